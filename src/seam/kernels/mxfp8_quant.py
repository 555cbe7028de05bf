"""Standalone MXFP8 quantizer (``docs/spec/mxfp8.md``).

Bytes moved per row of K: 2K read (BF16), K + K/32 written. One program covers
``BLOCK_M`` rows by ``BLOCK_K`` columns; the grid spans the padded scale area
(``M_pad`` rows, ``P * 32`` columns for swizzled scales) so that padding scale bytes
are written as zero by the programs that own them, with no separate memset launch.

A PDL launch where the GPU has it: every program waits for the previous kernel before it reads or writes
anything (``gdc_wait``), and lets its dependents launch at its start up to
:data:`seam.kernels.pdl.QUANT_EARLY_TRIGGER_MAX_M` rows, after its loads above (``seam.kernels.pdl``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.numerics import mxfp8_quantize_tile, swizzled_scale_offset, to_f32
from seam.kernels.pdl import quant_early_trigger


@triton.jit
def mxfp8_quant_kernel(
    x_ptr,  # [M, K] bf16/fp16/fp32, row stride stride_xm
    values_ptr,  # [M, K] uint8 view of float8_e4m3fn, contiguous
    scales_ptr,  # uint8: swizzled flat, or row-major [M, K/32]
    M,
    K,
    stride_xm,
    SWIZZLED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,  # multiple of 32
    USE_PDL: tl.constexpr,
    EARLY_TRIGGER: tl.constexpr,  # trigger dependents at the start (seam.kernels.pdl.quant_early_trigger)
):
    if USE_PDL:
        if EARLY_TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()  # the buffers may still be read or written by the kernel before this one
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # M * K may exceed 2^31
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    scols = pid_k * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
    num_scols = K // 32
    padded_scols = (num_scols + 3) // 4 * 4
    if SWIZZLED:
        s_offs = swizzled_scale_offset(rows[:, None], scols[None, :], padded_scols)
        # Every byte of the padded M_pad x P area is written: padding ones as zero.
        s_mask = (rows[:, None] < (M + 127) // 128 * 128) & (scols[None, :] < padded_scols)
    else:
        s_offs = rows[:, None] * num_scols + scols[None, :]
        s_mask = (rows[:, None] < M) & (scols[None, :] < num_scols)

    if pid_m * BLOCK_M < M:
        mask = (rows[:, None] < M) & (cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        if USE_PDL and not EARLY_TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()
        values, scales = mxfp8_quantize_tile(to_f32(x), BLOCK_M, BLOCK_K)
        tl.store(values_ptr + rows[:, None] * K + cols[None, :], values, mask=mask)
        tl.store(scales_ptr + s_offs, scales, mask=s_mask)
    else:
        # Rows past M exist only as swizzled padding: zero scales, nothing to read.
        tl.store(scales_ptr + s_offs, tl.zeros((BLOCK_M, BLOCK_K // 32), tl.uint8), mask=s_mask)


def _blocks(m: int, k_cover: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_K, num_warps): about 4K elements per program."""
    block_k = min(triton.next_power_of_2(k_cover), 2048)
    block_m = max(1, min(triton.next_power_of_2(max(m, 1)), 4096 // block_k, 32))
    num_warps = 4 if block_m * block_k <= 4096 else 8
    return block_m, block_k, num_warps


def launch_mxfp8_quant(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor, swizzled: bool) -> None:
    """Quantize x [M, K] (row stride may exceed K) into ``values`` and ``scales`` (validated)."""
    m, k = x.shape
    num_scols = k // 32
    padded_scols = -(-num_scols // 4) * 4
    rows_cover = -(-m // 128) * 128 if swizzled else m
    cols_cover = padded_scols * 32 if swizzled else k
    if rows_cover == 0:
        return
    block_m, block_k, num_warps = _blocks(m, cols_cover)
    grid = (triton.cdiv(rows_cover, block_m), triton.cdiv(cols_cover, block_k))
    use_pdl = runtime.supports_pdl(x.device)
    mxfp8_quant_kernel[grid](
        x,
        values.view(torch.uint8),
        scales,
        m,
        k,
        x.stride(0),
        SWIZZLED=swizzled,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        USE_PDL=use_pdl,
        EARLY_TRIGGER=quant_early_trigger(m),
        num_warps=num_warps,
        launch_pdl=use_pdl,
    )
