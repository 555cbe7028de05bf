"""mHC post-mix + collapse + RMSNorm (+MXFP8): the epilogue of Consumer B (``docs/spec/lamport.md``).

Per token (row) of an already-reduced BF16 input ``reduced [M, hidden]``:

    mixed_j   = f32(reduced) * post[j] + sum_i f32(residual[i]) * comb[i, j]    (i in order)
    new_res_j = bf16(mixed_j)                                  -> residual_out [M, hc, hidden]
    collapse  = bf16(sum_j f32(new_res_j) * pre[j])            (j in order, from +0.0)
    normed    = bf16(f32(collapse) * rsqrt(sum(collapse^2) / hidden + eps) * f32(w))
    values, scales = MXFP8(normed), swizzled 128x4, padding scale rows zero   (optional)

Bytes per row: (hc + 1) * 2 * hidden read, hc * 2 * hidden + 2 * hidden (+ hidden + hidden/32)
written. The mix and the collapse are per column; only the RMS needs the whole row, before
any normed element. ``seam.kernels.mhc_config.launch_shape`` picks one of two grids (the launch
rules live there):

* One program per row. When the row's [hc, hidden] fp32 tile fits the registers it is one
  chunk and the collapse stays in registers; otherwise the program walks the row in chunks
  of ``BLOCK_H`` columns twice: pass 1 mixes, stores the new streams and parks the BF16
  collapse in the ``layer_input`` row (its final home, so the round trip stays in L2 and
  costs no extra buffer), pass 2 normalizes it in place and quantizes.
* Column split, for decode M, where one program per row would leave most SMs idle and
  each row's bytes and arithmetic sit on one SM: a (row, chunk) grid of ``SPLIT`` programs
  per row, each running pass 1 on its ``BLOCK_H`` columns and storing its fp32 sum of
  squares to a workspace. The row's last program to arrive at its counter (acq_rel, the
  pattern of the split-K GEMM's ``split_k_combine``) sums the partials in chunk order,
  so the result does not depend on arrival order, and runs pass 2 for the whole row
  (:func:`mhc_split_rms_norm`). Extra traffic per row: the collapse's L2 round trip (as
  in a walked row), 4 * SPLIT bytes of workspace and an atomic on a 4-byte counter. The
  sum-of-squares order follows the grid, so a token's ``layer_input`` may differ by the
  spec's 1 ulp between Ms of different grids; ``residual_out`` never does.

post/pre are loaded once per program, the streams of a chunk as one [hc, BLOCK_H] tile
(:func:`take_row` picks a source out of it bit for bit), so the Lamport consumer can issue
them before it waits on its peers. The ``@triton.jit`` helpers below are shared with the
Lamport consumer (``seam.kernels.lamport_mhc``), which feeds pass 1 from the mailbox
instead of memory.

Rounding points sit between every product and its add, so launches pass
``enable_fp_fusion=False``; all fp32 -> BF16/E4M3 roundings go through ``numerics``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.mhc_config import PAD_ROWS, grid_rows, launch_shape
from seam.kernels.numerics import bf16_to_f32, mxfp8_quantize_tile, round_bf16, swizzled_scale_offset, to_bf16_rne
from seam.kernels.workspace import split_workspace


@triton.jit
def take_row(tile, idx, i):
    """Row ``i`` of a 2-D fp32 tile, bit for bit (sign of zero and NaN payload kept).

    An integer sum of the row's bits and zeros: exact in any reduction order, where a
    float sum would turn -0.0 into +0.0. For the [HC, BLOCK_H] tiles here Triton keeps the
    HC rows of a column in one thread, so the sum is in-thread (no barrier; checked in the
    sm_90 TTGIR).
    """
    bits = tl.where(idx[:, None] == i, tile.to(tl.int32, bitcast=True), 0)
    return tl.sum(bits, axis=0).to(tl.float32, bitcast=True)


@triton.jit
def mhc_load_mixes(
    post_ptr,  # fp32 [M, HC]
    pre_ptr,  # fp32 [M, HC] (read only when WRITE_LAYER_INPUT)
    row,  # int64 token index
    HC: tl.constexpr,
    WRITE_LAYER_INPUT: tl.constexpr,
):
    """(post [HC], pre [HC]) of one token; pre = post when unused.

    comb is read per source inside :func:`mhc_mix_chunk` instead: picking a column out of
    an [HC, HC] tile would be a cross-thread reduction (a barrier) per source and chunk,
    while the direct [HC] loads hit L1 after the first chunk.
    """
    idx = tl.arange(0, HC)
    post = tl.load(post_ptr + row * HC + idx)
    if WRITE_LAYER_INPUT:
        pre = tl.load(pre_ptr + row * HC + idx)
    else:
        pre = post
    return post, pre


@triton.jit
def mhc_load_streams(
    residual_ptr,  # bf16 [M, HC, H]
    row,  # int64
    cols,  # int32 [BLOCK_H] column indices of this chunk
    mask,  # cols < H
    H: tl.constexpr,
    HC: tl.constexpr,
):
    """The chunk of every residual stream as fp32 [HC, BLOCK_H] (masked lanes 0)."""
    idx = tl.arange(0, HC)
    ptrs = residual_ptr + row * (HC * H) + idx[:, None] * H + cols[None, :]
    return bf16_to_f32(tl.load(ptrs, mask=mask[None, :], other=0.0))


@triton.jit
def mhc_mix_chunk(
    reduced,  # fp32 [BLOCK_H] holding BF16 values: the all-reduced sublayer output
    streams,  # fp32 [HC, BLOCK_H] from mhc_load_streams
    post,  # fp32 [HC]
    comb_ptr,  # fp32 [M, HC, HC], [source, target]
    pre,  # fp32 [HC] (unused unless WRITE_LAYER_INPUT)
    residual_out_ptr,  # bf16 [M, HC, H]
    row,  # int64 token index
    cols,  # int32 [BLOCK_H]
    mask,  # cols < H
    H: tl.constexpr,
    HC: tl.constexpr,
    WRITE_LAYER_INPUT: tl.constexpr,
):
    """Post-mix one chunk of a row, store the new streams; return the BF16-valued collapse (fp32).

    Returns zeros when not WRITE_LAYER_INPUT (the residual-only variant has no collapse);
    masked lanes give collapse 0.
    """
    idx = tl.arange(0, HC)
    # Tile [target j, column]: the post term first, then sources i in order, each product
    # rounded to fp32 before its add (enable_fp_fusion=False at launch).
    mixed = reduced[None, :] * post[:, None]
    for i in tl.static_range(HC):
        comb_i = tl.load(comb_ptr + row * (HC * HC) + i * HC + idx)
        mixed = mixed + take_row(streams, idx, i)[None, :] * comb_i[:, None]
    new_res = to_bf16_rne(mixed)
    tl.store(residual_out_ptr + row * (HC * H) + idx[:, None] * H + cols[None, :], new_res, mask=mask[None, :])

    collapse = tl.zeros_like(reduced)
    if WRITE_LAYER_INPUT:
        prod = bf16_to_f32(new_res) * pre[:, None]
        for j in tl.static_range(HC):
            collapse = collapse + take_row(prod, idx, j)
        collapse = round_bf16(collapse)
    return collapse


@triton.jit
def mhc_norm_chunk(
    collapse,  # fp32 [BLOCK_H] holding BF16 values
    inv_rms,  # fp32 scalar
    weight_ptr,  # bf16 [H] RMSNorm weight (plain)
    layer_input_ptr,  # bf16 [M, H]
    values_ptr,  # uint8 [M, H] (E4M3 bits), used when QUANTIZE
    scales_ptr,  # uint8 swizzled scales, used when QUANTIZE
    row,  # int64
    col0,  # first column of the chunk (a multiple of BLOCK_H)
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,
    QUANTIZE: tl.constexpr,
):
    """normed = bf16(collapse * inv_rms * w) for one chunk; store it (and its MXFP8 blocks)."""
    cols = col0 + tl.arange(0, BLOCK_H)
    mask = cols < H
    w = bf16_to_f32(tl.load(weight_ptr + cols, mask=mask, other=0.0))
    normed = to_bf16_rne(collapse * inv_rms * w)
    tl.store(layer_input_ptr + row * H + cols, normed, mask=mask)
    if QUANTIZE:
        values, scales = mxfp8_quantize_tile(bf16_to_f32(normed)[None, :], 1, BLOCK_H)
        tl.store(values_ptr + row * H + cols[None, :], values, mask=mask[None, :])
        scols = col0 // 32 + tl.arange(0, BLOCK_H // 32)
        # Up to the padded scale columns P (H / 32 rounded up to 4): H is a multiple of 32 and chunk
        # edges of 128, so a 32-block is wholly inside or outside the row, and the blocks past it are
        # masked zeros, whose scale byte 0 is the padding's value.
        P: tl.constexpr = (H // 32 + 3) // 4 * 4
        tl.store(scales_ptr + swizzled_scale_offset(row, scols, P)[None, :], scales, mask=(scols < P)[None, :])


@triton.jit
def mxfp8_zero_scale_padding(
    scales_ptr,  # uint8 swizzled scales of M rows
    M,
    pid,  # this program's index among num_programs
    num_programs,
    SCALE_COLS: tl.constexpr,  # the padded scale columns, (H // 32) rounded up to 4
    SCALE_BLOCK: tl.constexpr,  # next power of two >= SCALE_COLS
):
    """Zero the swizzled scale bytes of padding rows [M, ceil(M/128)*128), spread over the grid."""
    m_pad = (M + 127) // 128 * 128
    r_off = tl.arange(0, PAD_ROWS)
    s = tl.arange(0, SCALE_BLOCK)
    zeros = tl.zeros((PAD_ROWS, SCALE_BLOCK), tl.uint8)
    start = M + pid * PAD_ROWS
    while start < m_pad:
        r = start + r_off
        mask = (r[:, None] < m_pad) & (s[None, :] < SCALE_COLS)
        tl.store(scales_ptr + swizzled_scale_offset(r[:, None], s[None, :], SCALE_COLS), zeros, mask=mask)
        start += num_programs * PAD_ROWS


@triton.jit
def mhc_inv_rms(sumsq, eps, H: tl.constexpr):
    """rsqrt(sumsq / H + eps) from the row's sum of collapse^2.

    A tolerance step (lamport.md: normed within 1 BF16 ulp): callers sum lane-parallel (and
    per chunk in the split mode); the GPU's approximate division and rsqrt.
    """
    return tl.math.rsqrt(sumsq / H + eps)


@triton.jit
def mhc_rms_norm_row(
    inv_rms,  # fp32 scalar
    weight_ptr,
    layer_input_ptr,  # bf16 [M, H], holding the row's BF16 collapse (pass 1)
    values_ptr,
    scales_ptr,
    row,  # int64
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,
    QUANTIZE: tl.constexpr,
):
    """Pass 2: normalize the row's collapse parked in ``layer_input`` in place (+MXFP8), BLOCK_H columns a step."""
    # This program's pass 1 collapse stores must be visible to all of its threads.
    tl.debug_barrier()
    for col0 in range(0, H, BLOCK_H):
        cols = col0 + tl.arange(0, BLOCK_H)
        # .cg: read at L2, where (split mode) the other programs' collapse stores landed
        collapse = bf16_to_f32(
            tl.load(layer_input_ptr + row * H + cols, mask=cols < H, other=0.0, cache_modifier=".cg")
        )
        mhc_norm_chunk(
            collapse, inv_rms, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row, col0, H, BLOCK_H, QUANTIZE
        )


@triton.jit
def mhc_split_rms_norm(
    collapse,  # fp32 [BLOCK_H] holding BF16 values: this program's chunk of the row
    eps,
    weight_ptr,
    layer_input_ptr,  # bf16 [M, H]
    values_ptr,
    scales_ptr,
    ws_ptr,  # fp32 [M, SPLIT] partial sums of squares
    counter_ptr,  # int32 [M] arrivals per row, zero between launches
    row,  # int64
    chunk,  # this program's chunk of the row
    cols,
    mask,
    H: tl.constexpr,
    SPLIT: tl.constexpr,
    NORM_BLOCK: tl.constexpr,  # pass 2 step of the last program
    QUANTIZE: tl.constexpr,
):
    """Split mode: park this chunk's collapse and its sum of squares; the row's last program
    to arrive sums the partials in chunk order, normalizes the whole row (+MXFP8) and re-arms
    the row's counter for the next launch."""
    tl.store(layer_input_ptr + row * H + cols, to_bf16_rne(collapse), mask=mask)
    tl.store(ws_ptr + row * SPLIT + chunk, tl.sum(collapse * collapse, axis=0))
    # Every thread's stores are issued before the release of the arrival count; the acquire
    # makes the other programs' stores (released the same way) visible to the last one.
    tl.debug_barrier()
    if tl.atomic_add(counter_ptr + row, 1, sem="acq_rel") == SPLIT - 1:
        sumsq = 0.0
        for c in tl.static_range(SPLIT):
            # .cg: read at L2, where the other programs' partials landed
            sumsq += tl.load(ws_ptr + row * SPLIT + c, cache_modifier=".cg")
        tl.store(counter_ptr + row, 0)
        inv_rms = mhc_inv_rms(sumsq, eps, H)
        mhc_rms_norm_row(
            inv_rms, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row, H, NORM_BLOCK, QUANTIZE
        )


@triton.jit
def mhc_norm_one_chunk(
    collapse,  # fp32 [BLOCK_H] holding BF16 values: the row (SPLIT 1) or chunk ``chunk`` of it
    eps,
    weight_ptr,
    layer_input_ptr,
    values_ptr,
    scales_ptr,
    ws_ptr,
    counter_ptr,
    row,
    chunk,
    cols,
    mask,
    H: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NORM_BLOCK: tl.constexpr,
    QUANTIZE: tl.constexpr,
):
    """Pass 2 of a program that holds one chunk: the whole row normalized from registers, or
    (column split) the row's combine (:func:`mhc_split_rms_norm`)."""
    if SPLIT > 1:
        mhc_split_rms_norm(
            collapse, eps, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, ws_ptr, counter_ptr,
            row, chunk, cols, mask, H, SPLIT, NORM_BLOCK, QUANTIZE,
        )
    else:
        inv_rms = mhc_inv_rms(tl.sum(collapse * collapse, axis=0), eps, H)
        mhc_norm_chunk(
            collapse, inv_rms, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row, 0, H, BLOCK_H, QUANTIZE
        )


@triton.jit
def mhc_stage_layer_input(collapse, sumsq, layer_input_ptr, row, cols, mask, H: tl.constexpr):
    """Pass 1 of a long row (several chunks per program), one chunk: store its BF16 layer input
    and return ``sumsq`` plus its squares (fp32 [BLOCK_H] partial sums, reduced at the end)."""
    tl.store(layer_input_ptr + row * H + cols, to_bf16_rne(collapse), mask=mask)
    return sumsq + collapse * collapse


@triton.jit
def mhc_norm_long_row(
    sumsq, eps, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row,
    H: tl.constexpr, NORM_BLOCK: tl.constexpr, QUANTIZE: tl.constexpr,
):
    """Pass 2 of a long row: normalize the layer input that :func:`mhc_stage_layer_input` stored."""
    inv_rms = mhc_inv_rms(tl.sum(sumsq, axis=0), eps, H)
    mhc_rms_norm_row(inv_rms, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row, H, NORM_BLOCK, QUANTIZE)


@triton.jit
def mhc_reduced_chunk(
    x_ptr,  # bf16 [M, H] (RANKS == 0) or [RANKS, M, H]
    row,  # int64
    cols,
    mask,
    M,
    H: tl.constexpr,
    RANKS: tl.constexpr,
):
    """The reduced input of one chunk as fp32 holding BF16 values."""
    if RANKS == 0:
        reduced = bf16_to_f32(tl.load(x_ptr + row * H + cols, mask=mask, other=0.0))
    else:
        # lamport.md consumer step 3: fp32 sum in rank order from +0.0, then BF16, so the
        # fallback returns exactly what the Lamport consumer computes.
        acc = tl.zeros(cols.shape, tl.float32)
        for p in tl.static_range(RANKS):
            acc = acc + bf16_to_f32(tl.load(x_ptr + (p * M + row) * H + cols, mask=mask, other=0.0))
        reduced = round_bf16(acc)
    return reduced


@triton.jit
def mhc_post_collapse_rms_norm_kernel(
    # pointers
    x_ptr,  # bf16 [M, H] all-reduced sublayer output (RANKS == 0), or [RANKS, M, H] partials
    residual_ptr,  # bf16 [M, HC, H]
    post_ptr,  # fp32 [M, HC]
    comb_ptr,  # fp32 [M, HC, HC]
    pre_ptr,  # fp32 [M, HC] or None (residual only)
    weight_ptr,  # bf16 [H] or None (residual only)
    residual_out_ptr,  # bf16 [M, HC, H]
    layer_input_ptr,  # bf16 [M, H] or None (residual only)
    values_ptr,  # uint8 [M, H] or None (no MXFP8)
    scales_ptr,  # uint8 [mxfp8_scale_numel(M, H)] or None
    ws_ptr,  # fp32 [M, SPLIT] or None (SPLIT == 1 or residual only)
    counter_ptr,  # int32 [M], zero between launches, or None (as ws_ptr)
    # sizes and scalars
    M,
    eps,
    # constexprs
    H: tl.constexpr,  # hidden, a multiple of 32
    HC: tl.constexpr,  # streams, a power of two
    RANKS: tl.constexpr,  # 0: x is reduced; n: sum n rank partials first (the fallback after an all-gather)
    BLOCK_H: tl.constexpr,  # chunk width, a power of two >= 128
    SPLIT: tl.constexpr,  # programs per row (grid axis 1); > 1: column split, one chunk each
    NORM_BLOCK: tl.constexpr,  # pass 2 step
    WRITE_LAYER_INPUT: tl.constexpr,
    QUANTIZE: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,  # next power of two >= the padded scale columns (padding-row stores)
    USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    row = pid.to(tl.int64)
    if USE_PDL:
        # Every input may come from the previous kernel (the all-reduce, the mHC pre).
        tl.extra.cuda.gdc_wait()
    if pid < M:
        post, pre = mhc_load_mixes(post_ptr, pre_ptr, row, HC, WRITE_LAYER_INPUT)
        if SPLIT > 1 or H <= BLOCK_H:
            # One chunk per program: the whole row, or (split) chunk program_id(1) of it.
            chunk = tl.program_id(1)
            cols = chunk * BLOCK_H + tl.arange(0, BLOCK_H)
            mask = cols < H
            streams = mhc_load_streams(residual_ptr, row, cols, mask, H, HC)
            reduced = mhc_reduced_chunk(x_ptr, row, cols, mask, M, H, RANKS)
            collapse = mhc_mix_chunk(
                reduced, streams, post, comb_ptr, pre, residual_out_ptr, row, cols, mask, H, HC, WRITE_LAYER_INPUT
            )
            if USE_PDL:
                tl.extra.cuda.gdc_launch_dependents()
            if WRITE_LAYER_INPUT:
                mhc_norm_one_chunk(
                    collapse, eps, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, ws_ptr, counter_ptr,
                    row, chunk, cols, mask, H, SPLIT, BLOCK_H, NORM_BLOCK, QUANTIZE,
                )
        else:
            sumsq = tl.zeros((BLOCK_H,), tl.float32)
            for col0 in range(0, H, BLOCK_H):
                cols = col0 + tl.arange(0, BLOCK_H)
                mask = cols < H
                streams = mhc_load_streams(residual_ptr, row, cols, mask, H, HC)
                reduced = mhc_reduced_chunk(x_ptr, row, cols, mask, M, H, RANKS)
                collapse = mhc_mix_chunk(
                    reduced, streams, post, comb_ptr, pre, residual_out_ptr, row, cols, mask, H, HC, WRITE_LAYER_INPUT
                )
                if WRITE_LAYER_INPUT:
                    sumsq = mhc_stage_layer_input(collapse, sumsq, layer_input_ptr, row, cols, mask, H)
            if USE_PDL:
                tl.extra.cuda.gdc_launch_dependents()
            if WRITE_LAYER_INPUT:
                mhc_norm_long_row(
                    sumsq, eps, weight_ptr, layer_input_ptr, values_ptr, scales_ptr, row, H, NORM_BLOCK, QUANTIZE
                )
    elif QUANTIZE:
        # Programs past M zero the swizzle padding scale rows, PAD_ROWS each (one program for
        # all of them is a serial tail of several microseconds at M = 1).
        mxfp8_zero_scale_padding(
            scales_ptr, M, (pid - M) * SPLIT + tl.program_id(1), (tl.num_programs(0) - M) * SPLIT,
            (H // 32 + 3) // 4 * 4, SCALE_BLOCK,
        )


def new_split_scratch(rows: int, split: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 workspace [rows * split], int32 arrival counters [rows], zero) for split launches
    of up to ``rows`` rows and ``split`` programs per row."""
    return (
        torch.empty(rows * split, dtype=torch.float32, device=device),
        torch.zeros(rows, dtype=torch.int32, device=device),
    )


def split_scratch(device: torch.device, rows: int, split: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-device split-mode scratch of the standalone op (fp32 workspace of ``rows * split``,
    int32 counters of ``rows``), grown on demand (``seam.kernels.workspace``: one allocation serves
    later launches and graph replays, one stream).

    Every launch of the standalone op asks for it, so the first eager call on a device (any M)
    allocates it; a graph capture that would have to allocate or grow it raises instead.

    Raises:
        RuntimeError: the scratch must be allocated or grown while the current CUDA stream
            is capturing a graph.
    """
    # Grown to at least the split mode's largest M (half the SMs) at hidden 8192.
    return split_workspace(
        "mhc", device, rows * split, rows, grow_partials_to=max(rows, 128) * max(split, 64),
        grow_counters_to=max(rows, 128),
        capture_error="seam.mhc_post_collapse_rms_norm: its column-split scratch on {device} must be allocated "
        "before CUDA-graph capture: make one eager call on this device first",
    )


def launch_mhc_post_collapse_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    pre: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    norm_eps: float,
    residual_out: torch.Tensor,
    layer_input: torch.Tensor | None,
    values: torch.Tensor | None,
    scales: torch.Tensor | None,
) -> None:
    """One launch of the fused epilogue on validated, contiguous inputs (M >= 1).

    ``x`` is the reduced BF16 [M, hidden], or BF16 [TP, M, hidden] rank partials that the
    kernel sums in rank order first (the fallback's all-gathered contributions).
    """
    m, hc, hidden = residual.shape
    ranks = x.shape[0] if x.dim() == 3 else 0
    shape = launch_shape(m, hidden, hc, residual.device)
    # Asked for on every launch, so that the first eager call allocates it (see split_scratch).
    ws, counters = split_scratch(residual.device, m if shape.split > 1 else 1, shape.split)
    if shape.split == 1 or layer_input is None:
        ws = counters = None
    quantize = values is not None
    use_pdl = runtime.supports_pdl(residual.device)
    mhc_post_collapse_rms_norm_kernel[(grid_rows(m, quantize, shape.split), shape.split)](
        x,
        residual,
        post,
        comb,
        pre,
        norm_weight,
        residual_out,
        layer_input,
        values.view(torch.uint8) if quantize else None,
        scales,
        ws,
        counters,
        m,
        norm_eps,
        H=hidden,
        HC=hc,
        RANKS=ranks,
        BLOCK_H=shape.block,
        SPLIT=shape.split,
        NORM_BLOCK=shape.norm_block,
        WRITE_LAYER_INPUT=pre is not None,
        QUANTIZE=quantize,
        SCALE_BLOCK=triton.next_power_of_2(-(-hidden // 128) * 4),  # the padded scale columns
        USE_PDL=use_pdl,
        num_warps=shape.num_warps,
        enable_fp_fusion=False,
        launch_pdl=use_pdl,
    )
