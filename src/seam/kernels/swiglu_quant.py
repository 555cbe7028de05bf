"""SwiGLU-OAI activation, BF16 output or fused MXFP8 output (``docs/spec/norm_act.md``).

Bytes moved per row of I: 4I read (gate_up BF16 [2I]); 2I written (BF16) or I + I/32
(E4M3 values, scales). One program covers ``BLOCK_M`` rows by ``BLOCK_I`` activation
columns (a multiple of 32, so each program owns whole MXFP8 blocks); I = 768 splits into
3 column programs of 256 with no masked lanes.

Split layout: gate = columns [0, I), up = [I, 2I), two contiguous loads. Interleaved
layout (gpt-oss): gate = even, up = odd columns; one contiguous load of 2 * BLOCK_I
columns split in registers, so loads stay vectorized.

Swizzled scales cover ``M_pad`` rows and ``P * 32`` columns; padding rows [M, M_pad) are
zeroed by extra programs of ``PAD_ROWS`` rows (at most 4 per column block), padding
columns by the column programs past I (masked lanes give all-zero blocks).
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
    sigmoid,
    store_row_scales,
    to_bf16_rne,
    zero_scale_padding_rows,
)

PAD_ROWS = 32  # swizzle padding rows zeroed per padding program


@triton.jit
def swiglu_oai_kernel(
    # pointers
    gate_up_ptr,  # [M, 2I] bf16, row stride stride_gm, unit column stride
    out_ptr,  # [M, I] bf16 contiguous (without QUANT)
    values_ptr,  # [M, I] uint8 view of E4M3 (with QUANT)
    scales_ptr,  # uint8: swizzled flat or row-major [M, I/32] (with QUANT)
    a_deq_ptr,  # [M, I] bf16 contiguous: A_deq of the MXFP8 rows (seam.formats.a_deq; with WRITE_A_DEQ)
    # sizes, strides, scalars
    M,
    I,
    stride_gm,
    alpha,
    beta,
    limit,
    # variants
    HAS_LIMIT: tl.constexpr,  # clamp gate above and up on both sides at +-limit
    INTERLEAVED: tl.constexpr,  # gate even / up odd columns (else split halves)
    QUANT: tl.constexpr,  # MXFP8 output (else BF16 activation)
    ROUND_BF16: tl.constexpr,  # quantize bf16(act) instead of the fp32 act
    SWIZZLED: tl.constexpr,
    WRITE_A_DEQ: tl.constexpr,  # with QUANT: also A_deq (I a multiple of 128)
    USE_PDL: tl.constexpr,
    EARLY_TRIGGER: tl.constexpr,  # trigger dependents at the start (seam.kernels.pdl.early_trigger)
    # tiling
    BLOCK_M: tl.constexpr,
    BLOCK_I: tl.constexpr,  # multiple of 32 (>= 128 when SWIZZLED)
    PAD_ROWS: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_i = tl.program_id(1)
    num_row_programs = (M + BLOCK_M - 1) // BLOCK_M
    SCOLS: tl.constexpr = BLOCK_I // 32
    num_scols = I // 32
    padded_scols = (num_scols + 3) // 4 * 4
    scols = pid_i * SCOLS + tl.arange(0, SCOLS)

    if USE_PDL:
        if EARLY_TRIGGER:  # seam.kernels.pdl: dependents may stream their weights during this kernel
            tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()

    if pid_m < num_row_programs:
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
        row_ok = rows < M
        mask = row_ok[:, None] & (cols[None, :] < I)
        row_ptr = gate_up_ptr + rows[:, None] * stride_gm
        if INTERLEAVED:
            cols2 = pid_i * (2 * BLOCK_I) + tl.arange(0, 2 * BLOCK_I)
            mask2 = row_ok[:, None] & (cols2[None, :] < 2 * I)
            pairs = bf16_to_f32(tl.load(row_ptr + cols2[None, :], mask=mask2, other=0.0))
            gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, BLOCK_I, 2)))
        else:
            gate = bf16_to_f32(tl.load(row_ptr + cols[None, :], mask=mask, other=0.0))
            up = bf16_to_f32(tl.load(row_ptr + I + cols[None, :], mask=mask, other=0.0))
        if USE_PDL and not EARLY_TRIGGER:
            # Every global read is done: the next kernel may start its prologue.
            tl.extra.cuda.gdc_launch_dependents()
        if HAS_LIMIT:
            # NaN propagates, as torch.clamp does (the GPU's default min/max would drop it).
            gate = tl.minimum(gate, limit, propagate_nan=tl.PropagateNan.ALL)
            up = tl.minimum(tl.maximum(up, -limit, propagate_nan=tl.PropagateNan.ALL), limit,
                            propagate_nan=tl.PropagateNan.ALL)
        act = gate * sigmoid(alpha * gate) * (up + beta)
        out_offs = rows[:, None] * I + cols[None, :]
        if QUANT:
            if ROUND_BF16:
                act = bf16_to_f32(to_bf16_rne(act))
            values, scales = mxfp8_quantize_tile(act, BLOCK_M, BLOCK_I)
            tl.store(values_ptr + out_offs, values, mask=mask)
            store_row_scales(scales_ptr, scales, rows, row_ok, scols, num_scols, SWIZZLED)
            if WRITE_A_DEQ:  # the column block is whole 128-column steps (BLOCK_I >= 128, a power of two)
                store_a_deq(a_deq_ptr, rows * I, cols, values, scales, mask, BLOCK_M, BLOCK_I, True)
        else:
            tl.store(out_ptr + out_offs, to_bf16_rne(act), mask=mask)
    else:
        zero_scale_padding_rows(scales_ptr, M, pid_m - num_row_programs, scols, padded_scols, PAD_ROWS)


def swiglu_config(m: int, cols_cover: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_I, num_warps): one row per program up to 32 tokens, 2 up to 768, 4 up to 4096,
    8 above, on 4 warps.

    BLOCK_I is at most 256 (I = 768 -> 3 exact column blocks) and at least 128, so one
    column program owns whole 128x4 scale atoms in the swizzled layout. Small programs keep
    many in flight: H200 (2026-12-01, ``docs/benchmarks-log.md`` run 73, I 768, MXFP8 swizzled,
    every (BLOCK_M, BLOCK_I, warps) with 256-16K elements, us against the former 4K elements per
    program): M 8 0.89 (1.64), M 64 1.05 (1.86; best 1.02), M 192 1.21 (1.88), M 2048 3.80 (4.66),
    M 8192 10.67 (10.89; best 10.63 on 2 warps x 128 columns). Run 80 (257-1536 tokens, 2 against 4
    rows): M 384 1.47 / 1.80, M 512 1.67 / 2.05, M 768 2.15 / 2.38; M 1024 2.61 at 4 rows, 2 slower.
    """
    block_i = max(128, min(triton.next_power_of_2(cols_cover), 256))
    block_m = 1 if m <= 32 else 2 if m <= 768 else 4 if m <= 4096 else 8
    return block_m, block_i, 4


def launch_swiglu_oai(
    gate_up: torch.Tensor,
    alpha: float,
    beta: float,
    limit: float | None,
    interleaved: bool,
    out: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    round_to_bf16: bool = False,
    swizzled: bool = False,
    a_deq: torch.Tensor | None = None,
) -> None:
    """One launch over validated buffers: BF16 ``out``, or MXFP8 ``values``/``scales`` (with ``a_deq``, BF16
    [M, I], their A_deq too: ``seam.formats.a_deq``, I a multiple of 128, swizzled scales).

    Flat annotated arguments, so ``seam.ops.swiglu`` registers this launcher as is.
    """
    m = gate_up.shape[0]
    inter = gate_up.shape[1] // 2
    quant = values is not None
    num_scols = inter // 32
    cols_cover = -(-num_scols // 4) * 128 if (quant and swizzled) else inter
    block_m, block_i, num_warps = swiglu_config(m, cols_cover)
    pad_rows = (-(-m // 128) * 128 - m) if (quant and swizzled) else 0
    grid = (triton.cdiv(m, block_m) + triton.cdiv(pad_rows, PAD_ROWS), triton.cdiv(cols_cover, block_i))
    if grid[0] == 0:
        return
    use_pdl = runtime.supports_pdl(gate_up.device)
    swiglu_oai_kernel[grid](
        gate_up,
        out if out is not None else gate_up,
        values.view(torch.uint8) if quant else gate_up,
        scales if quant else gate_up,
        a_deq if a_deq is not None else gate_up,
        m,
        inter,
        gate_up.stride(0),
        alpha,
        beta,
        limit if limit is not None else 0.0,
        HAS_LIMIT=limit is not None,
        INTERLEAVED=interleaved,
        QUANT=quant,
        ROUND_BF16=round_to_bf16,
        SWIZZLED=swizzled,
        WRITE_A_DEQ=a_deq is not None,
        USE_PDL=use_pdl,
        EARLY_TRIGGER=early_trigger(m),
        BLOCK_M=block_m,
        BLOCK_I=block_i,
        PAD_ROWS=PAD_ROWS,
        num_warps=num_warps,
        # The same act bits in the BF16 and the quantized variants (round_to_bf16 is
        # bit-identical to the unfused chain): no FMA contraction in either.
        enable_fp_fusion=False,
        launch_pdl=use_pdl,
    )
