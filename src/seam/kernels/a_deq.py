"""Writing A_deq from a producer kernel (``seam.formats.a_deq``): MXFP8 rows dequantized to BF16 in the
Gluon decode GEMM's K order, stored beside the MXFP8 rows by the kernel that quantized them."""

from __future__ import annotations

import triton
import triton.language as tl

from seam.kernels.numerics import e4m3_to_f32, to_bf16_rne, ue8m0_to_f32


@triton.jit
def k_permuted_column(col):
    """Where column ``col`` goes in A_deq (``seam.formats.a_deq.k_permutation``): within each 128-column step,
    32j + 4c + 2h + i -> 16c + 8h + 2j + i (``seam.kernels.mxfp8_wgmma.k_permute``'s relabelling)."""
    r = col % 128
    return col - r + (r // 4 % 8) * 16 + (r // 2 % 2) * 8 + (r // 32) * 2 + r % 2


@triton.jit
def store_a_deq(a_deq_ptr, row_offs, cols, values, scales, mask, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Store A_deq of a quantized tile: ``values`` E4M3 bits uint8 [ROWS, COLS], ``scales`` their UE8M0 bytes
    [ROWS, COLS // 32] (as :func:`seam.kernels.numerics.mxfp8_quantize_tile` returns them), at
    ``a_deq_ptr + row_offs[:, None] + k_permuted_column(cols)[None, :]``; ``bf16(e4m3 * 2^(s - 127))``, one
    rounding, as the decode GEMM's own staging computes it."""
    f = tl.reshape(e4m3_to_f32(values), (ROWS, COLS // 32, 32)) * ue8m0_to_f32(scales)[:, :, None]
    tl.store(a_deq_ptr + row_offs[:, None] + k_permuted_column(cols)[None, :],
             to_bf16_rne(tl.reshape(f, (ROWS, COLS))), mask=mask)
