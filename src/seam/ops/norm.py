"""Public (Gemma) RMSNorm ops: plain, fused residual add, and fused add + MXFP8 output.

All of them are one launch of ``seam.kernels.norm_quant`` (``docs/spec/norm_act.md``).
"""

from __future__ import annotations

import torch

from seam import checks
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import ScaleLayout
from seam.kernels.norm_quant import launch_fused_add_rms_norm
from seam.ops.a_deq import resolve_a_deq
from seam.ops.mxfp8 import check_mxfp8_out
from seam.ops.registry import register

MAX_HIDDEN = 16384  #: widest row one program holds in registers


# One op for every variant: a residual, the BF16 normed rows and the MXFP8 outputs are each optional.
_norm = register("fused_add_rms_norm", ("residual_out", "normed", "values", "scales", "a_deq"),
                 launch_fused_add_rms_norm)


def _check_rows(name: str, t: object, shape: tuple[int, int] | None, device: torch.device | None) -> torch.Tensor:
    """A BF16 [M, hidden] input whose rows are contiguous, at any row stride: the kernel reads row i at
    ``i * stride(0)``, so rows may overlap (stride 0: one row broadcast by ``expand()``), as in
    :func:`seam.mxfp8_linear`. Outputs are checked apart (contiguous)."""
    checks.tensor(name, t, dtype=torch.bfloat16, contiguous=False)
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D [M, hidden], got shape {list(t.shape)}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)} like x, got {list(t.shape)}")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have unit column stride, got strides {t.stride()}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} like x")
    return t


def _check_common(x, weight, eps):
    _check_rows("x", x, None, None)
    m, hidden = x.shape
    # One program holds a whole row in registers (kernels/norm_quant.py).
    checks.in_range("hidden (x.shape[1])", hidden, 1, MAX_HIDDEN)
    device = checks.kernel_device("x", x)
    checks.tensor("weight", weight, dtype=torch.bfloat16, shape=(hidden,), device=device)
    eps = checks.finite_float("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return m, hidden, device, eps


def _bf16_out(name: str, t: object, m: int, hidden: int, device: torch.device) -> torch.Tensor:
    return checks.tensor(name, t, dtype=torch.bfloat16, shape=(m, hidden), device=device, written=True)


def gemma_rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Gemma RMSNorm: ``bf16( f32(x) * rsqrt(mean(f32(x)^2) + eps) * (1 + f32(w)) )`` per row.

    Spec: ``docs/spec/norm_act.md`` (Gemma RMSNorm). One launch. Within 1 BF16 ulp of
    :func:`seam.ref.norm.gemma_rms_norm_ref` (reduction order differs).

    Args:
        x: BF16 [M, hidden], 1 <= hidden <= 16384, rows contiguous at any row stride (0 too: one
            row broadcast by ``expand()``). Read only.
        weight: BF16 [hidden], contiguous. Read only.
        eps: finite float or int (not a bool) >= 0, added inside the rsqrt.
        out: optional BF16 [M, hidden] contiguous buffer for the result, written in place.

    Returns:
        normed: BF16 [M, hidden] (``out`` when given).

    Raises:
        TypeError: a tensor of the wrong dtype, or eps not a real number (a bool is refused).
        ValueError: wrong shapes, strides or devices, hidden outside [1, 16384], eps < 0 or
            not finite, or ``out`` not contiguous, overlapping an input or requiring grad while grad mode is on.
    """
    m, hidden, device, eps = _check_common(x, weight, eps)
    normed = torch.empty((m, hidden), dtype=torch.bfloat16, device=device) if out is None else out
    _bf16_out("out", normed, m, hidden, device)
    checks.outputs_apart([("out", normed)], [("x", x), ("weight", weight)])
    _norm(x, None, weight, eps, True, normed=normed)
    return normed


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    gemma: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMSNorm, plain weight (``gemma=False``) or Gemma weight ``1 + w``.

    ``s = f32(x) + f32(residual)``; ``residual_out = bf16(s)`` (bit-identical);
    ``normed = bf16( s * rsqrt(sum(s^2)/hidden + eps) * w' )`` from the unrounded fp32 ``s``
    (within 1 BF16 ulp of the reference), ``w' = f32(w)`` or ``1 + f32(w)``. Spec:
    ``docs/spec/norm_act.md`` (Fused residual add + Gemma RMSNorm; the plain RMSNorm uses
    ``f32(w)``). One launch. It returns new tensors and leaves its inputs as they are; vLLM's in-place
    ``fused_add_rms_norm(input, residual, weight, eps)`` is ``fused_add_rms_norm(x, residual, weight, eps,
    out=(x, residual))``.

    Args:
        x: BF16 [M, hidden], 1 <= hidden <= 16384, rows contiguous at any row stride (0 too: one row
            broadcast by ``expand()``). Read only, unless passed as normed.
        residual: BF16 [M, hidden], rows contiguous at any row stride (0 too). Read only, unless passed
            as residual_out (an output: contiguous, so a stride-0 residual is not updated in place).
        weight: BF16 [hidden], contiguous.
        eps: finite float or int (not a bool) >= 0.
        gemma: weight factor ``1 + w`` (Gemma) instead of ``w``.
        out: optional (normed, residual_out) BF16 [M, hidden] contiguous buffers,
            written in place; they must not overlap each other or the inputs, except that
            ``out=(x, residual)`` (the very same tensors, contiguous) updates both in place, as
            vLLM's ``fused_add_rms_norm(input, residual, ...)`` does: each row is read whole
            before any of it is written, by the same threads.

    Returns:
        (normed, residual_out): BF16 [M, hidden] each.

    Raises:
        TypeError: wrong dtypes, eps not a real number (a bool is refused), gemma not a bool (Python or NumPy),
            or ``out`` not a tuple or list of two buffers.
        ValueError: wrong shapes, strides or devices, hidden outside [1, 16384], eps out of range,
            overlapping buffers, ``out`` buffers not contiguous (a stride-0 residual passed as
            residual_out included) or requiring grad while grad mode is on.
    """
    gemma = checks.flag("gemma", gemma)
    m, hidden, device, eps = _check_common(x, weight, eps)
    _check_rows("residual", residual, (m, hidden), device)
    if out is None:
        normed = torch.empty((m, hidden), dtype=torch.bfloat16, device=device)
        residual_out = torch.empty_like(normed)
    else:
        normed, residual_out = checks.out_buffers("out", out, ("normed", "residual_out"))
        _bf16_out("out[0] (normed)", normed, m, hidden, device)
        _bf16_out("out[1] (residual_out)", residual_out, m, hidden, device)
    checks.outputs_apart(
        [("out[0] (normed)", normed), ("out[1] (residual_out)", residual_out)],
        [("x", x), ("residual", residual), ("weight", weight)],
        in_place=(("out[0] (normed)", "x"), ("out[1] (residual_out)", "residual")),
    )
    _norm(x, residual, weight, eps, gemma, residual_out=residual_out, normed=normed)
    return normed, residual_out


def gemma_fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + Gemma RMSNorm (FlashInfer/vLLM ``gemma_fused_add_rmsnorm``).

    :func:`fused_add_rms_norm` with ``gemma=True``: ``normed = bf16(s * rsqrt(sum(s^2)/hidden
    + eps) * (1 + f32(w)))``, ``residual_out = bf16(s)``. Spec: ``docs/spec/norm_act.md``.
    New tensors by default; in place, as vLLM calls it: ``out=(x, residual)``.
    Args, Returns and Raises as :func:`fused_add_rms_norm` (1 <= hidden <= 16384).
    """
    return fused_add_rms_norm(x, residual, weight, eps, gemma=True, out=out)


def fused_add_rms_norm_mxfp8(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    gemma: bool = False,
    also_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
    out: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, ...]:
    """Fused residual add + RMSNorm + MXFP8 quantization of the normed rows, one launch.

    ``s = f32(x) + f32(residual)``, ``residual_out = bf16(s)``,
    ``normed = bf16( s * rsqrt(sum(s^2)/hidden + eps) * w' )`` with ``w' = f32(w)``
    (plain RMSNorm, DeepSeek; the default here) or ``1 + f32(w)`` (``gemma=True``), then
    ``(values, scales) = mxfp8_quantize(normed)`` of that same BF16 ``normed``, bit for
    bit, with or without ``also_bf16``. Spec: ``docs/spec/norm_act.md`` (... + MXFP8
    output) and ``docs/spec/mxfp8.md``. A NaN in a row makes its whole normed row NaN; an inf makes that element NaN
    and the rest of the row +-0 (the RMS is inf). The MXFP8 rows store those NaNs as +448 at scale 0 (as
    :func:`seam.mxfp8_quantize` says), finite when read back; ``normed`` and ``residual_out`` keep them.

    Args:
        x: BF16 [M, hidden], hidden a multiple of 32 and <= 16384, rows contiguous at any row stride
            (0 too: one row broadcast by ``expand()``). Read only, unless passed as normed.
        residual: BF16 [M, hidden], rows contiguous at any row stride (0 too). Read only, unless passed
            as residual_out (an output: contiguous, so a stride-0 residual is not updated in place).
        weight: BF16 [hidden], contiguous.
        eps: finite float or int (not a bool) >= 0.
        gemma: weight factor ``1 + f32(w)`` instead of ``f32(w)``.
        also_bf16: also return the BF16 normed rows.
        scale_layout: ``"swizzled"`` (flat uint8 ``[mxfp8_scale_numel(M, hidden)]``, 128x4
            layout, padding rows/columns written as 0 by the kernel) or ``"row_major"``
            (uint8 [M, hidden // 32]).
        out: optional caller buffers written in place, in return order: (values, scales,
            residual_out), or (values, scales, normed, residual_out) with ``also_bf16``.
            values float8_e4m3fn [M, hidden]; scales uint8 of the layout's size; normed and
            residual_out BF16 [M, hidden]; all contiguous, 16-byte aligned values/scales,
            no overlaps, except that residual_out may be ``residual`` and normed ``x`` (the
            very same tensors: updated in place, as in :func:`fused_add_rms_norm`).

    Returns:
        (values float8_e4m3fn [M, hidden], scales uint8 in ``scale_layout``, residual_out BF16 [M, hidden]), or
        with ``also_bf16`` (values, scales, normed BF16 [M, hidden], residual_out).

    Raises:
        TypeError: wrong dtypes, eps/flags of the wrong type, ``out`` of the wrong arity, scale_layout not a str
            or :class:`seam.ScaleLayout`.
        ValueError: hidden not a multiple of 32 or above 16384, wrong shapes/strides/devices/
            sizes/alignment, eps out of range, unknown scale_layout, overlapping buffers, ``out`` buffers
            not contiguous (a stride-0 residual passed as residual_out included) or requiring grad while grad mode is on.
    """
    values, scales, normed, residual_out, _ = _add_norm_mxfp8(x, residual, weight, eps, gemma, also_bf16,
                                                             scale_layout, out, a_deq=False)
    return (values, scales, normed, residual_out) if also_bf16 else (values, scales, residual_out)


def _add_norm_mxfp8(x, residual, weight, eps, gemma, also_bf16, scale_layout, out, *, a_deq: object):
    """:func:`fused_add_rms_norm_mxfp8`'s checks and launch; returns (values, scales, normed or None,
    residual_out, A_deq or None), writing A_deq (``seam.formats.a_deq``, a new BF16 [M, hidden] tensor)
    as :func:`seam.ops.a_deq.resolve_a_deq` decides for ``a_deq``."""
    layout = ScaleLayout.parse(scale_layout)
    gemma, also_bf16 = checks.flag("gemma", gemma), checks.flag("also_bf16", also_bf16)
    m, hidden, device, eps = _check_common(x, weight, eps)
    _check_rows("residual", residual, (m, hidden), device)
    checks.multiple_of("hidden (x.shape[1])", hidden, 32)
    n_out = 4 if also_bf16 else 3
    if out is None:
        values, scales = check_mxfp8_out(None, m, hidden, layout, device)
        normed = torch.empty((m, hidden), dtype=torch.bfloat16, device=device) if also_bf16 else None
        residual_out = torch.empty((m, hidden), dtype=torch.bfloat16, device=device)
    else:
        names = ("values", "scales", "normed", "residual_out") if also_bf16 else ("values", "scales", "residual_out")
        out = checks.out_buffers("out", out, names)
        values, scales = check_mxfp8_out(out[:2], m, hidden, layout, device)
        normed = _bf16_out("out[2] (normed)", out[2], m, hidden, device) if also_bf16 else None
        residual_out = _bf16_out(f"out[{n_out - 1}] (residual_out)", out[n_out - 1], m, hidden, device)
    # named as their checks above name them (only a caller's buffers can overlap)
    res_name, normed_name = f"out[{n_out - 1}] (residual_out)", "out[2] (normed)"
    outputs = [("out[0] (values)", values), ("out[1] (scales)", scales), (res_name, residual_out)]
    if normed is not None:
        outputs.append((normed_name, normed))
    checks.outputs_apart(outputs, [("x", x), ("residual", residual), ("weight", weight)],
                         in_place=((normed_name, "x"), (res_name, "residual")))
    deq = None
    if resolve_a_deq(a_deq, m, hidden, device, k_name="hidden (x.shape[1])"):
        deq = torch.empty((m, hidden), dtype=torch.bfloat16, device=device)
    _norm(x, residual, weight, eps, gemma, residual_out=residual_out, normed=normed, values=values, scales=scales,
          swizzled=layout is ScaleLayout.SWIZZLED, a_deq=deq)
    return values, scales, normed, residual_out, deq


def gemma_fused_add_rms_norm_mxfp8(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    also_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
    out: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, ...]:
    """Fused residual add + Gemma RMSNorm + MXFP8, one launch (:func:`fused_add_rms_norm_mxfp8`
    with ``gemma=True``).

    ``residual_out = bf16(f32(x) + f32(residual))`` (bit-identical);
    ``normed = bf16( s * rsqrt(sum(s^2)/hidden + eps) * (1 + f32(w)) )``;
    ``(values, scales) == mxfp8_quantize(normed)`` bit for bit for the same call's normed.
    Spec: ``docs/spec/norm_act.md`` (... + MXFP8 output), ``docs/spec/mxfp8.md``.

    Args:
        x, residual: BF16 [M, hidden], hidden a multiple of 32 and <= 16384, rows contiguous at any row
            stride (0 too). Read only, unless passed in ``out`` (in place, see :func:`fused_add_rms_norm_mxfp8`).
        weight: BF16 [hidden].
        eps: finite float or int (not a bool) >= 0.
        also_bf16: also return the BF16 normed rows (router and routed experts need them).
        scale_layout: ``"swizzled"`` (default, padding written as 0) or ``"row_major"``.
        out: optional buffers in return order, written in place (see
            :func:`fused_add_rms_norm_mxfp8`).

    Returns:
        (values float8_e4m3fn [M, hidden], scales uint8, residual_out BF16 [M, hidden]), or
        with ``also_bf16`` (values, scales, normed BF16 [M, hidden], residual_out).

    Raises:
        TypeError, ValueError: as :func:`fused_add_rms_norm_mxfp8` (ValueError for hidden not a
            multiple of 32 or above 16384).
    """
    return fused_add_rms_norm_mxfp8(
        x, residual, weight, eps, gemma=True, also_bf16=also_bf16, scale_layout=scale_layout, out=out
    )


def gemma_norm_mxfp8_activation(x, residual, weight, eps, also_bf16: bool = False, a_deq: bool | str = "auto"):
    """:func:`gemma_fused_add_rms_norm_mxfp8` (swizzled scales) packaged for a consumer GEMM.

    Returns ``(QuantizedActivation, residual_out)`` or with ``also_bf16``
    ``(QuantizedActivation, residual_out, normed)``: the TP-1 and no-peer-access paths of
    the all-reduce + norm + quant boundary. ``a_deq`` True: the same launch also writes the activation's
    A_deq (BF16 [M, hidden], ``seam.formats.a_deq``; hidden a multiple of 128), which
    :func:`seam.mxfp8_linear`'s and the fused QKV op's Hopper GEMM then reads instead of
    dequantizing the MXFP8 rows; "auto" (default): where that GEMM gains (Hopper, 2-64 tokens, 1-64 at
    hidden <= 2048 but 9-64 at hidden 512 and 768, 65-384 at hidden >= 2048 and 65-128 from 256,
    :func:`seam.kernels.wgmma_config.a_deq_pays`); False: never.
    Raises as :func:`gemma_fused_add_rms_norm_mxfp8`; TypeError for ``a_deq`` neither a bool nor a string,
    ValueError for another string or ``a_deq`` True with hidden not a multiple of 128.
    """
    values, scales, normed, residual_out, deq = _add_norm_mxfp8(
        x, residual, weight, eps, True, also_bf16, ScaleLayout.SWIZZLED, None, a_deq=a_deq)
    qa = QuantizedActivation(values, scales, torch.bfloat16, tuple(x.shape), ScaleLayout.SWIZZLED, a_deq=deq)
    return (qa, residual_out, normed) if also_bf16 else (qa, residual_out)
