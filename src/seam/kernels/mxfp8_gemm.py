"""MXFP8 x MXFP8 -> BF16 GEMM for Hopper: tiles dequantized to BF16 in the kernel (``docs/spec/mxfp8.md``).

The H200 has no MXFP8 tensor cores. ``e4m3 * 2^(s - 127)`` has at most 4 significant bits, so
it is exact in BF16 where it is a multiple of 2^-133 (BF16's smallest step: at every scale byte from 3, and
every value quantized BF16 rows give; :data:`BF16_EXACT_MIN_SCALE`): each
program loads E4M3 tiles of A [BLOCK_M, BLOCK_K] and B [BLOCK_N, BLOCK_K] with their
swizzled UE8M0 scales, dequantizes them to BF16 and ``tl.dot``s them into an fp32
accumulator. The products are exact, so the result equals ``f32(A_deq) @ f32(B_deq)^T``
up to fp32 summation order. Tiles with ``f16_operands`` scale the E4M3 values into F16
instead, by a power of two per row that the output undoes exactly (same bytes out,
fewer instructions; :func:`mxfp8_mainloop`).

Bytes moved per call: N*K (weights) + N*K/32 (weight scales) + M*K (+ scales) + 2*M*N
out. At decode M the weight stream dominates, so small BLOCK_M (16/32/64) keeps the A
tile cheap; large M takes 128-row tiles. With one program per output tile, decode has
only N/128 programs (20 at N = 2560) for 132 SMs, too few to stream the weights at HBM
speed, so K is split over ``split_k`` programs per tile, chosen to fill the SMs (two
waves of them for the decode tiles up to 32 rows, measured; the fused QKV kernel refits
the split to its register use, ``seam.kernels.mxfp8_gemm_config.pick_qkv_tile``). The splits combine
deterministically inside the kernel (:func:`split_k_combine`): each stores its fp32
partial to a workspace, and the last to arrive at the tile's counter sums all partials
in split order and runs the epilogue, so results do not depend on arrival order and the
fused QKV epilogue stays in the kernel. The helpers here are
shared with the fused QKV kernel (``seam.kernels.qkv_epilogue``).

One token (``BLOCK_M`` 1, ``mxfp8_gemm_config.GEMV_TILE``) takes a CUDA-core GEMV mainloop instead
(:func:`mxfp8_gemv_mainloop`): fp32 dequantization, each step's products summed over K
into one fp32 value per output column, no MMA padding to 16 rows and no operand-layout
conversion of the weights.

In-GEMM quantization (``A_BF16``): the kernel can take the BF16 activation [M, K]
instead of its MXFP8 form and quantize each A tile in registers with the same block
rule as ``seam.mxfp8_quantize`` (:func:`seam.kernels.numerics.mxfp8_quantize_tile`),
then dequantize it like a loaded tile, so ``A_deq`` and every product are bit for bit
those of the separate path and, with the same tile, so is the output. It saves the
quantizer launch and its E4M3 round trip through memory (M*K*(1 + 1/32) bytes written
and read back) but re-quantizes A once per N tile (N / BLOCK_N times): a win only at
small M, where the crossover is measured by ``seam bench linear``.

:func:`launch_mxfp8_linear` runs a picked tile (``seam.kernels.mxfp8_gemm_config.pick_tile``) on its kernel: this
one, the Gluon kernels (``seam.kernels.gluon_launch``) or the prefill path (``seam.kernels.mxfp8_dequant``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.gemm_workspace import split_k_scratch
from seam.kernels.gluon_launch import a_deq_readable, launch_gluon
from seam.kernels.mxfp8_dequant import launch_mxfp8_linear_bf16_mm
from seam.kernels.mxfp8_gemm_config import Tile, covers, pick_tile
from seam.kernels.numerics import (
    EMULATE_CONVERSIONS,
    bits_f32,
    e4m3_bits_to_f32,
    mxfp8_dequantize_tile,
    mxfp8_quantize_tile,
    round_bf16,
    swizzled_scale_offset,
    to_bf16_rne,
    to_f32,
)


@triton.jit
def load_e4m3_tile(
    v_ptr,  # uint8 view of E4M3 [R_total, K], row-major
    rows,  # int64 [R]: row indices
    row_mask,  # [R] bool
    k0,  # first column of the tile
    K,
    BLOCK_K: tl.constexpr,
):
    """E4M3 bytes [R, BLOCK_K] of rows x [k0, k0 + BLOCK_K); zeros outside."""
    cols = k0 + tl.arange(0, BLOCK_K)
    mask = row_mask[:, None] & (cols[None, :] < K)
    return tl.load(v_ptr + rows[:, None] * K + cols[None, :], mask=mask, other=0)


@triton.jit
def load_scale_tile(
    s_ptr,  # uint8 flat 128x4-swizzled scales of [R_total, K]
    rows,  # int64 [R]: row indices
    row_mask,  # [R] bool
    k0,  # first column of the tile, a multiple of 32
    K,
    BLOCK_K: tl.constexpr,  # multiple of 32
):
    """UE8M0 scale bytes [R, BLOCK_K // 32] of rows x [k0, k0 + BLOCK_K); zeros outside (also past K).

    The K loops load these one step ahead: a load of one or two bytes per row is too
    narrow for Triton's asynchronous copies, so in the step that uses it its global
    latency stalled every warp (the largest stall of the 16-row loop in Nsight Compute's
    source view on the H200, 2026-11-30).
    """
    scols = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    padded_scols = (K // 32 + 3) // 4 * 4
    mask = row_mask[:, None] & (scols[None, :] < K // 32)
    return tl.load(s_ptr + swizzled_scale_offset(rows[:, None], scols[None, :], padded_scols), mask=mask, other=0)


@triton.jit
def load_bf16_raw(
    x_ptr,  # bf16 activations [R_total, K], unit column stride
    stride_xm,  # row stride of x (elements)
    rows,  # int64 [R]: row indices
    row_mask,  # [R] bool
    k0,  # first column of the tile
    K,
    BLOCK_K: tl.constexpr,
):
    """The BF16 tile rows x [k0, k0 + BLOCK_K); zeros outside (whole 32-blocks, which quantize to zero)."""
    cols = k0 + tl.arange(0, BLOCK_K)
    mask = row_mask[:, None] & (cols[None, :] < K)
    return tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)


@triton.jit
def load_first_scales(
    xs_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base, K, BLOCK_K: tl.constexpr, A_BF16: tl.constexpr
):
    """(A scales, W scales) of a K loop's first step, for :func:`load_k_step` to carry (with
    ``A_BF16`` the A slot holds the W scales: A's are computed in the loop)."""
    b_s = load_scale_tile(wsc_ptr, cols, col_mask, k_base, K, BLOCK_K)
    if A_BF16:
        a_s = b_s
    else:
        a_s = load_scale_tile(xs_ptr, rows, row_mask, k_base, K, BLOCK_K)
    return a_s, b_s


@triton.jit
def load_k_step(
    x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k0, K,
    a_s_next,  # this step's A scales (from the previous step)
    b_s_next,  # this step's W scales (from the previous step)
    stride_xm,
    BM: tl.constexpr,
    BLOCK_K: tl.constexpr,
    A_BF16: tl.constexpr,
):
    """One K step's raw operands (A E4M3 bytes, A scales, W E4M3 bytes, W scales) and the next
    step's scales (:func:`load_scale_tile`: one step ahead; past the program's range unused).

    With ``A_BF16`` the A tile is loaded as BF16 and quantized to MXFP8 here.
    """
    b_s = b_s_next
    b_s_next = load_scale_tile(wsc_ptr, cols, col_mask, k0 + BLOCK_K, K, BLOCK_K)
    b_v = load_e4m3_tile(w_ptr, cols, col_mask, k0, K, BLOCK_K)
    if A_BF16:
        a_x = load_bf16_raw(x_ptr, stride_xm, rows, row_mask, k0, K, BLOCK_K)
        a_v, a_s = mxfp8_quantize_tile(to_f32(a_x), BM, BLOCK_K)
    else:
        a_s = a_s_next
        a_s_next = load_scale_tile(xs_ptr, rows, row_mask, k0 + BLOCK_K, K, BLOCK_K)
        a_v = load_e4m3_tile(x_ptr, rows, row_mask, k0, K, BLOCK_K)
    return a_v, a_s, b_v, b_s, a_s_next, b_s_next


@triton.jit
def dequantize_mxfp8(vals, s, R: tl.constexpr, BLOCK_K: tl.constexpr):
    """BF16 [R, BLOCK_K] = e4m3 * 2^(s - 127) (exact at multiples of 2^-133); fp32 holding those values under the
    interpreter, whose tl.dot reads bitcast BF16 tiles as integers."""
    f = mxfp8_dequantize_tile(vals, s, R, BLOCK_K)
    if EMULATE_CONVERSIONS:
        return round_bf16(f)
    else:
        return to_bf16_rne(f)


#: Largest offset of a block's scale byte below its row's reference (see :func:`f16_row_offsets`):
#: e4m3 * 2^-15 keeps every E4M3 code exact in F16 (smallest code 2^-9 -> 2^-24, F16's smallest step).
F16_MAX_BELOW = tl.constexpr(15)
#: Largest offset above the reference: 448 * 2^7 = 57344 <= 65504, F16's largest finite value.
F16_MAX_ABOVE = tl.constexpr(7)
#: Scale bytes where the BF16 loop's dequantization is exact and finite: from 3 every code's value is a multiple
#: of 2^-133 (BF16's smallest step; below, some are not), above 246 448 * 2^(s - 127) overflows fp32.
BF16_EXACT_MIN_SCALE = tl.constexpr(3)
BF16_EXACT_MAX_SCALE = tl.constexpr(246)
#: Bounds on a_s + w_s over a program's blocks under which every fp32 sum of both loops is exact
#: up to order and normal: each nonzero product is a multiple of 2^(a_s + w_s - 272) >= 2^-126, and
#: K * 448^2 * 2^(a_s + w_s - 254) < 2^128 for K <= 2^24.
PRODUCT_MIN_SCALE_SUM = tl.constexpr(146)
PRODUCT_MAX_SCALE_SUM = tl.constexpr(340)


@triton.jit
def f16_row_offsets(
    s_ptr,  # uint8 flat 128x4-swizzled scales of [R_total, K]
    rows,  # int64 [R]
    row_mask,  # [R] bool
    k_base,  # first K column of the range (a multiple of 32)
    K,
    KR: tl.constexpr,  # columns in the range (a multiple of 32)
):
    """(reference c int32 [R], whether every row's block scales fit F16's window around its c,
    smallest and largest scale byte of the rows) over the K range, for F16 operands.

    c = max(max scale byte - F16_MAX_ABOVE, 1), so ``e4m3 * 2^(s - c)`` is exact in F16 for
    every block with ``c - F16_MAX_BELOW <= s``. Rows not in ``row_mask`` count as fitting,
    with no scale bytes (smallest 255, largest 0).
    """
    CH: tl.constexpr = 16  # scale columns per load
    NCH: tl.constexpr = (KR // 32 + CH - 1) // CH
    R: tl.constexpr = rows.shape[0]
    padded_scols = (K // 32 + 3) // 4 * 4
    smax = tl.zeros((R,), tl.int32)
    smin = tl.full((R,), 255, tl.int32)
    for ch in tl.static_range(NCH):
        scols = k_base // 32 + ch * CH + tl.arange(0, CH)
        # a last step past K reads no scale (past the padded columns lies the next row group's)
        in_range = ((ch * CH + tl.arange(0, CH) < KR // 32) & (scols < K // 32))[None, :] & row_mask[:, None]
        s = tl.load(s_ptr + swizzled_scale_offset(rows[:, None], scols[None, :], padded_scols), mask=in_range,
                    other=0).to(tl.int32)
        smax = tl.maximum(smax, tl.max(s, axis=1))
        smin = tl.minimum(smin, tl.min(tl.where(in_range, s, 255), axis=1))
    c = tl.maximum(smax - F16_MAX_ABOVE, 1)
    fits = tl.min((smin >= c - F16_MAX_BELOW).to(tl.int32), axis=0) == 1
    return c, fits, tl.min(smin, axis=0), tl.max(smax, axis=0)


@triton.jit
def f16_same_bytes(a_fits, a_lo, a_hi, w_fits, w_lo, w_hi):
    """Whether a program's F16 loop gives the BF16 loop's bits: every row fits its window, the BF16
    loop's own dequantization is exact (:data:`BF16_EXACT_MIN_SCALE`..:data:`BF16_EXACT_MAX_SCALE`;
    all-zero blocks, scale 0, send the program to the BF16 loop too) and no sum of either loop
    overflows or leaves the normal range (:data:`PRODUCT_MIN_SCALE_SUM`..:data:`PRODUCT_MAX_SCALE_SUM`),
    so both hold the same sums up to one power of two."""
    ok = a_fits & w_fits & (a_lo >= BF16_EXACT_MIN_SCALE) & (w_lo >= BF16_EXACT_MIN_SCALE)
    ok = ok & (a_hi <= BF16_EXACT_MAX_SCALE) & (w_hi <= BF16_EXACT_MAX_SCALE)
    return ok & (a_lo + w_lo >= PRODUCT_MIN_SCALE_SUM) & (a_hi + w_hi <= PRODUCT_MAX_SCALE_SUM)


@triton.jit
def dequantize_mxfp8_f16(vals, s, c, R: tl.constexpr, BLOCK_K: tl.constexpr):
    """F16 [R, BLOCK_K] = e4m3 * 2^(s - c[row]), exact where :func:`f16_row_offsets` says the rows fit;
    fp32 holding those values under the interpreter (whose tl.dot takes fp32 tiles)."""
    d = tl.maximum(s.to(tl.int32) - c[:, None], -24)  # below -24 the block is not used (no fit)
    step = bits_f32(((d + 127) << 23).to(tl.uint32))  # 2^d, exact in F16 for d in [-24, 15]
    if EMULATE_CONVERSIONS:  # the F16 rounding of the product, which is exact where the rows fit
        f = tl.reshape(e4m3_bits_to_f32(vals), (R, BLOCK_K // 32, 32)) * step[:, :, None]
        f = f.to(tl.float16).to(tl.float32)
    else:
        v = vals.to(tl.float8e4nv, bitcast=True).to(tl.float16)
        f = tl.reshape(v, (R, BLOCK_K // 32, 32)) * step.to(tl.float16)[:, :, None]
    return tl.reshape(f, (R, BLOCK_K))


@triton.jit
def pow2_scale(acc, e):
    """acc * 2^e for int32 exponents e in [-252, 240] (broadcast to acc), as two fp32 multiplies by powers
    of two in the normal range: exact unless the result over- or underflows."""
    e_lo = e >> 1  # floor on both targets (``//`` truncates on the GPU, floors in the interpreter)
    e_hi = e - e_lo
    return (acc * bits_f32(((e_hi + 127) << 23).to(tl.uint32))) * bits_f32(((e_lo + 127) << 23).to(tl.uint32))


@triton.jit
def _mma_k_loop(
    acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base, K: tl.constexpr,
    N_STEPS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
    stride_xm, A_BF16: tl.constexpr,
    a_s_next,  # the first step's scales (:func:`load_first_scales`)
    b_s_next,
    c_a,  # F16: reference exponents of the A rows [BM] and W rows [BN] (:func:`f16_row_offsets`)
    c_w,
    F16: tl.constexpr,
):
    """The pipelined K loop of :func:`mxfp8_mainloop` with BF16 or (``F16``) scaled-F16 operands."""
    for i in tl.range(N_STEPS, num_stages=STAGES):
        a_v, a_s, b_v, b_s, a_s_next, b_s_next = load_k_step(
            x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base + i * BLOCK_K, K,
            a_s_next, b_s_next, stride_xm, BM, BLOCK_K, A_BF16,
        )
        if F16:
            a = dequantize_mxfp8_f16(a_v, a_s, c_a, BM, BLOCK_K)
            b = dequantize_mxfp8_f16(b_v, b_s, c_w, BN, BLOCK_K)
        else:
            a = dequantize_mxfp8(a_v, a_s, BM, BLOCK_K)
            b = dequantize_mxfp8(b_v, b_s, BN, BLOCK_K)
        acc = tl.dot(a, tl.trans(b), acc)
    return acc


@triton.jit
def mxfp8_mainloop(
    acc,  # fp32 [BM, BN] accumulator
    x_ptr,  # uint8 view of E4M3 activations [M, K]; bf16 [M, K] when A_BF16
    xs_ptr,  # swizzled activation scales (unused when A_BF16)
    w_ptr,  # uint8 view of E4M3 weights [N, K]
    wsc_ptr,  # swizzled weight scales
    rows,  # int64 [BM]
    row_mask,
    cols,  # int64 [BN]: weight rows (output columns)
    col_mask,
    k_base,  # first K column of this program's range
    K: tl.constexpr,
    N_STEPS: tl.constexpr,  # BLOCK_K steps in this program's range
    BM: tl.constexpr,
    BN: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,  # software-pipeline depth of the K loop (1: none)
    stride_xm=0,  # row stride of the bf16 activations (A_BF16)
    A_BF16: tl.constexpr = False,  # quantize BF16 A tiles in the kernel (in-GEMM quantization)
    F16_OPERANDS: tl.constexpr = False,  # F16 operands where the block scales allow (MXFP8 A only)
):
    """acc += A_deq[rows, range] @ W_deq[cols, range]^T over N_STEPS BLOCK_K steps from k_base.

    The loop is software-pipelined ``STAGES`` deep (``tl.range``): the raw E4M3 tiles of
    the next steps are copied to shared memory asynchronously while this step is
    dequantized and multiplied, so at decode M the weight stream keeps bytes in flight
    without holding them in registers. The stages must be asked for: Triton's pipeliner
    prefetches on its own only loads that feed a dot, and the dequantization stands
    between these loads and the dot. With ``A_BF16`` the raw A tile is BF16 and is
    quantized to MXFP8 (the quantizer's rule, on ``to_f32`` of it) right before its
    dequantization, so ``A_deq`` is bit-identical to dequantizing ``seam.mxfp8_quantize(x)``.

    ``F16_OPERANDS`` (MXFP8 A): E4M3 converts to F16 exactly, two codes per instruction, so
    the tiles can be dequantized as ``e4m3 * 2^(s - c)`` with one F16 multiply instead of
    the fp32 multiply and BF16 rounding, c a reference exponent per row of A and of W over
    this program's K range (:func:`f16_row_offsets`). Every product of an output element
    is then the BF16 path's product times the same power of two, 2^(254 - c_a - c_w), so
    the fp32 sums are scaled copies of the BF16 path's and :func:`pow2_scale` gives back
    the same bits. A program whose block scales leave F16's window around c, or the range
    where that argument holds (:func:`f16_same_bytes`), takes the BF16 loop. This cuts the
    K loop's instructions by about a quarter (sm_90 SASS: 180 against 254 per 16-row step)
    but adds registers: it paid only on the fused QKV kernel's register-capped 64-row tiles
    (``seam.kernels.mxfp8_gemm_config.pick_qkv_tile``).
    """
    a_s_next, b_s_next = load_first_scales(xs_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base, K, BLOCK_K, A_BF16)
    use_f16 = False  # a constexpr unless the tile asks for F16 operands: then the scales decide per program
    c_a = 0
    c_w = 0
    if F16_OPERANDS and not A_BF16:
        c_a, a_fits, a_lo, a_hi = f16_row_offsets(xs_ptr, rows, row_mask, k_base, K, N_STEPS * BLOCK_K)
        c_w, w_fits, w_lo, w_hi = f16_row_offsets(wsc_ptr, cols, col_mask, k_base, K, N_STEPS * BLOCK_K)
        use_f16 = f16_same_bytes(a_fits, a_lo, a_hi, w_fits, w_lo, w_hi)
    if use_f16:
        part = _mma_k_loop(
            tl.zeros((BM, BN), tl.float32), x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask,
            k_base, K, N_STEPS, BM, BN, BLOCK_K, STAGES, stride_xm, A_BF16, a_s_next, b_s_next, c_a, c_w, True,
        )
        acc += pow2_scale(part, c_a[:, None] + c_w[None, :] - 254)
    else:
        acc = _mma_k_loop(
            acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask,
            k_base, K, N_STEPS, BM, BN, BLOCK_K, STAGES, stride_xm, A_BF16, a_s_next, b_s_next, c_a, c_w, False,
        )
    return acc


@triton.jit
def mxfp8_gemv_mainloop(
    acc,  # fp32 [1, BN] accumulator
    x_ptr,  # uint8 view of E4M3 activations [M, K]; bf16 [M, K] when A_BF16
    xs_ptr,  # swizzled activation scales (unused when A_BF16)
    w_ptr,  # uint8 view of E4M3 weights [N, K]
    wsc_ptr,  # swizzled weight scales
    rows,  # int64 [1]: the token
    row_mask,
    cols,  # int64 [BN]: weight rows (output columns)
    col_mask,
    k_base,  # first K column of this program's range
    K: tl.constexpr,
    N_STEPS: tl.constexpr,  # BLOCK_K steps in this program's range
    BN: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,  # software-pipeline depth of the K loop (1: none)
    stride_xm=0,  # row stride of the bf16 activations (A_BF16)
    A_BF16: tl.constexpr = False,  # quantize BF16 A tiles in the kernel (in-GEMM quantization)
):
    """acc += A_deq[row, range] @ W_deq[cols, range]^T for one token, on CUDA cores.

    An MMA would pad the token to 16 rows and need each weight tile converted into its
    operand layout; here the weight tile stays in its load layout: every thread multiplies
    its fp32-dequantized weights by the token's activations, and each step's products are
    summed over K into a [BN] fp32 accumulator. A product of two dequantized MXFP8
    values is exact in fp32 (8 significant bits) unless it underflows, so the result is
    ``f32(A_deq) @ f32(W_deq)^T`` up to summation order. With ``A_BF16`` the A tile is
    quantized in the kernel exactly as in :func:`mxfp8_mainloop`.
    """
    # Each step's products are summed over K right away (in-thread adds, then warp shuffles):
    # a [BN, BLOCK_K] fp32 accumulator held through the loop took 128 registers per thread
    # at 4 warps and spilled with the QKV epilogue. Prefetching the next weight tile into
    # registers spilled too and measured slower on the H200, and 2-4 async-copy stages
    # (STAGES) measured no faster than none (2026-11-30).
    total = tl.zeros((BN,), tl.float32)
    a_s_next, b_s_next = load_first_scales(xs_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base, K, BLOCK_K, A_BF16)
    for i in tl.range(N_STEPS, num_stages=STAGES):
        a_v, a_s, b_v, b_s, a_s_next, b_s_next = load_k_step(
            x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, col_mask, k_base + i * BLOCK_K, K,
            a_s_next, b_s_next, stride_xm, 1, BLOCK_K, A_BF16,
        )
        # the [1, BLOCK_K] A tile broadcasts over the weight rows: only it changes layout
        w_deq = mxfp8_dequantize_tile(b_v, b_s, BN, BLOCK_K)
        total += tl.sum(w_deq * mxfp8_dequantize_tile(a_v, a_s, 1, BLOCK_K), axis=1)
    return acc + tl.reshape(total, (1, BN))


@triton.jit
def split_k_combine(
    acc,  # fp32 [BM, BN]: this program's partial over its K range
    ws_ptr,  # fp32 workspace [tiles, SPLIT_K, BM, BN]
    counter_ptr,  # int32 [tiles], zero between launches
    tile_id,
    kid,  # this program's split index
    row_mask,  # [BM]: rows that exist
    SPLIT_K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    """Deterministic split-K: returns (sum of all partials in split order, whether this program sums).

    Only the last program to arrive gets the sum (others get zeros and False); it rearms
    the tile's counter for the next launch.
    """
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BN)[None, :]
    base = ws_ptr + tile_id.to(tl.int64) * (SPLIT_K * BM * BN) + r * BN + c
    tl.store(base + kid * (BM * BN), acc, mask=row_mask[:, None])
    # every thread's partial is issued before the release of the arrival count
    tl.debug_barrier()
    count = tl.atomic_add(counter_ptr + tile_id, 1, sem="acq_rel")
    last = count == SPLIT_K - 1
    mask = row_mask[:, None] & last
    total = tl.zeros((BM, BN), tl.float32)
    for s in tl.static_range(SPLIT_K):
        # .cg: read at L2, where the other programs' partials landed
        total += tl.load(base + s * (BM * BN), mask=mask, other=0.0, cache_modifier=".cg")
    tl.store(counter_ptr + tile_id, 0, mask=last)
    return total, last


@triton.jit(do_not_specialize=["M"])
def mxfp8_linear_kernel(
    # pointers
    x_ptr,  # uint8 view of E4M3 activations [M, K]; bf16 [M, K], row stride stride_xm, when A_BF16
    xs_ptr,  # uint8 swizzled activation scales (unused when A_BF16)
    w_ptr,  # uint8 view of E4M3 weights [N, K]
    wsc_ptr,  # uint8 swizzled weight scales
    out_ptr,  # bf16 [M, N], row stride stride_om
    ws_ptr,  # split-K workspace and counters (SPLIT_K > 1)
    counter_ptr,
    # sizes
    M,
    N,
    stride_xm,
    stride_om,
    # constexprs
    K: tl.constexpr,  # per layer; a constexpr loop bound (the interpreter rejects runtime ones with numpy 2.4)
    A_BF16: tl.constexpr,  # x is BF16, quantized to MXFP8 in the kernel
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    STAGES: tl.constexpr,
    F16_OPERANDS: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    kid = tl.program_id(2)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < M
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    K_SPLIT: tl.constexpr = K // SPLIT_K
    if BLOCK_M == 1:
        acc = mxfp8_gemv_mainloop(
            acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, cols < N, kid * K_SPLIT,
            K, -(-K_SPLIT // BLOCK_K), BLOCK_N, BLOCK_K, STAGES, stride_xm, A_BF16,
        )
    else:
        acc = mxfp8_mainloop(
            acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, cols < N, kid * K_SPLIT,
            K, -(-K_SPLIT // BLOCK_K), BLOCK_M, BLOCK_N, BLOCK_K, STAGES, stride_xm, A_BF16, F16_OPERANDS,
        )
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if SPLIT_K > 1:
        tile_id = pid_m * tl.num_programs(1) + pid_n
        acc, last = split_k_combine(acc, ws_ptr, counter_ptr, tile_id, kid, row_mask, SPLIT_K, BLOCK_M, BLOCK_N)
        row_mask = row_mask & last
    mask = row_mask[:, None] & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], to_bf16_rne(acc), mask=mask)


def launch_mxfp8_linear(
    xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor, tile: Tile,
    a_deq: torch.Tensor | None = None, weight_bf16_mul: bool = False,
) -> None:
    """out[M, N] = bf16(A_deq @ B_deq^T) for validated operands (swizzled scales); an fp32 ``out`` (the
    fused QKV op's accumulator) gets the sums unrounded, from a ``bf16_mm`` tile only.

    ``xs`` None: ``xq`` is the BF16 activation [M, K] (unit column stride), quantized
    to MXFP8 inside the kernel; otherwise ``xq`` is E4M3 with scales ``xs``. A ``wgmma``
    tile runs the Gluon kernel; where TMA cannot read an operand as is (a base or row
    stride not 16-byte aligned) the tl kernel runs instead, on its own tile (same bytes
    wherever the sums are exact; within fp32 reordering otherwise). A ``bf16_mm`` tile runs
    the prefill path (:func:`seam.kernels.mxfp8_dequant.launch_mxfp8_linear_bf16_mm`). ``a_deq``: the
    activations' A_deq (:mod:`seam.formats.a_deq`), which the prefill path and the Gluon kernels read in place of
    ``xq`` where TMA could read it (16-byte aligned; the Gluon kernels as
    :func:`~seam.kernels.gluon_launch.launch_gluon` says); the tl kernel ignores it, and
    ``weight_bf16_mul`` is for the Gluon kernels only.
    A ``tile`` that does not cover M (:func:`~seam.kernels.mxfp8_gemm_config.covers`) is picked again for M.
    """
    m, k = xq.shape
    n = wq.shape[0]
    if m == 0 or n == 0:  # nothing to write
        return
    # a tile traced at fewer tokens, or the 16-row kernel's given BF16 rows (it reads MXFP8 rows only): pick again
    if not covers(tile, m) or (tile.mma_rows and xs is None):
        tile = pick_tile(m, n, k, out.device, a_deq=a_deq_readable(a_deq), mma_rows=xs is not None)
    if tile.bf16_mm:
        # a misaligned A may take another cuBLAS algorithm (another sum order) than the aligned copy made without it
        launch_mxfp8_linear_bf16_mm(xq, xs, wq, ws, out, a_deq if a_deq_readable(a_deq) else None)
        return
    if out.dtype == torch.float32:
        raise ValueError("an fp32 out (unrounded sums) needs a bf16_mm tile")
    a_bf16 = xs is None
    use_pdl = runtime.supports_pdl(out.device)
    if tile.wgmma:
        if launch_gluon(xq, xs, wq, ws, out, tile, use_pdl, a_deq=a_deq, weight_bf16_mul=weight_bf16_mul) is not None:
            return
        tile = pick_tile(m, n, k, out.device, tl_only=True)  # an operand TMA cannot read as is
    grid = (triton.cdiv(m, tile.block_m), triton.cdiv(n, tile.block_n), tile.split_k)
    if tile.split_k > 1:
        work, counters = split_k_scratch(out.device, grid[0] * grid[1], tile)
    else:
        work, counters = out, out  # unused
    mxfp8_linear_kernel[grid](
        xq if a_bf16 else xq.view(torch.uint8),
        xq if a_bf16 else xs,  # unused when A_BF16
        wq.view(torch.uint8),
        ws,
        out,
        work,
        counters,
        m,
        n,
        xq.stride(0),
        out.stride(0),
        K=k,
        A_BF16=a_bf16,
        BLOCK_M=tile.block_m,
        BLOCK_N=tile.block_n,
        BLOCK_K=tile.block_k,
        SPLIT_K=tile.split_k,
        STAGES=tile.num_stages,
        F16_OPERANDS=tile.f16_operands,
        USE_PDL=use_pdl,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
        launch_pdl=use_pdl,
        maxnreg=tile.max_registers,
    )
