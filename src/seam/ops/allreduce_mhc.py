"""AllReduceMHC: Lamport TP all-reduce fused with the DeepSeek-V4.1 mHC boundary.

``docs/spec/lamport.md`` (Publish, Consumer, MoE finalize publish, Consumer B). Each call is two
launches: the Lamport core's publish (``seam.kernels.lamport``, plain or MoE finalize)
and the mHC consumer (``seam.kernels.lamport_mhc``). Without peer access the same
outputs come from an all-gather of the BF16 contributions and the fused mHC kernel,
which sums them in rank order exactly as the Lamport consumer does (bit-identical, unlike
an NCCL all-reduce, whose BF16 sum order is its own); a real TP 1 group skips the
collective.

Mailbox, ledger, debug mode and the publish launch: :class:`seam.ops.allreduce_base.LamportBase`.
Split-step protocol per rank (as the core's ``LamportAllReduce``): ``publish`` or
``publish_finalize`` -> exactly one ``consume`` with the same M. A second publish before
the consume raises; a consume that raises on bad input leaves the publish pending.

Ranks of a real group that call with different M: as ``seam.ops.allreduce`` says for the
core. Debug mode exchanges every rank's M before the publish or the fallback all-gather
(through the mailbox on the Lamport path) and raises ValueError on every rank naming each
rank's M; without it the Lamport path hangs and the fallback all-gather aborts (gloo) or
can hang or gather wrong rows (NCCL).
"""

from __future__ import annotations

import torch

from seam import checks, runtime
from seam.comm import Group
from seam.formats.mxfp8 import ScaleLayout
from seam.kernels.lamport_mhc import launch_lamport_mhc_consumer
from seam.kernels.mhc import new_split_scratch, split_scratch
from seam.kernels.mhc_config import max_split
from seam.ops.allreduce_base import DEFAULT_SPIN_LIMIT, MAX_TOP_K, LamportBase, moe_finalize
from seam.ops.mhc import HC_MULTS, check_mhc_inputs, launch_checked
from seam.ops.mxfp8 import check_mxfp8_out
from seam.ops.registry import register


# As ``torch.ops.seam.lamport_mhc_consume``: traces under torch.compile, and eager calls bump the
# written buffers' versions (``MXFP8Linear``'s hand-off sees a reused ``mxfp8_out`` change).
_mhc_consume = register(
    "lamport_mhc_consume",
    ("mailbox", "stage_state", "error", "residual_out", "layer_input", "values", "scales", "split_ws",
     "split_counters"),
    launch_lamport_mhc_consumer,
)


class AllReduceMHC(LamportBase):
    """Lamport TP all-reduce fused with mHC post-mix, collapse and RMSNorm (DeepSeek-V4.1).

    Per token, with ``acc`` the fp32 sum of the ranks' contributions in rank order::

        reduced     = bf16(acc)
        new_res_j   = bf16(f32(reduced) * post[j] + sum_i f32(residual[i]) * comb[i, j])
        collapse    = bf16(sum_j f32(new_res_j) * pre[j])
        layer_input = bf16(f32(collapse) * rsqrt(sum(f32(collapse)^2) / hidden + eps) * f32(w))

    ``residual_output`` (the ``new_res`` streams) is bit-identical to
    :func:`seam.ref.mhc.allreduce_mhc_ref`; ``layer_input`` within 1 BF16 ulp; MXFP8
    bit-identical to ``mxfp8_quantize(layer_input)``.

    Construction is collective over ``group``: with peer access it allocates the Lamport
    mailbox (``group.create_mailbox``) and the consumer's column-split scratch, otherwise
    the fallback buffers (all-gather + fused mHC kernel, same outputs), so that a call
    allocates nothing but its outputs (CUDA-graph capture). A real group (one rank per
    process) calls :meth:`__call__` / :meth:`finalize`; a :class:`seam.comm.SimulatedGroup`
    drives every rank from one process with the separate steps :meth:`publish` /
    :meth:`publish_finalize` for every rank, then :meth:`consume` for every rank.

    Args:
        hidden_size: hidden, a positive multiple of 32 (no upper bound: the consumer splits
            a row's columns over programs).
        hc_mult: residual streams, one of 1, 2, 4, 8.
        max_num_tokens: capacity: the largest M of a call, in [1, 2**24].
        top_k: routed experts per token (``finalize``'s expert_weights [M, top_k]), in [1, 64].
        group: a :class:`seam.comm.Group` (real or simulated; default: a
            :class:`~seam.comm.DistGroup` over torch.distributed's default process group).
        device: the device of every tensor (default ``group.device``).
        quantize_layer_input: also accept ``mxfp8_out`` buffers that receive
            ``layer_input`` as MXFP8 (E4M3 values, 128x4-swizzled UE8M0 scales, padding zero).
        residual_only: also accept ``pre`` and ``norm_weight`` of None, then write only
            ``residual_output`` and return ``(residual_output, None)``.
        debug: bound the consumer's spin and raise RuntimeError on the host when a peer's
            fragment never arrives (a host sync per call), and on a real group check before
            each call that every rank has the same M (one more small all-reduce; ValueError
            on every rank otherwise). Every rank must pass the same value. Default: the
            ``SEAM_LAMPORT_DEBUG`` environment variable.
        spin_limit: re-loads per fragment before a debug-mode spin gives up.

    Sizes (``hidden_size``, ``hc_mult``, ``max_num_tokens``, ``top_k``, ``spin_limit``) are
    Python or NumPy ints.

    Raises:
        TypeError: non-int sizes, quantize_layer_input, residual_only or debug not a bool, or group not a Group.
        ValueError: hidden_size not a multiple of 32, hc_mult not in (1, 2, 4, 8),
            sizes out of range, device not the group's; the group's ranks disagree on the
            sizes or on debug.
        RuntimeError: ``group`` None before ``torch.distributed.init_process_group()``.

    Spec: ``docs/spec/lamport.md`` (Publish, MoE finalize publish, Consumer B, Errors and safety).
    """

    _max_hidden = None  # the mHC consumer splits a row's columns over programs
    _collect_verb = "consume"

    def __init__(
        self,
        *,
        hidden_size: int,
        hc_mult: int,
        max_num_tokens: int,
        top_k: int,
        group: Group | None = None,
        device: torch.device | str | None = None,
        quantize_layer_input: bool = False,
        residual_only: bool = False,
        debug: bool | None = None,
        spin_limit: int = DEFAULT_SPIN_LIMIT,
    ) -> None:
        hc_mult = checks.integer("hc_mult", hc_mult)
        if hc_mult not in HC_MULTS:
            raise ValueError(f"hc_mult must be one of {HC_MULTS}, got {hc_mult}")
        top_k = checks.integer("top_k", top_k)
        checks.in_range("top_k", top_k, 1, MAX_TOP_K)
        self.quantize_layer_input = checks.flag("quantize_layer_input", quantize_layer_input)
        self.residual_only = checks.flag("residual_only", residual_only)
        super().__init__(
            hidden_size=hidden_size, max_num_tokens=max_num_tokens, group=group, device=device, debug=debug,
            spin_limit=spin_limit, agree={"hc_mult": hc_mult, "top_k": top_k},
        )
        self.hc_mult = hc_mult
        self.top_k = top_k
        # The consumer's column-split scratch (decode M): its counters re-arm themselves after
        # every launch, so calls (and graph replays) need no other allocation or reset.
        if self.fused:
            self._split_scratch = new_split_scratch(self.capacity, max_split(self.hidden_size), self.device)
        else:
            # The fallback's fused kernel uses the standalone op's per-device scratch: grown here.
            split_scratch(self.device, self.capacity, max_split(self.hidden_size))
            # Rank partials gathered in rank order: [TP * capacity, hidden] viewed as [TP, M, hidden].
            self._gathered = torch.empty(
                self.tp * self.capacity * self.hidden_size, dtype=torch.bfloat16, device=self.device
            )

    # -- validation ---------------------------------------------------------------------
    def _check_finalize(self, gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx, shared_output) -> int:
        """Check an unfinalized MoE output (the arguments of :meth:`publish_finalize`); return M."""
        m = self._rows("shared_output", shared_output)
        checks.same_rows(m, "shared_output", ("expert_weights", expert_weights),
                         ("expanded_idx_to_permuted_idx", expanded_idx_to_permuted_idx))
        checks.tensor("gemm2_permuted", gemm2_permuted, dtype=torch.bfloat16, device=self.device, align=16)
        if gemm2_permuted.dim() != 2 or gemm2_permuted.shape[1] != self.hidden_size:
            raise ValueError(
                f"gemm2_permuted must have shape [rows, {self.hidden_size}], got {list(gemm2_permuted.shape)}"
            )
        checks.tensor(
            "expert_weights", expert_weights, dtype=torch.float32, shape=(m, self.top_k), device=self.device
        )
        idx = checks.tensor(
            "expanded_idx_to_permuted_idx", expanded_idx_to_permuted_idx, dtype=torch.int32,
            shape=(m, self.top_k), device=self.device,
        )
        if self.debug and runtime.host_reads_allowed(self.device):
            checks.elements_in_range("expanded_idx_to_permuted_idx", idx, -1, gemm2_permuted.shape[0] - 1)
        return m

    def _check_consumer(self, m, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, published=()):
        """Everything the consumer of M (checked) tokens reads or writes; returns (eps, mxfp8 buffers or None).
        ``published``: (name, tensor) the same call publishes, which mxfp8_out must not overlap either (as every
        op's outputs, its inputs)."""
        eps = check_mhc_inputs(
            m, self.hidden_size, self.hc_mult, residual, post, comb, pre, norm_weight, norm_eps, self.device
        )
        if pre is None and not self.residual_only:
            raise ValueError("pre and norm_weight are None, but this AllReduceMHC was built without residual_only")
        mxfp8 = None
        if mxfp8_out is not None:
            if not self.quantize_layer_input:
                raise ValueError("mxfp8_out was given, but this AllReduceMHC was built without quantize_layer_input")
            if pre is None:
                raise ValueError(
                    "mxfp8_out was given for a residual-only call (pre and norm_weight None): "
                    "no layer input to quantize"
                )
            mxfp8 = check_mxfp8_out(
                mxfp8_out, m, self.hidden_size, ScaleLayout.SWIZZLED, self.device, "mxfp8_out", layout_arg=None,
                inputs=[("residual", residual), ("post", post), ("comb", comb), ("pre", pre),
                        ("norm_weight", norm_weight), *published],
            )
        return eps, mxfp8

    # -- separate steps (the simulated driver; __call__/finalize chain them) ------------
    def publish(self, x: torch.Tensor, *, rank: int | None = None) -> None:
        """Publish this rank's TP-partial output ``x`` BF16 [M, hidden] (not modified).

        Raises:
            TypeError: x not a BF16 tensor. ValueError: wrong shape, not contiguous or 16-byte aligned, M outside
            [1, capacity], rank not driven here, a publish of this rank pending; in debug mode, ranks whose M
            differ (on every rank).
        """
        rank = self.group.check_rank(rank)
        self._publish_checked(rank, self._rows("x", x), x)

    def publish_finalize(
        self,
        gemm2_permuted: torch.Tensor,
        expert_weights: torch.Tensor,
        expanded_idx_to_permuted_idx: torch.Tensor,
        shared_output: torch.Tensor,
        *,
        rank: int | None = None,
    ) -> None:
        """Publish the MoE finalize contribution ``bf16(sum_k [idx >= 0] row_k * w_k + shared)``.

        Args: as :meth:`finalize`. Raises: as :meth:`finalize` for these arguments.
        """
        rank = self.group.check_rank(rank)
        m = self._check_finalize(gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx, shared_output)
        self._publish_checked(rank, m, shared_output, gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx)

    def consume(
        self,
        residual: torch.Tensor,
        post: torch.Tensor,
        comb: torch.Tensor,
        pre: torch.Tensor | None,
        norm_weight: torch.Tensor | None,
        norm_eps: float,
        mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        rank: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Reduce the published contributions and run the mHC epilogue (args as :meth:`__call__`).

        Raises:
            TypeError, ValueError: as :meth:`__call__` (M is the pending publish's); ValueError also where no
                publish of this rank is pending. A rejected consume leaves the publish pending.
            RuntimeError: debug mode and a peer never published.
        """
        rank = self.group.check_rank(rank)
        m = self._pending_m(rank)  # every mHC input must have the published M rows
        eps, mxfp8 = self._check_consumer(m, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out)
        return self._consume(rank, m, residual, post, comb, pre, norm_weight, eps, mxfp8)

    # -- one rank per process ----------------------------------------------------------
    def __call__(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        post: torch.Tensor,
        comb: torch.Tensor,
        pre: torch.Tensor | None,
        norm_weight: torch.Tensor | None,
        norm_eps: float,
        mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """All-reduce ``x`` over the group and apply the mHC boundary: ``(residual_output, layer_input)``.

        Args:
            x: BF16 [M, hidden] TP-partial sublayer output, 1 <= M <= max_num_tokens, contiguous, 16-byte
                aligned (not modified).
            residual: BF16 [M, hc, hidden] residual streams (not modified).
            post: FP32 [M, hc] or [M, hc, 1] post-mix.
            comb: FP32 [M, hc, hc] residual mix, indexed [source, target].
            pre: FP32 [M, hc] or [M, hc, 1] carried pre-mix of the collapse; None together with
                ``norm_weight`` when built with ``residual_only``.
            norm_weight: BF16 [hidden] plain RMSNorm weight, or None with ``pre``.
            norm_eps: RMSNorm epsilon.
            mxfp8_out: (values float8_e4m3fn [M, hidden], scales uint8 or float8_e8m0fnu, flat
                [mxfp8_scale_numel(M, hidden)]) written in place; needs quantize_layer_input.

        Returns:
            (residual_output BF16 [M, hc, hidden], layer_input BF16 [M, hidden] or None).

        Raises:
            TypeError: wrong tensor types or dtypes.
            ValueError (before any launch): pre/norm_weight given without the other; None
                without residual_only; mxfp8_out without quantize_layer_input or with
                residual-only; wrong shapes, strides or alignment of x/residual/post/comb/pre/mxfp8_out;
                mxfp8_out overlapping an input or each other, or requiring grad while grad mode is on; M outside
                [1, max_num_tokens]; a simulated group of tp > 1 (use publish/consume); a publish of this rank
                pending; in debug mode, ranks whose M differ (on every rank, before any collective).
            RuntimeError: debug mode and a peer never published.
        """
        rank = self.group.check_rank(None)
        m = self._rows("x", x)
        eps, mxfp8 = self._check_consumer(m, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out,
                                          [("x", x)])
        self._publish_checked(rank, m, x)
        return self._consume(rank, m, residual, post, comb, pre, norm_weight, eps, mxfp8)

    def finalize(
        self,
        gemm2_permuted: torch.Tensor,
        expert_weights: torch.Tensor,
        expanded_idx_to_permuted_idx: torch.Tensor,
        shared_output: torch.Tensor,
        residual: torch.Tensor,
        post: torch.Tensor,
        comb: torch.Tensor,
        pre: torch.Tensor | None,
        norm_weight: torch.Tensor | None,
        norm_eps: float,
        mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`__call__` for an unfinalized MoE output, folded into the publish.

        ``contribution = bf16(sum_k [idx[t,k] >= 0] f32(gemm2_permuted[idx[t,k]]) * w[t,k] + f32(shared_output[t]))``
        (k in order, each product rounded before its add), then as :meth:`__call__`.

        Args:
            gemm2_permuted: BF16 [rows, hidden] unweighted GEMM2 output, permuted order.
            expert_weights: FP32 [M, top_k] routing weights (routed scaling folded in).
            expanded_idx_to_permuted_idx: int32 [M, top_k], -1 for experts not on this rank.
            shared_output: BF16 [M, hidden] TP-partial shared-expert output.
            residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out: as :meth:`__call__`.

        Raises:
            TypeError: as :meth:`__call__`; expert_weights not FP32 or
                expanded_idx_to_permuted_idx not int32.
            ValueError: as :meth:`__call__`; expert_weights or expanded_idx_to_permuted_idx
                not [M, top_k]; gemm2_permuted or shared_output of the wrong shape.
        """
        rank = self.group.check_rank(None)
        m = self._check_finalize(gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx, shared_output)
        eps, mxfp8 = self._check_consumer(
            m, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out,
            [("gemm2_permuted", gemm2_permuted), ("expert_weights", expert_weights),
             ("expanded_idx_to_permuted_idx", expanded_idx_to_permuted_idx), ("shared_output", shared_output)],
        )
        self._publish_checked(rank, m, shared_output, gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx)
        return self._consume(rank, m, residual, post, comb, pre, norm_weight, eps, mxfp8)

    # -- launches on checked inputs -------------------------------------------------------
    def _publish_checked(self, rank, m, x, gemm2_permuted=None, expert_weights=None, idx=None) -> None:
        """Publish ``x`` as ``rank``, or with ``gemm2_permuted`` the MoE finalize of the routed
        output plus ``x`` as the shared-expert output."""
        if self.fused:
            self._publish(rank, m, x, gemm2_permuted, expert_weights, idx)
            return
        self._check_publish(rank, m)
        if gemm2_permuted is not None:
            x = moe_finalize(gemm2_permuted, expert_weights, idx, x)
        self._gather(m, x)
        self._ledger.published(rank, m)

    def _gather(self, m: int, contribution: torch.Tensor) -> None:
        out = self._gathered[: self.tp * m * self.hidden_size].view(self.tp * m, self.hidden_size)
        if self.tp == 1:
            out.copy_(contribution)
            return
        import torch.distributed as dist

        # torch 2.13 deprecates all_gather_into_tensor for all_gather_single, which older torch may not have
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, contribution, group=self.group.process_group)

    def _consume(self, rank, m, residual, post, comb, pre, norm_weight, eps, mxfp8):
        """Consumer B of ``rank``'s pending publish on checked inputs: ``(residual_output, layer_input)``."""
        if not self.fused:
            partials = self._gathered[: self.tp * m * self.hidden_size].view(self.tp, m, self.hidden_size)
            out = launch_checked(partials, residual, post, comb, pre, norm_weight, eps, mxfp8)
            self._collected(rank)
            return out
        state = self.mailbox.state(rank)
        residual_out = torch.empty_like(residual)
        layer_input = None
        if pre is not None:
            layer_input = torch.empty((m, self.hidden_size), dtype=torch.bfloat16, device=self.device)
        values, scales = mxfp8 if mxfp8 is not None else (None, None)
        _mhc_consume(
            state.mailbox, state.address, state.stage_state, state.error, residual, post, comb, pre, norm_weight, eps,
            residual_out, layer_input, values, scales, *self._split_scratch, self.spin_limit,
        )
        self._collected(rank)
        return residual_out, layer_input
