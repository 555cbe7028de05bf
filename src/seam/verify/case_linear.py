"""verify: MXFP8 linear (``docs/spec/mxfp8.md``): the GEMM accumulator within fp32 reordering error.

The output is ``bf16(acc)``; it must lie within one BF16 rounding plus the fp32
reordering bound ``K * 2^-24 * (|A_deq| @ |W_deq|^T)`` of ``f32(A_deq) @ f32(W_deq)^T``.
The unfused baseline timed against it is cuBLAS BF16 on the BF16 activation and weight.
"""

from __future__ import annotations

import torch

import seam
from seam.compare import bytes_equal
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.kernels.mxfp8_gemm_config import BF16_MM_TILE
from seam.ops.norm import gemma_norm_mxfp8_activation
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


def _run(ctx: Context, m: int, n: int, k: int, tile=None, *, a_deq: bool = False) -> Outcome:
    """MXFP8 rows (with their A_deq where ``a_deq``) into the GEMM's pick, or ``tile``: within the bound."""
    x = ctx.randn(m, k, seed=m)
    w_bf16 = ctx.randn(n, k, seed=m + 1, scale=k**-0.5)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs) if a_deq else None)
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


def _run_a_deq(ctx: Context, m: int, n: int, k: int) -> Outcome:
    """The norm + MXFP8 launch writing A_deq (``seam.formats.a_deq``), then the GEMM reading it: A_deq bytes
    equal to its reference from the same MXFP8 rows, the GEMM's bytes equal to those without A_deq."""
    x, r = ctx.randn(m, k, seed=m + 4, scale=3.0), ctx.randn(m, k, seed=m + 5)
    w = ctx.randn(k, seed=m + 6, scale=0.1)
    weight = seam.MXFP8Weight.from_bf16(ctx.randn(n, k, seed=m + 7, scale=k**-0.5))
    with_deq, _ = gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=True)
    plain, _ = gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=False)
    deq_ok = bytes_equal(with_deq.a_deq, a_deq_from_mxfp8(with_deq.values, with_deq.scales))
    out = seam.mxfp8_linear(with_deq, weight)
    ok = deq_ok and bytes_equal(with_deq.values, plain.values) and bytes_equal(out, seam.mxfp8_linear(plain, weight))
    return Outcome(
        exact=ok,
        detail="A_deq == reference; GEMM bytes equal to without A_deq" if ok else "A_deq or GEMM bytes DIFFER",
        fused=lambda: seam.mxfp8_linear(gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=True)[0], weight, out=out),
        unfused=lambda: seam.mxfp8_linear(gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=False)[0], weight, out=out),
        baseline="the same norm + GEMM without A_deq",
        bytes_moved=n * k + weight.scales.numel() + m * k * (2 * 4 + 1) + 2 * m * n,
    )


def _run_hand_off(ctx: Context, m: int, n: int, k: int) -> Outcome:
    """MXFP8 rows handed off (a QuantizedActivation; on a Hopper GPU at this case's K 768 and 1-8 tokens the 16-row
    kernel) and the same rows as BF16 under quantize="separate" (the same kernel): within the GEMM's bound, the same
    bytes."""
    x = ctx.randn(m, k, seed=m + 8)
    w_bf16 = ctx.randn(n, k, seed=m + 9, scale=k**-0.5)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    out = seam.mxfp8_linear(act, weight)
    ok, detail = within_reordering_error(out, xq, xs, weight)
    same = bytes_equal(seam.mxfp8_linear(x, weight, quantize="separate"), out)
    return Outcome(
        exact=ok and same,
        detail=detail + ("; BF16 rows, separate: the same bytes" if same else "; BF16 rows, separate: bytes DIFFER"),
        fused=lambda: seam.mxfp8_linear(act, weight, out=out),
        unfused=lambda: x @ w_bf16.t(),
        baseline="cuBLAS BF16 on BF16 weights (torch.mm)",
        bytes_moved=n * k + weight.scales.numel() + m * k + xs.numel() + 2 * m * n,
    )


RULE = "tolerance (summation order differs): within one BF16 rounding + the fp32 reordering bound of the fp32 GEMM"
HAND_OFF_RULE = RULE + "; BF16 rows under quantize='separate' bit-identical to the same rows handed off as MXFP8"
IN_GEMM_RULE = "bit-identical to quantize + GEMM"
A_DEQ_RULE = ("A_deq bit-identical to its reference; the GEMM bit-identical to the one without A_deq (the same split "
              "at this shape)")


def checks(ctx: Context) -> list[Check]:
    n, k = ctx.pick(2560, 256), ctx.pick(6144, 256)
    out = [
        Check("mxfp8_linear", m, f"N={n} K={k}", lambda m=m: _run(ctx, m, n, k), rule=RULE)
        for m in ctx.pick([1, 8, 64, 160, 256, 1024, 2048], [1, 17])  # on Hopper 1024: the token tiles past 384
    ]
    # the prefill path (BF16 dequantization + one fp32-output GEMM), picked from M 65 on a GPU where no Gluon
    # kernel takes the shape, asked for on CPU
    out += [
        Check("mxfp8_linear[prefill path]", m, f"N={n} K={k}", lambda m=m: _run(ctx, m, n, k, BF16_MM_TILE), rule=RULE)
        for m in ctx.pick([333], [133])
    ]
    # one token on a narrow weight: the tl GEMV (on a Hopper GPU wider ones take the Gluon tile from M 1)
    n_narrow = 1536
    out += [
        Check("mxfp8_linear[one-token GEMV]", m, f"N={n_narrow} K={k}", lambda m=m: _run(ctx, m, n_narrow, k),
              rule=RULE)
        for m in ctx.pick([1], [])
    ]
    # the MoE down projection's shape: on a Hopper GPU the 16-row kernel at 1-8 tokens
    n_down, k_down = ctx.pick(6144, 256), ctx.pick(768, 256)
    out += [
        Check("mxfp8_linear[MXFP8 hand-off, BF16 separate]", m, f"N={n_down} K={k_down}",
              lambda m=m: _run_hand_off(ctx, m, n_down, k_down), rule=HAND_OFF_RULE)
        for m in ctx.pick([1, 8], [2])
    ]
    # given A_deq, the warp-specialized tiles a Hopper GPU picks only then or only at short K: the down projection's
    # shape at 24 tokens (the 32-token tile, unsplit) and 100 (two 64-token tiles), o_proj's (N 6144 x K 2048) at 24
    # (the 32-token tile at split 2) and 100 (two 64-token tiles), N 8192 x K 768 at 100 (the streamed tile, unsplit)
    out += [
        Check("mxfp8_linear[given A_deq]", m, f"N={n_} K={k_}",
              lambda m=m, n_=n_, k_=k_: _run(ctx, m, n_, k_, a_deq=True), rule=RULE)
        for m, n_, k_ in ctx.pick([(24, 6144, 768), (100, 6144, 768), (24, 6144, 2048), (100, 6144, 2048),
                                   (100, 8192, 768)], [(20, 256, 256)])
    ]
    out += [
        Check("mxfp8_linear[in_gemm quant]", m, f"N={n} K={k}", lambda m=m: _run_in_gemm(ctx, m, n, k),
              rule=IN_GEMM_RULE)
        for m in ctx.pick([1, 8, 16, 64], [1, 5])
    ]
    out += [
        Check("norm+MXFP8[+A_deq] -> mxfp8_linear", m, f"N={n} K={k}", lambda m=m: _run_a_deq(ctx, m, n, k),
              rule=A_DEQ_RULE)
        for m in ctx.pick([1, 8, 16, 64, 80, 100], [3, 70])
    ]
    return out
