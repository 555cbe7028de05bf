"""MXFP8 decode GEMM for Hopper in Gluon, warp-specialized: the streamed tiles (65-128 tokens, and 129-2048 over token
tiles) of :mod:`seam.kernels.mxfp8_wgmma`, and its 64-row tile and a 32-token tile given A_deq, with the copies and
the math in separate warps.

Same operands, products and sums as that kernel's streamed tiles (``A_STREAM``: register-A weights, K-permuted
A_deq as the shared B operand, the 64 + tail split of :data:`seam.kernels.mxfp8_wgmma.TAIL_TILES`), so the same
bytes at the same split. What differs is who waits for what:

* **A one-warp producer** (``gl.warp_specialize`` worker) issues every TMA copy: the weight tile and its scale
  chunk of each ring stage first, before the PDL wait (they do not depend on the previous kernel), then the
  A_deq rows (after the wait) into the same stage, each stage completing on one ``ready`` barrier. It refills a
  stage once both consumers have released it (``empty``, two arrivals), and never waits for an MMA.
* **Two 4-warp consumers** (the default partition and a worker) each own 64 of the program's 128 weight rows: wait
  for a stage, convert their half of the E4M3 tile to BF16 in registers, run ``wgmma`` (one warpgroup each) and
  release the stage. Neither waits for the other: in the plain decode kernel (``seam.kernels.mxfp8_wgmma``) both
  warpgroups meet at a thread barrier every step before the refill, so the slower one sets the pace of both and of
  the copy engine.
* **Each consumer stores its half as a 64-row tile of its own**: split-K partial, arrival counter and fixed-order
  combine per half-tile (``seam.kernels.wgmma_combine.store_tile`` with 64 rows: twice the counters, the same
  workspace floats), so no consumer waits for the other at the end either.

H200 (2026-12-04, ``docs/benchmarks-log.md`` runs 190-191, ``mxfp8_linear`` given A_deq, weights past L2, us,
the plain decode kernel's streamed tile / this kernel at 4 stages, the same split and bytes, at M 65 / 96 / 128):
N 2560 x K 6144 (split 6) 11.85 / 12.58 / 13.92 -> 10.97 / 12.27 / 13.74; N 4992 x 6144 (3) 19.15 / 19.46 / 21.52 -> 15.61 / 17.16 /
18.73; N 6144 x 2048 (2) 12.17 / 12.24 / 14.20 -> 10.03 / 10.97 / 12.57; N 9856 x 6144 (1) 43.43 / 45.92 / 48.27
-> 33.83 / 34.64 / 35.79; N 6144 x 4096 (2) 19.66 / 19.45 / 21.74 -> 14.88 / 16.24 / 18.25. Where programs are
short and many (N 1536 x 6144, split 11, 4-5 K steps each) it was 4-13% slower, and at N 2048 x 6144 (split 8)
mixed: the picker keeps those splits on the plain decode kernel
(:func:`seam.kernels.mxfp8_gemm_config.wgmma_warp_specialized`).

Registers: the launch caps every thread at :data:`MAX_REGISTERS` (Triton runs the three partitions on 12 warps'
worth of threads, and 384 x 168 <= 65536) and ``setmaxnreg`` then gives the consumers :data:`CONSUMER_REGISTERS`
and the producer :data:`PRODUCER_REGISTERS` (the 256-token tile: :data:`WIDEST_CONSUMER_REGISTERS` and
:data:`WIDEST_PRODUCER_REGISTERS`); every picked tile compiles without spills (``tools/sm90_resources.py``).
With ``PARTIALS`` (the fused QKV op's GEMM at 65-1024 tokens) each consumer stores its rows of the program's partial in
the plain decode kernel's layout, which the QKV epilogue sums, and the PDL trigger comes after the producer's wait, as
there. At 17-32 tokens given A_deq ``mxfp8_linear`` runs the 32-token tile here unsplit at K 512-768 on wide N
(``mxfp8_gemm_config.ws_short_k``) and from K 2048 at one-wave splits 1-3 (``mxfp8_gemm_config.ws_small_split``). At
33-64 tokens it runs the 64-row tile here where the activations come with their A_deq, and unsplit at K <= 768 without
one too (``mxfp8_gemm_config.ws_whole_k``, after a launch that writes it); at 65-128 tokens two token tiles of the
64-row tile (below K 2048, and at 97-128 tokens from it: ``mxfp8_gemm_config.two_token_tiles_split``) or its streamed
tiles (unsplit at K 512-768 on wide N: ``mxfp8_gemm_config.ws_short_k``), and at 129-384 tokens the streamed tiles over
token tiles (grid axis 1: ``MP`` tokens from ``program_id(1) * MP`` each, every token tile's half-tiles on counters and
partials of their own;
:func:`seam.kernels.mxfp8_gemm_config.pick_token_tiles`): the weights stream once per token tile as the register
operand, with no BF16 weight copy (run 201: 0.64-0.91x the prefill path's or the ring kernel's time). Its
:data:`WIDE_TILES` (128 + 8-128 tokens on two accumulators, one weight conversion for both) take 129-256 tokens
where their one-wave K split puts at least 1.5x as many programs in the wave as the token tiles'
(``pick_token_tiles``; the TP 2 QKV shape, N 4992 x K 6144, at split 3: 0.76-0.82x the token tiles' time on the
192-token tile, log run 211, 0.83-0.92x the 192-token tile's on the tile sized to M, run 235, and on the 256-token
tile at 193-256 tokens 0.95-0.97x the token tiles' on MXFP8 rows, run 237). Past 384 tokens, up to 2048, 128-, 192-
or 256-token tiles where a wave model puts them ahead of the prefill path
(:func:`seam.kernels.mxfp8_gemm_config.pick_prefill_token_tiles`; run 239: 0.68-1.03x its time).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from seam.kernels import mxfp8_wgmma
from seam.kernels.mxfp8_wgmma import (
    BLOCK_K,
    BLOCK_N,
    TAIL_TILES,
    copy_activation_step,
    copy_weight_step,
    dequantize_weight_operand,
    program_steps,
    scale_descriptor,
    tail_tokens,
    tile_layout,
)
from seam.kernels.wgmma_combine import check_combiners, store_tile

#: The wide tiles, 128 + 8, 16, 32, 64 or 128 tokens per program: a 128-token accumulator and a second one for the
#: tokens past it (the 64 + tail tiles' structure), one weight conversion for both; the second sized to the tokens past
#: 128 (``seam.kernels.mxfp8_gemm_config.wide_block_m``), so the MMAs run no more padding than 7, 15, 31 or 63 tokens.
#: The 256-token tile takes 2 ring stages (82 KB each), the others 3 or 4.
WIDE_TILES = (136, 144, 160, 192, 256)
#: The tiles (``block_m``) this kernel runs: the 32- and 64-row tiles (given A_deq), the 64 + tail tiles, the
#: 128-token tile and the :data:`WIDE_TILES`.
BLOCK_MS = (32, 64, *TAIL_TILES, 128, *WIDE_TILES)


def second_tokens(block_m: int) -> int:
    """Tokens on the tile's second accumulator: a 64 + tail tile's tail
    (:func:`seam.kernels.mxfp8_wgmma.tail_tokens`), a wide tile's tokens past 128 (:data:`WIDE_TILES`); 0 for the
    others."""
    return block_m - 128 if block_m in WIDE_TILES else tail_tokens(block_m)


#: Registers per thread at launch (12 warps: 384 x 168 <= 65536).
MAX_REGISTERS = 168
#: Registers of the consumer partitions and of the producer after ``setmaxnreg``.
CONSUMER_REGISTERS = gl.constexpr(232)
PRODUCER_REGISTERS = gl.constexpr(40)
#: The same for the 128 + 128-token tile: its consumers' two [64, 128] accumulators spill at 232 in its split-K
#: epilogue (32 bytes at split 2, sm_90, ``tools/sm90_resources.py``); its producer fits 24, the least ``setmaxnreg``
#: gives.
WIDEST_CONSUMER_REGISTERS = gl.constexpr(240)
WIDEST_PRODUCER_REGISTERS = gl.constexpr(24)
#: Warps of each consumer partition (one warpgroup: 64 weight rows on the MMA's M side).
CONSUMER_WARPS = gl.constexpr(4)

#: Registers of one consumer's 64 rows of a [BLOCK_N, BLOCK_K] E4M3 tile: the decode kernel's
#: ``WEIGHT_LAYOUT`` on one warpgroup (thread (warp w, lane 4q + j): rows 16w + q and 16w + q + 8, bytes
#: [32j, 32j + 32), one MXFP8 block per row).
HALF_WEIGHT_LAYOUT = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [8, 0]],
    lane_bases=[[0, 32], [0, 64], [1, 0], [2, 0], [4, 0]],
    warp_bases=[[16, 0], [32, 0]],
    block_bases=[],
    shape=[64, 128],
))
#: Registers of those rows' scales in the landed [32, 16] chunk: its columns 8h..8h + 7 hold rows 64h.. (the chunk
#: keeps row r's block c at (r % 32, (r // 32) * 4 + c)), as [32, 8].
HALF_SCALE_LAYOUT = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[8, 0]],
    lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
    warp_bases=[[16, 0], [0, 4]],
    block_bases=[],
    shape=[32, 8],
))


def stage_bytes(block_m: int) -> int:
    """Shared bytes of one ring stage: the E4M3 tile, its scale chunk, the A_deq rows and two barriers."""
    return BLOCK_N.value * BLOCK_K.value + 512 + block_m * BLOCK_K.value * 2 + 16


def max_stages(block_m: int, k: int, split_k: int) -> int:
    """Deepest ring a launch takes: the plain decode kernel's streamed depth limit
    (:func:`seam.kernels.mxfp8_wgmma.max_stages`), no deeper than the steps. A stage here is smaller
    (:func:`stage_bytes`), but the two consumers' epilogue scratch (their layout conversions through shared memory,
    14-16 KB) comes on top: 72 columns at 6 stages compile to 228 KB, 80 at 6 to 241 KB (sm_90, over the 227 KiB
    a block may take)."""
    return mxfp8_wgmma.max_stages(block_m, k, split_k, streamed=True)


@gluon.jit
def _consumer(w_ring, s_ring, x_ring, xt_ring, ready, empty, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, m0,
              n_steps, M, N, stride_om, HALF: gl.constexpr, MP: gl.constexpr, TAIL: gl.constexpr, STAGES: gl.constexpr,
              SPLIT_K: gl.constexpr, COMBINE: gl.constexpr, COMBINERS: gl.constexpr, BF16_MUL: gl.constexpr,
              PARTIALS: gl.constexpr):
    """Weight rows 64 * HALF.. of the program's tile (``tile``: its index among the grid's tiles, token tiles
    included; with ``PARTIALS`` its partial's index), against tokens m0..m0 + MP: every step's MMA, then their store
    (a 64-row tile of its own: index 2 * tile + HALF), or with ``PARTIALS`` their rows of the program's partial
    ([N tiles, SPLIT_K, token tiles x MP, 128], what the QKV epilogue sums; one token tile: the decode kernel's
    layout)."""
    MA: gl.constexpr = MP - TAIL
    TW: gl.constexpr = TAIL if TAIL > 0 else 8  # the tail accumulator's width (TAIL 0: unused)
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CONSUMER_WARPS, 1],
                                                  instr_shape=[16, MA, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    mma_t: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CONSUMER_WARPS, 1],
                                                    instr_shape=[16, TW, 16])
    at_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_t, k_width=2)
    acc = gl.zeros([64, MA], gl.float32, mma)
    acc_t = gl.zeros([64, TW], gl.float32, mma_t)
    for i in range(n_steps):
        stage = i % STAGES
        mbarrier.wait(ready.index(stage), (i // STAGES) & 1)
        w = w_ring.index(stage).slice(64 * HALF, 64, dim=0).load(HALF_WEIGHT_LAYOUT)
        sc = s_ring.index(stage).slice(8 * HALF, 8, dim=1).load(HALF_SCALE_LAYOUT)
        a = dequantize_weight_operand(w, sc, a_layout, BF16_MUL)
        acc = warpgroup_mma(a, x_ring.index(stage).permute((1, 0)), acc, is_async=True)
        if TAIL > 0:  # the same weights against the tail's tokens (a relabelling, checked by assert_trivial)
            acc_t = warpgroup_mma(gl.convert_layout(a, at_layout, assert_trivial=True),
                                  xt_ring.index(stage).permute((1, 0)), acc_t, is_async=True)
            acc, acc_t, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_t, a))
        else:
            acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))
        # this warpgroup's reads of the stage are done: its tile's registers fed the MMA, which has read the rows
        mbarrier.arrive(empty.index(stage), count=1)
    if PARTIALS:
        # along N, contiguous in the workspace (the MMA layout spreads a column over 8 lanes)
        EPI: gl.constexpr = gl.BlockedLayout([2, 1], [32, 1], [1, CONSUMER_WARPS], [0, 1])
        r = 64 * HALF + gl.arange(0, 64, layout=gl.SliceLayout(1, EPI))
        base = ws_ptr + tile.to(gl.int64) * (MP * BLOCK_N) + r[:, None]
        gl.store(base + gl.arange(0, MA, layout=gl.SliceLayout(0, EPI))[None, :] * BLOCK_N, gl.convert_layout(acc, EPI))
        if TAIL > 0:
            t = MA + gl.arange(0, TW, layout=gl.SliceLayout(0, EPI))
            gl.store(base + t[None, :] * BLOCK_N, gl.convert_layout(acc_t, EPI))
    else:
        store_tile(acc, acc_t, out_ptr, ws_ptr, counter_ptr, 2 * tile + HALF, kid, n0 + 64 * HALF, m0, M, N,
                   stride_om, 64, MP, TAIL, SPLIT_K, COMBINE, False, COMBINERS, CONSUMER_WARPS)


@gluon.jit
def _producer(w_desc, s_desc, x_desc, xt_desc, w_ring, s_ring, x_ring, xt_ring, ready, empty, lo, n_steps, n0, m0,
              K_STEPS: gl.constexpr, STAGES: gl.constexpr, TAIL: gl.constexpr, USE_PDL: gl.constexpr,
              PARTIALS: gl.constexpr):
    """Every TMA copy of the program: the first STAGES steps' weights before the PDL wait, their A_deq after it,
    then each later step once both consumers have released its stage."""
    nbytes: gl.constexpr = (w_desc.block_type.nbytes + s_desc.block_type.nbytes + x_desc.block_type.nbytes
                            + (xt_desc.block_type.nbytes if TAIL > 0 else 0))
    # one expect per stage for all its bytes (the barrier's one arrival): its A_deq rows land on it after the wait
    for s in gl.static_range(STAGES):
        pred = s < n_steps
        mbarrier.expect(ready.index(s), nbytes, pred=pred)
        copy_weight_step(w_desc, s_desc, w_ring, s_ring, ready.index(s), s, lo + s, n0, K_STEPS, pred)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # A_deq is the previous kernel's output
        if PARTIALS:
            # past the wait: the QKV epilogue kernel next reads its inputs before its own wait (as the decode
            # kernel's PARTIALS launch, qkv_epilogue's INPUTS_BEFORE_WAIT)
            tl.extra.cuda.gdc_launch_dependents()
    for s in gl.static_range(STAGES):
        copy_activation_step(x_desc, xt_desc, x_ring, xt_ring, ready.index(s), s, lo + s, m0, s < n_steps, TAIL)
    for i in range(STAGES, n_steps):
        stage = i % STAGES
        mbarrier.wait(empty.index(stage), ((i // STAGES) & 1) ^ 1)  # both consumers released step i - STAGES
        bar = ready.index(stage)
        mbarrier.expect(bar, nbytes)
        copy_weight_step(w_desc, s_desc, w_ring, s_ring, bar, stage, lo + i, n0, K_STEPS, True)
        copy_activation_step(x_desc, xt_desc, x_ring, xt_ring, bar, stage, lo + i, m0, True, TAIL)


@gluon.jit(do_not_specialize=["M"])
def mxfp8_linear_wgmma_ws_kernel(
    w_desc,  # E4M3 weights as uint8 [N, K], block [BLOCK_N, BLOCK_K]
    s_desc,  # swizzled weight scales as uint8 [N_pad * K / 4096, 16], block [32, 16] (one 128x4 chunk)
    x_desc,  # A_deq [M, K] BF16, K-permuted (seam.formats.a_deq), block [MP - TAIL, BLOCK_K]
    xt_desc,  # with TAIL: A_deq's rows from MP - TAIL on, block [TAIL, BLOCK_K] (else unused)
    out_ptr,  # bf16 [M, N], row stride stride_om (unused with PARTIALS)
    ws_ptr,  # fp32 split-K workspace [2 * tiles, SPLIT_K, MP, 64]; with PARTIALS the partials
    # [N tiles, SPLIT_K, token tiles x MP, 128]
    counter_ptr,  # int32 [2 * tiles] arrival counters (one per half-tile), zero between launches
    # (tiles: N tiles x token tiles; grid axis 1: the token tile, MP tokens each)
    M,
    N,
    stride_om,
    K: gl.constexpr,
    MP: gl.constexpr,  # tokens padded to the MMAs' N sides, MP - TAIL + TAIL
    TAIL: gl.constexpr,  # 64 + TAIL and the wide tiles: tokens MP - TAIL.. on a second accumulator; else 0
    SPLIT_K: gl.constexpr,
    STAGES: gl.constexpr,
    COMBINE: gl.constexpr,  # split-K partials loaded per round trip by a combining program
    COMBINERS: gl.constexpr,  # programs of a half-tile that combine its partials (store_tile)
    BF16_MUL: gl.constexpr,  # weights dequantized by one BF16 multiply per pair (bf16_mul_exact)
    USE_PDL: gl.constexpr,
    PARTIALS: gl.constexpr,  # only store each program's partial (the QKV epilogue kernel sums them)
    num_warps: gl.constexpr,  # the default partition's: one consumer's
):
    K_STEPS: gl.constexpr = K // BLOCK_K
    MA: gl.constexpr = MP - TAIL
    TW: gl.constexpr = TAIL if TAIL > 0 else 8
    tile, kid, lo, n_steps = program_steps(K_STEPS, SPLIT_K)
    n0 = tile * BLOCK_N
    m0 = gl.program_id(1) * MP
    if PARTIALS:  # the program's partial: [N tiles, SPLIT_K, token tiles x MP, 128], a head's rows contiguous
        tile = (tile * SPLIT_K + kid) * gl.num_programs(1) + gl.program_id(1)
    else:  # token tile-major: its own counters and partials
        tile += gl.program_id(1) * (gl.num_programs(0) // SPLIT_K)
    w_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    s_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, 32, 16], s_desc.layout)
    x_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, MA, BLOCK_K], x_desc.layout)
    xt_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES if TAIL > 0 else 1, TW, BLOCK_K], xt_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # one arrival per consumer
    if USE_PDL and not PARTIALS:
        # The next kernel may start now and stream its own weights: its gdc_wait still waits for all of this one.
        tl.extra.cuda.gdc_launch_dependents()
    # (Worker partitions take their constexprs only as literal tuple items, not through tuple arithmetic.)
    gl.warp_specialize([
        (_consumer, (w_ring, s_ring, x_ring, xt_ring, ready, empty, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, m0,
                     n_steps, M, N, stride_om, 0, MP, TAIL, STAGES, SPLIT_K, COMBINE, COMBINERS, BF16_MUL, PARTIALS)),
        (_consumer, (w_ring, s_ring, x_ring, xt_ring, ready, empty, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, m0,
                     n_steps, M, N, stride_om, 1, MP, TAIL, STAGES, SPLIT_K, COMBINE, COMBINERS, BF16_MUL, PARTIALS)),
        (_producer, (w_desc, s_desc, x_desc, xt_desc, w_ring, s_ring, x_ring, xt_ring, ready, empty, lo, n_steps, n0,
                     m0, K_STEPS, STAGES, TAIL, USE_PDL, PARTIALS)),
    ], [CONSUMER_WARPS, 1], [WIDEST_CONSUMER_REGISTERS if MP == 256 else CONSUMER_REGISTERS,
                             WIDEST_PRODUCER_REGISTERS if MP == 256 else PRODUCER_REGISTERS])


def launch_mxfp8_linear_wgmma_ws(
    a_deq: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor, block_m: int, split_k: int,
    stages: int, work: torch.Tensor, counters: torch.Tensor, use_pdl: bool, combine: int, *, combiners: int,
    bf16_mul: bool = False, partials: bool = False,
) -> None:
    """out[M, N] = bf16(A_deq @ W_deq^T) on a Hopper GPU, for validated operands that
    :func:`seam.kernels.mxfp8_wgmma.operands_ready` accepts: ``a_deq`` BF16 [M, K] in the decode kernel's K order
    (``seam.formats.a_deq``), ``wq`` / ``ws`` the MXFP8 weight and its swizzled scales. ``block_m``: one of
    :data:`BLOCK_MS`: the tokens per program, ceil(M / block_m) token tiles; ``stages``: the
    ring depth, 1 to :func:`max_stages`; ``work``: fp32 split-K scratch of at least ``tiles * split_k * block_m *
    128`` floats, ``counters``: int32, at least ``2 * tiles``, zero (both unused at ``split_k`` 1; tiles = ceil(N /
    128) x the token tiles); ``combine`` / ``combiners``: as the decode kernel's launcher
    (combiners per 64-row half-tile); ``bf16_mul``: dequantize by BF16 multiplies, for a weight
    :func:`seam.kernels.mxfp8_wgmma.bf16_mul_exact` accepts. With ``partials`` (the fused QKV op) ``out`` and
    ``counters`` are unused: each program stores its fp32 partial in ``work``, [N tiles, split_k, token tiles x
    block_m, 128] (split 1 too; one token tile: the decode kernel's partials layout), and the QKV epilogue kernel
    sums them.

    Raises:
        ValueError: ``block_m`` not in :data:`BLOCK_MS`, ``split_k`` not in
            [1, K / 128] (a program without steps would store before the PDL wait), ``stages`` out of range, or
            ``combiners`` out of range (:func:`seam.kernels.wgmma_combine.check_combiners`)."""
    if block_m not in BLOCK_MS:
        raise ValueError(f"block_m must be one of {BLOCK_MS}, got {block_m}")
    m, k = a_deq.shape
    n = wq.shape[0]
    if not 1 <= split_k <= k // BLOCK_K.value:
        raise ValueError(f"split_k must be in [1, K / 128 = {k // BLOCK_K.value}], got {split_k}")
    most = max_stages(block_m, k, split_k)
    if not 1 <= stages <= most:
        raise ValueError(f"stages must be in [1, {most}] at block_m {block_m}, K {k}, split_k {split_k}; got {stages}")
    check_combiners(combiners, split_k)
    bk = BLOCK_K.value
    tail = second_tokens(block_m)
    w_desc = TensorDescriptor.from_tensor(wq.view(torch.uint8), [BLOCK_N.value, bk], tile_layout(BLOCK_N.value, False))
    x_desc = TensorDescriptor.from_tensor(a_deq, [block_m - tail, bk], tile_layout(block_m - tail, True))
    xt_desc = TensorDescriptor.from_tensor(a_deq, [tail, bk], tile_layout(tail, True)) if tail else x_desc
    mxfp8_linear_wgmma_ws_kernel[(triton.cdiv(n, BLOCK_N.value) * split_k, triton.cdiv(m, block_m))](
        w_desc, scale_descriptor(ws), x_desc, xt_desc, out, work, counters, m, n, out.stride(0),
        K=k, MP=block_m, TAIL=tail, SPLIT_K=split_k, STAGES=stages, COMBINE=combine, COMBINERS=combiners,
        BF16_MUL=bf16_mul, USE_PDL=use_pdl, PARTIALS=partials, num_warps=CONSUMER_WARPS.value,
        maxnreg=MAX_REGISTERS, launch_pdl=use_pdl,
    )
