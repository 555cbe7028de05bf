"""Operands shared by the MXFP8 GEMM tests (tl kernel, Gluon kernel, prefill path)."""

from __future__ import annotations

import torch

import seam


def edge_and_random_rows(m: int, k: int, seed: int) -> torch.Tensor:
    """BF16 [m, k]: edge rows first (zeros, tiny, dominating element, inf/NaN, huge, -0.0), then random rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-3, 3, m)[:, None]
    x[0] = 0.0
    x[1] = 1e-38  # scale byte 0
    x[2, 0], x[2, 1:] = 1000.0, 1e-6  # one dominating element; blocks 30 binades apart (past F16's window)
    x[3, 3], x[3, 40] = float("inf"), float("-inf")
    x[4, ::3] = float("nan")
    x[5] = torch.randn(k, generator=g) * 3e4
    x[6] = -0.0
    return x.to(torch.bfloat16)


def exact_block_inputs(m: int, n: int, k: int, seed: int, device="cuda"):
    """(BF16 x [m, k], MXFP8Weight [n, k], the exact BF16 product): small integers times a power of two
    per 32-block (block scales vary over 7 binades), so every partial sum is exact in fp32 and any
    summation order gives the exact result's bytes."""
    g = torch.Generator().manual_seed(seed)

    def rows(r):
        v = torch.randint(-4, 5, (r, k), generator=g).float()
        return (v * 2.0 ** torch.randint(-3, 4, (r, k // 32), generator=g).repeat_interleave(32, 1)).to(torch.bfloat16)

    x, w = rows(m).to(device), rows(n).to(device)
    return x, seam.MXFP8Weight.from_bf16(w), (x.double() @ w.double().t()).to(torch.bfloat16)


def linear_both_paths(x, w, tile):
    """``mxfp8_linear`` outputs of ``tile`` on the E4M3 activation and on the BF16 one quantized by the
    MXFP8 rule (in the GEMM or before it), each into a NaN-poisoned buffer."""
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, tuple(x.shape))
    outs = []
    for arg, quantize in ((act, "auto"), (x, "in_gemm")):
        out = torch.full((x.shape[0], w.shape[0]), float("nan"), dtype=torch.bfloat16, device=x.device)
        outs.append(seam.mxfp8_linear(arg, w, out=out, tile=tile, quantize=quantize))
    return outs
