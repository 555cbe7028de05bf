"""Reference (Gemma) RMSNorm, fused residual add + RMSNorm, and their MXFP8 outputs.

Pure PyTorch, step by step from ``docs/spec/norm_act.md``, with the kernel's rounding
points: ``s = f32(x) + f32(residual)`` rounded once for ``residual_out``; the norm uses
the unrounded fp32 ``s``; ``rsqrt`` is taken as ``1 / sqrt`` with both steps correctly
rounded (what the kernel does); the MXFP8 output quantizes the BF16-rounded normed row.
"""

from __future__ import annotations

import torch

from seam.formats.mxfp8 import ScaleLayout, mxfp8_quantize_ref


def sqrt_rn(v: torch.Tensor) -> torch.Tensor:
    """Correctly rounded fp32 square root: through fp64, which holds the exact root to more than
    2*24 + 2 bits, so rounding it to fp32 is correct. torch's fp32 CPU sqrt is not (one ulp off
    for some inputs, e.g. bits 0x41797e28 on torch 2.13)."""
    return torch.sqrt(v.double()).float()


def _rms_norm_f32(s: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool) -> torch.Tensor:
    """bf16( s * rsqrt(sum(s^2)/hidden + eps) * w' ) with w' = 1 + f32(w) (Gemma) or f32(w)."""
    hidden = s.shape[-1]
    mean_sq = (s * s).sum(dim=-1, keepdim=True) / hidden
    rstd = 1.0 / sqrt_rn(mean_sq + eps)
    w = weight.float()
    if gemma:
        w = 1.0 + w
    return (s * rstd * w).to(torch.bfloat16)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, *, gemma: bool = False) -> torch.Tensor:
    """RMSNorm of BF16 rows x [M, hidden] with BF16 weight [hidden]; BF16 [M, hidden]."""
    return _rms_norm_f32(x.float(), weight, eps, gemma)


def gemma_rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``bf16( f32(x) * rsqrt(mean(f32(x)^2) + eps) * (1 + f32(w)) )`` per row."""
    return rms_norm_ref(x, weight, eps, gemma=True)


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, gemma: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, residual_out): ``s = f32(x) + f32(residual)``, ``residual_out = bf16(s)``,
    ``normed`` = RMSNorm of the unrounded fp32 ``s``."""
    s = x.float() + residual.float()
    return _rms_norm_f32(s, weight, eps, gemma), s.to(torch.bfloat16)


def gemma_fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gemma flavour of :func:`fused_add_rms_norm_ref` (weight factor ``1 + f32(w)``)."""
    return fused_add_rms_norm_ref(x, residual, weight, eps, gemma=True)


def fused_add_rms_norm_mxfp8_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    gemma: bool = False,
    also_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
) -> tuple[torch.Tensor, ...]:
    """Reference norm, then :func:`mxfp8_quantize_ref` of the BF16 normed rows.

    Returns (values, scales, residual_out), or (values, scales, normed, residual_out)
    with ``also_bf16``.
    """
    normed, residual_out = fused_add_rms_norm_ref(x, residual, weight, eps, gemma=gemma)
    values, scales = mxfp8_quantize_ref(normed, scale_layout=scale_layout)
    if also_bf16:
        return values, scales, normed, residual_out
    return values, scales, residual_out


def gemma_fused_add_rms_norm_mxfp8_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    also_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
) -> tuple[torch.Tensor, ...]:
    """Gemma flavour of :func:`fused_add_rms_norm_mxfp8_ref`."""
    return fused_add_rms_norm_mxfp8_ref(
        x, residual, weight, eps, gemma=True, also_bf16=also_bf16, scale_layout=scale_layout
    )
