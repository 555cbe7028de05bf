"""Activation rows shared by the MXFP8 GEMM tests (tl kernel and Gluon kernel)."""

from __future__ import annotations

import torch


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
