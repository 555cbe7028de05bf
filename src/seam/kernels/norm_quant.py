"""Fused residual add + (Gemma) RMSNorm, optionally + MXFP8 (``docs/spec/norm_act.md``).

Bytes moved per row of H (fused add + norm + MXFP8 + BF16 normed): 2H (x) + 2H (residual)
read, 2H (residual_out) + H + H/32 (E4M3 values, scales) + 2H (normed, optional) + 2H (A_deq,
optional: the MXFP8 rows dequantized for the Hopper Gluon GEMMs, ``seam.formats.a_deq``) written;
the weight (2H) is read once per program and stays in L2.

One program owns ``ROWS`` whole rows (``ROWS = 1`` at model sizes) held in registers as a
single masked ``BLOCK_H = next_pow2(H)`` tile: the row is read once, reduced, normalized
and quantized without a second pass over memory. For H = 6144 the tile is 8192 wide: its last
quarter is all masked, and where the quarters sit in each thread's registers (``norm_config``) the
kernel splits the tile after the row sum and skips that quarter's normalize / quantize / store
instructions, which otherwise cost issue slots at every M and latency at decode M.

Swizzled scales cover ``M_pad = ceil(M/128)*128`` rows. The padding rows [M, M_pad) are
zeroed by up to four extra programs of ``PAD_ROWS`` rows each (not one program per padding
row), so M = 1 pays for 4 tiny stores instead of 127 row programs. Padding columns
[cols, P) of real rows are written as zero by the row programs themselves: their tile is
at least 128 wide (``BLOCK_H // 32 >= P``) and masked lanes give all-zero blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.a_deq import store_a_deq
from seam.kernels.pdl import early_trigger
from seam.kernels.numerics import (
    bf16_to_f32,
    mxfp8_quantize_tile,
    store_row_scales,
    to_bf16_rne,
    zero_scale_padding_rows,
)

PAD_ROWS = 32  # swizzle padding rows zeroed per padding program (M_pad - M < 128: <= 4 programs)


@triton.jit
def fused_add_rms_norm_kernel(
    # pointers
    x_ptr,  # [M, H] bf16, row stride stride_xm
    residual_ptr,  # [M, H] bf16, row stride stride_rm (unused without HAS_RESIDUAL)
    weight_ptr,  # [H] bf16
    residual_out_ptr,  # [M, H] bf16 contiguous: bf16(x + residual)
    normed_ptr,  # [M, H] bf16 contiguous (written with WRITE_NORMED)
    values_ptr,  # [M, H] uint8 view of E4M3 (written with QUANT)
    scales_ptr,  # uint8: swizzled flat, or row-major [M, H/32] (written with QUANT)
    a_deq_ptr,  # [M, H] bf16 contiguous: A_deq of the MXFP8 rows (written with WRITE_A_DEQ)
    # sizes and strides
    M,
    H,
    stride_xm,
    stride_rm,
    eps,
    # variants
    HAS_RESIDUAL: tl.constexpr,  # s = x + residual (else s = x and no residual_out)
    GEMMA: tl.constexpr,  # weight factor 1 + w (Gemma) or w (plain RMSNorm)
    WRITE_NORMED: tl.constexpr,  # store the BF16 normed rows
    QUANT: tl.constexpr,  # store MXFP8 values/scales of the BF16 normed rows
    SWIZZLED: tl.constexpr,  # 128x4 swizzled scales (padding written as zero)
    WRITE_A_DEQ: tl.constexpr,  # with QUANT: also A_deq (seam.formats.a_deq; H a multiple of 128)
    USE_PDL: tl.constexpr,
    EARLY_TRIGGER: tl.constexpr,  # trigger dependents at the start (seam.kernels.pdl.early_trigger)
    # tiling
    ROWS: tl.constexpr,  # rows per program
    BLOCK_H: tl.constexpr,  # power of two >= max(H, 128)
    LIVE_QUARTERS: tl.constexpr,  # 4, or 3: the tile's last column quarter holds no column of the row (norm_config)
    PAD_ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    num_row_programs = (M + ROWS - 1) // ROWS
    SCOLS: tl.constexpr = BLOCK_H // 32
    num_scols = H // 32
    padded_scols = (num_scols + 3) // 4 * 4
    scols = tl.arange(0, SCOLS)

    if USE_PDL:
        if EARLY_TRIGGER:  # seam.kernels.pdl: dependents may stream their weights during this kernel
            tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()

    if pid < num_row_programs:
        rows = (pid * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        cols = tl.arange(0, BLOCK_H)
        row_ok = rows < M
        mask = row_ok[:, None] & (cols[None, :] < H)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        s = bf16_to_f32(x)
        if HAS_RESIDUAL:
            r = tl.load(residual_ptr + rows[:, None] * stride_rm + cols[None, :], mask=mask, other=0.0)
            s = s + bf16_to_f32(r)
        w = bf16_to_f32(tl.load(weight_ptr + cols[None, :], mask=cols[None, :] < H, other=0.0))
        if USE_PDL and not EARLY_TRIGGER:
            # Every global read is done: the next kernel may start its prologue.
            tl.extra.cuda.gdc_launch_dependents()
        if GEMMA:
            w = 1.0 + w
        # mean of squares from the unrounded fp32 s (over the whole tile: its masked lanes add zeros); 1/sqrt
        # with correct rounding (the reference does the same) so that only the reduction order differs from it.
        sum_sq = tl.sum(s * s, axis=1)
        mean_sq = tl.math.div_rn(sum_sq, tl.zeros_like(sum_sq) + H)
        rstd = tl.math.div_rn(tl.full((ROWS,), 1.0, tl.float32), tl.math.sqrt_rn(mean_sq + eps))
        if LIVE_QUARTERS == 3:
            # The last quarter is all masked: it takes no normalize, quantize or store instructions (H 6144,
            # MXFP8 without the BF16 rows: 1272 -> 1136 static sm_90 SASS instructions, CPU compile).
            s_quarters = column_quarters(s, ROWS, BLOCK_H)
            w_quarters = column_quarters(w, 1, BLOCK_H)
            QUARTER: tl.constexpr = BLOCK_H // 4
            for q in tl.static_range(3):
                _finish_columns(s_quarters[q], w_quarters[q], rstd, q * QUARTER, rows, row_ok, H, residual_out_ptr,
                                normed_ptr, values_ptr, scales_ptr, a_deq_ptr, HAS_RESIDUAL, WRITE_NORMED, QUANT,
                                SWIZZLED, WRITE_A_DEQ, ROWS, QUARTER)
        else:
            _finish_columns(s, w, rstd, 0, rows, row_ok, H, residual_out_ptr, normed_ptr, values_ptr, scales_ptr,
                            a_deq_ptr, HAS_RESIDUAL, WRITE_NORMED, QUANT, SWIZZLED, WRITE_A_DEQ, ROWS, BLOCK_H)
    else:
        zero_scale_padding_rows(scales_ptr, M, pid - num_row_programs, scols, padded_scols, PAD_ROWS)


@triton.jit
def column_quarters(t, ROWS: tl.constexpr, COLS: tl.constexpr):
    """The four column quarters [ROWS, COLS // 4] of a [ROWS, COLS] tile, in order. Where ``norm_config`` takes
    them, sm_90 compiles the split without shared memory (the tile's layout holds each quarter in registers)."""
    # column (2a + b) * COLS/4 + c: dims (a, b, c) -> (c, b, a), then split a, then b
    t = tl.permute(tl.reshape(t, (ROWS, 2, 2, COLS // 4)), (0, 3, 2, 1))
    low, high = tl.split(t)
    q0, q1 = tl.split(low)
    q2, q3 = tl.split(high)
    return q0, q1, q2, q3


@triton.jit
def _finish_columns(s, w, rstd, col0, rows, row_ok, H, residual_out_ptr, normed_ptr, values_ptr, scales_ptr,
                    a_deq_ptr, HAS_RESIDUAL: tl.constexpr, WRITE_NORMED: tl.constexpr, QUANT: tl.constexpr,
                    SWIZZLED: tl.constexpr, WRITE_A_DEQ: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Columns [col0, col0 + COLS) of the rows: residual_out, normed, MXFP8 values and scales, A_deq from the
    fp32 sums ``s`` [ROWS, COLS], the weight factors ``w`` [1, COLS] and ``rstd`` [ROWS]."""
    cols = col0 + tl.arange(0, COLS)
    mask = row_ok[:, None] & (cols[None, :] < H)
    out_offs = rows[:, None] * H + cols[None, :]
    if HAS_RESIDUAL:
        tl.store(residual_out_ptr + out_offs, to_bf16_rne(s), mask=mask)
    y = s * rstd[:, None] * w
    if WRITE_NORMED:
        tl.store(normed_ptr + out_offs, to_bf16_rne(y), mask=mask)
    if QUANT:
        # Quantize exactly the BF16 normed row (spec: bit-identical to mxfp8_quantize(normed)).
        values, scales = mxfp8_quantize_tile(bf16_to_f32(to_bf16_rne(y)), ROWS, COLS)
        tl.store(values_ptr + out_offs, values, mask=mask)
        store_row_scales(scales_ptr, scales, rows, row_ok, col0 // 32 + tl.arange(0, COLS // 32), H // 32, SWIZZLED)
        if WRITE_A_DEQ:
            store_a_deq(a_deq_ptr, rows * H, cols, values, scales, mask, ROWS, COLS, True)


def norm_config(m: int, hidden: int) -> tuple[int, int, int, int]:
    """(ROWS, BLOCK_H, num_warps, LIVE_QUARTERS) for a row of ``hidden``.

    The whole row sits in one tile (one read of x and residual). About 8K elements per
    program; several rows per program for small H; ROWS never exceeds next_pow2(M).
    H in (4096, 6144] (the 8192-wide tile's last quarter all masked): one row with 8 warps
    and that quarter skipped (LIVE_QUARTERS 3) at every M. H100 (``docs/benchmarks-log.md``
    run 220, H 6144, us, 16 warps whole tile -> 8 warps 3 quarters): M 1 2.67 -> 2.36, M 64
    2.68 -> 2.59, M 128 3.11 -> 2.97, M 160 3.65 -> 3.30, M 192 3.72 -> 3.58, M 384 5.81 -> 4.75,
    M 4-8 and 256 within 0.05; run 219, 8 warps whole tile -> 3 quarters: M 12 2.90 -> 2.51,
    M 512 6.96 -> 6.03, M 2048 / 8192 within 2% (HBM-bound on the H100).
    H in (6144, 8192]: one row with 16 warps (16 fp32 per thread per tensor), 8 warps at 9-16
    and from 512 tokens. H200 (runs 77, 80, 86 and 87, the whole tile, us at 16 / 8 warps):
    M 8192 119.2 / 98.6, M 2048 32.2 / 27.5, M 512 7.93 / 7.43; M 256 4.62 / 5.54, M 192
    4.39 / 5.34; M 12 3.17 / 2.84, M 16 3.35 / 2.90; M 1-8 and 24-128 within 4%.
    The warps (and the per-thread layout the compiler picks for the split tile) shape the row
    sum's reduction tree, so they change a few ``normed`` bytes (within the spec's 1 ulp; run
    219: 0.0001-0.001% of them at 16-8192 rows; the MXFP8 output is still that call's
    ``normed`` quantized).

    LIVE_QUARTERS is 3 where the 8192-wide one-row tile at 8 warps has no column of the row in its
    last quarter (H <= 6144; swizzle-padded scale columns end on a multiple of 128 columns, inside
    the third quarter): the kernel splits the tile into quarters after the row sum over the whole
    tile (each quarter is one repetition of the layout sm_90 compiles, 8 elements x 32 lanes x
    8 warps) and skips the last. Elsewhere 4: the whole tile, as before.
    """
    block_h = max(128, triton.next_power_of_2(hidden))
    rows = max(1, min(8192 // block_h, triton.next_power_of_2(max(m, 1)), 16))
    elems = rows * block_h
    quarter_masked = block_h == 8192 and hidden <= 6144  # one row (ROWS 1), the tile's last quarter all masked
    eight = block_h == 8192 and (quarter_masked or 9 <= m <= 16 or m >= 512)
    num_warps = 4 if elems <= 2048 else 8 if elems <= 4096 or eight else 16
    return rows, block_h, num_warps, 3 if quarter_masked else 4


def launch_fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    gemma: bool,
    residual_out: torch.Tensor | None = None,
    normed: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    swizzled: bool = False,
    a_deq: torch.Tensor | None = None,
) -> None:
    """One launch over validated buffers; each ``None`` output is not written.

    ``residual`` and ``residual_out`` go together; ``values`` and ``scales`` go together; ``a_deq`` (BF16
    [M, H], H a multiple of 128: A_deq of the MXFP8 rows, ``seam.formats.a_deq``) comes with them.
    Flat annotated arguments, so ``seam.ops.norm`` registers this launcher as is.
    """
    m, hidden = x.shape
    quant = values is not None
    assert a_deq is None or quant, "A_deq comes with the MXFP8 outputs"
    rows, block_h, num_warps, live_quarters = norm_config(m, hidden)
    num_row_programs = triton.cdiv(m, rows)
    pad_rows = (-(-m // 128) * 128 - m) if (quant and swizzled) else 0
    grid = (num_row_programs + triton.cdiv(pad_rows, PAD_ROWS),)
    if grid[0] == 0:
        return
    use_pdl = runtime.supports_pdl(x.device)
    fused_add_rms_norm_kernel[grid](
        x,
        residual if residual is not None else x,
        weight,
        residual_out if residual_out is not None else x,
        normed if normed is not None else x,
        values.view(torch.uint8) if quant else x,
        scales if quant else x,
        a_deq if a_deq is not None else x,
        m,
        hidden,
        x.stride(0),
        residual.stride(0) if residual is not None else 0,
        eps,
        HAS_RESIDUAL=residual is not None,
        GEMMA=gemma,
        WRITE_NORMED=normed is not None,
        QUANT=quant,
        SWIZZLED=swizzled,
        WRITE_A_DEQ=a_deq is not None,
        USE_PDL=use_pdl,
        EARLY_TRIGGER=early_trigger(m),
        ROWS=rows,
        BLOCK_H=block_h,
        LIVE_QUARTERS=live_quarters,
        PAD_ROWS=PAD_ROWS,
        num_warps=num_warps,
        launch_pdl=use_pdl,
    )
