"""QKV+indexer projection with the norm / RoPE / NVFP4-KV epilogue in one kernel (``docs/spec/qkv_epilogue.md``).

One output tile is BLOCK_M tokens x one 128-wide head of N = (19*nkv + 1)*128 columns
``[q x 16nkv | k x nkv | v x nkv | index_q x nkv | index_k]``: its programs (``SPLIT_K``
of them, each over a K range) run the MXFP8 GEMM mainloop of
``seam.kernels.mxfp8_gemm``; the one holding the full accumulator (all of them when
SPLIT_K is 1, else the last to arrive, which sums the partials in split order) runs
the head's role-specific epilogue on the fp32 accumulator, so qkv is never written
out as a tensor. Scratch traffic remains on split-K tiles (decode, and capped 64-row
tiles at a few hundred tokens): fp32 split-K partials, and on multi-row tiles of up to 32 rows (the 16- and
32-row GEMM tiles, the 4-row epilogue after a Gluon GEMM) the K / V / index_k head rows (fp32, after norm and
RoPE), which pass through the program's own workspace slot (a few KB, read back at once by the same program) to reach the
layout their NVFP4 quantization compiles correctly in (:func:`_store_nvfp4_rows`). On one-token
tiles every program loads the epilogue's inputs (positions, cos/sin rows, norm
weights, cache slots) before its mainloop, so their latency overlaps the GEMM; wider
tiles load them in the program that runs the epilogue. ``ACC_MODE`` 1 replaces the
GEMM by a load of a given accumulator [M, N] (fp32, or BF16 for the unfused chain): the same epilogue code,
which is how the epilogue is tested bit for bit against :mod:`seam.ref.qkv`, and how the op runs where
``mxfp8_linear``'s Gluon decode kernel or prefill path is faster than this kernel's tl mainloop: that GEMM
writes the fp32 accumulator, this kernel reads it (:func:`launch_qkv_epilogue`). The launch rules
(the tile: ``seam.kernels.mxfp8_gemm_config.pick_qkv_tile``; staged rows and the workspace:
``seam.kernels.qkv_config``) live beside this module.

Exactness: every epilogue step is a correctly rounded fp32 operation with a named
rounding point, launched with ``enable_fp_fusion=False`` so no product is contracted
into an FMA. seam's rsqrt here is ``div_rn(1, sqrt_rn(v))``. The per-head sum of
squares is a pairwise tree over the dims in index order (adjacent pairs first), so
its value does not depend on how a compiler orders a reduction. The head is split
into dims [0, 32), [32, 64) (the RoPE pair) and [64, 128).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.gemm_workspace import gemm_scratch
from seam.kernels.gluon_launch import launch_gluon
from seam.kernels.mxfp8_gemm import launch_mxfp8_linear, mxfp8_gemv_mainloop, mxfp8_mainloop, split_k_combine
from seam.kernels.mxfp8_gemm_config import Tile, covers, pick_qkv_tile
from seam.kernels.numerics import e4m3_saturate_bits, to_bf16_rne, to_f32
from seam.kernels.nvfp4 import nvfp4_quantize_group, v_scale_offset
from seam.kernels.qkv_config import (
    STAGED_NVFP4_MAX_ROWS,
    epilogue_tile,
    epilogue_tile_after,
    needs_workspace,
    workspace_floats,
)

_INV_HEAD_DIM = tl.constexpr(0.0078125)  # 1/128, exact


@triton.jit
def _pair_sum(s, R: tl.constexpr, W: tl.constexpr):
    """[R, W] -> [R, W // 2]: sums of adjacent pairs (a sum of two has no order)."""
    return tl.sum(tl.reshape(s, (R, W // 2, 2)), axis=2)


@triton.jit
def _tree32(s, R: tl.constexpr):
    """Pairwise-tree sum of [R, 32] -> [R]."""
    s = _pair_sum(s, R, 32)
    s = _pair_sum(s, R, 16)
    s = _pair_sum(s, R, 8)
    s = _pair_sum(s, R, 4)
    s = _pair_sum(s, R, 2)
    return tl.reshape(s, (R,))


@triton.jit
def _split_head(acc, R: tl.constexpr):
    """acc [R, 128] -> (dims [0, 32), [32, 64), [64, 128))."""
    lo, hi = tl.split(tl.permute(tl.reshape(acc, (R, 2, 64)), (0, 2, 1)))
    x, y = tl.split(tl.permute(tl.reshape(lo, (R, 2, 32)), (0, 2, 1)))
    return x, y, hi


@triton.jit
def _gemma_rms_norm(x, y, z, w, eps, R: tl.constexpr):
    """Gemma RMSNorm of the head rows with BF16 weights w [128]: r = 1/sqrt_rn(tree(x^2)/128 + eps),
    n = x*r, n + n*f32(w)."""
    z_lo, z_hi = tl.split(tl.permute(tl.reshape(z * z, (R, 2, 32)), (0, 2, 1)))
    # tree over dims 0..127 in index order: ((x + y) + (z_lo + z_hi))
    ss = (_tree32(x * x, R) + _tree32(y * y, R)) + (_tree32(z_lo, R) + _tree32(z_hi, R))
    v = ss * _INV_HEAD_DIM + eps
    r = tl.math.div_rn(1.0, tl.math.sqrt_rn(v))[:, None]
    wx, wy, wz = _split_head(to_f32(tl.reshape(w, (1, 128))), 1)
    nx = x * r
    ny = y * r
    nz = z * r
    return nx + nx * wx, ny + ny * wy, nz + nz * wz


@triton.jit
def _load_cos_sin(cs_ptr, pos, mask, R: tl.constexpr):
    """The positions' BF16 cos and sin rows for :func:`_rope` (rows not in mask are not loaded):
    a tuple (cos, sin) of [R, 32], or for one row a [1, 128] tile (cos | sin | dims [64, 128)
    not loaded).

    They wait in registers through the mainloop. Triton re-issues a load of fewer elements
    than threads in each layout the epilogue uses (some replicated per thread), which would
    keep all those copies live, so the one-row load is widened to 128 elements.
    """
    if R == 1:
        d = tl.arange(0, 128)[None, :]
        return tl.load(cs_ptr + pos[:, None] * 64 + d, mask=mask[:, None] & (d < 64))
    else:
        base = cs_ptr + pos[:, None] * 64 + tl.arange(0, 32)[None, :]
        return tl.load(base, mask=mask[:, None]), tl.load(base + 32, mask=mask[:, None])


@triton.jit
def _rope(x, y, cs, R: tl.constexpr):
    """NeoX RoPE of the pair (x = dims [0, 32), y = dims [32, 64)) with :func:`_load_cos_sin`'s
    rows; products rounded before add/sub."""
    if R == 1:
        cos, sin, _ = _split_head(to_f32(cs), 1)
    else:
        cos = to_f32(cs[0])
        sin = to_f32(cs[1])
    return x * cos - y * sin, y * cos + x * sin


@triton.jit
def _join_head(x, y, z, R: tl.constexpr):
    """(dims [0, 32), [32, 64), [64, 128)) -> [R, 128]: the inverse of :func:`_split_head`."""
    lo = tl.reshape(tl.permute(tl.join(x, y), (0, 2, 1)), (R, 64))
    return tl.reshape(tl.permute(tl.join(lo, z), (0, 2, 1)), (R, 128))


@triton.jit
def _scale_offset(tok, j, SWIZZLED: tl.constexpr):
    """Byte offset of scale byte j of token ``tok`` in a page's scale area: V-swizzled or linear."""
    if SWIZZLED:
        return v_scale_offset(tok, j)
    else:
        return tok * 8 + j


@triton.jit
def _store_nvfp4(
    cache_ptr,  # uint8 page base
    slot_base,  # int64 [1]: byte offset of this head's slot in the token's page
    tok,  # int64 [1]: token index in the block
    valid,  # [1] bool: row < M and slot >= 0
    x,
    y,
    z,
    inv_g,
    block_size,
    SWIZZLED: tl.constexpr,
):
    """Quantize one token's head (x: dims [0, 32), y: [32, 64), z: [64, 128)) to NVFP4 into its
    cache slot: 64 data bytes, then 8 scale bytes (linear or V-swizzled).

    The 8 groups of 16 are quantized as one [8, 16] tile: one amax reduction and one
    scale computation, where a loop over the groups puts 8 dependent reduction chains on
    the critical path of the kernel's last program (H200, 2026-11-30: one-token TP4 QKV
    9.6 against 11.5 us).
    """
    sf_area = cache_ptr + slot_base + block_size * 64
    packed, sf = nvfp4_quantize_group(tl.reshape(_join_head(x, y, z, 1), (8, 16)), inv_g, 8)
    tl.store(cache_ptr + (slot_base + tok * 64)[:, None] + tl.arange(0, 64)[None, :],
             tl.reshape(packed, (1, 64)), mask=valid[:, None])
    sf_off = _scale_offset(tok[:, None], tl.arange(0, 8)[None, :], SWIZZLED)
    tl.store(sf_area[:, None] + sf_off, tl.reshape(sf, (1, 8)), mask=valid[:, None])


@triton.jit
def _store_nvfp4_rows(
    cache_ptr,  # uint8 cache base
    page_stride,  # bytes per page
    num_slots,  # pages * block_size
    head_off,  # byte offset of this head's slots in a page
    slot_src,  # int64 [M] slot mapping of this head kind
    stage_ptr,  # fp32 [R, 128] scratch of this program (global memory)
    row0,  # first row of the tile
    M,
    x,
    y,
    z,
    inv_g,
    block_size,
    SWIZZLED: tl.constexpr,
    R: tl.constexpr,
):
    """Quantize the head rows of a multi-row tile of up to 32 rows to NVFP4 into their cache slots.

    The rows go through a global scratch tile (this program's split-K workspace slot) and
    come back as one plain [R * 8, 16] load, so every group of every row is quantized at
    once. Quantizing straight from the QKV accumulator's register layouts wrote wrong
    cache bytes on sm_90 in every all-groups form tried (a [R * 8, 16] view, pair trees;
    Triton 3.6, docs/benchmarks-log.md runs 9 and 12), and the group-by-group loop that compiles
    correctly puts 8 dependent reduction chains on the kernel's critical path: fused QKV
    at M 8 took 16.9 us that way against 13.6 here (nkv 1; nkv 2: 24.0 against 20.4; H200,
    2026-11-30). The slots are reloaded in the new layout for the same reason.
    """
    # the split-K combine's reads of this slot are done before it is overwritten
    tl.debug_barrier()
    # each part where it lies: no layout change of the accumulator's pieces
    row = stage_ptr + tl.arange(0, R)[:, None] * 128
    tl.store(row + tl.arange(0, 32)[None, :], x)
    tl.store(row + 32 + tl.arange(0, 32)[None, :], y)
    tl.store(row + 64 + tl.arange(0, 64)[None, :], z)
    # every thread's part of the tile is written before any thread reads it back
    tl.debug_barrier()
    e = tl.arange(0, R * 8)
    v = tl.load(stage_ptr + e[:, None] * 16 + tl.arange(0, 16)[None, :], cache_modifier=".cg")
    packed, sf = nvfp4_quantize_group(v, inv_g, R * 8)
    row = row0 + e // 8
    g = e % 8
    slot = tl.load(slot_src + row, mask=row < M, other=-1)
    blk, tok, valid = _slot_location(slot, block_size, num_slots)
    slot_base = blk * page_stride + head_off
    data = cache_ptr + slot_base + tok * 64 + g * 8
    tl.store(data[:, None] + tl.arange(0, 8)[None, :], packed, mask=valid[:, None])
    sf_area = cache_ptr + slot_base + block_size * 64
    tl.store(sf_area + _scale_offset(tok, g, SWIZZLED), sf, mask=valid)


@triton.jit
def _halves(x, R: tl.constexpr, W: tl.constexpr):
    """[R, W] -> (columns [0, W/2), [W/2, W))."""
    return tl.split(tl.permute(tl.reshape(x, (R, 2, W // 2)), (0, 2, 1)))


@triton.jit
def _store_group(data, sf_area, tok, valid, v, j: tl.constexpr, inv_g, SWIZZLED: tl.constexpr, R: tl.constexpr):
    """Quantize dims [16j, 16j + 16) of the head rows; store their 8 data bytes and scale byte j."""
    packed, sf = nvfp4_quantize_group(v, inv_g, R)
    tl.store(data + j * 8 + tl.arange(0, 8)[None, :], packed, mask=valid[:, None])
    tl.store(sf_area + _scale_offset(tok, j, SWIZZLED), sf, mask=valid)


@triton.jit
def _store_nvfp4_groups(
    cache_ptr, slot_base, tok, valid, x, y, z, inv_g, block_size, SWIZZLED: tl.constexpr, R: tl.constexpr
):
    """Quantize the head rows of a 64- or 128-row tile to NVFP4 one group of 16 dims at a time.

    Staged through memory like :func:`_store_nvfp4_rows` these tiles came out wrong on
    sm_90 as one [R * 8, 16] tile and, in chunks of 32 rows, 4-9% slower at nkv 2,
    M 256-2048 (H200, 2026-11-30): with this many rows the loop's groups keep the SM busy.
    """
    data = cache_ptr + (slot_base + tok * 64)[:, None]
    sf_area = cache_ptr + slot_base + block_size * 64
    x0, x1 = _halves(x, R, 32)
    y0, y1 = _halves(y, R, 32)
    z01, z23 = _halves(z, R, 64)
    z0, z1 = _halves(z01, R, 32)
    z2, z3 = _halves(z23, R, 32)
    _store_group(data, sf_area, tok, valid, x0, 0, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, x1, 1, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, y0, 2, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, y1, 3, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, z0, 4, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, z1, 5, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, z2, 6, inv_g, SWIZZLED, R)
    _store_group(data, sf_area, tok, valid, z3, 7, inv_g, SWIZZLED, R)


@triton.jit
def _store_head_nvfp4(
    cache_ptr, page_stride, num_slots, head_off, slot, slot_src, stage_ptr, row0, M, x, y, z, inv_g, block_size,
    SWIZZLED: tl.constexpr, R: tl.constexpr,
):
    """NVFP4 store of one head's rows: :func:`_store_nvfp4` for one token, :func:`_store_nvfp4_rows`
    up to :data:`STAGED_NVFP4_MAX_ROWS` rows, :func:`_store_nvfp4_groups` above."""
    if R == 1:
        blk, tok, valid = _slot_location(slot, block_size, num_slots)
        _store_nvfp4(cache_ptr, blk * page_stride + head_off, tok, valid, x, y, z, inv_g, block_size, SWIZZLED)
    elif R <= STAGED_NVFP4_MAX_ROWS:
        _store_nvfp4_rows(cache_ptr, page_stride, num_slots, head_off, slot_src, stage_ptr, row0, M, x, y, z,
                          inv_g, block_size, SWIZZLED, R)
    else:
        blk, tok, valid = _slot_location(slot, block_size, num_slots)
        _store_nvfp4_groups(cache_ptr, blk * page_stride + head_off, tok, valid, x, y, z, inv_g, block_size,
                            SWIZZLED, R)


@triton.jit
def _slot_location(slot, block_size, num_slots):
    """(block, token, valid) of each row's cache slot; only slots in [0, num_slots) are valid: -1 (and
    padding rows, which load -1) skips, and a slot past the cache is not written (memory safety for
    input that only ``SEAM_DEBUG=1`` checks)."""
    valid = (slot >= 0) & (slot < num_slots)
    slot = tl.where(valid, slot, 0)
    return slot // block_size, slot % block_size, valid


@triton.jit
def _load_epilogue_inputs(
    head, rows, row_mask, pos_ptr, cs_ptr, max_pos, qw_ptr, kw_ptr, iqw_ptr, ikw_ptr, slot_ptr, islot_ptr,
    nkv, R: tl.constexpr,
):
    """(norm weights [128], :func:`_load_cos_sin` rows, cache slots [R]) of one head's rows.

    Each head loads only what its kind uses: norm weights and RoPE rows for all but V,
    cache slots (-1 elsewhere) for K, V and index_k. The weights are one [128] load for
    the reason given in :func:`_load_cos_sin`. A position outside [0, max_pos) loads no
    cos/sin row (zeros): only ``SEAM_DEBUG=1`` rejects it, and it must not read out of bounds.
    """
    k_start = 16 * nkv
    v_start = 17 * nkv
    iq_start = 18 * nkv
    ik_start = 19 * nkv
    normed = (head < v_start) | (head >= iq_start)
    slotted = (head >= k_start) & ((head < iq_start) | (head >= ik_start))
    norm_w_ptr = tl.where(
        head < k_start, qw_ptr, tl.where(head < v_start, kw_ptr, tl.where(head < ik_start, iqw_ptr, ikw_ptr))
    )
    w = tl.load(norm_w_ptr + tl.arange(0, 128), mask=normed)
    pos = tl.load(pos_ptr + rows, mask=row_mask & normed, other=0)
    cs = _load_cos_sin(cs_ptr, pos, row_mask & normed & (pos >= 0) & (pos < max_pos), R)
    slot = tl.load(tl.where(head < ik_start, slot_ptr, islot_ptr) + rows, mask=row_mask & slotted, other=-1)
    return w, cs, slot


@triton.jit(do_not_specialize=["M", "block_size", "max_pos", "kv_slots", "idx_slots", "nkv"])
def qkv_epilogue_kernel(
    # GEMM operands (ACC_MODE 0): uint8 views of E4M3 + swizzled UE8M0 scales
    x_ptr,  # [M, K]
    xs_ptr,
    w_ptr,  # [N, K]
    wsc_ptr,
    # given accumulator (ACC_MODE 1): fp32 or bf16 [M, N] (strides stride_acc, stride_head = 128), or the Gluon
    # GEMM's fp32 partials [heads, NUM_PARTIALS, MP, 128] (strides stride_head, stride_split, stride_acc)
    acc_ptr,
    stride_acc,
    stride_head,
    stride_split,
    # epilogue inputs
    pos_ptr,  # int64 [M]
    cs_ptr,  # bf16 [max_pos, 64]: cos | sin
    max_pos,
    qw_ptr,  # bf16 [128] norm weights: q, k, index_q, index_k
    kw_ptr,
    iqw_ptr,
    ikw_ptr,
    slot_ptr,  # int64 [M] kv slots (-1 skips; outside [0, kv_slots) not written)
    islot_ptr,  # int64 [M] index slots (-1 skips; outside [0, idx_slots) not written)
    ws_ptr,  # fp32 workspace (needs_workspace): split-K partials, then staged NVFP4 rows
    counter_ptr,  # int32 split-K arrival counters (SPLIT_K > 1)
    # outputs
    kv_ptr,  # uint8 [nb, 2*nkv, block_size, 72], page stride kv_page_stride
    idx_ptr,  # uint8 [nb, block_size, 72], page stride idx_page_stride
    iq_ptr,  # uint8 view of E4M3 [M, nkv*128]
    q_ptr,  # bf16 [M, 16*nkv*128] (HAS_Q)
    qf_ptr,  # uint8 view of E4M3 [M, 16*nkv*128] (HAS_QFP8)
    # sizes and scalars
    M,
    eps,
    inv_q_fp8_scale,  # fp32 1/q_fp8_scale (host)
    inv_k_scale,  # fp32 1/k_scale (host)
    inv_v_scale,  # fp32 1/v_scale (host)
    kv_page_stride,
    idx_page_stride,
    block_size,
    kv_slots,  # kv pages * block_size
    idx_slots,  # index pages * block_size
    nkv,  # KV heads: a runtime value (one compile per tile, not per nkv; a few scalar compares per program)
    # constexprs
    K: tl.constexpr,  # per layer; a constexpr loop bound (the interpreter rejects runtime ones with numpy 2.4)
    HAS_Q: tl.constexpr,
    HAS_QFP8: tl.constexpr,
    ACC_MODE: tl.constexpr,
    NUM_PARTIALS: tl.constexpr,  # ACC_MODE 1: partials summed into the accumulator (1: a given accumulator)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,  # 1 with ACC_MODE 1
    STAGES: tl.constexpr,  # software-pipeline depth of the GEMM's K loop
    F16_OPERANDS: tl.constexpr,  # the GEMM's scaled-F16 operands (``mxfp8_mainloop``)
    USE_PDL: tl.constexpr,
    INPUTS_BEFORE_WAIT: tl.constexpr,  # the previous kernel triggers this one after its own wait (partials)
):
    K_START = 16 * nkv
    V_START = 17 * nkv
    IQ_START = 18 * nkv
    IK_START = 19 * nkv
    N = (19 * nkv + 1) * 128
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    n0 = head.to(tl.int64) * 128
    # One token's tile loads the epilogue's inputs before the GEMM or the partials, so their round trips
    # (positions, then cos/sin) overlap them instead of adding to the end of the tile's last program.
    # Wider tiles load them in the epilogue: held through the mainloop they cost the 64-row tile its
    # last registers (measured 8% slower at M 64 on the H200). A previous kernel may write them: after
    # gdc_wait, unless INPUTS_BEFORE_WAIT says the kernel before this one triggered it past its own wait.
    if BLOCK_M == 1 and INPUTS_BEFORE_WAIT:
        w, cs, slot = _load_epilogue_inputs(
            head, rows, row_mask, pos_ptr, cs_ptr, max_pos, qw_ptr, kw_ptr, iqw_ptr, ikw_ptr, slot_ptr, islot_ptr,
            nkv, BLOCK_M,
        )
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    if BLOCK_M == 1 and not INPUTS_BEFORE_WAIT:
        w, cs, slot = _load_epilogue_inputs(
            head, rows, row_mask, pos_ptr, cs_ptr, max_pos, qw_ptr, kw_ptr, iqw_ptr, ikw_ptr, slot_ptr, islot_ptr,
            nkv, BLOCK_M,
        )
    last = True  # this program holds the full accumulator and writes the outputs
    kid = tl.program_id(2)
    tile_id = pid_m * (19 * nkv + 1) + head
    # this program's workspace slot: after the split-K combine, 2..32-row tiles stage NVFP4 rows in it
    stage = ws_ptr + (tile_id.to(tl.int64) * SPLIT_K + kid) * (BLOCK_M * 128)
    if ACC_MODE == 0:
        cols = n0 + tl.arange(0, 128)
        acc = tl.zeros((BLOCK_M, 128), tl.float32)
        K_SPLIT: tl.constexpr = K // SPLIT_K
        if BLOCK_M == 1:
            acc = mxfp8_gemv_mainloop(
                acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, cols < N, kid * K_SPLIT,
                K, K_SPLIT // BLOCK_K, 128, BLOCK_K, STAGES,
            )
        else:
            acc = mxfp8_mainloop(
                acc, x_ptr, xs_ptr, w_ptr, wsc_ptr, rows, row_mask, cols, cols < N, kid * K_SPLIT,
                K, K_SPLIT // BLOCK_K, BLOCK_M, 128, BLOCK_K, STAGES, F16_OPERANDS=F16_OPERANDS,
            )
        if SPLIT_K > 1:
            acc, last = split_k_combine(acc, ws_ptr, counter_ptr, tile_id, kid, row_mask, SPLIT_K, BLOCK_M, 128)
    else:
        src = acc_ptr + head.to(tl.int64) * stride_head + rows[:, None] * stride_acc + tl.arange(0, 128)[None, :]
        if NUM_PARTIALS == 1:
            acc = to_f32(tl.load(src, mask=row_mask[:, None], other=0.0))
        else:
            # in split order from +0.0: the sums the GEMM's own split-K combine would have made, bit for bit
            acc = tl.zeros((BLOCK_M, 128), tl.float32)
            for s in tl.static_range(NUM_PARTIALS):
                acc += tl.load(src + s * stride_split, mask=row_mask[:, None], other=0.0)
    if USE_PDL:
        # Here rather than before the wait: that let a next GEMM stream more of its weights beside this launch
        # (0.8-1.5 us back to back) but gained nothing in the MiniMax step (H100, log run 306).
        tl.extra.cuda.gdc_launch_dependents()

    if last:  # the other split programs only contributed their partial
        if BLOCK_M > 1:
            w, cs, slot = _load_epilogue_inputs(
                head, rows, row_mask, pos_ptr, cs_ptr, max_pos, qw_ptr, kw_ptr, iqw_ptr, ikw_ptr, slot_ptr,
                islot_ptr, nkv, BLOCK_M,
            )
        x, y, z = _split_head(acc, BLOCK_M)
        d32 = tl.arange(0, 32)[None, :]
        d64 = tl.arange(0, 64)[None, :]
        m2 = row_mask[:, None]
        if head < K_START:
            x, y, z = _gemma_rms_norm(x, y, z, w, eps, BLOCK_M)
            x, y = _rope(x, y, cs, BLOCK_M)
            q_off = rows[:, None] * (16 * nkv * 128) + n0
            if HAS_Q:
                tl.store(q_ptr + q_off + d32, to_bf16_rne(x), mask=m2)
                tl.store(q_ptr + q_off + 32 + d32, to_bf16_rne(y), mask=m2)
                tl.store(q_ptr + q_off + 64 + d64, to_bf16_rne(z), mask=m2)
            if HAS_QFP8:
                tl.store(qf_ptr + q_off + d32, e4m3_saturate_bits(x * inv_q_fp8_scale), mask=m2)
                tl.store(qf_ptr + q_off + 32 + d32, e4m3_saturate_bits(y * inv_q_fp8_scale), mask=m2)
                tl.store(qf_ptr + q_off + 64 + d64, e4m3_saturate_bits(z * inv_q_fp8_scale), mask=m2)
        elif head < V_START:
            x, y, z = _gemma_rms_norm(x, y, z, w, eps, BLOCK_M)
            x, y = _rope(x, y, cs, BLOCK_M)
            _store_head_nvfp4(kv_ptr, kv_page_stride, kv_slots, (2 * (head - K_START)) * (block_size * 72), slot,
                              slot_ptr, stage, pid_m.to(tl.int64) * BLOCK_M, M, x, y, z, inv_k_scale, block_size,
                              False, BLOCK_M)
        elif head < IQ_START:
            _store_head_nvfp4(kv_ptr, kv_page_stride, kv_slots, (2 * (head - V_START) + 1) * (block_size * 72), slot,
                              slot_ptr, stage, pid_m.to(tl.int64) * BLOCK_M, M, x, y, z, inv_v_scale, block_size,
                              True, BLOCK_M)
        elif head < IK_START:
            x, y, z = _gemma_rms_norm(x, y, z, w, eps, BLOCK_M)
            x, y = _rope(x, y, cs, BLOCK_M)
            iq_off = rows[:, None] * (nkv * 128) + (head - IQ_START) * 128
            tl.store(iq_ptr + iq_off + d32, e4m3_saturate_bits(x), mask=m2)
            tl.store(iq_ptr + iq_off + 32 + d32, e4m3_saturate_bits(y), mask=m2)
            tl.store(iq_ptr + iq_off + 64 + d64, e4m3_saturate_bits(z), mask=m2)
        else:
            x, y, z = _gemma_rms_norm(x, y, z, w, eps, BLOCK_M)
            x, y = _rope(x, y, cs, BLOCK_M)
            _store_head_nvfp4(idx_ptr, idx_page_stride, idx_slots, 0, slot, islot_ptr,
                              stage, pid_m.to(tl.int64) * BLOCK_M, M, x, y, z, 1.0, block_size, False, BLOCK_M)


def qkv_scratch(device: torch.device, floats: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (workspace, counters) of the fused op's launches needing ``floats`` workspace elements
    (:func:`seam.kernels.qkv_config.workspace_floats`); None where they need none (nor counters). Every counted
    tile has at least 128 floats of partials, so floats / 128 counters suffice."""
    return gemm_scratch(device, floats, floats // 128) if floats else None


def _extent_in(t: torch.Tensor, buf: torch.Tensor) -> int:
    """The leading elements of ``buf`` that ``t`` (non-empty, ``buf``'s dtype) reaches into; 0 where they share
    no storage."""
    if t.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
        return 0
    last = t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return max(0, last + 1 - buf.storage_offset())


def launch_qkv_epilogue(
    *,
    xq: torch.Tensor | None,
    xsf: torch.Tensor | None,
    wq: torch.Tensor | None,
    wsf: torch.Tensor | None,
    acc: torch.Tensor | None,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    norm_weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    eps: float,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: torch.Tensor | None,
    q_fp8_out: torch.Tensor | None,
    inv_scales: tuple[float, float, float],
    nkv: int,
    tile: Tile | None,
    a_deq: torch.Tensor | None = None,
) -> None:
    """Launch on validated inputs: the GEMM (``acc`` None) or a given accumulator [M, N] (``xq`` None).
    ``tile`` None: picked here for M (``pick_qkv_tile``, or on a given accumulator
    :func:`seam.kernels.qkv_config.epilogue_tile`), at call time.
    ``a_deq``: A_deq of ``xq`` (``seam.formats.a_deq``), which the GEMM reads in its place where
    :func:`seam.kernels.mxfp8_gemm.launch_mxfp8_linear` says.

    A ``wgmma`` or ``bf16_mm`` tile (``pick_qkv_tile``) runs that GEMM first, then this kernel with
    the tile :func:`seam.kernels.qkv_config.epilogue_tile_after` gives on what it wrote: the Gluon kernel's
    split-K partials (in the workspace, with any rows this kernel stages past them:
    :func:`seam.kernels.qkv_config.workspace_floats`; this kernel sums them in split order), or the prefill
    GEMM's fp32 accumulator (4 * M * N bytes, temporary). Where TMA cannot read an operand as is, the one-kernel
    path runs instead, on its tl tile. ``acc`` may be such partials, [heads, splits, rows >= M, 128] fp32.
    ``inv_scales`` are the host fp32 reciprocals (1/q_fp8_scale, 1/k_scale, 1/v_scale).
    """
    m = positions.shape[0]
    if m == 0:
        return
    use_pdl = runtime.supports_pdl(positions.device)
    heads = 19 * nkv + 1
    if tile is None and acc is not None:
        tile = epilogue_tile(m)
    elif acc is None and (tile is None or not covers(tile, m, partials=True)):  # traced at fewer tokens (covers)
        tile = pick_qkv_tile(m, wq.shape[0], wq.shape[1], positions.device)
    gluon_partials = False  # the decode GEMM launched here, which triggers this kernel past its own wait
    # one workspace for the launch(es) here: the Gluon GEMM's partials first, any staged rows of the epilogue after
    scratch = qkv_scratch(positions.device, workspace_floats(m, tile, heads))
    if acc is None and (tile.wgmma or tile.bf16_mm):
        n, k = wq.shape
        if tile.bf16_mm:
            acc = torch.empty((m, n), dtype=torch.float32, device=positions.device)
            launch_mxfp8_linear(xq, xsf, wq, wsf, acc, tile, a_deq)
        else:
            # its partials (every token tile's rows) land in scratch (the workspace reserved above is the one it
            # takes)
            acc = launch_gluon(xq, xsf, wq, wsf, None, tile, use_pdl, partials=True, a_deq=a_deq)
            # the decode kernel's PARTIALS mode triggers this launch only past its own wait (mxfp8_wgmma, and
            # mxfp8_wgmma_ws's producer warp); the
            # ring kernel triggers before its wait, so its epilogue reads its inputs after its own
            gluon_partials = acc is not None and not tile.ring
            if acc is None:  # an operand TMA cannot read as is
                tile = pick_qkv_tile(m, n, k, positions.device, tl_only=True)
                scratch = qkv_scratch(positions.device, workspace_floats(m, tile, heads))
        if acc is not None:
            xq = xsf = wq = wsf = None
            tile = epilogue_tile_after(tile)  # one per GEMM tile (qkv_warmup compiles it)
    from_acc = acc is not None
    if from_acc and acc.dim() == 4:  # the Gluon GEMM's partials
        stride_head, stride_split, stride_acc, partials = acc.stride(0), acc.stride(1), acc.stride(2), acc.shape[1]
    else:
        stride_head, stride_split, stride_acc, partials = 128, 0, acc.stride(0) if from_acc else 0, 1
    k = 128 if from_acc else xq.shape[1]
    grid = (triton.cdiv(m, tile.block_m), heads, tile.split_k)
    # unused pointer slots get a tensor of the right kind so the signature stays fixed
    dummy = index_q_out.view(torch.uint8)
    work, counters = dummy, dummy
    if needs_workspace(tile):
        # rows staged past any partials the accumulator keeps in the workspace: other heads' programs may
        # still be reading those
        need = grid[0] * grid[1] * grid[2] * tile.block_m * 128  # its split-K partials or staged rows
        work, counters = scratch
        past = _extent_in(acc, work) if from_acc else 0
        if past + need > work.numel():
            work, counters = qkv_scratch(positions.device, past + need)
            past = _extent_in(acc, work)
        work = work[past:]
    qkv_epilogue_kernel[grid](
        dummy if from_acc else xq.view(torch.uint8),
        dummy if from_acc else xsf,
        dummy if from_acc else wq.view(torch.uint8),
        dummy if from_acc else wsf,
        acc if from_acc else dummy,
        stride_acc,
        stride_head,
        stride_split,
        positions,
        cos_sin_cache,
        cos_sin_cache.shape[0],
        *norm_weights,
        slot_mapping,
        index_slot_mapping,
        work,
        counters,
        kv_cache,
        index_cache,
        index_q_out.view(torch.uint8),
        q_out if q_out is not None else dummy,
        q_fp8_out.view(torch.uint8) if q_fp8_out is not None else dummy,
        m,
        eps,
        *inv_scales,
        kv_cache.stride(0),
        index_cache.stride(0),
        kv_cache.shape[2],
        kv_cache.shape[0] * kv_cache.shape[2],
        index_cache.shape[0] * index_cache.shape[1],
        K=k,
        nkv=nkv,
        HAS_Q=q_out is not None,
        HAS_QFP8=q_fp8_out is not None,
        ACC_MODE=int(from_acc),
        NUM_PARTIALS=partials,
        BLOCK_M=tile.block_m,
        BLOCK_K=tile.block_k,
        SPLIT_K=tile.split_k,
        STAGES=tile.num_stages,
        F16_OPERANDS=tile.f16_operands and not from_acc,
        USE_PDL=use_pdl,
        INPUTS_BEFORE_WAIT=gluon_partials,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
        enable_fp_fusion=False,
        launch_pdl=use_pdl,
        maxnreg=tile.max_registers,
    )
