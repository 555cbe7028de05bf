"""The all-reduce + add + Gemma RMSNorm + MXFP8 dispatch an engine calls at a layer boundary.

``docs/spec/integration.md`` ("allreduce + norm + quant dispatch"), seed 004's
``allreduce_gemma_rms_norm_mxfp8``: one entry point that picks the cheapest exact path
for the group it is given, so a model's code does not branch on TP or peer access.
"""

from __future__ import annotations

import torch

from seam import checks
from seam.comm.group import Group
from seam.ops.a_deq import check_a_deq
from seam.ops.allreduce import LamportAllReduce
from seam.ops.norm import gemma_norm_mxfp8_activation


def allreduce_gemma_rms_norm_mxfp8(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    comm: LamportAllReduce | None = None,
    *,
    also_bf16: bool = False,
    defer: bool = False,
    a_deq: bool | str = "auto",
):
    """All-reduce ``x`` over the TP group, add ``residual``, Gemma RMSNorm, MXFP8 (swizzled).

    Paths:

    * ``comm`` None (TP 1): the fused add+norm+quant kernel
      (:func:`seam.gemma_fused_add_rms_norm_mxfp8`, ``docs/spec/norm_act.md``: the RMS of
      the unrounded fp32 sum).
    * ``comm`` a :class:`seam.LamportAllReduce` with peer access: the Lamport fused
      all-reduce, consumer A (``docs/spec/lamport.md``: the RMS of the BF16-rounded
      residual_out).
    * ``comm`` without peer access: ``torch.distributed.all_reduce`` then the fused
      kernel (the LamportAllReduce fallback).
    * ``defer=True``: returns None without doing anything, for a caller that owns a fused
      all-reduce + norm kernel of its own and only wants seam where that does not apply
      (the seed's contract).

    Args:
        x: BF16 [M, hidden] this rank's partial sum (TP 1: the sublayer output), hidden a multiple
            of 32 and <= 16384 (``comm``'s hidden_size). Read only. With ``comm``: contiguous, 16-byte aligned,
            1 <= M <= its capacity; without: rows contiguous at any row stride.
        residual: BF16 [M, hidden], the same layout rules as x. Read only.
        weight: BF16 [hidden] Gemma weight (scale ``1 + w``).
        eps: RMSNorm epsilon.
        comm: None or the TP group's :class:`seam.LamportAllReduce` (built once per process;
            its capacity bounds M).
        also_bf16: also return the BF16 normed rows (the MoE router needs them).
        defer: return None (see above).
        a_deq: True: the norm's launch also writes the activation's A_deq (BF16 [M, hidden],
            ``seam.formats.a_deq``; hidden a multiple of 128), which :func:`seam.mxfp8_linear`'s and the fused
            QKV op's Hopper GEMMs then read instead of dequantizing the MXFP8 rows: 2 bytes
            per element more written here, the GEMM's dequantization saved there; "auto" (default): where
            that trade gains (Hopper, 2-64 tokens, 1-64 at hidden <= 2048 but 9-64 at hidden 512 and 768,
            65-384 at hidden >= 2048 and 65-128 from 256, :func:`seam.kernels.wgmma_config.a_deq_pays`); False: never.

    Returns:
        ``(QuantizedActivation, residual_out)`` or with ``also_bf16``
        ``(QuantizedActivation, residual_out, normed)``; None when ``defer``.

    Raises:
        TypeError: ``comm`` of another type, ``defer`` or ``also_bf16`` not a bool, ``a_deq`` neither a bool nor a
            string (with ``defer`` too); otherwise as the path taken. With ``defer`` the tensors are not checked: they
            go to the caller's own kernel.
        ValueError: ``a_deq`` a string other than "auto" (with ``defer`` too); as the path taken (shapes, dtypes, M
            outside the capacity).
        RuntimeError: as the path taken (a Lamport ``comm`` in debug mode whose peer never published).

    Spec: ``docs/spec/integration.md`` (allreduce + norm + quant dispatch).
    """
    if comm is not None and not isinstance(comm, LamportAllReduce):
        wrap = " (wrap it once: seam.LamportAllReduce(hidden_size=..., max_num_tokens=..., group=it))"
        hint = wrap if isinstance(comm, Group) else ""
        raise TypeError(f"comm must be None or a seam.LamportAllReduce, got {type(comm).__name__}{hint}")
    if checks.flag("defer", defer):
        # the option flags are the caller's too: a wrong one surfaces while deferring, not once it stops
        checks.flag("also_bf16", also_bf16)
        check_a_deq(a_deq)
        return None
    if comm is None:
        return gemma_norm_mxfp8_activation(x, residual, weight, eps, also_bf16, a_deq)
    return comm.all_reduce_gemma_rms_norm_mxfp8(x, residual, weight, eps, also_bf16=also_bf16, a_deq=a_deq)
