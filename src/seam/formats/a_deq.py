"""A_deq: MXFP8 rows dequantized to BF16 in the K order of seam's Hopper GEMMs.

Hopper has no MXFP8 MMA: seam's Hopper GEMMs multiply BF16 copies of both operands. The decode GEMM
(``seam.kernels.mxfp8_wgmma``, and over token tiles ``seam.kernels.mxfp8_wgmma_ws``) holds each weight step in registers
in a fixed permutation of its 128 K columns and stages the activations with the same permutation; the prefill path
(``seam.kernels.mxfp8_dequant.launch_mxfp8_linear_bf16_mm``) dequantizes the weight in that order too where K >= 2048,
so one copy serves every M. A producer kernel that writes that BF16 copy beside its MXFP8 rows ("A_deq"; carried by
:class:`seam.QuantizedActivation` as ``a_deq``) spares the GEMM that work (H200, the GEMM alone,
``docs/benchmarks-log.md``: run 102, the decode GEMM 1.1-3.2 us faster at 32-64 tokens, 0.65-1.3 at 16, from 0.9 us
slower to 0.8 faster at 8; run 111, 0.95-3.24 us faster at 65-128 tokens). The ring kernel
(``seam.kernels.mxfp8_wgmma_ring``) reads the activations in natural order from its own dequantization launch.
"""

from __future__ import annotations

import torch

from seam import checks
from seam.formats.mxfp8 import ScaleLayout, mxfp8_dequantize

#: Columns per K step of the decode GEMM: the permutation stays inside each such step.
A_DEQ_STEP = 128


def k_permutation(k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """int64 [K]: the column each of K columns moves to in A_deq. Within each 128-column step, column
    32j + 4c + 2h + i (j < 4, c < 8, h < 2, i < 2) moves to 16c + 8h + 2j + i.

    Raises:
        TypeError: k not an int. ValueError: k not a positive multiple of 128.
    """
    k = checks.integer("k", k)
    if k <= 0 or k % A_DEQ_STEP:
        raise ValueError(f"k must be a positive multiple of {A_DEQ_STEP}, got {k}")
    col = torch.arange(k, dtype=torch.int64, device=device)
    r = col % A_DEQ_STEP
    return col - r + (r // 4 % 8) * 16 + (r // 2 % 2) * 8 + (r // 32) * 2 + r % 2


def a_deq_from_mxfp8(
    values: torch.Tensor, scales: torch.Tensor, *, scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED
) -> torch.Tensor:
    """A_deq of MXFP8 rows: ``bf16(f32(e4m3) * 2^(s - 127))`` (one rounding, as
    :func:`seam.mxfp8_dequantize`), each column moved as :func:`k_permutation` says. Pure PyTorch, any device;
    the reference for the kernels that write it.

    Args:
        values: float8_e4m3fn (or its uint8 bytes) [M, K], K a positive multiple of 128.
        scales: uint8 (or float8_e8m0fnu) in ``scale_layout``.

    Returns:
        BF16 [M, K], contiguous.

    Raises:
        TypeError, ValueError: as :func:`seam.mxfp8_dequantize`; ValueError for K not a multiple of 128.
    """
    deq = mxfp8_dequantize(values, scales, scale_layout=scale_layout, dtype=torch.bfloat16)
    k = deq.shape[1]
    if k % A_DEQ_STEP:
        raise ValueError(f"K must be a positive multiple of {A_DEQ_STEP}, got {k}")
    out = torch.empty_like(deq)
    out[:, k_permutation(deq.shape[1], deq.device)] = deq
    return out
