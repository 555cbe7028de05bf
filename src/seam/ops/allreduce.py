"""Lamport one-shot TP all-reduce and its fused consumers: the public API (``docs/spec/lamport.md``).

:class:`LamportAllReduce` exposes each fused all-reduce in two forms: the **split steps**
``publish`` / ``collect*`` (a simulated driver publishes for every rank before any consumer;
a real rank may do the same to keep a first call's JIT compile from delaying a concurrent
publish) and the **one-call** methods (``all_reduce``, ``all_reduce_rms_norm``,
``all_reduce_gemma_rms_norm_mxfp8``) for a process that drives one rank. Its mailbox, ledger,
debug mode and launchers are :class:`seam.ops.allreduce_base.LamportBase`'s; the MoE finalize
publish (seed 000) is :mod:`seam.ops.allreduce_moe`.

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

import torch

from seam import checks
from seam.comm.group import Group
from seam.formats.activation import QuantizedActivation
from seam.kernels.lamport import EPILOGUE_ALL_REDUCE, EPILOGUE_RMS_NORM
from seam.ops.allreduce_base import DEFAULT_SPIN_LIMIT, LamportBase
from seam.ops.norm import fused_add_rms_norm, gemma_norm_mxfp8_activation


def _bf16_out(name: str, t: object, m: int, hidden: int, device: torch.device) -> torch.Tensor:
    if t is None:
        return torch.empty((m, hidden), dtype=torch.bfloat16, device=device)
    return checks.tensor(name, t, dtype=torch.bfloat16, shape=(m, hidden), device=device, written=True)


class LamportAllReduce(LamportBase):
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
        hidden_size: row width, a positive multiple of 32 (MXFP8 blocks), at most 16384
            (:data:`~seam.ops.allreduce_base.MAX_HIDDEN`: the consumer keeps one whole row in registers).
        max_num_tokens: mailbox capacity, the largest M of any call, in [1, 2**24].
        group: a :class:`seam.comm.Group` (:class:`~seam.comm.DistGroup` or
            :class:`~seam.comm.SimulatedGroup`; default: a DistGroup over torch.distributed's
            default process group). Construction is collective over it.
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
        RuntimeError: ``group`` None before ``torch.distributed.init_process_group()``.
    """

    def __init__(
        self,
        *,
        hidden_size: int,
        max_num_tokens: int,
        group: Group | None = None,
        device: torch.device | str | None = None,
        debug: bool | None = None,
        spin_limit: int = DEFAULT_SPIN_LIMIT,
    ) -> None:
        super().__init__(
            hidden_size=hidden_size, max_num_tokens=max_num_tokens, group=group, device=device, debug=debug,
            spin_limit=spin_limit,
        )

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
        r = self._mailbox_rank(rank)
        self._publish(r, self._rows("x", x), x)

    def collect(self, *, rank: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """Consumer (c): wait for every rank's rows, return ``bf16(acc)`` BF16 [M, hidden].

        Args:
            rank: the simulated rank collecting (None for a real group).
            out: optional BF16 [M, hidden] contiguous buffer, written in place.

        Raises:
            TypeError / ValueError: bad out (ValueError for one requiring grad while grad mode is on) or
                rank, no pending publish.
            RuntimeError: debug mode and a peer never published; the group uses the fallback.
        """
        r = self._mailbox_rank(rank)
        m = self._pending_m(r)
        return self._collect(r, m, _bf16_out("out", out, m, self.hidden_size, self.device))

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
            residual: BF16 [M, hidden] (M of the pending publish), contiguous, 16-byte aligned. Read only.
            weight: BF16 [hidden] RMSNorm weight; applied as ``1 + w`` when ``gemma``.
            eps: finite float or int (not a bool) >= 0.
            gemma: Gemma weight convention.
            rank: the simulated rank collecting (None for a real group).

        Raises:
            TypeError / ValueError: bad inputs (the publish stays pending).
            RuntimeError: debug mode and a peer never published; the group uses the fallback.
        """
        r = self._mailbox_rank(rank)
        gemma = checks.flag("gemma", gemma)
        m = self._pending_m(r)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        return self._collect_rms_norm(r, m, residual, weight, eps, gemma)

    def collect_gemma_rms_norm_mxfp8(
        self,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        *,
        also_bf16: bool = False,
        rank: int | None = None,
        a_deq: bool | str = "auto",
    ) -> tuple[QuantizedActivation, torch.Tensor] | tuple[QuantizedActivation, torch.Tensor, torch.Tensor]:
        """Consumer (a): ``(QuantizedActivation(normed), residual_out[, normed])``.

        Args:
            residual: BF16 [M, hidden] (M of the pending publish), contiguous, 16-byte aligned. Read only.
            weight: BF16 [hidden] Gemma RMSNorm weight (scale ``1 + w``).
            eps: finite float or int (not a bool) >= 0.
            also_bf16: also return the BF16 normed rows.
            rank: the simulated rank collecting (None for a real group).
            a_deq: True: the same launch also writes the activation's A_deq (``seam.formats.a_deq``; hidden
                a multiple of 128), which :func:`seam.mxfp8_linear`'s and the fused QKV op's Hopper Gluon
                GEMM then reads; "auto" (default): where that GEMM gains (Hopper, 2-64 tokens, 1-64 at
                hidden <= 2048 but 9-64 at hidden 512 and 768, 65-384 at hidden >= 2048 and 65-128 from 256,
                :func:`seam.kernels.wgmma_config.a_deq_pays`); False: never.

        Returns:
            QuantizedActivation (values float8_e4m3fn [M, hidden], 128x4 swizzled scales
            ``[mxfp8_scale_numel(M, hidden)]`` with padding rows zero), residual_out BF16
            [M, hidden], and normed BF16 [M, hidden] when ``also_bf16``.

        Raises:
            TypeError / ValueError: bad inputs (the publish stays pending).
            RuntimeError: debug mode and a peer never published; the group uses the fallback.
        """
        r = self._mailbox_rank(rank)
        also_bf16 = checks.flag("also_bf16", also_bf16)
        m = self._pending_m(r)
        a_deq = self._check_a_deq(a_deq, m)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        return self._consume_gemma_rms_norm_mxfp8(r, m, residual, weight, eps, also_bf16, a_deq)

    def _collect(self, r: int, m: int, out: torch.Tensor) -> torch.Tensor:
        self._launch_consumer(r, m, EPILOGUE_ALL_REDUCE, out=out)
        return out

    def _collect_rms_norm(self, r, m, residual, weight, eps, gemma) -> tuple[torch.Tensor, torch.Tensor]:
        normed = torch.empty_like(residual)
        residual_out = torch.empty_like(residual)
        self._launch_consumer(
            r, m, EPILOGUE_RMS_NORM, residual=residual, weight=weight, eps=eps, gemma=gemma,
            out=normed, residual_out=residual_out,
        )
        return normed, residual_out

    # -- one call (a process driving one rank; a SimulatedGroup of tp > 1 drives several
    #    ranks and uses publish + collect_* with rank= instead: these raise ValueError there) --
    def all_reduce(self, x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Consumer (c) in one call: publish ``x``, return ``bf16(sum over ranks)`` (see :meth:`collect`).

        Args: ``x`` as :meth:`publish`, ``out`` as :meth:`collect`. Without peer access this call
        takes the fallback (``torch.distributed.all_reduce``).

        Raises:
            TypeError / ValueError: bad x or out (out overlapping x, or requiring grad while grad mode is
                on, too), before any launch or collective; ValueError also
                on a :class:`~seam.comm.SimulatedGroup` of tp > 1 (use :meth:`publish` and
                :meth:`collect` with ``rank=``), with a publish of this rank pending, and in debug
                mode when the ranks' M differ (on every rank, before any collective).
            RuntimeError: debug mode and a peer never published.
        """
        m = self._rows("x", x)
        out = _bf16_out("out", out, m, self.hidden_size, self.device)
        checks.outputs_apart([("out", out)], [("x", x)])  # as every op: outputs apart from the inputs
        if not self.fused:
            out.copy_(self._fallback_sum(x))
            return out
        r = self.group.check_rank(None)
        self._publish(r, m, x)
        return self._collect(r, m, out)

    def all_reduce_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, gemma: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Consumer (b) in one call: publish ``x``, return ``(normed, residual_out)`` (see :meth:`collect_rms_norm`).

        Args: as :meth:`publish` and :meth:`collect_rms_norm`. Without peer access this call takes
        the fallback (``torch.distributed.all_reduce``, then the fused norm kernel).

        Raises:
            TypeError / ValueError: bad x, residual, weight, eps or gemma, before any launch or
                collective; ValueError also as :meth:`all_reduce` (simulated tp > 1, a pending
                publish, the ranks' M differing in debug mode).
            RuntimeError: debug mode and a peer never published.
        """
        m = self._rows("x", x)
        gemma = checks.flag("gemma", gemma)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        if not self.fused:
            return fused_add_rms_norm(self._fallback_sum(x), residual, weight, eps, gemma=gemma)
        r = self.group.check_rank(None)
        self._publish(r, m, x)
        return self._collect_rms_norm(r, m, residual, weight, eps, gemma)

    def all_reduce_gemma_rms_norm_mxfp8(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, also_bf16: bool = False,
        a_deq: bool | str = "auto",
    ):
        """Consumer (a) in one call: publish ``x``, return ``(QuantizedActivation, residual_out[, normed])``.

        Args and Returns: as :meth:`publish` and :meth:`collect_gemma_rms_norm_mxfp8`. Without peer
        access this call takes the fallback (``torch.distributed.all_reduce``, then the fused kernel).

        Raises:
            TypeError / ValueError: bad x, residual, weight, eps, also_bf16 or a_deq, before any launch or
                collective; ValueError also as :meth:`all_reduce` (simulated tp > 1, a pending
                publish, the ranks' M differing in debug mode).
            RuntimeError: debug mode and a peer never published.
        """
        m = self._rows("x", x)
        also_bf16 = checks.flag("also_bf16", also_bf16)
        a_deq = self._check_a_deq(a_deq, m)
        eps = self._check_norm_inputs(m, residual, weight, eps)
        if not self.fused:
            return gemma_norm_mxfp8_activation(self._fallback_sum(x), residual, weight, eps, also_bf16, a_deq)
        r = self.group.check_rank(None)
        self._publish(r, m, x)
        return self._consume_gemma_rms_norm_mxfp8(r, m, residual, weight, eps, also_bf16, a_deq)


def all_reduce(x: torch.Tensor, comm: LamportAllReduce, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``bf16(sum over TP ranks of x)``: :meth:`LamportAllReduce.all_reduce`.

    Args:
        x: BF16 [M, hidden] this rank's contribution, 1 <= M <= capacity, contiguous, 16-byte aligned. Read only.
        comm: the group's :class:`LamportAllReduce`.
        out: optional BF16 [M, hidden] contiguous buffer, apart from x, written in place.

    Returns:
        BF16 [M, hidden] (``out`` when given).

    Raises:
        TypeError / ValueError: bad inputs (before any launch); ValueError also as
            :meth:`LamportAllReduce.all_reduce` (simulated tp > 1, a pending publish, the ranks' M differing in
            debug mode, on every rank, before any collective).
        RuntimeError: debug mode and a peer never published.

    Spec: ``docs/spec/lamport.md`` (Publish, Consumer).
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
        eps: finite float or int (not a bool) >= 0.
        comm: the group's :class:`LamportAllReduce`.
        gemma: apply the weight as ``1 + w``.

    Raises:
        TypeError / ValueError: bad inputs (before any launch); ValueError also as
            :meth:`LamportAllReduce.all_reduce` (simulated tp > 1, a pending publish, the ranks' M differing in
            debug mode, on every rank, before any collective).
        RuntimeError: debug mode and a peer never published.

    Spec: ``docs/spec/lamport.md`` (Publish, Consumer; the RMSNorm epilogue of Consumer A).
    """
    if not isinstance(comm, LamportAllReduce):
        raise TypeError(f"comm must be a LamportAllReduce, got {type(comm).__name__}")
    return comm.all_reduce_rms_norm(x, residual, weight, eps, gemma=gemma)
