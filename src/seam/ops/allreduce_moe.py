"""MoE finalize + TP all-reduce + residual add + Gemma RMSNorm + MXFP8: seed 000's API.

``docs/spec/lamport.md`` (MoE finalize publish, Consumer A). The MoE input types, the Lamport
object :class:`FinalizeAllReduceGemmaRMSNormMxfp8` (a :class:`seam.ops.allreduce_base.LamportBase`
whose publish takes an unfinalized MoE output), and the process-wide instance behind
:func:`finalize_allreduce_gemma_rms_norm_mxfp8` (:func:`init_fused_moe_finalize`). Protocol,
fallback and debug mode as :mod:`seam.ops.allreduce` describes for the core.
"""

from __future__ import annotations

import dataclasses

import torch

from seam import checks, runtime
from seam.comm.group import Group
from seam.formats.activation import QuantizedActivation
from seam.ops.allreduce_base import DEFAULT_SPIN_LIMIT, MAX_TOP_K, LamportBase, moe_finalize
from seam.ops.norm import gemma_norm_mxfp8_activation


@dataclasses.dataclass(frozen=True, eq=False)  # tensors: == by identity, as torch.nn.Module
class UnfinalizedMoEOutput:
    """A TP-partial routed MoE output before the top-k weighted sum.

    Attributes:
        gemm2_permuted: BF16 [rows, hidden], the unweighted expert GEMM2 output in the
            MoE's permuted order; rows may be 0 (nothing routed to this rank's experts: every index -1).
        expert_weights: FP32 [M, top_k], or BF16 for a finalize built with ``fp32_weights=False``; routed
            scaling already folded in.
        expanded_idx_to_permuted_idx: int32 [M, top_k], the row of gemm2_permuted for
            (token, k), in [0, rows); -1 where the expert is not on this rank (range-checked
            only in the finalize's debug mode, ``debug=True`` or ``SEAM_LAMPORT_DEBUG=1``: reading it syncs;
            without it the kernel skips an index outside [0, rows) like -1 and never reads out of bounds).

    A plain container: building one checks nothing. The finalize calls that take it
    (:class:`FinalizeAllReduceGemmaRMSNormMxfp8`, :func:`finalize_allreduce_gemma_rms_norm_mxfp8`) check every field
    before any launch and raise TypeError / ValueError naming it.

    Spec: ``docs/spec/lamport.md`` (MoE finalize publish).
    """

    gemm2_permuted: torch.Tensor
    expert_weights: torch.Tensor
    expanded_idx_to_permuted_idx: torch.Tensor


@dataclasses.dataclass(frozen=True, eq=False)
class MoEOutput:
    """An MoE layer's TP-partial output: routed part (unfinalized) and shared-expert part.

    Attributes:
        routed: the unfinalized routed output.
        shared_output: BF16 [M, hidden] TP-partial shared-expert output, required: the spec adds it
            to every token's sum, and its rows give M (an MoE without a shared expert passes zeros).
        routed_scaling_factor: must be 1.0 (the factor lives in ``expert_weights``).

    A plain container: building one checks nothing. The finalize calls that take it
    (:class:`FinalizeAllReduceGemmaRMSNormMxfp8`, :func:`finalize_allreduce_gemma_rms_norm_mxfp8`) check every field
    before any launch and raise TypeError / ValueError naming it.

    Spec: ``docs/spec/lamport.md`` (MoE finalize publish).
    """

    routed: UnfinalizedMoEOutput
    shared_output: torch.Tensor
    routed_scaling_factor: float = 1.0


class FinalizeAllReduceGemmaRMSNormMxfp8(LamportBase):
    """MoE top-k finalize + TP all-reduce + residual add + Gemma RMSNorm + MXFP8, two launches.

    Publish (per token t of this rank):
    ``acc_r = sum_k [idx[t,k] >= 0] f32(gemm2_permuted[idx[t,k]]) * f32(w[t,k])`` (k in
    order, products rounded to fp32), ``x_r = bf16(acc_r + f32(shared_output[t]))``;
    consumer: ``residual_out = bf16(sum_p f32(x_p) + f32(residual))``,
    ``normed = bf16(f32(residual_out) * rsqrt(mean(f32(residual_out)^2) + eps) * (1 + f32(w)))``,
    ``(values, scales) = mxfp8_quantize(normed)`` (128x4 swizzled, padding zero).
    Spec: ``docs/spec/lamport.md`` (MoE finalize publish, Consumer A). Each instance owns
    a mailbox for ``max_num_tokens`` rows that all layers may share; construction is
    collective over the TP group. Without peer access (or on a real TP 1 group) a call
    finalizes with :func:`seam.kernels.moe_finalize.launch_moe_finalize`, sums with
    ``torch.distributed.all_reduce`` and runs the fused norm kernel (the
    :class:`~seam.LamportAllReduce` fallback: the sum is rounded to BF16 before the residual add).

    Args:
        hidden_size: multiple of 32, at most 16384.
        max_num_tokens: capacity (largest M), in [1, 2**24].
        top_k: experts per token, in [1, 64].
        fp32_weights: ``expert_weights`` are FP32 (else BF16).
        group: the TP :class:`seam.comm.Group` (default: a :class:`~seam.comm.DistGroup`
            over the default process group).
        device: the group's device.
        debug, spin_limit: as :class:`~seam.LamportAllReduce`; debug mode also range-checks
            the routing indices (a host sync).

    Sizes are Python or NumPy ints.

    Raises:
        TypeError / ValueError: bad sizes or types; another rank passed other sizes, flags or
            debug (every rank raises).
        RuntimeError: ``group`` None before ``torch.distributed.init_process_group()``.
    """

    def __init__(
        self,
        *,
        hidden_size: int,
        max_num_tokens: int,
        top_k: int,
        fp32_weights: bool,
        group: Group | None = None,
        device: torch.device | str | None = None,
        debug: bool | None = None,
        spin_limit: int = DEFAULT_SPIN_LIMIT,
    ) -> None:
        top_k = checks.integer("top_k", top_k)
        checks.in_range("top_k", top_k, 1, MAX_TOP_K)
        fp32_weights = checks.flag("fp32_weights", fp32_weights)
        super().__init__(
            hidden_size=hidden_size, max_num_tokens=max_num_tokens, group=group, device=device, debug=debug,
            spin_limit=spin_limit, agree={"top_k": top_k, "fp32_weights": fp32_weights},
        )
        self.top_k = top_k
        self.fp32_weights = fp32_weights

    def _check_moe(self, moe_output: object) -> int:
        """Check the MoE inputs; return M."""
        if not isinstance(moe_output, MoEOutput):
            raise TypeError(f"moe_output must be a MoEOutput, got {type(moe_output).__name__}")
        routed = moe_output.routed
        if not isinstance(routed, UnfinalizedMoEOutput):
            raise TypeError(f"moe_output.routed must be an UnfinalizedMoEOutput, got {type(routed).__name__}")
        factor = checks.finite_float("moe_output.routed_scaling_factor", moe_output.routed_scaling_factor)
        if factor != 1.0:
            raise ValueError(
                f"moe_output.routed_scaling_factor must be 1.0 (fold it into expert_weights), "
                f"got {factor}"
            )
        if moe_output.shared_output is None:
            raise TypeError("moe_output.shared_output must be a BF16 [M, hidden] tensor, got None "
                            "(an MoE without a shared expert passes zeros)")
        m = self._rows("moe_output.shared_output", moe_output.shared_output)
        checks.same_rows(m, "moe_output.shared_output", ("moe_output.routed.expert_weights", routed.expert_weights),
                         ("moe_output.routed.expanded_idx_to_permuted_idx", routed.expanded_idx_to_permuted_idx))
        checks.tensor(
            "moe_output.routed.gemm2_permuted", routed.gemm2_permuted, dtype=torch.bfloat16,
            shape=(-1, self.hidden_size), device=self.device, align=16,
        )
        wdtype = torch.float32 if self.fp32_weights else torch.bfloat16
        other = torch.bfloat16 if self.fp32_weights else torch.float32
        if isinstance(routed.expert_weights, torch.Tensor) and routed.expert_weights.dtype == other:
            raise TypeError(f"moe_output.routed.expert_weights must have dtype {wdtype}, got {other}: this finalize "
                            f"was built with fp32_weights={self.fp32_weights}")
        checks.tensor(
            "moe_output.routed.expert_weights", routed.expert_weights, dtype=wdtype,
            shape=(m, self.top_k), device=self.device,
        )
        idx = checks.tensor(
            "moe_output.routed.expanded_idx_to_permuted_idx", routed.expanded_idx_to_permuted_idx,
            dtype=torch.int32, shape=(m, self.top_k), device=self.device,
        )
        if self.debug and runtime.host_reads_allowed(self.device):
            checks.elements_in_range(
                "moe_output.routed.expanded_idx_to_permuted_idx", idx, -1, routed.gemm2_permuted.shape[0] - 1
            )
        return m

    def publish(self, moe_output: MoEOutput, *, rank: int | None = None) -> None:
        """The MoE finalize publish of one rank (split step; see the class formula).

        Args:
            moe_output: this rank's TP-partial MoE output (shapes in :class:`MoEOutput`;
                every tensor contiguous, on the group's device). Read only.
            rank: the simulated rank publishing (None for a real group).

        Raises:
            TypeError / ValueError: bad inputs, or a publish of this rank is pending;
                ValueError also in debug mode when the ranks' M differ (every rank).
            RuntimeError: the group uses the fallback (call the instance instead).
        """
        r = self._mailbox_rank(rank)
        self._publish_moe(r, self._check_moe(moe_output), moe_output)

    def collect(
        self,
        residual: torch.Tensor,
        norm_weight: torch.Tensor,
        norm_eps: float,
        *,
        also_bf16: bool = False,
        rank: int | None = None,
        a_deq: bool | str = "auto",
    ) -> tuple[QuantizedActivation, torch.Tensor] | tuple[QuantizedActivation, torch.Tensor, torch.Tensor]:
        """Consumer A of one rank (split step): ``(QuantizedActivation(normed), residual_out[, normed])``.

        Args, Returns and Raises: as :meth:`seam.LamportAllReduce.collect_gemma_rms_norm_mxfp8`
        (``norm_weight`` and ``norm_eps`` are its ``weight`` and ``eps``; ``a_deq`` as there).
        """
        r = self._mailbox_rank(rank)
        also_bf16 = checks.flag("also_bf16", also_bf16)
        m = self._pending_m(r)
        a_deq = self._check_a_deq(a_deq, m)
        eps = self._check_norm_inputs(m, residual, norm_weight, norm_eps, ("norm_weight", "norm_eps"))
        return self._consume_gemma_rms_norm_mxfp8(r, m, residual, norm_weight, eps, also_bf16, a_deq)

    def __call__(
        self,
        moe_output: MoEOutput,
        residual: torch.Tensor,
        norm_weight: torch.Tensor,
        norm_eps: float,
        *,
        a_deq: bool | str = "auto",
    ) -> tuple[QuantizedActivation, torch.Tensor]:
        """Return ``(QuantizedActivation(normed), residual_out)`` for this process's rank.

        Args:
            moe_output: TP-partial routed output (unfinalized) and shared-expert output,
                routed_scaling_factor already in the weights. Read only.
            residual: BF16 [M, hidden] residual stream, contiguous, 16-byte aligned. Read only.
            norm_weight: BF16 [hidden] Gemma RMSNorm weight (scale ``1 + w``).
            norm_eps: RMSNorm epsilon, finite >= 0.
            a_deq: True: the norm's launch also writes the activation's A_deq (``seam.formats.a_deq``; hidden
                a multiple of 128), which the next layer's Hopper GEMM then reads (the fused QKV op's
                ``a_deq=``, or :func:`seam.mxfp8_linear` on the activation); "auto" (default): where that
                GEMM gains (Hopper, 2-64 tokens, 1-64 at hidden <= 2048 but 9-64 at hidden 512 and 768,
                65-384 at hidden >= 2048 and 65-128 from 256, :func:`seam.kernels.wgmma_config.a_deq_pays`); False:
                never.

        Returns:
            QuantizedActivation (values float8_e4m3fn [M, hidden], 128x4 swizzled scales
            ``[mxfp8_scale_numel(M, hidden)]``, and A_deq when written), residual_out BF16 [M, hidden].

        Raises:
            TypeError / ValueError: bad inputs, all checked before any launch; ValueError
                also on a :class:`~seam.comm.SimulatedGroup` of tp > 1 (one process drives
                every rank there: use :meth:`publish` and :meth:`collect` with ``rank=``),
                and in debug mode when the ranks' M differ (on every rank, before any
                collective).
            RuntimeError: debug mode and a peer never published.
        """
        m = self._check_moe(moe_output)
        a_deq = self._check_a_deq(a_deq, m)
        eps = self._check_norm_inputs(m, residual, norm_weight, norm_eps, ("norm_weight", "norm_eps"))
        if not self.fused:
            routed = moe_output.routed
            x = moe_finalize(
                routed.gemm2_permuted, routed.expert_weights, routed.expanded_idx_to_permuted_idx,
                moe_output.shared_output,
            )
            return gemma_norm_mxfp8_activation(self._fallback_sum(x, owned=True), residual, norm_weight, eps,
                                               a_deq=a_deq)
        r = self.group.check_rank(None)
        self._publish_moe(r, m, moe_output)
        return self._consume_gemma_rms_norm_mxfp8(r, m, residual, norm_weight, eps, False, a_deq)

    def _publish_moe(self, r: int, m: int, moe_output: MoEOutput) -> None:
        routed = moe_output.routed
        self._publish(
            r, m, moe_output.shared_output, routed.gemm2_permuted, routed.expert_weights,
            routed.expanded_idx_to_permuted_idx,
        )


def supports_fused_moe_finalize(
    group: Group, *, expert_parallel: bool = False, dtype: torch.dtype = torch.bfloat16
) -> bool:
    """Whether to build :class:`FinalizeAllReduceGemmaRMSNormMxfp8` rather than use the fallback.

    True when TP > 1, no expert parallelism, the group's device is CUDA (kernels compiled,
    not interpreted), the model dtype is BF16, and every rank has peer access to every
    other (``group.peer_access``, decided collectively when the group was built).

    Args:
        group: the TP group (every rank calls this).
        expert_parallel: whether the MoE uses expert parallelism.
        dtype: the model's activation dtype.

    Raises:
        TypeError: group not a seam.comm.Group, expert_parallel not a bool, dtype not a torch.dtype.

    Spec: ``docs/spec/integration.md`` (allreduce + norm + quant dispatch: ``supports_fused_moe_finalize``).
    """
    if not isinstance(group, Group):
        raise TypeError(f"group must be a seam.comm.Group, got {type(group).__name__}")
    expert_parallel = checks.flag("expert_parallel", expert_parallel)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {checks.type_name(dtype)}")
    return (
        group.tp > 1
        and not expert_parallel
        and group.device.type == "cuda"
        and not runtime.INTERPRET
        and dtype == torch.bfloat16
        and group.peer_access
    )


_fused_moe_finalize: FinalizeAllReduceGemmaRMSNormMxfp8 | None = None


def init_fused_moe_finalize(
    *,
    hidden_size: int,
    max_num_tokens: int,
    top_k: int,
    fp32_weights: bool,
    group: Group | None = None,
    device: torch.device | str | None = None,
    debug: bool | None = None,
    spin_limit: int = DEFAULT_SPIN_LIMIT,
) -> FinalizeAllReduceGemmaRMSNormMxfp8:
    """Build the instance every deferred MoE output is finalized with (collective over the group).

    Args as :class:`FinalizeAllReduceGemmaRMSNormMxfp8`. Call on every rank, whatever
    :func:`supports_fused_moe_finalize` says: on a group without peer access the instance
    falls back to ``torch.distributed`` + the fused kernels. ``group`` None means a
    :class:`~seam.comm.DistGroup` over the default process group (torch.distributed must be
    initialized); at TP 1 without torch.distributed pass ``seam.SimulatedGroup(1)``.
    Returns the instance that :func:`finalize_allreduce_gemma_rms_norm_mxfp8` uses.

    Raises:
        As :class:`FinalizeAllReduceGemmaRMSNormMxfp8`: TypeError / ValueError for bad sizes or types, or where another
        rank passed other sizes, flags or debug (every rank raises); RuntimeError where ``group`` is None and
        torch.distributed is not initialized. An earlier instance stays in use where this one is refused.

    Spec: ``docs/spec/integration.md`` (allreduce + norm + quant dispatch: ``init_fused_moe_finalize``),
    ``docs/spec/lamport.md`` (MoE finalize publish).
    """
    global _fused_moe_finalize
    _fused_moe_finalize = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden_size, max_num_tokens=max_num_tokens, top_k=top_k,
        fp32_weights=fp32_weights, group=group, device=device, debug=debug, spin_limit=spin_limit,
    )
    return _fused_moe_finalize


def finalize_allreduce_gemma_rms_norm_mxfp8(
    moe_output: MoEOutput, residual: torch.Tensor, norm_weight: torch.Tensor, norm_eps: float, *,
    a_deq: bool | str = "auto",
) -> tuple[QuantizedActivation, torch.Tensor]:
    """Finalize a deferred MoE output into the next layer's MXFP8 input and new residual.

    Calls the instance built by :func:`init_fused_moe_finalize`, which checks every argument
    before any launch or collective (formula in :class:`FinalizeAllReduceGemmaRMSNormMxfp8`).

    Args:
        moe_output: this rank's TP-partial MoE output (:class:`MoEOutput`). Read only.
        residual: BF16 [M, hidden] residual stream, contiguous, 16-byte aligned. Read only.
        norm_weight: BF16 [hidden] Gemma RMSNorm weight (scale ``1 + w``).
        norm_eps: RMSNorm epsilon, finite >= 0.
        a_deq: write the activation's A_deq: True, "auto" (default) or False, as
            :meth:`FinalizeAllReduceGemmaRMSNormMxfp8.__call__` says.

    Returns:
        ``(QuantizedActivation, residual_out)``: MXFP8 values float8_e4m3fn [M, hidden] with
        128x4-swizzled scales (and A_deq when written), residual_out BF16 [M, hidden].

    Raises:
        RuntimeError: :func:`init_fused_moe_finalize` was not called; debug mode and a peer
            never published.
        TypeError / ValueError: as :meth:`FinalizeAllReduceGemmaRMSNormMxfp8.__call__`.

    Spec: ``docs/spec/lamport.md`` (MoE finalize publish, Consumer A), ``docs/spec/integration.md`` (allreduce + norm +
    quant dispatch).
    """
    if _fused_moe_finalize is None:
        raise RuntimeError("init_fused_moe_finalize() was not called")
    return _fused_moe_finalize(moe_output, residual, norm_weight, norm_eps, a_deq=a_deq)
