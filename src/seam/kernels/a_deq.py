"""Writing A_deq from a producer kernel (``seam.formats.a_deq``): MXFP8 rows dequantized to BF16 in the K
order of seam's Hopper GEMMs, stored beside the MXFP8 rows by the kernel that quantized them; the same store
writes the dequantization launch's copies (``seam.kernels.mxfp8_dequant``), natural order for the ring kernel."""

from __future__ import annotations

import triton
import triton.language as tl

from seam.kernels.numerics import mxfp8_dequantize_tile, to_bf16_rne


@triton.jit
def store_a_deq(a_deq_ptr, row_offs, cols, values, scales, mask, ROWS: tl.constexpr, COLS: tl.constexpr,
                PERMUTED: tl.constexpr):
    """Store A_deq of a quantized tile: ``values`` E4M3 bits uint8 [ROWS, COLS], ``scales`` their UE8M0 bytes
    [ROWS, COLS // 32] (as :func:`seam.kernels.numerics.mxfp8_quantize_tile` returns them), each column at ``a_deq_ptr +
    row_offs`` plus the column ``seam.formats.a_deq.k_permutation`` moves it to (``PERMUTED``: A_deq, and the prefill
    path's weight copy) or its own (the ring kernel's copy); ``bf16(e4m3 * 2^(s - 127))``, one rounding, as the decode
    GEMM's own staging computes it. With ``PERMUTED``, ``cols`` start at a multiple of 128 and ``mask`` is the same
    across each 128-column step (rows, whole steps), so it holds at the permuted columns too.

    The tile is permuted in registers and stored in order: scattered 2-byte stores of each column at its
    permuted place took the H200's norm kernel 1.1 us longer at 8 tokens
    (``docs/benchmarks-log.md`` run 106)."""
    deq = to_bf16_rne(mxfp8_dequantize_tile(values, scales, ROWS, COLS))
    if PERMUTED:
        # column 32j + 4c + 2h + i of each step: dims (j, c, h, i) -> (c, h, j, i)
        steps = tl.reshape(deq, (ROWS, COLS // 128, 4, 8, 2, 2))
        ordered = tl.reshape(tl.permute(steps, (0, 1, 3, 4, 2, 5)), (ROWS, COLS))
    else:
        ordered = tl.reshape(deq, (ROWS, COLS))
    tl.store(a_deq_ptr + row_offs[:, None] + cols[None, :], ordered, mask=mask)
