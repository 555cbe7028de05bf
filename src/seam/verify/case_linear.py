"""verify: MXFP8 linear (``docs/spec/mxfp8.md``): the GEMM accumulator within fp32 reordering error.

The output is ``bf16(acc)``; it must lie within one BF16 rounding plus the fp32
reordering bound ``K * 2^-24 * (|A_deq| @ |W_deq|^T)`` of ``f32(A_deq) @ f32(W_deq)^T``.
The unfused baseline timed against it is cuBLAS BF16 on the BF16 activation and weight.
"""

from __future__ import annotations

import torch

import seam
from seam.compare import bytes_equal
from seam.kernels.mxfp8_gemm_config import BF16_MM_TILE
from seam.verify.core import Check, Context, Outcome


def within_reordering_error(out: torch.Tensor, xq, xs, weight: seam.MXFP8Weight) -> tuple[bool, str]:
    """(ok, detail): ``out`` vs the dequantized fp32 GEMM, bound as in the module docstring."""
    a = seam.mxfp8_dequantize(xq, xs, dtype=torch.float32)
    w = weight.dequantize()
    ref = a @ w.t()
    reorder = a.shape[1] * 2.0**-24 * (a.abs() @ w.abs().t())
    err = (out.float() - ref).abs()
    bound = ref.abs() * 2.0**-8 + 2 * reorder
    ok = bool((err <= bound + 1e-30).all())
    equal = float((out == ref.to(torch.bfloat16)).float().mean() * 100)
    return ok, f"{equal:.2f}% equal to bf16(ref), max err/bound {float((err / (bound + 1e-30)).max()):.3f}"


def _run(ctx: Context, m: int, n: int, k: int, tile=None) -> Outcome:
    x = ctx.randn(m, k, seed=m)
    w_bf16 = ctx.randn(n, k, seed=m + 1, scale=k**-0.5)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    out = seam.mxfp8_linear(act, weight, tile=tile)
    ok, detail = within_reordering_error(out, xq, xs, weight)
    return Outcome(
        exact=ok,
        detail=detail,
        fused=lambda: seam.mxfp8_linear(act, weight, out=out, tile=tile),
        unfused=lambda: x @ w_bf16.t(),
        baseline="cuBLAS BF16 on BF16 weights (torch.mm)",
        bytes_moved=n * k + weight.scales.numel() + m * k + xs.numel() + 2 * m * n,
    )


def _run_in_gemm(ctx: Context, m: int, n: int, k: int) -> Outcome:
    """BF16 input quantized inside the GEMM: the same bytes as quantizer launch + GEMM."""
    x = ctx.randn(m, k, seed=m + 2)
    weight = seam.MXFP8Weight.from_bf16(ctx.randn(n, k, seed=m + 3, scale=k**-0.5))
    separate = seam.mxfp8_linear(x, weight, quantize="separate")
    in_gemm = seam.mxfp8_linear(x, weight, quantize="in_gemm")
    ok = bytes_equal(in_gemm, separate)
    out = torch.empty_like(in_gemm)
    return Outcome(
        exact=ok,
        detail="bytes equal to quantize + GEMM" if ok else "bytes differ from quantize + GEMM",
        fused=lambda: seam.mxfp8_linear(x, weight, quantize="in_gemm", out=out),
        unfused=lambda: seam.mxfp8_linear(x, weight, quantize="separate", out=out),
        baseline="seam.mxfp8_quantize, then the GEMM (two launches)",
        bytes_moved=n * k + weight.scales.numel() + 2 * m * k + 2 * m * n,
    )


RULE = "tolerance (summation order differs): within one BF16 rounding + the fp32 reordering bound of the fp32 GEMM"
IN_GEMM_RULE = "bit-identical to quantize + GEMM"


def checks(ctx: Context) -> list[Check]:
    n, k = ctx.pick(2560, 256), ctx.pick(6144, 256)
    out = [
        Check("mxfp8_linear", m, f"N={n} K={k}", lambda m=m: _run(ctx, m, n, k), rule=RULE)
        for m in ctx.pick([1, 8, 64, 256, 2048], [1, 17])
    ]
    # the prefill path (BF16 dequantization + one fp32-output GEMM), picked from M 129 on a GPU, asked for on CPU
    out += [
        Check("mxfp8_linear[prefill path]", m, f"N={n} K={k}", lambda m=m: _run(ctx, m, n, k, BF16_MM_TILE), rule=RULE)
        for m in ctx.pick([333], [133])
    ]
    out += [
        Check("mxfp8_linear[in_gemm quant]", m, f"N={n} K={k}", lambda m=m: _run_in_gemm(ctx, m, n, k),
              rule=IN_GEMM_RULE)
        for m in ctx.pick([1, 8, 16, 64], [1, 5])
    ]
    return out
