"""Lamport one-shot TP all-reduce and its fused consumers: the public API (``docs/spec/lamport.md``).

:class:`LamportAllReduce` owns a group's mailbox and exposes each fused all-reduce in
two forms: the **split steps** ``publish*`` / ``collect*`` (a simulated driver publishes
for every rank before any consumer; a real rank may do the same to keep a first call's
JIT compile from delaying a concurrent publish) and the **one-call** methods
(``all_reduce``, ``all_reduce_rms_norm``, ``all_reduce_gemma_rms_norm_mxfp8``) for a
process that drives one rank. :class:`FinalizeAllReduceGemmaRMSNormMxfp8` adds the MoE
finalize publish (seed 000).

Fallback: where the group has no peer access, or a real group has TP == 1, the
one-call methods compute the same outputs with ``torch.distributed.all_reduce`` (NCCL,
which sums the BF16 contributions in BF16, so the sum is rounded to BF16 before the
residual add, and the rank order is NCCL's) followed by seam's fused norm kernels
(which take the RMS of the fp32 sum ``x + residual`` rather than of its BF16
rounding). Outputs then agree with the fused path to within those roundings, not bit
for bit.

Split-step protocol per rank: ``publish`` -> exactly one ``collect*`` with the same M.
A second publish before the collect raises; a collect that raises on bad input leaves
the publish pending (call it again with good input), so the mailbox never holds rows
that no consumer re-arms.

Every rank of a real group must make each call with the same M. Debug mode checks it
before the call's publish or fallback collective (``Group.agree_on_m``: every rank's M summed
into one small row, through the mailbox on the Lamport path, so that a rank that skips the
call still makes the others time out in their bounded spin; skipped while a CUDA graph is
captured or ``torch.compile`` traces): every rank raises ValueError naming each rank's M,
nothing is published, and the next call with agreeing M needs no reset. Without debug mode
nothing checks it (that would cost launches and a host sync per call) and such a call does
not return on every rank: on the Lamport path the rank with the larger M spins forever on
rows no peer publishes and the others hang in their next call; on the fallback gloo aborts
the processes (SIGABRT, "Received data size doesn't match expected size") and NCCL, which
does not compare sizes, can hang or return wrong sums.
"""

from __future__ import annotations

import dataclasses

import torch

from seam import checks, runtime
from seam.comm.group import DistGroup, Group, SimulatedGroup
from seam.comm.ledger import CallLedger
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import ScaleLayout, mxfp8_scale_numel
from seam.kernels.lamport import (
    EPILOGUE_ALL_REDUCE,
    EPILOGUE_RMS_NORM,
    EPILOGUE_RMS_NORM_MXFP8,
    launch_lamport_consumer,
    launch_lamport_publish,
)
from seam.ops.registry import register

#: Re-loads of one fragment before a debug-mode spin gives up. On a GPU one re-load is
#: well under a microsecond, so this is seconds; under the interpreter each is slow.
DEFAULT_SPIN_LIMIT = 200 if runtime.INTERPRET else 1 << 24
#: The device spin counter is int32.
SPIN_LIMIT_MAX = 2**31 - 1
#: Largest hidden_size: the consumer keeps one whole row in registers.
MAX_HIDDEN = 16384
DEBUG_ENV = "SEAM_LAMPORT_DEBUG"


@dataclasses.dataclass(frozen=True)
class UnfinalizedMoEOutput:
    """A TP-partial routed MoE output before the top-k weighted sum.

    Attributes:
        gemm2_permuted: BF16 [rows, hidden], the unweighted expert GEMM2 output in the
            MoE's permuted order.
        expert_weights: FP32 (or BF16) [M, top_k], routed scaling already folded in.
        expanded_idx_to_permuted_idx: int32 [M, top_k], the row of gemm2_permuted for
            (token, k), in [0, rows); -1 where the expert is not on this rank (range-checked
            only with ``SEAM_LAMPORT_DEBUG=1``: reading it syncs; without it the kernel skips
            an index outside [0, rows) like -1 and never reads out of bounds).
    """

    gemm2_permuted: torch.Tensor
    expert_weights: torch.Tensor
    expanded_idx_to_permuted_idx: torch.Tensor


@dataclasses.dataclass(frozen=True)
class MoEOutput:
    """An MoE layer's TP-partial output: routed part (unfinalized) and shared-expert part.

    Attributes:
        routed: the unfinalized routed output.
        shared_output: BF16 [M, hidden] TP-partial shared-expert output.
        routed_scaling_factor: must be 1.0 (the factor lives in ``expert_weights``).
    """

    routed: UnfinalizedMoEOutput
    shared_output: torch.Tensor | None
    routed_scaling_factor: float = 1.0


# ---------------------------------------------------------------------------------------
# Registered launchers (torch.ops.seam.lamport_publish / lamport_consume)
# ---------------------------------------------------------------------------------------
def _publish_launch(
    x: torch.Tensor,
    gemm2: torch.Tensor | None,
    weights: torch.Tensor | None,
    idx: torch.Tensor | None,
    mailbox: torch.Tensor,
    peer_offsets: torch.Tensor,
    stage_state: torch.Tensor,
    m: int,
    rank: int,
    use_pdl: bool,
) -> None:
    launch_lamport_publish(
        m, x, mailbox, peer_offsets, stage_state, rank, gemm2=gemm2, weights=weights, idx=idx, use_pdl=use_pdl
    )


def _consume_launch(
    mailbox: torch.Tensor,
    stage_state: torch.Tensor,
    error: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    out: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    values: torch.Tensor | None,
    scales: torch.Tensor | None,
    m: int,
    epilogue: int,
    eps: float,
    gemma: bool,
    spin_limit: int,
    use_pdl: bool,
) -> None:
    launch_lamport_consumer(
        m,
        epilogue,
        mailbox,
        stage_state,
        error,
        residual=residual,
        weight=weight,
        eps=eps,
        gemma=gemma,
        out=out,
        residual_out=residual_out,
        values=values,
        scales=scales,
        spin_limit=spin_limit,
        use_pdl=use_pdl,
    )


#: The publish launch as ``torch.ops.seam.lamport_publish`` (shared with ``seam.ops.allreduce_mhc``).
lamport_publish_op = register("lamport_publish", ("mailbox", "stage_state"), _publish_launch)
_consume = register(
    "lamport_consume",
    ("mailbox", "stage_state", "error", "out", "residual_out", "values", "scales"),
    _consume_launch,
)


def _debug_default() -> bool:
    return runtime.env_flag(DEBUG_ENV)


def _bf16_out(name: str, t: object, m: int, hidden: int, device: torch.device) -> torch.Tensor:
    if t is None:
        return torch.empty((m, hidden), dtype=torch.bfloat16, device=device)
    return checks.tensor(name, t, dtype=torch.bfloat16, shape=(m, hidden), device=device)


class LamportAllReduce:
    """One-shot TP all-reduce over unicast peer stores, fused with a consumer epilogue.

    Every rank's BF16 contribution (-0.0 -> +0.0) is stored into every rank's mailbox;
    each rank then computes ``acc = sum_{p=0..TP-1} f32(x_p)`` in rank order and one of:

    * (c) ``out = bf16(acc)``;
    * (b) ``residual_out = bf16(acc + f32(residual))``,
      ``normed = bf16(f32(residual_out) * rsqrt(mean(f32(residual_out)^2) + eps) * w)``
      with ``w = f32(weight)`` or ``1 + f32(weight)`` (Gemma);
    * (a) as (b) with Gemma weight, then ``normed`` -> MXFP8 (128x4 swizzled scales,
      padding rows zero) bit-identical to ``seam.mxfp8_quantize(normed)``.

    residual_out and the sum are bit-identical to ``seam.ref.lamport``; normed within
    1 BF16 ulp. Spec: ``docs/spec/lamport.md`` (Publish, Consumer, Consumer A).

    Args:
        hidden_size: row width, a positive multiple of 128, at most 16384 (``MAX_HIDDEN``: the
            consumer keeps one whole row in registers).
        max_num_tokens: mailbox capacity, the largest M of any call (>= 1).
        group: a :class:`seam.comm.Group` (:class:`~seam.comm.DistGroup` or
            :class:`~seam.comm.SimulatedGroup`). Construction is collective over it.
        device: must equal ``group.device`` when given.
        debug: bound the consumer's spin and raise RuntimeError on the host when a
            peer's fragment never arrives (a host sync per call), and on a real group
            check before each call that every rank has the same M (one more small
            all-reduce; ValueError on every rank otherwise; module doc). Every rank must
            pass the same value. Default: the ``SEAM_LAMPORT_DEBUG`` environment variable.
        spin_limit: re-loads per fragment before a debug-mode spin gives up.

    Sizes (``hidden_size``, ``max_num_tokens``, ``spin_limit``) are Python or NumPy ints.

    Raises:
        TypeError: arguments of the wrong type.
        ValueError: sizes out of range or different on another rank, device not the group's.
    """

    def __init__(
        self,
        *,
        hidden_size: int,
        max_num_tokens: int,
        group: Group,
        device: torch.device | str | None = None,
        debug: bool | None = None,
        spin_limit: int = DEFAULT_SPIN_LIMIT,
    ) -> None:
        if not isinstance(group, Group):
            raise TypeError(f"group must be a seam.comm.Group, got {type(group).__name__}")
        hidden_size = checks.integer("hidden_size", hidden_size)
        max_num_tokens = checks.integer("max_num_tokens", max_num_tokens)
        spin_limit = checks.integer("spin_limit", spin_limit)
        checks.multiple_of("hidden_size", hidden_size, 128)
        # The consumer holds a whole row in registers (one program per token).
        checks.in_range("hidden_size", hidden_size, 128, MAX_HIDDEN)
        checks.in_range("max_num_tokens", max_num_tokens, 1, 1 << 24)
        checks.in_range("spin_limit", spin_limit, 1, SPIN_LIMIT_MAX)
        group.check_device(device)
        self.debug = _debug_default() if debug is None else checks.flag("debug", debug)
        # debug too: its M check is collective, so every rank must run it
        group.agree("(hidden_size, max_num_tokens, debug)", (hidden_size, max_num_tokens, self.debug))
        self.group = group
        self.device = group.device
        self.tp = group.tp
        self.hidden_size = hidden_size
        self.capacity = max_num_tokens
        self.spin_limit = spin_limit if self.debug else 0
        # A real TP == 1 group needs no mailbox; a simulated one keeps the Lamport path
        # so that single-rank simulation exercises the kernels.
        self.fused = group.peer_access and (group.tp > 1 or isinstance(group, SimulatedGroup))
        self.mailbox = group.create_mailbox(hidden_size, max_num_tokens) if self.fused else None
        self.use_pdl = self.fused and runtime.supports_pdl(self.device)
        self._ledger = CallLedger(group.tp, isinstance(group, SimulatedGroup) and not self.debug)

    # -- validation ----------------------------------------------------------------------
    def _rank(self, rank: int | None) -> int:
        if not self.fused:
            raise RuntimeError(
                "publish/collect need peer access (this group uses the fallback): call the one-call methods"
            )
        return self.group.check_rank(rank)

    def _rows(self, name: str, t: object, m: int | None = None) -> torch.Tensor:
        """A BF16 [M, hidden] contiguous 16-byte-aligned input on the group's device."""
        checks.tensor(name, t, dtype=torch.bfloat16, shape=(-1 if m is None else m, self.hidden_size), align=16)
        if t.device != self.device:
            raise ValueError(f"{name} is on {t.device}, expected the group's device {self.device}")
        checks.in_range(f"M ({name}.shape[0])", t.shape[0], 1, self.capacity)
        return t

    def _check_publish(self, rank: int, m: int) -> None:
        self._ledger.check_publish(rank, m)
        self._agree_on_m(m)

    def _agree_on_m(self, m: int) -> None:
        # Last check before the publish or the fallback collective: ranks with different M would
        # hang or abort there (module doc), so debug mode spends one small all-reduce per call.
        if self.debug:
            self.group.agree_on_m(m, self.mailbox, self.spin_limit)

    def _check_norm_inputs(self, m: int, residual, weight, eps) -> float:
        self._rows("residual", residual, m)
        checks.tensor("weight", weight, dtype=torch.bfloat16, shape=(self.hidden_size,), device=self.device)
        eps = checks.finite_float("eps", eps)
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        return eps

    def _pending_m(self, rank: int) -> int:
        return self._ledger.pending_m(rank)

    # -- split steps -----------------------------------------------------------------------
    def publish(self, x: torch.Tensor, *, rank: int | None = None) -> None:
        """Store this rank's contribution ``x`` into every rank's mailbox (publish steps 1-4).

        Args:
            x: BF16 [M, hidden], 1 <= M <= capacity, contiguous, 16-byte aligned. Read only.
            rank: the simulated rank publishing (None for a real group).

        Raises:
            TypeError / ValueError: bad x or rank, or a publish of this rank is pending;
                ValueError also in debug mode when the ranks' M differ (every rank).
            RuntimeError: the group uses the fallback.
        """
        r = self._rank(rank)
        self._rows("x", x)
        self._publish_rows(r, x)

    def _publish_rows(self, r: int, x: torch.Tensor) -> None:
        """Publish validated rows ``x`` as rank ``r`` (refused while r's last publish is pending)."""
        self._check_publish(r, x.shape[0])
        self._launch_publish(r, x.shape[0], x, None, None, None)

    def _launch_publish(self, r, m, x, gemm2, weights, idx) -> None:
        s = self.mailbox.state(r)
        lamport_publish_op(x, gemm2, weights, idx, s.mailbox, s.peer_offsets, s.stage_state, m, r, self.use_pdl)
        self._ledger.published(r, m)

    def _launch_consume(self, r, m, epilogue, **kw) -> None:
        s = self.mailbox.state(r)
        _consume(
            s.mailbox,
            s.stage_state,
            s.error,
            kw.get("residual"),
            kw.get("weight"),
            kw.get("out"),
            kw.get("residual_out"),
            kw.get("values"),
            kw.get("scales"),
            m,
            epilogue,
            kw.get("eps", 0.0),
            kw.get("gemma", False),
            self.spin_limit,
            self.use_pdl,
        )
        # after the launch: a launch that raises (a compile error, say) leaves the publish pending
        self._ledger.collected(r)
        if self.debug and runtime.host_reads_allowed(self.device):
            self.mailbox.check_error(r)

    def collect(self, *, rank: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """Consumer (c): wait for every rank's rows, return ``bf16(acc)`` BF16 [M, hidden].

        Args:
            rank: the simulated rank collecting (None for a real group).
            out: optional BF16 [M, hidden] contiguous buffer, written in place.

        Raises:
            TypeError / ValueError: bad out/rank, no pending publish.
            RuntimeError: debug mode and a peer never published.
        """
        r = self._rank(rank)
        m = self._pending_m(r)
        out = _bf16_out("out", out, m, self.hidden_size, self.device)
        self._launch_consume(r, m, EPILOGUE_ALL_REDUCE, out=out)
        return out

    def collect_rms_norm(
        self,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        *,
        gemma: bool = False,
        rank: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Consumer (b): ``(normed, residual_out)``, both BF16 [M, hidden] (formula in the class doc).

        Args:
            residual: BF16 [M, hidden] (M of the pending publish), contiguous. Read only.
            weight: BF16 [hidden] RMSNorm weight; applied as ``1 + w`` when ``gemma``.
            eps: finite float >= 0.
            gemma: Gemma weight convention.
            rank: the simulated rank collecting (None for a real group).

        Raises:
            TypeError / ValueError: bad inputs (the publish stays pending).
            RuntimeError: debug mode and a peer never published.
        """
        r = self._rank(rank)
        gemma = checks.flag("gemma", gemma)
        m = self._pending_m(r)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        normed = torch.empty_like(residual)
        residual_out = torch.empty_like(residual)
        self._launch_consume(
            r, m, EPILOGUE_RMS_NORM, residual=residual, weight=weight, eps=eps, gemma=gemma,
            out=normed, residual_out=residual_out,
        )
        return normed, residual_out

    def collect_gemma_rms_norm_mxfp8(
        self,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        *,
        also_bf16: bool = False,
        rank: int | None = None,
    ) -> tuple[QuantizedActivation, torch.Tensor] | tuple[QuantizedActivation, torch.Tensor, torch.Tensor]:
        """Consumer (a): ``(QuantizedActivation(normed), residual_out[, normed])``.

        Args:
            residual: BF16 [M, hidden] (M of the pending publish), contiguous. Read only.
            weight: BF16 [hidden] Gemma RMSNorm weight (scale ``1 + w``).
            eps: finite float >= 0.
            also_bf16: also return the BF16 normed rows.
            rank: the simulated rank collecting (None for a real group).

        Returns:
            QuantizedActivation (values float8_e4m3fn [M, hidden], 128x4 swizzled scales
            ``[mxfp8_scale_numel(M, hidden)]`` with padding rows zero), residual_out BF16
            [M, hidden], and normed BF16 [M, hidden] when ``also_bf16``.

        Raises:
            TypeError / ValueError: bad inputs (the publish stays pending).
            RuntimeError: debug mode and a peer never published.
        """
        r = self._rank(rank)
        also_bf16 = checks.flag("also_bf16", also_bf16)
        m = self._pending_m(r)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        hidden = self.hidden_size
        values = torch.empty((m, hidden), dtype=torch.float8_e4m3fn, device=self.device)
        scales = torch.empty(mxfp8_scale_numel(m, hidden), dtype=torch.uint8, device=self.device)
        residual_out = torch.empty_like(residual)
        normed = torch.empty_like(residual) if also_bf16 else None
        self._launch_consume(
            r, m, EPILOGUE_RMS_NORM_MXFP8, residual=residual, weight=weight, eps=eps, gemma=True,
            out=normed, residual_out=residual_out, values=values, scales=scales,
        )
        qa = QuantizedActivation(values, scales, torch.bfloat16, (m, hidden), ScaleLayout.SWIZZLED)
        return (qa, residual_out, normed) if also_bf16 else (qa, residual_out)

    # -- one call (a process driving one rank; a SimulatedGroup of tp > 1 drives several
    #    ranks and uses publish + collect_* with rank= instead: these raise ValueError there) --
    def _fallback_sum(self, x: torch.Tensor) -> torch.Tensor:
        self._agree_on_m(x.shape[0])
        y = x.clone()
        self.group.all_reduce_(y)
        return y

    def all_reduce(self, x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Consumer (c) in one call: publish ``x``, return ``bf16(sum over ranks)`` (see :meth:`collect`)."""
        self._rows("x", x)
        out = _bf16_out("out", out, x.shape[0], self.hidden_size, self.device)
        if not self.fused:
            out.copy_(self._fallback_sum(x))
            return out
        r = self._rank(None)
        self._publish_rows(r, x)
        return self.collect(rank=r, out=out)

    def all_reduce_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, gemma: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Consumer (b) in one call: publish ``x``, return ``(normed, residual_out)`` (see :meth:`collect_rms_norm`)."""
        self._rows("x", x)
        gemma = checks.flag("gemma", gemma)
        eps = self._check_norm_inputs(x.shape[0], residual, weight, eps)
        if not self.fused:
            return _fallback_norm(self._fallback_sum(x), residual, weight, eps, gemma)
        r = self._rank(None)
        self._publish_rows(r, x)
        return self.collect_rms_norm(residual, weight, eps, gemma=gemma, rank=r)

    def all_reduce_gemma_rms_norm_mxfp8(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, also_bf16: bool = False
    ):
        """Consumer (a) in one call: publish ``x``, return ``(QuantizedActivation, residual_out[, normed])``."""
        self._rows("x", x)
        also_bf16 = checks.flag("also_bf16", also_bf16)
        eps = self._check_norm_inputs(x.shape[0], residual, weight, eps)
        if not self.fused:
            return _fallback_mxfp8(self._fallback_sum(x), residual, weight, eps, also_bf16)
        r = self._rank(None)
        self._publish_rows(r, x)
        return self.collect_gemma_rms_norm_mxfp8(residual, weight, eps, also_bf16=also_bf16, rank=r)

    def reset(self) -> None:
        """Re-arm every mailbox slot and stage_state, forget pending publishes (collective).

        Needed only after a debug-mode timeout left the ranks out of step.
        """
        self._ledger.clear()
        if self.mailbox is not None:
            self.mailbox.reset()


def _fallback_norm(y, residual, weight, eps, gemma):
    # Lazy: seam.ops.norm is only needed without peer access.
    from seam.ops.norm import fused_add_rms_norm

    return fused_add_rms_norm(y, residual, weight, eps, gemma=gemma)


def _fallback_mxfp8(y, residual, weight, eps, also_bf16):
    # Lazy: seam.ops.norm is only needed without peer access.
    from seam.ops.norm import gemma_norm_mxfp8_activation

    return gemma_norm_mxfp8_activation(y, residual, weight, eps, also_bf16)


def all_reduce(x: torch.Tensor, comm: LamportAllReduce, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``bf16(sum over TP ranks of x)``: :meth:`LamportAllReduce.all_reduce`.

    Args:
        x: BF16 [M, hidden] this rank's contribution, contiguous, 16-byte aligned. Read only.
        comm: the group's :class:`LamportAllReduce`.
        out: optional BF16 [M, hidden] output, written in place.

    Raises:
        TypeError / ValueError: bad inputs (before any launch); ValueError also in debug mode
            when the ranks' M differ (on every rank, before any collective). Spec: ``lamport.md``.
    """
    if not isinstance(comm, LamportAllReduce):
        raise TypeError(f"comm must be a LamportAllReduce, got {type(comm).__name__}")
    return comm.all_reduce(x, out=out)


def all_reduce_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    comm: LamportAllReduce,
    *,
    gemma: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce + residual add + RMSNorm: ``(normed, residual_out)`` BF16 [M, hidden].

    ``residual_out = bf16(sum_p f32(x_p) + f32(residual))``;
    ``normed = bf16(f32(residual_out) * rsqrt(mean(f32(residual_out)^2) + eps) * w)``,
    ``w = f32(weight)`` (+ 1 when ``gemma``).

    Args:
        x: BF16 [M, hidden] this rank's contribution, 1 <= M <= capacity, contiguous,
            16-byte aligned. Read only.
        residual: BF16 [M, hidden], contiguous, 16-byte aligned. Read only.
        weight: BF16 [hidden] RMSNorm weight.
        eps: finite float >= 0.
        comm: the group's :class:`LamportAllReduce`.
        gemma: apply the weight as ``1 + w``.

    Raises:
        TypeError / ValueError: bad inputs (before any launch); ValueError also in debug mode
            when the ranks' M differ (on every rank, before any collective).
        RuntimeError: debug mode and a peer never published.

    Spec: ``docs/spec/lamport.md`` (Publish, Consumer; the RMSNorm epilogue of Consumer A).
    """
    if not isinstance(comm, LamportAllReduce):
        raise TypeError(f"comm must be a LamportAllReduce, got {type(comm).__name__}")
    return comm.all_reduce_rms_norm(x, residual, weight, eps, gemma=gemma)


class FinalizeAllReduceGemmaRMSNormMxfp8:
    """MoE top-k finalize + TP all-reduce + residual add + Gemma RMSNorm + MXFP8, two launches.

    Publish (per token t of this rank):
    ``acc_r = sum_k [idx[t,k] >= 0] f32(gemm2_permuted[idx[t,k]]) * f32(w[t,k])`` (k in
    order, products rounded to fp32), ``x_r = bf16(acc_r + f32(shared_output[t]))``;
    consumer: ``residual_out = bf16(sum_p f32(x_p) + f32(residual))``,
    ``normed = bf16(f32(residual_out) * rsqrt(mean(f32(residual_out)^2) + eps) * (1 + f32(w)))``,
    ``(values, scales) = mxfp8_quantize(normed)`` (128x4 swizzled, padding zero).
    Spec: ``docs/spec/lamport.md`` (MoE finalize publish, Consumer A). Each instance owns
    a mailbox for ``max_num_tokens`` rows that all layers may share; construction is
    collective over the TP group.

    Args:
        hidden_size: multiple of 128, at most 16384.
        max_num_tokens: capacity (largest M).
        top_k: experts per token (>= 1).
        fp32_weights: ``expert_weights`` are FP32 (else BF16).
        group: the TP :class:`seam.comm.Group` (default: a :class:`~seam.comm.DistGroup`
            over the default process group).
        device: the group's device.
        debug, spin_limit: as :class:`LamportAllReduce`.

    Sizes are Python or NumPy ints.

    Raises:
        TypeError / ValueError: bad sizes or types.
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
        checks.in_range("top_k", top_k, 1, 64)
        self.fp32_weights = checks.flag("fp32_weights", fp32_weights)
        if group is None:
            group = DistGroup(device=device)
        if not isinstance(group, Group):
            raise TypeError(f"group must be a seam.comm.Group, got {type(group).__name__}")
        group.agree("(top_k, fp32_weights)", (top_k, self.fp32_weights))
        self.comm = LamportAllReduce(
            hidden_size=hidden_size, max_num_tokens=max_num_tokens, group=group, device=device,
            debug=debug, spin_limit=spin_limit,
        )
        self.hidden_size = self.comm.hidden_size
        self.capacity = self.comm.capacity
        self.top_k = top_k
        self.group = group

    def _check_moe(self, moe_output: MoEOutput) -> int:
        """Validate the MoE inputs; return M."""
        if not isinstance(moe_output, MoEOutput):
            raise TypeError(f"moe_output must be a MoEOutput, got {type(moe_output).__name__}")
        routed = moe_output.routed
        if not isinstance(routed, UnfinalizedMoEOutput):
            raise TypeError(f"moe_output.routed must be an UnfinalizedMoEOutput, got {type(routed).__name__}")
        if moe_output.routed_scaling_factor != 1.0:
            raise ValueError(
                f"moe_output.routed_scaling_factor must be 1.0 (fold it into expert_weights), "
                f"got {moe_output.routed_scaling_factor}"
            )
        if moe_output.shared_output is None:
            raise ValueError("moe_output.shared_output is required")
        comm = self.comm
        shared = comm._rows("moe_output.shared_output", moe_output.shared_output)
        m = shared.shape[0]
        checks.tensor(
            "moe_output.routed.gemm2_permuted", routed.gemm2_permuted, dtype=torch.bfloat16,
            shape=(-1, self.hidden_size), device=comm.device, align=16,
        )
        if routed.gemm2_permuted.shape[0] < 1:
            raise ValueError("moe_output.routed.gemm2_permuted must have at least one row")
        wdtype = torch.float32 if self.fp32_weights else torch.bfloat16
        checks.tensor(
            "moe_output.routed.expert_weights", routed.expert_weights, dtype=wdtype,
            shape=(m, self.top_k), device=comm.device,
        )
        idx = checks.tensor(
            "moe_output.routed.expanded_idx_to_permuted_idx", routed.expanded_idx_to_permuted_idx,
            dtype=torch.int32, shape=(m, self.top_k), device=comm.device,
        )
        if comm.debug and runtime.host_reads_allowed(comm.device):
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
        """
        r = self.comm._rank(rank)
        m = self._check_moe(moe_output)
        self.comm._check_publish(r, m)
        self._launch_publish(r, m, moe_output)

    def _launch_publish(self, r: int, m: int, moe_output: MoEOutput) -> None:
        routed = moe_output.routed
        self.comm._launch_publish(
            r, m, moe_output.shared_output, routed.gemm2_permuted, routed.expert_weights,
            routed.expanded_idx_to_permuted_idx,
        )

    def collect(self, residual, norm_weight, norm_eps, *, also_bf16: bool = False, rank: int | None = None):
        """Consumer A of one rank (split step): :meth:`LamportAllReduce.collect_gemma_rms_norm_mxfp8`."""
        return self.comm.collect_gemma_rms_norm_mxfp8(residual, norm_weight, norm_eps, also_bf16=also_bf16, rank=rank)

    def __call__(
        self,
        moe_output: MoEOutput,
        residual: torch.Tensor,
        norm_weight: torch.Tensor,
        norm_eps: float,
    ) -> tuple[QuantizedActivation, torch.Tensor]:
        """Return ``(QuantizedActivation(normed), residual_out)`` for this process's rank.

        Args:
            moe_output: TP-partial routed output (unfinalized) and shared-expert output,
                routed_scaling_factor already in the weights. Read only.
            residual: BF16 [M, hidden] residual stream. Read only.
            norm_weight: BF16 [hidden] Gemma RMSNorm weight (scale ``1 + w``).
            norm_eps: RMSNorm epsilon, finite >= 0.

        Raises:
            TypeError / ValueError: bad inputs, all checked before any launch; ValueError
                also on a :class:`~seam.comm.SimulatedGroup` of tp > 1 (one process drives
                every rank there: use :meth:`publish` and :meth:`collect` with ``rank=``),
                and in debug mode when the ranks' M differ (on every rank, before any
                collective).
            RuntimeError: debug mode and a peer never published.
        """
        m = self._check_moe(moe_output)
        eps = self.comm._check_norm_inputs(m, residual, norm_weight, norm_eps)
        if not self.comm.fused:
            from seam.ref.lamport import moe_finalize_ref

            routed = moe_output.routed
            x = moe_finalize_ref(
                routed.gemm2_permuted, routed.expert_weights, routed.expanded_idx_to_permuted_idx,
                moe_output.shared_output,
            )
            return _fallback_mxfp8(self.comm._fallback_sum(x), residual, norm_weight, eps, False)
        r = self.comm._rank(None)
        self.comm._check_publish(r, m)
        self._launch_publish(r, m, moe_output)
        return self.collect(residual, norm_weight, eps, rank=r)

    def reset(self) -> None:
        """Re-arm the mailbox after a debug-mode timeout (collective)."""
        self.comm.reset()


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
    """
    if not isinstance(group, Group):
        raise TypeError(f"group must be a seam.comm.Group, got {type(group).__name__}")
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
) -> FinalizeAllReduceGemmaRMSNormMxfp8:
    """Build the instance every deferred MoE output is finalized with (collective over the group).

    Args as :class:`FinalizeAllReduceGemmaRMSNormMxfp8`. Call on every rank, whatever
    :func:`supports_fused_moe_finalize` says: on a group without peer access the instance
    falls back to ``torch.distributed`` + the fused kernels. ``group`` None means a
    :class:`~seam.comm.DistGroup` over the default process group (torch.distributed must be
    initialized); at TP 1 without torch.distributed pass ``seam.SimulatedGroup(1)``.
    Returns the instance that :func:`finalize_allreduce_gemma_rms_norm_mxfp8` uses.
    """
    global _fused_moe_finalize
    _fused_moe_finalize = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden_size, max_num_tokens=max_num_tokens, top_k=top_k,
        fp32_weights=fp32_weights, group=group, device=device,
    )
    return _fused_moe_finalize


def finalize_allreduce_gemma_rms_norm_mxfp8(
    moe_output: MoEOutput, residual: torch.Tensor, norm_weight: torch.Tensor, norm_eps: float
) -> tuple[QuantizedActivation, torch.Tensor]:
    """Finalize a deferred MoE output into the next layer's MXFP8 input and new residual.

    Calls the instance built by :func:`init_fused_moe_finalize` (formula, args and Raises
    in :meth:`FinalizeAllReduceGemmaRMSNormMxfp8.__call__`).

    Raises:
        RuntimeError: :func:`init_fused_moe_finalize` was not called.
    """
    if _fused_moe_finalize is None:
        raise RuntimeError("init_fused_moe_finalize() was not called")
    return _fused_moe_finalize(moe_output, residual, norm_weight, norm_eps)
