"""Output comparisons shared by ``seam verify``, the benchmarks and harnesses, and the tests.

Bytes where the spec says bit-identical, BF16 ulp distances where it gives a tolerance. Only
torch: every harness can use it without importing another.
"""

from __future__ import annotations

import torch


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def bf16_ulp_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in BF16 units in the last place (ordered-integer distance).

    NaN positions must match and count as 0; +0 and -0 are 0 apart.

    Raises:
        TypeError: a or b not BF16.
    """
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise TypeError(f"bf16_ulp_diff compares BF16 tensors, got {a.dtype} and {b.dtype}")
    ia = a.contiguous().view(torch.int16).to(torch.int32)
    ib = b.contiguous().view(torch.int16).to(torch.int32)
    # map sign-magnitude to a monotonic integer line
    oa = torch.where(ia < 0, -32768 - ia, ia)
    ob = torch.where(ib < 0, -32768 - ib, ib)
    d = (oa - ob).abs()
    both_nan = torch.isnan(a) & torch.isnan(b)
    return torch.where(both_nan, torch.zeros_like(d), d)


def ulp_summary(a: torch.Tensor, b: torch.Tensor, max_ulp: int = 1) -> tuple[bool, str]:
    """(within max_ulp everywhere, 'x% equal, max n ulp') for two BF16 tensors."""
    d = bf16_ulp_diff(a, b)
    worst = int(d.max()) if d.numel() else 0
    eq = float((d == 0).float().mean() * 100) if d.numel() else 100.0
    return worst <= max_ulp, f"{eq:.2f}% equal, max {worst} ulp"
