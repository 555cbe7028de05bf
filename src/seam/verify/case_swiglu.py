"""verify: SwiGLU-OAI and SwiGLU-OAI + MXFP8 (``docs/spec/norm_act.md``).

BF16 activation: relative L2 < 5e-3 against float64. Fused MXFP8 of the fp32 act: scale
bytes equal to the unfused chain's (``mxfp8_quantize(swiglu_oai(x))``) except in blocks
whose BF16-rounded amax is exactly 448 * 2^k (rounding first can drop the scale's bump
there), and dequantized at least as close to float64. ``round_to_bf16``: bytes equal.
"""

from __future__ import annotations

import torch

import seam
from seam.compare import bytes_equal
from seam.formats.mxfp8 import mxfp8_dequantize
from seam.ref.swiglu import swiglu_oai_f64_ref, swiglu_oai_ref
from seam.verify.core import Check, Context, Outcome


def rel_l2(a: torch.Tensor, exact: torch.Tensor) -> float:
    """||a - exact|| / ||exact|| in float64."""
    return float((a.double() - exact).norm() / exact.norm().clamp_min(1e-300))


def boundary_blocks(act_bf16: torch.Tensor) -> torch.Tensor:
    """bool [M, I/32]: blocks whose BF16 amax / 448 is an exact power of two, the only blocks
    where the fused (fp32) and unfused (BF16) scale bytes may differ."""
    amax = act_bf16.float().reshape(act_bf16.shape[0], -1, 32).abs().nan_to_num(0.0).amax(-1)
    n = amax / 448.0
    return (n > 0) & (n == torch.exp2(torch.floor(torch.log2(n))))


def _run_bf16(ctx: Context, m: int, inter: int) -> Outcome:
    x = ctx.randn(m, 2 * inter, seed=m, scale=8.0)
    out = seam.swiglu_oai(x)
    err = rel_l2(out, swiglu_oai_f64_ref(x))
    return Outcome(
        exact=err < 5e-3,
        detail=f"rel L2 {err:.1e} vs fp64",
        fused=lambda: seam.swiglu_oai(x, out=out),
        unfused=lambda: swiglu_oai_ref(x),
        baseline="the PyTorch reference (eager)",
        bytes_moved=x.numel() * 2 + out.numel() * 2,
    )


def _run_mxfp8(ctx: Context, m: int, inter: int) -> Outcome:
    x = ctx.randn(m, 2 * inter, seed=m, scale=8.0)
    values, scales = seam.swiglu_oai_mxfp8(x)
    act = seam.swiglu_oai(x)
    uv, us = seam.mxfp8_quantize(act)
    bv, bs = seam.swiglu_oai_mxfp8(x, round_to_bf16=True)
    exact = swiglu_oai_f64_ref(x)
    differ = seam.unswizzle_scales(scales, m, inter) != seam.unswizzle_scales(us, m, inter)
    scales_ok = not bool((differ & ~boundary_blocks(act)).any())
    err_f = rel_l2(mxfp8_dequantize(values, scales, dtype=torch.float32), exact)
    err_u = rel_l2(mxfp8_dequantize(uv, us, dtype=torch.float32), exact)
    rounded_ok = bytes_equal(bv, uv) and bytes_equal(bs, us)
    byte_diff = float((values.view(torch.uint8) != uv.view(torch.uint8)).float().mean())
    ok = scales_ok and err_f <= err_u * 1.0001 and rounded_ok
    detail = (
        f"scales {'== unfused' if scales_ok else 'DIFFER'} ({int(differ.sum())} blocks differ, at 448*2^k); "
        f"E4M3 differ {byte_diff:.1%}; rel L2 {err_f:.2e} vs unfused {err_u:.2e}; "
        f"round_to_bf16 {'bytes equal' if rounded_ok else 'DIFFERS'}"
    )
    act_buf = torch.empty_like(act)
    return Outcome(
        exact=ok,
        detail=detail,
        fused=lambda: seam.swiglu_oai_mxfp8(x, out=(values, scales)),
        unfused=lambda: seam.mxfp8_quantize(seam.swiglu_oai(x, out=act_buf), out=(uv, us)),
        baseline="seam.swiglu_oai, then seam.mxfp8_quantize (two launches)",
        bytes_moved=x.numel() * 2 + values.numel() + scales.numel(),
    )


BF16_RULE = "tolerance (sigmoid implementations differ): rel L2 < 5e-3 vs float64"
MXFP8_RULE = (
    "tolerance (it quantizes the fp32 act, the unfused chain the BF16-rounded one): scale bytes equal to the "
    "chain's except at 448*2^k, error vs float64 <= the chain's; round_to_bf16 bit-identical to the chain"
)


def checks(ctx: Context) -> list[Check]:
    inter = ctx.pick(768, 96)
    ms = ctx.pick([1, 8, 16, 32, 64, 128, 192, 256, 2048], [1, 8, 129])
    shape = f"I={inter}"
    out = [Check("swiglu_oai_mxfp8", m, shape, lambda m=m: _run_mxfp8(ctx, m, inter), rule=MXFP8_RULE) for m in ms]
    for m in ctx.pick([1, 64, 2048], [1, 129]):
        out.append(Check("swiglu_oai", m, shape, lambda m=m: _run_bf16(ctx, m, inter), rule=BF16_RULE))
    return out
