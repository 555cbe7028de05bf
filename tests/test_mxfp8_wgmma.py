"""The Gluon decode GEMM behind ``seam.mxfp8_linear`` at 2 <= M <= 64 (one token too at N >= 2560) on Hopper (``seam.kernels.mxfp8_wgmma``).

Gluon kernels do not run under the interpreter, so on CPU these tests check what can be
checked there: the picker, tile validation, and that every kernel the picker chooses for the
benchmarked shapes compiles for sm_90 without spills inside the shared memory budget (the
compile also proves the register relabellings move no data). The GPU tests compare bytes
with the exact result on operands whose sums are exact in any order, at the picked tiles of
three shapes and five M, and
with the tl kernel (within fp32 reordering, non-finite outputs in the same places) on
random and edge rows.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import seam
from seam import runtime
from seam.kernels import gluon_launch, mxfp8_gemm_config, mxfp8_wgmma, mxfp8_wgmma_ws, wgmma_combine, wgmma_config
from seam.kernels import workspace
from seam.kernels.gemm_workspace import split_k_scratch
from seam.kernels.mxfp8_gemm_config import (
    TAIL_STAGES,
    WGMMA_ONE_TOKEN_MIN_N,
    WGMMA_PROGRAM_COST_STEPS,
    Tile,
    streamed_block_m,
    streamed_stages,
    pick_qkv_tile,
    pick_tile,
    pick_wgmma_tile,
    wgmma_warp_specialized,
    two_token_tiles_split,
    ws_short_k,
    ws_small_split,
    ws_whole_k,
    WS_SMALL_BLOCK_M,
    WS_SMALL_MAX_SPLIT,
    WS_STAGES,
    TOKEN_TILES_MAX_M,
    pick_token_tiles,
    PREFILL_TOKEN_TILES_MAX_M,
    pick_prefill_token_tiles,
)
from seam.kernels.wgmma_config import (
    RESIDENT_MAX_M,
    STREAMED_BLOCK_M,
    STREAMED_MIN_K,
    TAIL_MAX_M,
    WGMMA_MAX_M,
    WgmmaLaunch,
    combine_group,
    wgmma_combiners,
    wgmma_a_stream,
    wgmma_bf16_mul,
    wgmma_dequantize_first,
    wgmma_early_steps,
    wgmma_launch,
    wgmma_smem_steps,
    WS_MAX_SPLIT,
)
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.formats.mxfp8_weight import ByteFacts
from seam.kernels.mxfp8_gemm_config import covers, one_wave_split
from seam.ops.linear import check_tile
from mxfp8_rows import edge_and_random_rows, exact_block_inputs, linear_both_paths  # tests/mxfp8_rows.py
from sm90_tool import needs_tool, with_tool  # tests/sm90_tool.py

SM90_SHARED_BYTES = 227 * 1024  # per block, opt-in maximum
SM90_SHARED_BYTES_PER_SM = 228 * 1024  # 1 KB of it reserved per resident block
#: (N, K) per rank of the MiniMax-M3.1 layer at TP 4 (gate_up, down, o_proj, qkv) and the TP 2 QKV / a
#: 3072-wide projection: the shapes ``seam bench gemm`` times.
SHAPES = ((1536, 6144), (6144, 768), (6144, 2048), (2560, 6144), (3072, 6144), (4992, 6144))
#: The plain decode kernel's 64-row tile at split 2, which the picker took at N 6144 x K 640-768 before the unsplit
#: warp-specialized tile (``ws_whole_k``): the tests of the plain kernel's launch rules there run it by override.
FORMER_SHORT_K_64_ROW_TILE = Tile(64, 128, 128, 8, 2, 2, wgmma=True)


def _picked_tiles(sms: int = 132) -> set[Tile]:
    """The resident tiles (8-64 rows) picked at the benchmarked shapes."""
    return {t for n, k in SHAPES for m in range(1, RESIDENT_MAX_M + 1) if (t := pick_wgmma_tile(m, n, k, sms))}


def test_picker_takes_up_to_64_tokens_and_whole_128_columns():
    """2..64 tokens at every shape; one token only where N >= WGMMA_ONE_TOKEN_MIN_N (runs 122-123: no clear
    win at N 1536-2048), on the 2-token tile."""
    assert WGMMA_ONE_TOKEN_MIN_N == 2560
    assert pick_wgmma_tile(1, 1536, 6144, 132) is None and pick_wgmma_tile(1, 2048, 2048, 132) is None
    assert pick_wgmma_tile(8, 2560, 6112, 132) is None  # K not a multiple of 128
    assert pick_wgmma_tile(1, 2560, 2048, 132) == pick_wgmma_tile(2, 2560, 2048, 132)
    for n, k in SHAPES:
        for m in range(1 if n >= WGMMA_ONE_TOKEN_MIN_N else 2, RESIDENT_MAX_M + 1):
            t = pick_wgmma_tile(m, n, k, 132)
            if t.warp_specialized:  # the unsplit 64-row tile at short K (its own test below)
                assert (t.block_m, t.split_k) == (64, 1) and ws_whole_k(-(-n // 128), k // 128, 132, a_deq=False)
                continue
            assert t.wgmma and not t.ring and (t.block_n, t.block_k, t.num_warps) == (128, 128, 8)
            assert t.block_m in (8, 16, 32, 64) and m <= t.block_m < max(16, 2 * m)
            assert 1 <= t.split_k <= k // 128
            ring = min(2, mxfp8_wgmma.max_steps(k, t.split_k))  # two stages, or every step of a short range
            assert t.num_stages == ring <= mxfp8_wgmma.max_stages(t.block_m, k, t.split_k)
            fits = [s for s in range(1, k // 128 + 1)
                    if mxfp8_wgmma.max_stages(t.block_m, k, s) >= min(2, mxfp8_wgmma.max_steps(k, s))]
            if t.block_m <= 32:  # two waves of programs of >= 2 K steps, else at most one; more for the activations
                tiles, steps = -(-n // 128), k // 128
                two_waves = min(steps, 2 * (132 // tiles))
                if steps >= 2 * two_waves:
                    assert t.split_k >= two_waves
                else:  # at most one wave, each program >= 2 steps where that fits
                    assert t.split_k in fits and (steps // t.split_k >= 2 or t.split_k - 1 not in fits)
                    assert tiles * t.split_k <= 132 or t.split_k - 1 not in fits
                if tiles * t.split_k > 2 * 132:
                    assert t.split_k - 1 not in fits
            else:  # fewest waves x (steps + a program's fixed cost), the smaller split on a tie
                def cost(s):
                    return -(-(-(-n // 128) * s) // 132) * (mxfp8_wgmma.max_steps(k, s) + WGMMA_PROGRAM_COST_STEPS)
                assert t.split_k == min(fits, key=cost)


def test_picker_takes_65_to_128_tokens_on_the_streamed_tiles_at_k_from_2048():
    """Runs 176-177 (H200, given A_deq): one 128-token tile streaming A_deq, 0.82-0.97x the ring kernel's time
    at 27 points of eleven shapes; its split fills one wave of programs of >= 4 K steps (the ring kernel's
    measured splits, kept), 3 stages where the split is at most 2, else 2 (faster at 21 of 22 points). Run 184:
    65-96 tokens on the 64 + tail tiles (72, 80, 96) at the same split, 4 stages, one program per SM: 0.85-0.97x
    the 128-token tile's time at all 15 points of five shapes. Runs 190-191: both warp-specialized at splits up to
    6, 4 stages (wgmma_warp_specialized). 97-128 tokens run two 64-token tiles instead where
    two_token_tiles_split says (below), and so does the fused QKV op's GEMM never."""
    assert (RESIDENT_MAX_M, STREAMED_BLOCK_M, WGMMA_MAX_M, STREAMED_MIN_K) == (64, 128, 128, 2048)
    assert (TAIL_MAX_M, TAIL_STAGES, mxfp8_wgmma.TAIL_TILES) == (96, 4, (72, 80, 96))
    assert pick_wgmma_tile(129, 2560, 6144, 132) is None  # beyond the decode kernel
    assert pick_wgmma_tile(100, 9856, 1920, 132) is None  # K below 2048, two token tiles past a wave: prefill path
    assert pick_wgmma_tile(100, 2560, 6112, 132) is None  # K not a multiple of 128
    for n, k in SHAPES + ((9856, 6144), (8192, 2048), (4096, 4096)):
        for m in range(RESIDENT_MAX_M + 1, WGMMA_MAX_M + 1):
            for partials in (False, True):
                t = pick_wgmma_tile(m, n, k, 132, partials=partials)
                tiles, steps = -(-n // 128), k // 128
                if k < STREAMED_MIN_K:  # the prefill path, but for the unsplit tiles at K <= 768 on wide N and
                    # two token tiles (below)
                    assert (t is None or not partials and t.block_m == RESIDENT_MAX_M
                            or ws_short_k(tiles, steps, 132) and t.block_m == streamed_block_m(m)), (m, n, k)
                    continue
                if t.block_m == RESIDENT_MAX_M:  # two token tiles, never for the QKV op's partials
                    assert not partials and m > TAIL_MAX_M and t.warp_specialized, (m, n, k, t)
                    continue
                ws = t.split_k <= WS_MAX_SPLIT  # warp-specialized: 4 stages
                if m <= TAIL_MAX_M:  # 64 + the tail's tokens rounded up to 8, 16 or 32
                    bm = 72 if m <= 72 else 80 if m <= 80 else 96
                    assert t == Tile(bm, 128, 128, 8, min(4, mxfp8_wgmma.max_steps(k, t.split_k)), t.split_k,
                                     wgmma=True, warp_specialized=ws)
                    assert t.split_k == pick_wgmma_tile(100, n, k, 132, partials=True).split_k  # the 128 tile's
                    smem = (t.num_stages * mxfp8_wgmma_ws.stage_bytes(bm) if ws else
                            mxfp8_wgmma.shared_bytes(bm, k, t.split_k, t.num_stages, 0, a_stream=True))
                    assert smem > mxfp8_wgmma.TWO_PER_SM_BYTES  # one program per SM
                else:
                    stages = min(4, mxfp8_wgmma.max_steps(k, t.split_k)) if ws else streamed_stages(t.split_k)
                    assert t == Tile(128, 128, 128, 8, stages, t.split_k, wgmma=True, warp_specialized=ws)
                    assert not t.ring
                assert t.warp_specialized == ws == wgmma_warp_specialized(t.block_m, t.split_k, k, a_deq=False)
                assert pick_wgmma_tile(m, n, k, 132, a_deq=True, partials=partials) == t  # they read A_deq anyway
                assert t.num_stages <= mxfp8_wgmma_ws.max_stages(t.block_m, k, t.split_k)
                assert tiles * t.split_k <= max(132, tiles) and (t.split_k == 1 or steps // t.split_k >= 4)
                assert (t.split_k == 1 or tiles * (t.split_k + 1) > 132 or steps // (t.split_k + 1) < 4)
                assert mxfp8_wgmma.shared_bytes(t.block_m, k, t.split_k, t.num_stages, 0, a_stream=True) <= \
                    mxfp8_wgmma.SHARED_BUDGET
    # the measured splits and depths of the 128-token tile (the QKV op's partials keep it)
    got = {(n, k): (lambda t: (t.split_k, t.num_stages))(pick_wgmma_tile(100, n, k, 132, partials=True))
           for n, k in ((6144, 2048), (2560, 6144), (4992, 6144), (1536, 6144), (9856, 6144), (3072, 2048))}
    assert got == {(6144, 2048): (2, 4), (2560, 6144): (6, 4), (4992, 6144): (3, 4), (1536, 6144): (11, 2),
                   (9856, 6144): (1, 4), (3072, 2048): (4, 4)}
    assert (WS_STAGES, WS_MAX_SPLIT) == (4, 6)
    assert [streamed_stages(s) for s in (1, 2, 3, 11)] == [3, 3, 2, 2]


def test_picker_runs_65_to_128_tokens_over_two_64_token_tiles_where_measured():
    """Runs 340-342 (H100, given A_deq): two token tiles of the warp-specialized 64-token tile (grid axis 1), from N
    1024. Below K 2048 at 65-128 tokens: unsplit, from 12 K steps split 4 or 2 where each program keeps >= 3 steps and
    the programs hold at most 2/3 of the SMs (0.40-0.73x the prefill path's time back to back, 0.59-0.88x after
    SwiGLU); against the unsplit streamed tile at K 512-768 only to 7/8 of the SMs (N 8192 x K 768, 128 programs,
    lost after SwiGLU). From K 2048 at 97-128 tokens, at the two tiles' one-wave split where that wave holds >= 9/10
    of the 128-token tile's programs."""
    def two(m, n, k):
        t = pick_wgmma_tile(m, n, k, 132)
        return t and t.block_m == RESIDENT_MAX_M and (t.split_k, t.num_stages)
    for m in (65, 80, 96, 97, 112, 128):
        for a_deq in (False, True):
            assert pick_wgmma_tile(m, 6144, 768, 132, a_deq=a_deq) == Tile(64, 128, 128, 8, 4, 1, wgmma=True,
                                                                          warp_specialized=True)
        # below K 2048: unsplit, ring no deeper than the steps; split 4 or 2 from K 1536 within 2/3 of the SMs
        assert [two(m, n, k) for n, k in ((3072, 768), (1024, 768), (2048, 512), (4096, 1024), (6144, 1536),
                                           (8192, 1536), (3072, 1536), (4096, 256), (6144, 384), (7168, 768))] == \
            [(1, 4)] * 7 + [(1, 2), (1, 3), (1, 4)]
        assert [two(m, n, k) for n, k in ((1024, 1536), (2048, 1536), (2560, 1536), (1024, 1920), (2048, 1920))] == \
            [(4, 3), (2, 4), (2, 4), (4, 4), (2, 4)]
        # not: the streamed tile at 128 programs, two tiles past a wave, one K step, the QKV op's partials
        assert pick_wgmma_tile(m, 8192, 768, 132).block_m == streamed_block_m(m)
        assert pick_wgmma_tile(m, 9856, 640, 132).block_m == streamed_block_m(m)
        assert pick_wgmma_tile(m, 9856, 1024, 132) is None and pick_wgmma_tile(m, 6144, 128, 132) is None
        assert pick_wgmma_tile(m, 896, 768, 132) is None  # N 896: narrower than measured
        assert pick_wgmma_tile(m, 6144, 768, 132, partials=True) is None
        assert pick_wgmma_tile(m, 6144, 1536, 132, partials=True) is None
        # from K 2048 at 97-128 tokens (the 64 + tail tiles keep 65-96)
        want = {(6144, 2048): 1, (8192, 2048): 1, (4096, 2048): 2, (6144, 4096): 1, (4096, 4096): 2, (1536, 6144): 5,
                (2048, 6144): 4, (2560, 6144): 3, (3072, 6144): None, (4992, 6144): None, (9856, 6144): None}
        for (n, k), split in want.items():
            got = two(m, n, k)
            assert got == ((split, 4) if split and m > TAIL_MAX_M else False), (m, n, k, got)
            assert pick_wgmma_tile(m, n, k, 132, partials=True).block_m == streamed_block_m(m)
    assert two_token_tiles_split(100, 66, 6, 132, None) == 1 and two_token_tiles_split(100, 67, 6, 132, None) is None
    assert two_token_tiles_split(100, 57, 6, 132, 1) == 1 and two_token_tiles_split(100, 58, 6, 132, 1) is None
    assert two_token_tiles_split(100, 11, 12, 132, None) == 4 and two_token_tiles_split(100, 12, 12, 132, None) == 2
    assert two_token_tiles_split(100, 22, 12, 132, None) == 2 and two_token_tiles_split(100, 23, 12, 132, None) == 1
    assert two_token_tiles_split(100, 16, 11, 132, None) == 1 and two_token_tiles_split(100, 20, 1, 132, None) is None
    assert two_token_tiles_split(100, 8, 6, 132, None) == 1 and two_token_tiles_split(100, 7, 6, 132, None) is None
    assert two_token_tiles_split(100, 12, 48, 132, 11) == 5 and two_token_tiles_split(100, 24, 48, 132, 5) is None


def test_picker_takes_129_to_384_tokens_on_token_tiles_that_fit_one_wave():
    """Runs 199-200: 129-384 tokens on the warp-specialized kernel over 128-token tiles (dequantization launch
    included) beat the prefill path / ring kernel at 11 of 13 points of four shapes (0.69-0.95x; up to 1.10x at 129
    tokens on N 1536) where one program per N tile and token tile fits a wave, and lost where it did not (N 6144 x
    2048 at 384 tokens) or past 384 tokens. The split fills that wave with programs of >= 4 steps, at most 6."""
    assert TOKEN_TILES_MAX_M == 384
    for m in (128, 385):
        assert pick_token_tiles(m, 2560, 6144, 132) is None  # the decode kernel's / past the measured range
    assert pick_token_tiles(200, 6144, 768, 132) is None  # K below the measured range: the prefill path
    assert pick_token_tiles(200, 2560, 6112, 132) is None  # K not a multiple of 128
    assert pick_token_tiles(129, 9856, 6144, 132) is None  # 77 tiles x 2 token tiles: more than a wave
    assert pick_token_tiles(384, 6144, 2048, 132) is None  # 48 x 3 (run 200: lost there)
    for n, k in SHAPES + ((9856, 6144), (256, 6144), (4096, 4096)):
        tiles, steps = -(-n // 128), k // 128
        for m in range(WGMMA_MAX_M + 1, TOKEN_TILES_MAX_M + 1):
            t = pick_token_tiles(m, n, k, 132)
            token_tiles = -(-m // 128)
            if k < STREAMED_MIN_K or tiles * token_tiles > 132:
                assert t is None, (m, n, k)
                continue
            share = -(-m // token_tiles)  # a 64 + tail tile where a token tile's share fits one
            bm = 72 if share <= 72 else 80 if share <= 80 else 96 if share <= 96 else 128
            # the split fills one wave with programs of >= 4 steps, at most WS_MAX_SPLIT ways
            split = min(WS_MAX_SPLIT, max(1, min(132 // (tiles * token_tiles), steps // 4)))
            programs = tiles * token_tiles * split
            assert 1 <= split <= WS_MAX_SPLIT and programs <= 132 and (split == 1 or steps // split >= 4)
            assert split == WS_MAX_SPLIT or programs + tiles * token_tiles > 132 or steps // (split + 1) < 4
            narrow = Tile(bm, 128, 128, 8, min(WS_STAGES, mxfp8_wgmma.max_steps(k, split)), split, wgmma=True,
                          warp_specialized=True)
            assert -(-m // narrow.block_m) == token_tiles  # the launch's grid axis 1
            assert narrow.num_stages <= mxfp8_wgmma_ws.max_stages(narrow.block_m, k, split)
            # up to 256 tokens a wide tile (128 + the tokens past 128, rounded up to 8, 16, 32, 64 or 128) where its
            # one-wave split fills more of the wave
            wide_split = min(WS_MAX_SPLIT, max(1, min(132 // tiles, steps // 4)))
            if m <= 256 and 2 * tiles * wide_split >= 3 * programs:  # 1.5x the programs: run 211's one win
                wide = 136 if m <= 136 else 144 if m <= 144 else 160 if m <= 160 else 192 if m <= 192 else 256
                assert (t.block_m, t.split_k) == (wide, wide_split) and t.warp_specialized, (m, n, k)
                assert t.num_stages == min(WS_STAGES, mxfp8_wgmma_ws.max_stages(wide, k, wide_split)), (m, n, k)
            else:
                assert t == narrow, (m, n, k)
    # runs 211 and 237: only N 4992 x 6144 (split 1 -> 3) of the measured shapes takes it
    assert {(m, n, k) for m in (129, 160, 192, 193, 256) for n, k in SHAPES + ((9856, 6144), (4096, 4096))
            if (t := pick_token_tiles(m, n, k, 132)) is not None and t.block_m in mxfp8_wgmma_ws.WIDE_TILES} == {
        (m, 4992, 6144) for m in (129, 160, 192, 193, 256)}
    for outside in (128, 257):  # no wide tile holds them
        with pytest.raises(ValueError, match=f"the wide tiles take 129-256 tokens, got {outside}"):
            mxfp8_gemm_config.wide_block_m(outside)
    # run 234's tiles, at the depths it timed (4 stages at 136-144 tokens, 3 above, as shared memory allows)
    assert [(t.block_m, t.num_stages, t.split_k) for t in (pick_token_tiles(m, 4992, 6144, 132) for m in (
        129, 136, 137, 144, 145, 160, 161, 192, 193, 256))] == [
        (136, 4, 3), (136, 4, 3), (144, 4, 3), (144, 4, 3), (160, 3, 3), (160, 3, 3), (192, 3, 3), (192, 3, 3),
        (256, 2, 3), (256, 2, 3)]
    # the measured splits (runs 199-200; N 4992 at 256 tokens: the 128 + 128-token tile since run 237)
    assert [(t.block_m, t.split_k) for t in (pick_token_tiles(m, n, k, 132) for m, n, k in (
        (256, 2560, 6144), (384, 2560, 6144), (256, 4992, 6144), (384, 4992, 6144), (256, 6144, 2048),
        (256, 1536, 6144), (384, 1536, 6144)))] == [(128, 3), (128, 2), (256, 3), (128, 1), (128, 1), (128, 5),
                                                    (128, 3)]
    assert [pick_token_tiles(m, 2560, 6144, 132).block_m for m in (129, 144, 145, 160, 161, 192, 193, 257, 288,
                                                                       289)] == [72, 72, 80, 80, 96, 96, 128, 96, 96,
                                                                                 128]


def test_picker_takes_385_to_2048_tokens_on_token_tiles_where_the_wave_model_says():
    """Run 239 (H100): past 384 tokens the warp-specialized kernel over token tiles of 128, 192 or 256 tokens (no
    BF16 weight copy) took 0.68-1.03x the prefill path's time where this rule takes it, at four layers' shapes; split 1
    unless that fills less than 3/4 of a wave; none at K < 2048 (not measured) nor past 2048 tokens."""
    assert PREFILL_TOKEN_TILES_MAX_M == 2048
    ms = (385, 512, 768, 1024, 1536, 2048)
    picks = {n_k: [(t.block_m, t.split_k) if (t := pick_prefill_token_tiles(m, *n_k, 132)) else None for m in ms]
             for n_k in ((1536, 6144), (2560, 6144), (6144, 2048), (4992, 6144))}
    assert picks == {  # the prefill path (None) where run 239's token tiles lost or the model's idle time is dear
        (1536, 6144): [None, (192, 3), (256, 3), None, None, (192, 1)],
        (2560, 6144): [(256, 3), (256, 3), (128, 1), (192, 1), (256, 1), None],
        (6144, 2048): [(256, 1), (256, 1), (192, 1), (128, 1), (192, 1), (192, 1)],
        (4992, 6144): [(192, 1), (192, 1), (256, 1), (192, 1), (256, 1), (128, 1)]}
    for m in (384, 2049):  # the 129-384 rule's / the prefill path's
        assert pick_prefill_token_tiles(m, 2560, 6144, 132) is None
    assert pick_prefill_token_tiles(512, 6144, 768, 132) is None  # K below 2048
    assert pick_prefill_token_tiles(512, 2560, 6112, 132) is None  # K not a multiple of 128
    for n, k in SHAPES + ((9856, 6144), (8192, 2048), (3072, 2048)):
        for m in range(385, PREFILL_TOKEN_TILES_MAX_M + 1, 41):
            if (t := pick_prefill_token_tiles(m, n, k, 132)) is None:
                continue
            assert k >= STREAMED_MIN_K and t.block_m in (128, 192, 256) and t.warp_specialized and t.wgmma
            programs = -(-n // 128) * -(-m // t.block_m)
            assert t.split_k == 1 or 4 * programs < 3 * 132 and t.split_k <= 4, (m, n, k, t)
            assert t.num_stages == min(WS_STAGES, mxfp8_wgmma_ws.max_stages(t.block_m, k, t.split_k))


def test_default_pick_at_129_to_384_tokens(monkeypatch):
    """pick_tile takes the token tiles ahead of the ring kernel and the prefill path; so does the fused QKV op (log
    run 207: ahead of the ring kernel at N 4992 too), the wide tiles included."""
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.kernels.mxfp8_gemm_config.bf16_mm_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    for m in (129, 160, 192, 200, 256, 384):
        for n, k in ((2560, 6144), (4992, 6144), (1536, 6144)):
            t = pick_token_tiles(m, n, k, 132)
            assert pick_tile(m, n, k, cuda) == pick_tile(m, n, k, cuda, a_deq=True) == t
            assert pick_qkv_tile(m, n, k, cuda) == t
            assert (t.block_m in mxfp8_wgmma_ws.WIDE_TILES) == (n == 4992 and m <= 256)
        assert pick_tile(m, 6144, 768, cuda) == mxfp8_gemm_config.BF16_MM_TILE
    assert pick_qkv_tile(200, 9856, 6144, cuda) == mxfp8_gemm_config.pick_ring_tile(200, 9856, 6144, 132)  # > a wave
    assert pick_tile(200, 9856, 6144, cuda) == mxfp8_gemm_config.pick_ring_tile(200, 9856, 6144, 132)  # > a wave
    # past 384 tokens the token tiles where pick_prefill_token_tiles takes them, else the prefill path
    for m, n, k in ((385, 2560, 6144), (2048, 1536, 6144), (2048, 2560, 6144), (385, 1536, 6144), (2049, 1536, 6144)):
        t = pick_prefill_token_tiles(m, n, k, 132) or mxfp8_gemm_config.BF16_MM_TILE
        assert pick_tile(m, n, k, cuda) == pick_tile(m, n, k, cuda, a_deq=True) == t
        assert t.warp_specialized == ((m, n) in ((385, 2560), (2048, 1536)))
    # the fused QKV op up to QKV_TOKEN_TILES_MAX_M only (run 246: its epilogue on their partials costs more above)
    assert mxfp8_gemm_config.QKV_TOKEN_TILES_MAX_M == 1024
    for m in (512, 1024, 1025, 2048):
        t = pick_tile(m, 4992, 6144, cuda)
        assert t.warp_specialized and t == pick_prefill_token_tiles(m, 4992, 6144, 132)
        assert pick_qkv_tile(m, 4992, 6144, cuda) == (t if m <= 1024 else mxfp8_gemm_config.BF16_MM_TILE)
    # a torch without the prefill path's mm: the token tiles all the same, the tl refit past them
    monkeypatch.setattr("seam.kernels.mxfp8_gemm_config.bf16_mm_supported", lambda device: False)
    assert pick_qkv_tile(200, 2560, 6144, cuda).warp_specialized
    assert pick_qkv_tile(385, 2560, 6144, cuda).warp_specialized
    t = pick_qkv_tile(385, 1536, 6144, cuda)
    assert not (t.wgmma or t.bf16_mm) and t == pick_qkv_tile(385, 1536, 6144, cuda, tl_only=True)


def test_token_tile_overrides_checked(monkeypatch):
    """A warp-specialized tile override runs any M over token tiles, up to the grid's 65535; other decode-kernel
    tiles still need M <= block_m."""
    from seam.ops.linear import MAX_TOKEN_TILES, _check_wgmma_tile

    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    cuda = torch.device("cuda")
    ws64, ws72 = (Tile(bm, 128, 128, 8, 4, 2, wgmma=True, warp_specialized=True) for bm in (64, 72))
    _check_wgmma_tile(ws72, 300, 6144, cuda)
    _check_wgmma_tile(ws64, 64 * MAX_TOKEN_TILES, 6144, cuda)
    with pytest.raises(ValueError, match="at most 65535 token tiles of block_m 64, got M=4194241"):
        _check_wgmma_tile(ws64, 64 * MAX_TOKEN_TILES + 1, 6144, cuda)
    with pytest.raises(ValueError, match="and >= M=100 \\(the decode kernel; any M warp-specialized\\)"):
        _check_wgmma_tile(dataclasses.replace(ws64, warp_specialized=False, num_stages=2), 100, 6144, cuda)


def test_picker_runs_the_64_row_tile_warp_specialized_given_a_deq():
    """Runs 190-191: at 33-64 tokens given A_deq the warp-specialized 64-row tile at the one-wave split, 4 stages,
    was 0.75-0.98x the plain decode kernel's pick at all 20 points of ten shapes whose one-wave split is at most 6; not
    at split 8 and 11 (N 2048 and 1536 x 6144), nor measured at K < 2048; without A_deq the plain decode kernel
    stays (but for the unsplit tiles at short K, runs 319-331)."""
    for n, k in SHAPES + ((9856, 6144), (8192, 2048), (4096, 4096), (3072, 2048), (2560, 2048), (2048, 6144)):
        tiles, steps = -(-n // 128), k // 128
        for m in range(2, RESIDENT_MAX_M + 1):
            t, given = pick_wgmma_tile(m, n, k, 132), pick_wgmma_tile(m, n, k, 132, a_deq=True)
            split = one_wave_split(tiles, steps, 132)
            if m > 32 and (n, k) == (6144, 768):  # unsplit (ws_whole_k, runs 319-321): the one short K here
                assert given == t == Tile(64, 128, 128, 8, min(4, steps), 1, wgmma=True, warp_specialized=True), \
                    (m, n, k)
                continue
            if m > 16 and (n, k) == (6144, 768):  # given A_deq the 32-token tile unsplit (ws_short_k, runs 328-331)
                assert not t.warp_specialized and given.block_m == 32 and given.warp_specialized, (m, n, k)
                continue
            assert not t.warp_specialized
            if 16 < m <= 32 and k >= STREAMED_MIN_K and split <= WS_SMALL_MAX_SPLIT:  # the next test
                assert given.block_m == 32 and given.warp_specialized, (m, n, k)
                continue
            if m > 32 and k >= STREAMED_MIN_K and split <= WS_MAX_SPLIT:
                assert given == Tile(64, 128, 128, 8, min(4, mxfp8_wgmma.max_steps(k, split)), split, wgmma=True,
                                     warp_specialized=True), (m, n, k)
                assert given.num_stages <= mxfp8_wgmma_ws.max_stages(64, k, split)
            else:
                assert given == t, (m, n, k)
    got = {(n, k): pick_wgmma_tile(64, n, k, 132, a_deq=True).split_k
           for n, k in ((9856, 6144), (4992, 6144), (2560, 6144), (6144, 2048), (3072, 2048))}
    assert got == {(9856, 6144): 1, (4992, 6144): 3, (2560, 6144): 6, (6144, 2048): 2, (3072, 2048): 4}
    assert not pick_wgmma_tile(64, 1536, 6144, 132, a_deq=True).warp_specialized  # split 11
    assert not wgmma_warp_specialized(64, 2, 1536, a_deq=True)  # K below 2048
    assert not wgmma_warp_specialized(32, 2, 6144, a_deq=True) and not wgmma_warp_specialized(256, 2, 6144, a_deq=True)


def test_picker_runs_17_to_32_tokens_on_the_32_token_tile_at_one_wave_splits_up_to_3_given_a_deq():
    """Runs 335-336 (H100, given A_deq, K >= 2048): the warp-specialized 32-token tile at the one-wave split beat the
    plain decode kernel's 32-row tile at splits 1-3 (0.87-0.97x fenced, one point 1.02-1.03x after SwiGLU: N 8192 x
    K 2048), was mixed at 4 and lost at 6 (5 not run); not for the fused QKV op's partials, nor without A_deq."""
    cases = {(9856, 6144): 1, (6144, 4096): 2, (6144, 3072): 2, (6144, 2048): 2, (8192, 2048): 2, (4992, 6144): 3}
    for m in (17, 24, 32):
        for (n, k), split in cases.items():
            assert one_wave_split(-(-n // 128), k // 128, 132) == split
            assert pick_wgmma_tile(m, n, k, 132, a_deq=True) == Tile(
                WS_SMALL_BLOCK_M, 128, 128, 8, 4, split, wgmma=True, warp_specialized=True), (m, n, k)
            for kw in ({}, {"a_deq": True, "partials": True}):
                t = pick_wgmma_tile(m, n, k, 132, **kw)
                assert t.block_m == 32 and not t.warp_specialized, (m, n, k, kw)
        for n, k in ((4096, 2048), (4096, 4096), (3072, 6144), (2560, 6144), (1536, 6144)):  # one-wave split 4-11
            t = pick_wgmma_tile(m, n, k, 132, a_deq=True)
            assert t.block_m == 32 and not t.warp_specialized, (m, n, k)
    assert ws_small_split(3, 2048, a_deq=True) and not ws_small_split(4, 2048, a_deq=True)
    assert not ws_small_split(1, 1920, a_deq=True) and not ws_small_split(1, 6144, a_deq=False)
    assert pick_wgmma_tile(16, 9856, 6144, 132, a_deq=True).block_m == 16  # 9-16 tokens: the 16-row tile


def test_picker_runs_the_64_row_tile_unsplit_at_short_k_given_a_deq():
    """Runs 319-320 (H100, given A_deq, after SwiGLU + MXFP8): the warp-specialized 64-row tile over the whole K beat
    the plain kernel's split pick at K 256-1024 where N >= 3072 (0.74-0.93x at 33 and 64 tokens; N 6144 x K 1024 at
    33 tokens 1.01x), and lost at N 1024-2048 from K 512 (1.01-1.62x) and at K 1536 (N 6144 at 33 tokens: 1.04x); N
    2048 x K 256 won but stays with the rest of N 2048. The bound is 22 N tiles on 132 SMs (N 2689) and 8 K steps.
    Run 321 (H100, rows without A_deq, after the tile's own A_deq launch): 0.75-0.88x back to back at N 3072 and 6144
    x K 768 on MXFP8 and BF16 rows, mixed at K 1024 (N 4096: 0.97-1.07x back to back on MXFP8 rows): 6 K steps
    there; never for the fused QKV op's partials."""
    taken = {(6144, 768), (6144, 512), (6144, 256), (6144, 1024), (3072, 768), (4096, 1024), (2689, 768)}
    kept = {(2048, 256), (2048, 512), (2048, 768), (2048, 1024), (2048, 1536), (1024, 768), (1024, 1536),
            (6144, 1536), (2688, 768), (6144, 1152)}
    on_rows = {(n, k) for n, k in taken if k <= 768}  # without A_deq: K <= 768
    for m in (33, 40, 48, 64):
        for n, k in taken | kept:
            for a_deq, unsplit in ((True, taken), (False, on_rows)):
                t = pick_wgmma_tile(m, n, k, 132, a_deq=a_deq)
                if (n, k) in unsplit:
                    assert t == Tile(64, 128, 128, 8, 2 if k == 256 else 4, 1, wgmma=True, warp_specialized=True), \
                        (m, n, k, a_deq)
                else:
                    assert not t.warp_specialized and t.split_k > 1, (m, n, k, a_deq, t)
    assert not pick_wgmma_tile(32, 6144, 768, 132).warp_specialized  # 17-32 tokens given A_deq: the next test
    assert ws_whole_k(22, 8, 132) and not ws_whole_k(21, 8, 132) and not ws_whole_k(48, 9, 132)
    assert ws_whole_k(22, 6, 132, a_deq=False) and not ws_whole_k(48, 7, 132, a_deq=False)
    assert not ws_whole_k(21, 6, 132, a_deq=False)
    partials = pick_wgmma_tile(64, 6144, 768, 132, partials=True)  # the fused QKV op's GEMM: no combine to save
    assert not partials.warp_specialized and partials.split_k > 1


def test_picker_runs_17_to_32_tokens_unsplit_at_short_k_on_wide_n_given_a_deq():
    """Runs 328-331 (H100, given A_deq): the warp-specialized 32-token tile over the whole K beat the plain kernel's
    split 32-row tile at N 6144-9856 x K 512-768 (0.81-0.97x after SwiGLU + MXFP8, 17-32 tokens), was 0.94-1.04x at N
    3072-4608 (won at N 4608 x K 768, lost at 17 tokens) and lost at K 256: the short-K streamed tiles' bounds (44 N
    tiles on 132 SMs, 4-6 K steps). On MXFP8 rows without A_deq (not measured) and for the fused QKV op's partials the
    split tile stays."""
    for m in (17, 20, 24, 31, 32):
        for n, k in ((6144, 768), (6144, 512), (5505, 768), (9856, 640), (8192, 512)):
            assert pick_wgmma_tile(m, n, k, 132, a_deq=True) == Tile(
                WS_SMALL_BLOCK_M, 128, 128, 8, 4, 1, wgmma=True, warp_specialized=True), (m, n, k)
            assert not pick_wgmma_tile(m, n, k, 132).warp_specialized
            assert not pick_wgmma_tile(m, n, k, 132, a_deq=True, partials=True).warp_specialized
        for n, k in ((5504, 768), (4608, 768), (3072, 768), (6144, 896), (6144, 1024), (6144, 384), (6144, 256)):
            t = pick_wgmma_tile(m, n, k, 132, a_deq=True)
            assert t.block_m == 32 and not t.warp_specialized, (m, n, k, t)
    for m in (16, 33):  # other token tiles: the 16-row tile and the 64-row tile's own rule
        assert pick_wgmma_tile(m, 6144, 768, 132, a_deq=True).block_m != WS_SMALL_BLOCK_M
    t = pick_wgmma_tile(32, 6144, 768, 132, a_deq=True)  # its ring fits as measured
    assert t.num_stages <= mxfp8_wgmma_ws.max_stages(WS_SMALL_BLOCK_M, 768, 1)


def test_picker_runs_65_to_128_tokens_unsplit_at_short_k_on_wide_n():
    """Run 328 (H100, N 6144 x K 768 at 65 and 128 tokens): the warp-specialized streamed tile over the whole K took
    0.57-0.82x the prefill path's time back to back and 0.72-0.90x after SwiGLU + MXFP8, on MXFP8 rows and given
    A_deq; at N 3072 x K 768 and N 4096 x K 1024 (96 tokens) it was mixed. The bounds: 44 N tiles on 132 SMs
    (N 5505) and 4-6 K steps (fewer: a ring shallow enough for two programs an SM); never for the fused QKV op's
    partials. Where two 64-token tiles fit 7/8 of the SMs they run instead (two_token_tiles_split)."""
    for m in (65, 72, 73, 80, 96, 97, 128):
        for n, k in ((8192, 768), (8192, 512), (7424, 768), (9856, 640)):
            for a_deq in (False, True):
                assert pick_wgmma_tile(m, n, k, 132, a_deq=a_deq) == Tile(
                    streamed_block_m(m), 128, 128, 8, 4, 1, wgmma=True, warp_specialized=True), (m, n, k)
        for n, k in ((9856, 896), (9856, 1024), (9856, 1920), (9856, 384), (9856, 256)):
            assert pick_wgmma_tile(m, n, k, 132) is None and pick_wgmma_tile(m, n, k, 132, a_deq=True) is None
        assert pick_wgmma_tile(m, 8192, 768, 132, partials=True) is None
    assert pick_wgmma_tile(129, 6144, 768, 132) is None  # 129-256 tokens at short K: not measured
    assert ws_short_k(44, 6, 132) and not ws_short_k(43, 6, 132)
    assert not ws_short_k(48, 7, 132) and not ws_short_k(48, 3, 132) and ws_short_k(40, 4, 120)
    for m in (65, 96, 128):  # every such tile fits its ring and compiles as the other streamed tiles do
        t = pick_wgmma_tile(m, 8192, 768, 132)
        assert t.num_stages <= mxfp8_wgmma_ws.max_stages(t.block_m, 768, 1)


def test_warp_specialized_tile_checked_before_launch(device):
    """A warp_specialized override needs a wgmma tile the kernel has (32-256 rows) and a ring that fits; the fused
    QKV op refuses it (its epilogue reads the plain decode kernel's partials)."""
    with pytest.raises(ValueError, match="warp_specialized needs tile.wgmma"):
        check_tile(Tile(64, 128, 128, 8, 2, 1, warp_specialized=True), 2048, 40, device)
    if not wgmma_config.wgmma_supported(device):
        return
    for bad, m, match in ((Tile(16, 128, 128, 8, 2, 1, wgmma=True, warp_specialized=True), 12,
                           "warp_specialized needs block_m in \\(32, 64, 72, 80, 96, 128, 136, 144, 160, 192, 256\\), "
                           "got 16"),
                          (Tile(128, 128, 128, 8, 5, 1, wgmma=True, warp_specialized=True), 40,
                           "num_stages in \\[1, 4\\]")):
        with pytest.raises(ValueError, match=match):
            check_tile(bad, 2048, m, device)
    # the warp-specialized 64-row tile streams A_deq: a split whose resident activations would not fit is fine
    assert check_tile(Tile(64, 128, 128, 8, 4, 1, wgmma=True, warp_specialized=True), 6144, 40, device)


@pytest.mark.parametrize("block_m, second, most", [(136, 8, 4), (144, 16, 4), (160, 32, 3), (192, 64, 3),
                                                    (256, 128, 2)])
def test_wide_tiles_are_warp_specialized_only(device, monkeypatch, block_m, second, most):
    """The wide tiles, 128 + 8, 16, 32, 64 or 128 tokens: warp-specialized only (256 rows not warp-specialized are
    the ring kernel's tile), at most 4, 3 or 2 stages (shared memory), any M (token tiles); not ring tiles, and the
    launch rules their combine reads exist."""
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    wide = Tile(block_m, 128, 128, 8, min(3, most), 3, wgmma=True, warp_specialized=True)
    assert check_tile(wide, 6144, 129, device) == wide and check_tile(wide, 6144, 400, device) == wide
    assert not wide.ring and covers(wide, 400) and covers(wide, 400, partials=True)
    assert mxfp8_wgmma_ws.second_tokens(block_m) == second and mxfp8_wgmma_ws.max_stages(block_m, 6144, 3) == most
    assert wgmma_launch(block_m, 6144, 3, 3).combiners == 2
    bad = [(dataclasses.replace(wide, num_stages=most + 1), f"num_stages in \\[1, {most}\\]")]
    if block_m != 256:
        bad.append((dataclasses.replace(wide, warp_specialized=False), "tile.wgmma needs block_m in"))
    else:
        assert dataclasses.replace(wide, warp_specialized=False).ring
    for tile, match in bad:
        with pytest.raises(ValueError, match=match):
            check_tile(tile, 6144, 129, device)


def test_streamed_tiles_stream_every_launch_and_dequantize_first():
    """The 64 + tail and 128-token tiles' activations never fit resident: given A_deq they always stream it (any
    program count), and without one the dequantization launch writes it first (MXFP8 or BF16 rows); their weights
    are dequantized by BF16 multiplies (where the weight allows) and one weight step is read before the PDL
    wait."""
    for n, k in ((6144, 2048), (2560, 6144), (200, 2048)):
        for m in (65, 80, 96, 100):
            t = pick_wgmma_tile(m, n, k, 132, partials=True)  # the streamed tile (at 100 tokens two 64-token tiles
            # stream A_deq too: the warp-specialized kernel always does)
            programs = -(-n // 128) * t.split_k
            assert wgmma_a_stream(t.block_m, k, t.split_k, t.num_stages, programs, 132)
            for bf16_rows in (False, True):
                assert wgmma_dequantize_first(t.block_m, k, t.split_k, t.num_stages, programs, 132,
                                              bf16_rows=bf16_rows)
            rules = wgmma_launch(t.block_m, k, t.split_k, t.num_stages, a_deq_programs=programs, sms=132)
            assert rules.a_stream and rules.bf16_mul and rules.early_steps == 1 and rules.smem_steps == 0


def test_launcher_refuses_the_streamed_tile_without_a_stream_before_launch():
    """128 tokens do not fit resident: the launcher refuses block_m 128 without a_stream (CPU tensors: never
    launched)."""
    x = torch.zeros(100, 256, dtype=torch.bfloat16)
    w, ws = torch.zeros(128, 256, dtype=torch.uint8), torch.zeros(128 * 8, dtype=torch.uint8)
    out = torch.empty(100, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="block_m must be one of \\(8, 16, 32, 64, 72, 80, 96, 128\\), got 48"):
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(x, None, w, ws, out, 48, 1, 2, out, out, False, 1, early_steps=1,
                                              smem_steps=0, combiners=1, a_deq=True, a_stream=True)
    for bm in (72, 128):
        with pytest.raises(ValueError, match=f"block_m {bm} streams its activations"):
            mxfp8_wgmma.launch_mxfp8_linear_wgmma(x, None, w, ws, out, bm, 1, 2, out, out, False, 1, early_steps=1,
                                                  smem_steps=0, combiners=1, a_deq=True, a_stream=False)
    with pytest.raises(ValueError, match="block_m 96 \\(64 \\+ tail\\) takes early_steps 0 or 1"):
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(x, None, w, ws, out, 96, 1, 2, out, out, False, 1, early_steps=2,
                                              smem_steps=0, combiners=1, a_deq=True, a_stream=True)


def test_warp_specialized_launcher_refuses_bad_tiles_before_launch():
    """The warp-specialized kernel runs the 32- and 64-row, 64 + tail, 128-token and wide tiles, at ring depths that
    fit (CPU tensors: never launched)."""
    x = torch.zeros(100, 2048, dtype=torch.bfloat16)
    w, ws = torch.zeros(128, 2048, dtype=torch.uint8), torch.zeros(128 * 64, dtype=torch.uint8)
    out = torch.empty(100, 128, dtype=torch.bfloat16)
    assert mxfp8_wgmma_ws.BLOCK_MS == (32, 64, 72, 80, 96, 128, 136, 144, 160, 192, 256)
    for bm in (8, 16, 48, 512):
        with pytest.raises(ValueError, match=f"block_m must be one of \\(32, 64, 72, 80, 96, 128, 136, 144, 160, 192, "
                                             f"256\\), got {bm}"):
            mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws(x, w, ws, out, bm, 1, 2, out, out, False, 1, combiners=1)
    assert mxfp8_wgmma_ws.max_stages(128, 2048, 1) == 4 and mxfp8_wgmma_ws.max_stages(72, 2048, 8) == 2
    for stages in (0, 5):
        match = f"stages must be in \\[1, 4\\] at block_m 128, K 2048, split_k 1; got {stages}"
        with pytest.raises(ValueError, match=match):
            mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws(x, w, ws, out, 128, 1, stages, out, out, False, 1,
                                                        combiners=1)
    with pytest.raises(ValueError, match="combiners must be a power of two"):
        mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws(x, w, ws, out, 96, 2, 2, out, out, False, 1, combiners=4)
    with pytest.raises(ValueError, match="split_k must be in \\[1, K / 128 = 16\\], got 17"):
        mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws(x, w, ws, out, 96, 17, 1, out, out, False, 1, combiners=1)


def test_partials_reach_the_warp_specialized_launcher(device, monkeypatch):
    """launch_gluon with a warp_specialized tile and partials (the fused QKV op's GEMM) runs the warp-specialized
    launcher on A_deq with partials=True into the workspace it returns as [tiles, split, block_m, 128] (a recorder:
    nothing launched)."""
    seen = []
    monkeypatch.setattr(mxfp8_wgmma_ws, "launch_mxfp8_linear_wgmma_ws",
                        lambda a, wq, ws, out, *args, **kw: seen.append((a, out, args[3], kw["partials"])))
    m, n, k = 90, 200, 2048
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k).bfloat16().to(device))
    xq, xs = seam.mxfp8_quantize(torch.randn(m, k).bfloat16().to(device))
    a = a_deq_from_mxfp8(xq, xs)
    tile = Tile(128, 128, 128, 8, 4, 3, wgmma=True, warp_specialized=True)
    parts = gluon_launch.launch_gluon(xq, xs, w.values, w.scales, None, tile, False, partials=True, a_deq=a)
    (got_a, out, work, partials), = seen
    assert got_a is a and partials and out is work
    assert parts.shape == (2, 3, 128, 128) and parts.data_ptr() == work.data_ptr()


def test_picker_up_to_32_tokens_takes_one_wave_where_two_leave_short_programs():
    """Runs 128-130 (H200, given A_deq): N 6144 x K 768 (6 K steps) at split 2 (one wave, 3 steps) against split
    4 (two waves, 1-2 steps): 3.64-3.74 against 4.47-4.50 us alone at 1-8 tokens, within 2% at 16-32, and 0.37-1.15
    us faster after its SwiGLU + MXFP8 producer at 1-32 (without A_deq, 16 tokens lost: 5.81 against 5.38); N 2048
    x 2048 split 8 beat 16, N 1792 x 2048 split 8 beat 9 and 16; where two waves give >= 2 steps they stay (N 1536
    x 6144: split 22, faster in its norm chain than 11)."""
    for m in (1, 2, 8, 16, 32):
        assert pick_wgmma_tile(m, 6144, 768, 132).split_k == 2
        assert pick_wgmma_tile(max(m, 2), 2048, 2048, 132).split_k == 8
        assert pick_wgmma_tile(max(m, 2), 1792, 2048, 132).split_k == 8
        assert pick_wgmma_tile(max(m, 2), 1536, 6144, 132).split_k == 22
        assert pick_wgmma_tile(m, 2560, 6144, 132).split_k == 12 and pick_wgmma_tile(m, 6144, 2048, 132).split_k == 4


def test_picker_at_64_tokens_takes_the_measured_best_split():
    """Run 53 (H200, M 64, K 6144): the fastest split of each N, which the former rule (one wave, grown
    until the activations fit) missed at N 4992 (split 5: 28.9 us, 6: 26.4)."""
    assert [pick_wgmma_tile(64, n, 6144, 132).split_k for n in (2560, 3072, 4992)] == [6, 5, 6]


def test_early_steps_at_the_measured_picks():
    """Runs 65-66 (H200): one weight step read before the PDL wait at 8, 16 and 64 tokens, none at 32
    (its registers) unless shared-memory steps come first (run 72: K <= 2048), two at 64 tokens where a
    program runs <= 3 steps (measured at N 6144 x K 768 on split 2, which the unsplit warp-specialized tile has
    taken since; here N 2560 x K 1024 on split 4)."""
    cases = {(8, 2560, 6144): 1, (16, 6144, 2048): 1, (32, 2560, 6144): 0, (64, 2560, 6144): 1,
             (64, 2560, 1024): 2, (8, 6144, 768): 1, (32, 6144, 2048): 1}
    got = {}
    for m, n, k in cases:
        t = pick_wgmma_tile(m, n, k, 132)
        smem_steps = wgmma_smem_steps(t.block_m, k, t.split_k, t.num_stages)
        got[m, n, k] = wgmma_early_steps(t.block_m, k, t.split_k, smem_steps)
    assert got == cases


def test_smem_steps_at_the_measured_picks():
    """Run 72 (H200): weight steps converted into shared memory before the PDL wait where K <= 2048 (2 at 8
    tokens, 1 at 16-32), none at K 6144 (slower there) nor at 64 tokens; fewer where the slots would leave
    no room for a second program on the SM (wide N: split 2 keeps 8 K steps of activations; a deep ring)."""
    cases = {(8, 6144, 2048): 2, (16, 6144, 2048): 1, (32, 6144, 768): 1, (64, 6144, 2048): 0,
             (8, 2560, 6144): 0, (32, 4992, 6144): 0, (8, 12288, 2048): 1, (32, 12288, 2048): 0}
    got = {}
    for key in cases:
        t = pick_wgmma_tile(*key, 132)
        got[key] = wgmma_smem_steps(t.block_m, key[2], t.split_k, t.num_stages)
    assert got == cases
    # a user tile's deep ring (the launcher takes the same rule): no slots, the program still fits
    assert wgmma_smem_steps(8, 2048, 1, 10) == 0 and wgmma_smem_steps(16, 2048, 1, 8) == 0
    assert mxfp8_wgmma.shared_bytes(8, 2048, 1, 10, 0) <= mxfp8_wgmma.SHARED_BUDGET


def test_bf16_mul_at_the_measured_picks():
    """Run 132 (H200): BF16-multiply dequantization where the decode kernel's program converts steps into
    shared memory before its PDL wait or has an SM to itself (faster at each measured shape; by its registers: the
    64-row tile's programs of 2-3 steps with 2 early steps, run 344), not where two programs share an SM without such
    steps (slower there); run 134: the ring kernel always."""
    faster = [(1, 6144, 2048), (8, 6144, 2048), (64, 6144, 2048), (1, 6144, 768), (8, 6144, 768), (32, 6144, 768),
              (64, 2560, 6144), (64, 4992, 6144)]
    slower = [(1, 2560, 6144), (8, 2560, 6144), (16, 2560, 6144), (8, 4992, 6144), (8, 1536, 6144)]
    got = {}
    for m, n, k in faster + slower:
        t = pick_wgmma_tile(m, n, k, 132)
        got[m, n, k] = wgmma_launch(t.block_m, k, t.split_k, t.num_stages).bf16_mul
    assert got == {key: key in faster for key in faster + slower}
    rings = [(t, k) for m in (200, 256) for n, k in SHAPES + ((9856, 6144),)
             if (t := mxfp8_gemm_config.pick_ring_tile(m, n, k, 132))]
    assert rings and all(wgmma_launch(t.block_m, k, t.split_k, t.num_stages).bf16_mul for t, k in rings)
    for t in _picked_tiles():
        if t.block_m <= RESIDENT_MAX_M:
            for k in (768, 2048, 6144):
                if t.split_k <= k // 128 and t.num_stages <= mxfp8_wgmma.max_stages(t.block_m, k, t.split_k):
                    rules = wgmma_launch(t.block_m, k, t.split_k, t.num_stages)
                    alone = mxfp8_wgmma.shared_bytes(t.block_m, k, t.split_k, t.num_stages, rules.smem_steps) > \
                        mxfp8_wgmma.TWO_PER_SM_BYTES or rules.early_steps == 2 and \
                        mxfp8_wgmma.max_steps(k, t.split_k) > 1
                    assert rules.bf16_mul == (rules.smem_steps > 0 or alone), (t, k)


def test_bf16_mul_only_for_weights_whose_bytes_allow_it():
    """No NaN code and no scale byte above 134 (2^(s - 7) a normal BF16); unknown facts: no."""
    assert mxfp8_wgmma.bf16_mul_exact(ByteFacts(134, False))
    assert not mxfp8_wgmma.bf16_mul_exact(ByteFacts(135, False))
    assert not mxfp8_wgmma.bf16_mul_exact(ByteFacts(120, True))
    assert not mxfp8_wgmma.bf16_mul_exact(None)
    assert mxfp8_wgmma.bf16_mul_exact(seam.MXFP8Weight.from_bf16(torch.randn(128, 256)).byte_facts())


def test_one_launch_rule_set_per_tile():
    """wgmma_launch (what launch_gluon and tools/sm90_resources.py read) is the separate rules' values; the ring
    kernel (256 tokens) takes no weight steps before the PDL wait."""
    for bm, k, sk, st in [(8, 2048, 4, 2), (8, 6144, 12, 2), (32, 6144, 9, 2), (64, 768, 2, 2)]:
        smem = wgmma_smem_steps(bm, k, sk, st)
        assert wgmma_launch(bm, k, sk, st) == WgmmaLaunch(combine_group(bm, sk), wgmma_combiners(bm, sk), smem,
                                                          wgmma_early_steps(bm, k, sk, smem),
                                                          wgmma_bf16_mul(bm, k, sk, st, smem))
    assert wgmma_launch(64, 6144, 6, 2, partials=True).combiners == 1
    assert wgmma_launch(256, 6144, 3, 2) == WgmmaLaunch(1, 2, 0, 0, bf16_mul=True)
    assert wgmma_launch(128, 6144, 11, 2) == WgmmaLaunch(1, 8, 0, 1, bf16_mul=True)  # streams where given A_deq
    assert wgmma_launch(72, 6144, 6, 4) == WgmmaLaunch(1, 4, 0, 1, bf16_mul=True)
    assert wgmma_launch(96, 2048, 2, 4) == WgmmaLaunch(1, 2, 0, 1, bf16_mul=True)


def test_two_early_steps_of_several_take_bf16_multiplies():
    """The 64-row tile's programs of 2-3 K steps take 2 early steps; their registers keep one program per SM, so they
    dequantize by BF16 multiplies (through fp32 they spilled; run 344). One-step programs, two per SM, keep fp32."""
    for k, sk in [(896, 4), (1536, 6), (896, 3), (3584, 10), (2432, 10), (1920, 8)]:
        rules = wgmma_launch(64, k, sk, 2)
        assert rules.early_steps == 2 and rules.bf16_mul, (k, sk, rules)
    rules = wgmma_launch(64, 1536, 12, 1)
    assert rules.early_steps == 2 and not rules.bf16_mul
    t = pick_wgmma_tile(33, 2432, 896, 132)
    assert (t.block_m, t.split_k, t.num_stages, t.warp_specialized) == (64, 4, 2, False)
    assert wgmma_launch(64, 896, t.split_k, t.num_stages).bf16_mul


@needs_tool
def test_two_early_steps_of_several_compile_for_sm90_without_spills():
    """Those launches as launched (BF16 multiplies), on E4M3 rows and on A_deq: no spills (fp32: 255 registers and
    16-24 bytes of spills)."""
    runs = [(2, 4, 896, False), (2, 4, 896, True), (2, 3, 896, False), (2, 10, 3584, True)]
    results = with_tool(
        f"for st, sk, k, a_deq in {runs!r}:\n"
        "    r = tool.resources('wgmma', 64, split_k=sk, num_stages=st, k=k, a_deq=a_deq, warp_specialized=False)\n"
        "    print(json.dumps([st, sk, k, a_deq, r]))\n"
    )
    assert len(results) == len(runs)
    for *config, r in results:
        assert r["stack_bytes"] == 0 and r["registers"] <= 168, (config, r)


def _streamed(m: int, n: int, k: int, sms: int = 132) -> bool:
    t = pick_wgmma_tile(m, n, k, sms)
    return wgmma_launch(t.block_m, k, t.split_k, t.num_stages, a_deq_programs=-(-n // 128) * t.split_k,
                        sms=sms).a_stream


def test_a_stream_at_the_measured_picks():
    """Run 139 (H200): given A_deq, the decode kernel streams it where resident activations leave one program per
    SM and the picked split takes two waves (N 4992 x 6144 at 33-64 tokens: faster), not where the split runs in
    one wave (slower there) nor at 32 tokens (two programs per SM already); only on the measured 64-row tile (not
    the 16-32-row tiles of N >= 8192); never without A_deq (nothing to stream) nor on the ring kernel; where it
    streams, two programs fit on an SM."""
    assert _streamed(64, 4992, 6144) and _streamed(33, 4992, 6144) and _streamed(64, 8192, 6144)
    slower = [(64, 2560, 6144), (64, 3072, 6144), (64, 6144, 2048), (32, 4992, 6144), (8, 4992, 6144)]
    unmeasured = [(32, 8192, 6144), (16, 12288, 6144), (32, 12288, 4096)]
    assert not any(_streamed(*key) for key in slower + unmeasured)
    t = pick_wgmma_tile(64, 4992, 6144, 132)
    assert not wgmma_launch(t.block_m, 6144, t.split_k, t.num_stages).a_stream  # no A_deq
    # the ring kernel: even where its shared memory would leave one program per SM, past one wave
    assert not wgmma_a_stream(256, 6144, 2, 2, 10 * 132, 132)
    assert not wgmma_launch(256, 6144, 3, 2, a_deq_programs=10 * 132, sms=132).a_stream
    for n, k in SHAPES + ((8192, 6144), (12288, 4096)):
        for m in range(1, RESIDENT_MAX_M + 1):
            if (t := pick_wgmma_tile(m, n, k, 132)) and _streamed(m, n, k):
                assert -(-n // 128) * t.split_k > 132, (m, n, k)
                assert mxfp8_wgmma.shared_bytes(t.block_m, k, t.split_k, t.num_stages, 0, a_stream=True) <= \
                    mxfp8_wgmma.TWO_PER_SM_BYTES < mxfp8_wgmma.shared_bytes(t.block_m, k, t.split_k, t.num_stages, 0)
                assert wgmma_smem_steps(t.block_m, k, t.split_k, t.num_stages) == 0


def test_dequantize_first_where_measured_faster():
    """Runs 150 and 152 (H200): without A_deq, the decode kernel has its activations dequantized into A_deq by a
    launch before it where it would stream a given A_deq (N 4992 x 6144 at 33-64 tokens, N 6144 x 4096 at 64:
    24-27% faster) and on its 64-row tile at K 1536-2048 (6-14% faster at N 3072-12288); elsewhere (K 6144
    or 1024 and below at 64 tokens, 32-token tiles) it stages MXFP8 rows itself (slower or tied there)."""
    def first(m, n, k, bf16_rows=False):
        t = pick_wgmma_tile(m, n, k, 132)
        return wgmma_dequantize_first(t.block_m, k, t.split_k, t.num_stages, -(-n // 128) * t.split_k, 132,
                                      bf16_rows=bf16_rows)

    taken = [(64, 4992, 6144), (33, 4992, 6144), (64, 6144, 4096), (64, 6144, 2048), (48, 6144, 2048),
             (64, 3072, 2048), (64, 12288, 2048), (64, 7168, 1536)]
    left = [(64, 2560, 6144), (64, 1536, 6144), (64, 2048, 6144), (64, 4096, 1024), (64, 6144, 768),
            (64, 4096, 4096), (32, 4992, 6144), (32, 6144, 2048), (32, 4096, 2048), (8, 4992, 6144)]
    assert all(first(*key) for key in taken) and not any(first(*key) for key in left)
    assert wgmma_config.DEQUANTIZE_FIRST_K == (1536, 2048)
    # BF16 rows (runs 159-160): every 32- and 64-row tile (17-64 tokens, 0.86-1.0x the separate quantizer's
    # time at 30 points); not the 8- and 16-row tiles (up to 1.27x slower than the kernel quantizing them)
    shapes = [(2560, 6144), (1536, 6144), (6144, 2048), (6144, 768), (4992, 6144), (3072, 6144)]
    assert all(first(m, n, k, bf16_rows=True) for n, k in shapes for m in (17, 24, 32, 48, 64))
    assert not any(first(m, n, k, bf16_rows=True) for n, k in shapes for m in (2, 8, 12, 16))


def test_launcher_refuses_a_stream_without_a_deq_before_launch():
    """A_STREAM streams A_deq: without it (BF16 rows for the kernel to quantize), or beside shared-memory weight
    steps, ValueError before any launch (the kernel is never reached, so this runs on the CPU too)."""
    x = torch.zeros(8, 256, dtype=torch.bfloat16)
    w, ws = torch.zeros(128, 256, dtype=torch.uint8), torch.zeros(128 * 8, dtype=torch.uint8)
    out = torch.empty(8, 128, dtype=torch.bfloat16)
    for a_deq, smem in ((False, 0), (True, 1)):
        with pytest.raises(ValueError, match="a_stream"):
            mxfp8_wgmma.launch_mxfp8_linear_wgmma(x, None, w, ws, out, 8, 1, 2, out, out, False, 1, early_steps=0,
                                                  smem_steps=smem, combiners=1, a_deq=a_deq, a_stream=True)


@needs_tool
def test_streamed_a_deq_kernels_compile_for_sm90_two_per_sm():
    """Every streamed-A_deq decode kernel the rule takes at the benchmarked shapes (and the QKV op's partials-only
    launch at nkv 2, 4), compiled for sm_90: no spills, at most 128 registers and shared memory for two programs
    per SM (what the rule counts on)."""
    runs = set()
    for n, k in SHAPES + tuple(((19 * nkv + 1) * 128, 6144) for nkv in (2, 4)):
        for m in range(2, RESIDENT_MAX_M + 1):
            if _streamed(m, n, k):
                t = pick_wgmma_tile(m, n, k, 132)
                runs |= {(t.block_m, t.num_stages, t.split_k, k, partials) for partials in (False, True)}
    assert runs
    results = with_tool(
        f"for bm, st, sk, k, partials in {sorted(runs)!r}:\n"
        "    r = tool.resources('wgmma', bm, split_k=sk, num_stages=st, k=k, partials=partials, a_deq=True,\n"
        "                       a_stream=True)\n"
        "    print(json.dumps([bm, st, sk, k, partials, r]))\n"
    )
    assert len(results) == len(runs)
    for *config, r in results:
        assert r["stack_bytes"] == 0 and r["registers"] <= 128, (config, r)
        assert r["shared_bytes"] <= SM90_SHARED_BYTES_PER_SM // 2 - 1024, (config, r)


@needs_tool
@pytest.mark.timeout(450)  # dozens of compiles: past 150 s under the GPU suite's load (run 193)
def test_streamed_tiles_compile_for_sm90_without_spills():
    """Every 64 + tail and 128-token kernel the picker takes at the benchmarked shapes, and its 64-row tile given A_deq
    (warp-specialized where picked so) and warp-specialized 32-token tile, the token tiles at 129-384 tokens
    (pick_token_tiles; the split reaches the code through its steps, combiners and combine group), with BF16-multiply
    and fp32 weight dequantization, and the QKV op's partials-only launches (nkv 1, 2, 4: the same tiles): no spills,
    shared memory within the limit and, on the 64 + tail tiles, above two programs' share (one per SM)."""
    runs = set()
    for n, k in SHAPES + ((9856, 6144), (6144, 256), (6144, 512), (4096, 1024)):
        # 40: the 64-row tile picked given A_deq (unsplit at K <= 1024); 24: the 32-token one (at K 512-768, wide N);
        # 70-100: the streamed tiles, or two 64-token tiles (K 256-1536 and 100 tokens at K >= 2048)
        for m in (24, 40, 70, 80, 96, 100):
            if (t := pick_wgmma_tile(m, n, k, 132, a_deq=True)) is not None and (t.block_m >= 64 or t.warp_specialized):
                runs |= {(t.block_m, t.num_stages, t.split_k, k, False, bf16_mul, t.warp_specialized)
                         for bf16_mul in (True, False)}
        for m in (129, 160, 192, 256, 384):
            if (t := pick_token_tiles(m, n, k, 132)) is not None:
                runs |= {(t.block_m, t.num_stages, t.split_k, k, False, bf16_mul, True) for bf16_mul in (True, False)}
        for m in (385, 512, 768, 1024, 1536, 2048):  # the token tiles past 384 (pick_prefill_token_tiles)
            if (t := pick_prefill_token_tiles(m, n, k, 132)) is not None:
                runs.add((t.block_m, t.num_stages, t.split_k, k, False, True, True))
    for n, k in ((6144, 384), (2048, 1536), (8192, 768)):  # two 64-token tiles at 3 stages and at split 2; the
        # streamed tile unsplit where they would take more than 7/8 of the SMs
        t = pick_wgmma_tile(100, n, k, 132, a_deq=True)
        runs |= {(t.block_m, t.num_stages, t.split_k, k, False, bf16_mul, True) for bf16_mul in (True, False)}
    # the 192-token tile (128 + 64 tokens) at splits beyond its pick's: its combine (2 combiners at split 3), partials
    runs |= {(192, 3, split, 6144, partials, not partials, True) for split in (1, 3, 6) for partials in (False, True)}
    # the 128 + 128-token tile (two [64, 128] accumulators per consumer) at one and two combiners, and its partials
    runs |= {(256, 2, split, 6144, partials, not partials, True) for split in (1, 3) for partials in (False, True)}
    # the narrower wide tiles at their deepest rings (144 at 4 stages: the closest to the shared-memory limit)
    runs |= {(bm, st, 3, 6144, partials, not partials, True) for bm, st in ((136, 4), (144, 4), (160, 3))
             for partials in (False, True)}
    for nkv in (1, 2, 4):
        n = (19 * nkv + 1) * 128
        for m in (70, 100):  # a 64 + tail tile and the 128-token tile, as pick_qkv_tile runs them
            t = pick_wgmma_tile(m, n, 6144, 132, partials=True)
            runs.add((t.block_m, t.num_stages, t.split_k, 6144, True, False, t.warp_specialized))
        for m in (129, 160, 193, 257, 384):  # the token tiles, the wide tiles at nkv 2 (136, 160, 256) included
            if (t := pick_token_tiles(m, n, 6144, 132)) is not None:
                runs.add((t.block_m, t.num_stages, t.split_k, 6144, True, False, True))
        for m in (512, 1024, 2048):  # past 384 tokens, where the token tiles take them
            if (t := pick_prefill_token_tiles(m, n, 6144, 132)) is not None:
                runs.add((t.block_m, t.num_stages, t.split_k, 6144, True, False, True))
    # the 64 + tail tiles' partials as overrides: the plain decode kernel's too
    runs |= {(72, 4, 8, 6144, True, False, False), (96, 4, 3, 6144, True, False, False)}
    assert any(run[0] == 64 for run in runs) and any(run[0] == 32 for run in runs)
    results = with_tool(
        f"for bm, st, sk, k, partials, bf16_mul, ws in {sorted(runs)!r}:\n"
        "    r = tool.resources('wgmma', bm, split_k=sk, num_stages=st, k=k, partials=partials, bf16_mul=bf16_mul,\n"
        "                       warp_specialized=ws, a_deq=True)\n"
        "    print(json.dumps([bm, st, sk, k, partials, bf16_mul, ws, r]))\n"
    )
    assert len(results) == len(runs) >= 32
    for *config, r in results:
        assert r["stack_bytes"] == 0 and r["shared_bytes"] <= SM90_SHARED_BYTES, (config, r)
        if config[0] in mxfp8_wgmma.TAIL_TILES:
            assert r["shared_bytes"] > mxfp8_wgmma.TWO_PER_SM_BYTES, (config, r)


def test_combiners_spread_only_large_partials():
    """Run 68 (H200): one combiner for 8 tokens at split 12 and 64 tokens at split 2; a power of two of the
    tile's programs, at most 16, from 160 split x tokens (16 tokens at split 10)."""
    got = [wgmma_combiners(bm, sk) for bm, sk in [(8, 12), (8, 4), (16, 6), (64, 2), (16, 10), (8, 22), (32, 12),
                                                  (64, 6), (64, 5), (128, 2), (128, 11), (256, 3), (8, 48)]]
    assert got == [1, 1, 1, 1, 8, 16, 8, 4, 4, 2, 8, 2, 16]


def test_combiners_out_of_range_rejected():
    """More combiners than splits would leave the counter above zero (the next launch would read partials
    before they arrive): the launchers refuse them, and counts that are not powers of two, before any launch."""
    wgmma_combine.check_combiners(4, 6)
    wgmma_combine.check_combiners(16, 48)
    for combiners, split in [(0, 4), (3, 12), (8, 4), (32, 48)]:
        with pytest.raises(ValueError, match="combiners"):
            wgmma_combine.check_combiners(combiners, split)


def test_launcher_refuses_bad_early_steps_and_combiners_before_launch():
    """The decode kernel's launcher checks its rule-given arguments first: nothing is read or launched
    (CPU tensors here, which no Gluon launch could take)."""
    t = torch.zeros(8, 256, dtype=torch.uint8)
    args = (t, t, t, t, t, 8, 4, 2, t, t, False, 4)
    with pytest.raises(ValueError, match="early_steps"):
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(*args, early_steps=3, smem_steps=0, combiners=1)
    for smem_steps, early_steps in [(3, 1), (1, 2), (-1, 0)]:
        with pytest.raises(ValueError, match="smem_steps"):
            mxfp8_wgmma.launch_mxfp8_linear_wgmma(*args, early_steps=early_steps, smem_steps=smem_steps, combiners=1)
    with pytest.raises(ValueError, match="combiners"):
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(*args, early_steps=1, smem_steps=0, combiners=8)


def test_picker_never_chooses_gluon_without_a_hopper_gpu():
    cpu = torch.device("cpu")
    for m in (2, 8, 64):
        assert not pick_tile(m, 2560, 6144, cpu).wgmma


def test_default_pick_on_hopper_is_the_gluon_tile(monkeypatch):
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    for m in (2, 8, 64):
        assert pick_tile(m, 2560, 6144, cuda) == pick_wgmma_tile(m, 2560, 6144, 132)
        assert not pick_tile(m, 2560, 6144, cuda, tl_only=True).wgmma
    assert pick_tile(1, 2560, 6144, cuda) == pick_wgmma_tile(2, 2560, 6144, 132)  # one token, N >= 2560
    assert not pick_tile(1, 1536, 6144, cuda).wgmma  # one token, narrower: the GEMV
    assert pick_tile(65, 2560, 6144, cuda) == pick_wgmma_tile(65, 2560, 6144, 132)  # a 64 + tail tile
    assert pick_tile(65, 2560, 6144, cuda).block_m == 72 and pick_tile(97, 4992, 6144, cuda).block_m == 128
    assert pick_tile(97, 2560, 6144, cuda).block_m == 64  # two 64-token tiles
    assert not pick_tile(128, 2560, 6144, cuda).ring
    # the fused QKV op takes the same GEMM (into an fp32 accumulator, then its epilogue kernel)
    for m in (2, 20, 64):
        for nkv in (1, 2, 4):
            n = (19 * nkv + 1) * 128
            assert pick_qkv_tile(m, n, 6144, cuda) == pick_tile(m, n, 6144, cuda)
            assert not pick_qkv_tile(m, n, 6144, cuda, tl_only=True).wgmma
    # and past 64 tokens: the 64 + tail tiles to 96 tokens (log run 207), then the 128-token tile (not the two
    # 64-token tiles mxfp8_linear takes at nkv 1 from 97 tokens: not measured for the partials)
    for m in (65, 80, 96, 100, 128):
        for nkv in (1, 2, 4):
            n = (19 * nkv + 1) * 128
            t, q = pick_tile(m, n, 6144, cuda), pick_qkv_tile(m, n, 6144, cuda)
            assert (q.block_m in mxfp8_wgmma.TAIL_TILES) == (m <= 96) and q.block_m > 64
            assert q == t or nkv == 1 and m > 96 and t.block_m == 64


def test_wgmma_tiles_rejected_where_they_cannot_run(device):
    x = torch.randn(4, 256).to(torch.bfloat16).to(device)
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 256).to(device))
    tile = Tile(8, 128, 128, 8, 2, 2, wgmma=True)
    out = torch.zeros(4, 128, dtype=torch.bfloat16, device=device)
    if device.type != "cuda":
        with pytest.raises(ValueError, match="tile.wgmma needs a Hopper GPU"):
            seam.mxfp8_linear(x, w, tile=tile, out=out)
        assert out.eq(0).all()
    with pytest.raises(ValueError, match="applies to a GEMM launch only"):
        check_tile(tile, 256)  # the epilogue-only entry's check (no m: no GEMM)
    with pytest.raises(TypeError, match="tile.wgmma must be a bool"):
        check_tile(dataclasses.replace(tile, wgmma=1), 256)


def test_tma_ready_accepts_only_what_tma_reads_as_is():
    """Operands TMA cannot read as they are send a call to the tl kernel (``launch_mxfp8_linear``)."""
    x = torch.zeros(8, 256, dtype=torch.bfloat16)
    assert mxfp8_wgmma.tma_ready(x)
    assert mxfp8_wgmma.tma_ready(torch.zeros(8, 264, dtype=torch.bfloat16)[:, :256])  # 528-byte rows
    assert not mxfp8_wgmma.tma_ready(x[:, 1:])  # base 2 bytes past alignment
    assert not mxfp8_wgmma.tma_ready(torch.zeros(8, 260, dtype=torch.bfloat16)[:, :256])  # 520-byte rows
    assert not mxfp8_wgmma.tma_ready(x[:1].expand(8, 256))  # one row repeated (stride 0)
    assert not mxfp8_wgmma.tma_ready(torch.zeros(2048, dtype=torch.bfloat16).as_strided((8, 256), (128, 1)))
    assert not mxfp8_wgmma.tma_ready(x.t())  # no unit column stride
    scales = torch.zeros(512, dtype=torch.uint8)  # swizzled scales: any shape, contiguous 16-byte rows
    assert mxfp8_wgmma.tma_ready(scales) and mxfp8_wgmma.tma_ready(scales.view(128, 4))
    assert not mxfp8_wgmma.tma_ready(scales[16:504])  # 488 bytes: not whole 16-byte rows
    assert not mxfp8_wgmma.tma_ready(scales[1:497])  # base past alignment
    assert not mxfp8_wgmma.tma_ready(scales.view(128, 4)[:, :2])  # not contiguous


@pytest.mark.gpu
def test_wgmma_tile_sizes_checked_gpu():
    x = torch.randn(9, 256, device="cuda").to(torch.bfloat16)
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 256, device="cuda"))
    bad = [
        (Tile(8, 128, 128, 8, 2, 2, wgmma=True), "block_m in \\(8, 16, 32, 64, 72, 80, 96, 128\\) and >= M=9"),
        (Tile(16, 64, 128, 8, 2, 2, wgmma=True), "block_n=128, block_k=128, num_warps=8"),
        (Tile(16, 128, 128, 8, 2, 3, wgmma=True), "split_k in \\[1, K/128=2\\]"),
        (Tile(16, 128, 128, 8, 3, 2, wgmma=True), "num_stages in \\[1, 1\\]"),
        (Tile(16, 128, 128, 8, 1, 2, max_registers=128, wgmma=True), "no max_registers"),
    ]
    for tile, msg in bad:
        with pytest.raises(ValueError, match=msg):
            seam.mxfp8_linear(x, w, tile=tile)
    with pytest.raises(ValueError, match="K a multiple of 128"):
        seam.mxfp8_linear(x[:, :224], seam.MXFP8Weight.from_bf16(torch.randn(128, 224, device="cuda")),
                          tile=Tile(16, 128, 128, 8, 1, 1, wgmma=True))


@needs_tool
@pytest.mark.timeout(450)  # dozens of compiles: past 150 s under the GPU suite's load (run 179)
def test_every_picked_kernel_compiles_for_sm90_without_spills():
    """Every distinct kernel the picker chooses for the benchmarked shapes (block_m, ring depth, steps
    per program and shared-memory weight steps change the code; the split and K beyond that do not), E4M3
    activations, and BF16 ones (quantized in the kernel, or A_deq) at each block_m's longest range with and
    without shared-memory steps, each with the weight dequantization its rule takes and, where that is BF16
    multiplies, also the fp32 one (weights that do not allow them), and the partials-only kernels the QKV op
    picks (on E4M3 rows and on A_deq) (nkv 1, 2, 4): no spills, shared memory within the limit,
    up to 32 tokens at most 128 registers (two programs per SM; the weight steps read before the PDL
    wait are held across the activation staging), and with shared-memory steps at most half an SM's
    shared memory.
    One process compiles them all (``tools/sm90_resources.py``'s ``resources``)."""
    configs = {}
    for n, k in SHAPES:
        for m in range(2, RESIDENT_MAX_M + 1):
            t = pick_wgmma_tile(m, n, k, 132)
            # the split reaches the code through the combiners and the combine group only
            key = (t.block_m, t.num_stages, mxfp8_wgmma.max_steps(k, t.split_k),
                   wgmma_combiners(t.block_m, t.split_k), combine_group(t.block_m, t.split_k),
                   wgmma_smem_steps(t.block_m, k, t.split_k, t.num_stages))
            configs.setdefault(key, (t.split_k, k))
    longest = {(key[0], key[-1]): max(other for other in configs if (other[0], other[-1]) == (key[0], key[-1]))
               for key in configs}
    runs = [(key[0], key[1], sk, k, False, False, False, None) for key, (sk, k) in sorted(configs.items())]
    runs += [(key[0], key[1], *configs[key], True, False, False, None) for key in sorted(longest.values())]
    runs += [(key[0], key[1], *configs[key], False, False, True, None) for key in sorted(longest.values())]  # A_deq
    # where the rule takes BF16 multiplies (None above), also the fp32 path of weights that do not allow them
    runs += [(bm, st, sk, k, False, False, False, False) for bm, st, sk, k, *_ in runs[:len(configs)]
             if wgmma_launch(bm, k, sk, st).bf16_mul]
    qkv = {}
    for nkv in (1, 2, 4):
        for m in range(2, RESIDENT_MAX_M + 1):
            t = pick_wgmma_tile(m, (19 * nkv + 1) * 128, 6144, 132)  # pick_qkv_tile's on Hopper (test above)
            qkv.setdefault((t.block_m, t.num_stages, mxfp8_wgmma.max_steps(6144, t.split_k)), t.split_k)
    runs += [(bm, st, sk, 6144, False, True, a_deq, None) for (bm, st, _), sk in sorted(qkv.items())
             for a_deq in (False, True)]
    results = with_tool(
        f"for bm, st, sk, k, bf16, partials, a_deq, bf16_mul in {runs!r}:\n"
        "    r = tool.resources('wgmma', bm, split_k=sk, num_stages=st, k=k, a_bf16=bf16, partials=partials,\n"
        "                       a_deq=a_deq, bf16_mul=bf16_mul)\n"
        "    print(json.dumps([bm, st, sk, k, bf16, partials, a_deq, bf16_mul, r]))\n"
    )
    assert len(results) == len(runs)
    for *config, r in results:
        assert r["stack_bytes"] == 0, (config, r)
        if config[0] <= 32:  # two programs per SM (256 threads each): the picker's two waves count on them
            assert r["registers"] <= 128, (config, r)
        if wgmma_smem_steps(config[0], config[3], config[2], config[1]):  # slots keep two programs per SM (run 72)
            assert r["shared_bytes"] <= SM90_SHARED_BYTES_PER_SM // 2 - 1024, (config, r)
        assert r["shared_bytes"] <= SM90_SHARED_BYTES, (config, r)


@needs_tool
def test_8_row_tiles_wait_for_every_a_deq_copy_before_the_first_mma():
    """mxfp8_wgmma.A_DEQ_WAIT_ALL_MAX_M in the sm_90 PTX: between the PDL wait and the first wgmma, an 8-row
    A_deq tile waits on as many barriers as the tile that stages E4M3 rows (every step's copy; log run 114),
    a 16-row one on those less all but step 0's (each later step is waited for before its own MMA). A
    race (an MMA reading a copy not yet landed) would pass the GPU tests unless timing exposed it."""
    cases = [(8, 12, 6144), (8, 4, 768), (16, 12, 6144), (16, 4, 2048)]
    results = with_tool(
        f"for bm, sk, k in {cases!r}:\n"
        "    for a_deq in (False, True):\n"
        "        lines = tool.resources('wgmma', bm, split_k=sk, num_stages=2, k=k, a_deq=a_deq, ptx=True)['ptx']\n"
        "        lines = lines.splitlines()\n"
        "        gdc = next(i for i, l in enumerate(lines) if 'griddepcontrol.wait' in l)\n"
        "        mma = next(i for i, l in enumerate(lines) if 'wgmma.mma_async' in l)\n"
        "        waits = sum(gdc < i < mma and 'mbarrier.try_wait' in l for i, l in enumerate(lines))\n"
        "        print(json.dumps([bm, sk, k, a_deq, waits]))\n"
    )
    waits = {tuple(r[:4]): r[4] for r in results}
    assert mxfp8_wgmma.A_DEQ_WAIT_ALL_MAX_M.value == 8  # measured: 16-row tiles lose 0.1-0.25 us waiting once
    for bm, sk, k in cases:
        steps = mxfp8_wgmma.max_steps(k, sk)
        staged = waits[bm, sk, k, False]
        assert staged >= steps, (bm, sk, k, staged)
        assert waits[bm, sk, k, True] == (staged if bm <= mxfp8_wgmma.A_DEQ_WAIT_ALL_MAX_M.value
                                          else staged - steps + 1), (bm, sk, k, waits)


# GPU: bytes on exact sums at the picked tiles, the tl kernel where TMA cannot read an operand.


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(2560, 6144), (6144, 768), (200, 512)])
@pytest.mark.parametrize("m", [1, 2, 9, 17, 33, 64])
def test_bit_exact_every_picked_tile_gpu(m, n, k):
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    tile = pick_tile(m, n, k, x.device)
    assert tile.wgmma == (m > 1 or n >= WGMMA_ONE_TOKEN_MIN_N)  # else one token's GEMV
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("tile,k", [
    (Tile(8, 128, 128, 8, 1, 4, wgmma=True), 6144),  # one stage: every step refills the ring
    (Tile(16, 128, 128, 8, 3, 5, wgmma=True), 6144),  # uneven split: 9 or 10 steps per program
    (Tile(64, 128, 128, 8, 2, 1, wgmma=True), 768),  # no split: the direct store
    (Tile(128, 128, 128, 8, 1, 4, wgmma=True), 2048),  # the streamed tile: every step refills both rings
    (Tile(128, 128, 128, 8, 4, 5, wgmma=True), 2048),  # its deepest ring, uneven split (3-4 steps per program)
    (Tile(128, 128, 128, 8, 3, 1, wgmma=True), 2048),  # no split: the direct store
    (Tile(72, 128, 128, 8, 1, 4, wgmma=True), 2048),  # a 64 + tail tile: every step refills both rings
    (Tile(96, 128, 128, 8, 4, 5, wgmma=True), 2048),  # uneven split (3-4 steps per program)
    (Tile(80, 128, 128, 8, 3, 1, wgmma=True), 2048),  # no split: both accumulators' direct stores
], ids=str)
@pytest.mark.parametrize("warp_specialized", [True, False], ids=["ws", "landed"])
def test_bit_exact_ring_refills_and_uneven_splits_gpu(monkeypatch, tile, k, warp_specialized):
    """Exact sums at ring depths, splits and stores the picker may not take; the 64-128-row tiles on both decode
    kernels: warp-specialized and the plain one."""
    if warp_specialized and tile.block_m not in mxfp8_wgmma_ws.BLOCK_MS:
        pytest.skip("the 8-32-row tiles have one kernel")
    tile = dataclasses.replace(tile, warp_specialized=warp_specialized)
    launched = _spy_decode_kernels(monkeypatch)
    x, w, want = exact_block_inputs(tile.block_m - 3, 640, k, seed=tile.split_k)
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile
    assert set(launched) == {"ws" if warp_specialized else "landed"}


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,split", [(100, 2560, 6144, None), (65, 4992, 6144, None), (128, 6144, 2048, None),
                                         (90, 200, 2048, None), (70, 2560, 6144, 5), (40, 2560, 6144, 5)])
def test_warp_specialized_partials_are_the_landed_kernels_gpu(monkeypatch, m, n, k, split):
    """The fused QKV op's GEMM (partials only, summed by its epilogue) on the warp-specialized kernel writes the
    plain decode kernel's partials bit for bit, [tiles, split, block_m, 128], at the tiles pick_qkv_tile takes
    (the 128-token tile at splits 6 and 2, the 72-token 64 + tail tile at 3; N 200 at split 4: rows past N), and at
    uneven splits (48 K steps over 5) on the 128- and 64-row tiles."""
    w, a = _random_operands_with_a_deq(m, n, k)
    tile = pick_qkv_tile(m, n, k, w.values.device)
    if split is not None:
        tile = Tile(64 if m <= 64 else 128, 128, 128, 8, 4, split, wgmma=True, warp_specialized=True)
    assert tile.warp_specialized and tile.block_m in (64, *mxfp8_wgmma.TAIL_TILES, 128)
    args = (a.values, a.scales, w.values, w.scales, None)
    launched = _spy_decode_kernels(monkeypatch)
    ws = gluon_launch.launch_gluon(*args, tile, True, partials=True, a_deq=a.a_deq).clone()  # shared scratch
    fits = mxfp8_wgmma.max_stages(tile.block_m, k, tile.split_k, streamed=tile.block_m > RESIDENT_MAX_M)
    landed_tile = dataclasses.replace(tile, warp_specialized=False, num_stages=min(tile.num_stages, fits))
    landed = gluon_launch.launch_gluon(*args, landed_tile, True, partials=True, a_deq=a.a_deq)
    assert launched == ["ws", "landed"]
    assert ws.shape == landed.shape == (-(-n // 128), tile.split_k, tile.block_m, 128)
    assert torch.equal(ws, landed), tile


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,ws", [(33, 9856, 6144, True), (64, 4992, 6144, True), (40, 2560, 6144, True),
                                      (64, 6144, 2048, True), (48, 200, 2048, True), (64, 1536, 6144, False),
                                      (64, 6144, 768, True), (33, 6144, 256, True), (40, 4096, 1024, True),
                                      (50, 3000, 512, True), (36, 6144, 128, True), (64, 2048, 768, False),
                                      (48, 6144, 1536, False), (64, 2048, 1536, False)])
def test_bit_exact_64_row_tile_given_a_deq_gpu(monkeypatch, m, n, k, ws):
    """33-64 tokens given A_deq: the picked tile (warp-specialized at the one-wave split where it is at most 6 and K
    >= 2048, unsplit at K <= 1024 where ws_whole_k says, else the plain decode kernel's) gives the exact sums'
    bytes (N 3000: a tile partly past N)."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
    assert pick_tile(m, n, k, x.device, a_deq=True).warp_specialized == ws
    launched = _spy_decode_kernels(monkeypatch)
    got = seam.mxfp8_linear(act, w)
    assert launched == ["ws" if ws else "landed"]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("bf16_rows", [False, True])
@pytest.mark.parametrize("m,n,k,ws", [(64, 6144, 768, True), (33, 3072, 768, True), (40, 3000, 512, True),
                                      (36, 6144, 128, True), (64, 4096, 1024, False), (48, 2048, 768, False),
                                      (33, 2432, 896, False)])
def test_bit_exact_64_row_tile_on_rows_gpu(monkeypatch, m, n, k, ws, bf16_rows):
    """33-64 tokens on MXFP8 rows without A_deq, or on BF16 rows: where ws_whole_k takes the shape (K <= 768) the
    unsplit warp-specialized tile runs after its path's own A_deq launch, else the plain decode kernel; both give the
    exact sums' bytes (N 3000: a tile partly past N)."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    xq, xs = seam.mxfp8_quantize(x)
    act = x if bf16_rows else seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    assert pick_tile(m, n, k, x.device).warp_specialized == ws
    launched = _spy_decode_kernels(monkeypatch)
    got = seam.mxfp8_linear(act, w)
    assert launched == ["ws" if ws else "landed"]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("given", ["a_deq", "rows", "bf16"])
@pytest.mark.parametrize("m,n,k,block_m", [(65, 8192, 768, 72), (96, 8064, 512, 96), (128, 8000, 768, 128),
                                           (100, 896, 768, None)])
def test_bit_exact_streamed_tiles_at_short_k_gpu(monkeypatch, m, n, k, block_m, given):
    """65-128 tokens at K 512-768 on N too wide for two 64-token tiles in 7/8 of the SMs but within ws_short_k: the
    unsplit warp-specialized streamed tile, given A_deq or after its path's own A_deq launch (MXFP8 and BF16 rows),
    gives the exact sums' bytes (N 8000, 8064: a tile partly past N); N below 1024 keeps the prefill path."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    xq, xs = seam.mxfp8_quantize(x)
    act = (x if given == "bf16" else
           seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs) if given == "a_deq"
                                    else None))
    tile = pick_tile(m, n, k, x.device, a_deq=given == "a_deq")
    assert (tile.block_m, tile.split_k, tile.warp_specialized) == (block_m, 1, True) if block_m else tile.bf16_mm, tile
    launched = _spy_decode_kernels(monkeypatch)
    got = seam.mxfp8_linear(act, w)
    assert launched == (["ws"] if block_m else [])
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,split", [(65, 6144, 768, 1), (128, 6000, 768, 1), (100, 3072, 768, 1),
                                         (112, 2000, 1536, 2), (65, 1024, 1920, 4), (128, 4096, 256, 1),
                                         (80, 1152, 384, 1), (100, 6144, 2048, 1), (128, 1536, 6144, 5),
                                         (97, 2560, 6144, 3), (120, 4000, 4096, 2)])
def test_bit_exact_two_64_token_tiles_gpu(monkeypatch, m, n, k, split):
    """65-128 tokens over two 64-token tiles of the warp-specialized kernel where two_token_tiles_split takes them
    (below K 2048 at 65-128 tokens, from K 2048 at 97-128): the exact sums' bytes given A_deq and on MXFP8 and BF16
    rows (after the path's own A_deq launch), into NaN-poisoned outputs; the second token tile's 1-64 tokens (65, 97,
    128), N tiles partly past N (6000, 2000, 4000), an uneven K split (K 1920: 4 + 4 + 4 + 3 steps), a ring as deep as
    two steps (K 256)."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n + k)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
    tile = pick_tile(m, n, k, x.device, a_deq=True)
    assert tile == pick_tile(m, n, k, x.device)  # the same tile on the rows alone
    assert (tile.block_m, tile.split_k, tile.warp_specialized) == (RESIDENT_MAX_M, split, True), tile
    launched = _spy_decode_kernels(monkeypatch)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=x.device)
    got = [seam.mxfp8_linear(act, w, out=out).clone()] + linear_both_paths(x, w, tile)
    assert launched == ["ws"] * 3
    for y in got:
        assert torch.equal(y.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,split", [(17, 6144, 768, 1), (32, 6000, 512, 1), (24, 9856, 640, 1),
                                         (32, 4096, 768, None), (20, 6144, 2048, 2), (24, 4992, 6144, 3),
                                         (32, 4096, 2048, None)])
def test_bit_exact_32_token_tile_gpu(monkeypatch, m, n, k, split):
    """17-32 tokens given A_deq on the warp-specialized 32-token tile: unsplit at K 512-768 on wide N (ws_short_k),
    at the one-wave split 2-3 from K 2048 (ws_small_split), with the exact sums' bytes (N 6000: a tile partly past N;
    M 17-24: padded token columns); elsewhere (``split`` None) the plain kernel's split 32-row tile."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
    tile = pick_tile(m, n, k, x.device, a_deq=True)
    assert tile.block_m == 32 and tile.warp_specialized == (split is not None), tile
    assert split is None or tile.split_k == split, tile
    launched = _spy_decode_kernels(monkeypatch)
    got = seam.mxfp8_linear(act, w)
    assert launched == ["landed" if split is None else "ws"]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def _spy_decode_kernels(monkeypatch) -> list[str]:
    """Record which decode kernel each launch runs: "ws" (mxfp8_wgmma_ws) or "landed" (mxfp8_wgmma)."""
    launched = []
    for module, name, label in ((mxfp8_wgmma_ws, "launch_mxfp8_linear_wgmma_ws", "ws"),
                                (mxfp8_wgmma, "launch_mxfp8_linear_wgmma", "landed")):
        launch = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *args, _l=launch, _n=label, **kw: launched.append(_n) or _l(*args, **kw))
    return launched


def _random_operands_with_a_deq(m: int, n: int, k: int) -> tuple[seam.MXFP8Weight, seam.QuantizedActivation]:
    """A random MXFP8 weight [n, k] and MXFP8 rows [m, k] carrying their A_deq, on the GPU (inexact sums)."""
    g = torch.Generator().manual_seed(m + n)
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=g).cuda())
    xq, xs = seam.mxfp8_quantize((torch.randn(m, k, generator=g) * 3).to(torch.bfloat16).cuda())
    return w, seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,split", [(65, 2560, 6144, None), (90, 6144, 2048, None), (128, 4992, 6144, None),
                                         (100, 136, 2048, None), (96, 9856, 6144, None), (72, 2560, 6144, 5),
                                         (128, 1536, 6144, 6), (40, 2560, 6144, None), (64, 4992, 6144, 6),
                                         (33, 9856, 6144, 5), (64, 136, 2048, None), (50, 3072, 2048, 3),
                                         (64, 6144, 768, None), (40, 6144, 256, None)])
def test_warp_specialized_writes_the_landed_kernels_bytes_gpu(monkeypatch, m, n, k, split):
    """At the same tile the warp-specialized kernel gives the plain decode kernel's bytes on random (inexact)
    sums, at the tiles picked given A_deq (the 64-row one too): the same products in the same k16 order per split,
    each 64-row half-tile combined in split order (4 combiners per half-tile at split 6, a half-tile wholly past N
    at N 136, an uneven split); twice in a row (its arrival counters return to zero)."""
    w, a = _random_operands_with_a_deq(m, n, k)
    # past 64 tokens the streamed tiles (the fused QKV op's; mxfp8_linear takes two 64-token tiles at some shapes)
    tile = pick_tile(m, n, k, w.values.device, a_deq=True, partials=m > RESIDENT_MAX_M)
    assert split is not None or tile.warp_specialized
    if split is not None:
        tile = dataclasses.replace(tile, split_k=split, num_stages=4, warp_specialized=True)
    launched = _spy_decode_kernels(monkeypatch)
    ws = [seam.mxfp8_linear(a, w, tile=tile) for _ in range(2)]
    # the plain decode kernel at a depth it fits (the ring's depth does not change the bytes)
    fits = mxfp8_wgmma.max_stages(tile.block_m, k, tile.split_k, streamed=tile.block_m > RESIDENT_MAX_M)
    landed = seam.mxfp8_linear(a, w, tile=dataclasses.replace(tile, warp_specialized=False,
                                                               num_stages=min(tile.num_stages, fits)))
    assert launched == ["ws", "ws", "landed"], tile
    for got in ws:
        assert torch.equal(got.view(torch.int16), landed.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(129, 2560, 6144), (160, 1536, 6144), (192, 6144, 2048), (300, 4992, 6144),
                                   (256, 2560, 6144), (300, 1536, 6144), (384, 2560, 6144), (384, 136, 2048),
                                   (512, 1536, 6144), (600, 4992, 6144)])
def test_token_tiles_write_each_token_tiles_bytes_gpu(monkeypatch, m, n, k):
    """From 129 tokens the picked warp-specialized tile runs ceil(M / block_m) token tiles: on random (inexact)
    sums each token tile's rows are the bytes of the same tile run on those rows alone (one token tile: the same
    products, order and combine), twice in a row (every token tile's counters return to zero); and the exact sums
    of small-integer operands, on MXFP8 and BF16 rows."""
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m + n)) * 3).to(torch.bfloat16).cuda()
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=torch.Generator().manual_seed(n)).cuda())
    tile = pick_tile(m, n, k, x.device)
    assert tile.warp_specialized and m > tile.block_m, tile
    launched = _spy_decode_kernels(monkeypatch)
    outs = [seam.mxfp8_linear(x, w, tile=tile) for _ in range(2)]
    assert launched == ["ws", "ws"]
    for m0 in range(0, m, tile.block_m):
        rows = seam.mxfp8_linear(x[m0:m0 + tile.block_m], w, tile=tile)
        for got in outs:
            assert torch.equal(got[m0:m0 + tile.block_m].view(torch.int16), rows.view(torch.int16)), (tile, m0)
    x, w, want = exact_block_inputs(m, n, k, seed=m)
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("tile,m", [
    (Tile(64, 128, 128, 8, 4, 2, wgmma=True, warp_specialized=True), 100),  # two 64-row token tiles
    (Tile(72, 128, 128, 8, 2, 3, wgmma=True, warp_specialized=True), 300),  # five 64 + 8 tiles, the last 12 rows
], ids=str)
def test_bit_exact_token_tile_overrides_gpu(tile, m):
    """Token tiles of an override the picker does not choose: exact sums on MXFP8 and BF16 rows."""
    x, w, want = exact_block_inputs(m, 640, 2048, seed=m)
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("tile,m,n", [
    (Tile(192, 128, 128, 8, 3, 3, wgmma=True, warp_specialized=True), 160, 4992),  # run 199's best at TP 2 QKV
    (Tile(192, 128, 128, 8, 3, 1, wgmma=True, warp_specialized=True), 129, 640),  # one token on the 64-token accumulator
    (Tile(192, 128, 128, 8, 2, 6, wgmma=True, warp_specialized=True), 192, 2560),  # 4 combiners (the spread combine)
    (Tile(192, 128, 128, 8, 3, 2, wgmma=True, warp_specialized=True), 300, 640),  # two token tiles, the last 108 rows
    (Tile(192, 128, 128, 8, 3, 3, wgmma=True, warp_specialized=True), 350, 640),  # the second tile's 64-token rows
    (Tile(192, 128, 128, 8, 3, 5, wgmma=True, warp_specialized=True), 384, 1536),  # two full tiles, 4 combiners
    (Tile(192, 128, 128, 8, 3, 1, wgmma=True, warp_specialized=True), 100, 640),  # the second accumulator unused
    (Tile(136, 128, 128, 8, 4, 3, wgmma=True, warp_specialized=True), 129, 4992),  # the pick at 129-136 tokens
    (Tile(144, 128, 128, 8, 4, 3, wgmma=True, warp_specialized=True), 144, 4992),  # 4 stages: 226 KiB of shared memory
    (Tile(160, 128, 128, 8, 3, 3, wgmma=True, warp_specialized=True), 150, 640),  # the 32-token accumulator part full
    (Tile(136, 128, 128, 8, 4, 2, wgmma=True, warp_specialized=True), 300, 640),  # three token tiles, the last 28 rows
    (Tile(144, 128, 128, 8, 4, 6, wgmma=True, warp_specialized=True), 144, 2560),  # 4 combiners
    (Tile(256, 128, 128, 8, 2, 3, wgmma=True, warp_specialized=True), 256, 4992),  # run 237's pick at 193-256 tokens
    (Tile(256, 128, 128, 8, 2, 3, wgmma=True, warp_specialized=True), 193, 640),  # one token on the second accumulator
    (Tile(256, 128, 128, 8, 2, 6, wgmma=True, warp_specialized=True), 256, 2560),  # 4 combiners
    (Tile(256, 128, 128, 8, 2, 2, wgmma=True, warp_specialized=True), 600, 640),  # three token tiles, the last 88 rows
    (Tile(256, 128, 128, 8, 2, 1, wgmma=True, warp_specialized=True), 100, 640),  # the second accumulator unused
], ids=str)
def test_bit_exact_wide_tiles_gpu(tile, m, n):
    """The warp-specialized wide tiles (a 128-token and an 8-128-token accumulator on one weight conversion; picked
    at 129-256 tokens where they fill the wave 1.5x better, and past 384 tokens): exact sums on MXFP8 and BF16 rows,
    for two problems back to back on one workspace (stale partials or counters would show in the second), counters
    back at zero where the split uses them."""
    for seed in (m + n, m + n + 1):
        x, w, want = exact_block_inputs(m, n, 6144, seed=seed)
        for got in linear_both_paths(x, w, tile):
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (tile, seed)
    if tile.split_k > 1:  # one split writes the output directly: no workspace is allocated
        counters = workspace._BUFFERS[("mxfp8_gemm", runtime.normalize_device(x.device))][1]
        assert not counters.any()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,pick", [
    (385, 4992, 6144, (192, 1)), (512, 1536, 6144, (192, 3)), (512, 2560, 6144, (256, 3)), (768, 2560, 6144, (128, 1)),
    (1024, 6144, 2048, (128, 1)),
    (2048, 1536, 6144, (192, 1)),
])
def test_bit_exact_token_tiles_past_384_tokens_gpu(m, n, k, pick):
    """pick_prefill_token_tiles' tiles at 132 SMs (run on any GPU as overrides: at other SM counts the rule may keep
    the prefill path there): exact sums on MXFP8 and BF16 rows, and the default call, which takes this GPU's pick."""
    tile = pick_prefill_token_tiles(m, n, k, 132)
    assert tile is not None and (tile.block_m, tile.split_k) == pick
    here = pick_prefill_token_tiles(m, n, k, runtime.num_sms(torch.device("cuda")))
    assert pick_tile(m, n, k, torch.device("cuda")) == (here or mxfp8_gemm_config.BF16_MM_TILE)
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    for got in (*linear_both_paths(x, w, tile), seam.mxfp8_linear(x, w)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("tile,m", [
    (Tile(72, 128, 128, 8, 2, 2, wgmma=True), 40),  # the tail's rows wholly past M: copied as zeros, none stored
    (Tile(80, 128, 128, 8, 1, 1, wgmma=True), 70),  # one stage, no split
], ids=str)
def test_bit_exact_tail_tiles_at_any_m_gpu(tile, m):
    """A 64 + tail tile override at any M up to its rows (the picker takes them at 65-96 tokens only)."""
    x, w, want = exact_block_inputs(m, 640, 2048, seed=m)
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("m", [8, 33, 64])
def test_random_and_edge_rows_match_the_tl_kernel_gpu(m):
    n, k = 2560, 6144
    x = edge_and_random_rows(m, k, seed=m).cuda()
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=torch.Generator().manual_seed(m)) * 0.05).cuda())
    tile = pick_tile(m, n, k, x.device)
    got, in_gemm = linear_both_paths(x, w, tile)
    assert torch.equal(got.view(torch.int16), in_gemm.view(torch.int16))  # in-GEMM quantization: same bytes
    tl_out = seam.mxfp8_linear(x, w, tile=pick_tile(m, n, k, x.device, tl_only=True), quantize="separate")
    assert torch.equal(got.isnan(), tl_out.isnan()) and torch.equal(got.isinf(), tl_out.isinf())
    xq, xs = seam.mxfp8_quantize(x)
    a = seam.mxfp8_dequantize(xq, xs, dtype=torch.float32)
    wd = w.dequantize()
    ref = a @ wd.t()
    finite = ref.isfinite()
    bound = ref.abs() * 2.0**-8 + 2 * k * 2.0**-24 * (a.abs() @ wd.abs().t()) + 1e-30
    assert bool(((got.float() - ref).abs() <= bound)[finite].all())
    assert got[0].eq(0).all() and got[6].eq(0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(2560, 6144), (6144, 2048), (200, 2048)])
@pytest.mark.parametrize("m", [65, 72, 73, 80, 81, 96, 100, 128])
def test_bit_exact_streamed_tile_gpu(m, n, k):
    """Exact sums at the 64 + tail and 128-token tiles (the fused QKV op's picks; mxfp8_linear's too but at 97-128
    tokens on N 2560 and 6144, where it picks two 64-token tiles, also run): on MXFP8 rows and on BF16 rows (A_deq
    written by its dequantization launch, BF16 rows quantized there) and given the producer's A_deq, the exact
    bytes."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    streamed = pick_wgmma_tile(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count, partials=True)
    assert streamed.block_m == (STREAMED_BLOCK_M if m > 96 else 72 if m <= 72 else 80 if m <= 80 else 96)
    tile = pick_tile(m, n, k, x.device)
    assert tile == streamed or (m > 96 and n > 200 and tile.block_m == RESIDENT_MAX_M and tile.warp_specialized)
    xq, xs = seam.mxfp8_quantize(x)
    given = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
    for t in {tile, streamed}:
        assert t.wgmma and not t.ring
        for got in linear_both_paths(x, w, t) + [seam.mxfp8_linear(given, w, tile=t)]:
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), t


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(13, 200, 6144), (40, 2560, 6144), (65, 200, 2048), (90, 2560, 6144),
                                   (100, 2560, 6144)])
def test_poisoned_split_k_workspace_never_reaches_the_output_gpu(monkeypatch, m, n, k):
    """The kernel's own split-K combine reads partials only of the columns it stored (up to 64 tokens per program)
    or sums the stale ones and drops them at the output mask (the 64 + tail and 128-token tiles): with the workspace
    filled with NaN before the call, the exact bytes still come out, and the counters end at zero. (The 16-row tile
    of 13 tokens at N 200 is split 24: its own combine, not the sum apart, which test_split_k_sum.py poisons.)"""
    monkeypatch.setattr(wgmma_config, "COMBINE_APART_MIN_SPLIT", {})  # read by wgmma_launch
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    tile = pick_tile(m, n, k, x.device)
    assert tile.wgmma and tile.split_k > 1
    assert not wgmma_launch(tile.block_m, k, tile.split_k, tile.num_stages).combine_apart
    seam.mxfp8_linear(x, w, tile=tile)  # the workspace now exists at this size
    work, counters = split_k_scratch(x.device, -(-n // 128), tile)
    work.fill_(float("nan"))
    got = seam.mxfp8_linear(x, w, tile=tile)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile
    assert not counters.any()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(65, 2560, 6144), (90, 6144, 2048), (128, 6144, 2048), (100, 200, 2048)])
def test_streamed_tile_bf16_mul_writes_the_fp32_paths_bytes_gpu(monkeypatch, m, n, k):
    """At the picked 64 + tail and 128-token tiles (warp-specialized at these splits), and where the picker takes two
    64-token tiles at 97-128 tokens at those too and at the 128-token tile (the QKV op's pick), BF16-multiply
    dequantization (what a quantized weight gets) and the fp32 path (a weight that does not allow it) give the same
    bytes on random sums."""
    w = _wide_scale_weight(n, k, seed=m + n)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 4).to(torch.bfloat16).cuda()
    tiles = [pick_tile(m, n, k, x.device)]
    if tiles[0].block_m == RESIDENT_MAX_M:  # two 64-token tiles
        tiles.append(pick_wgmma_tile(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count,
                                     partials=True))
    assert tiles[-1].block_m > RESIDENT_MAX_M and not any(t.ring for t in tiles)
    launched = []
    for module, name in ((mxfp8_wgmma, "launch_mxfp8_linear_wgmma"), (mxfp8_wgmma_ws, "launch_mxfp8_linear_wgmma_ws")):
        monkeypatch.setattr(module, name, lambda *args, _l=getattr(module, name), **kw:
                            launched.append(kw["bf16_mul"]) or _l(*args, **kw))
    on = [seam.mxfp8_linear(x, w, tile=t) for t in tiles]
    monkeypatch.setattr(mxfp8_wgmma, "bf16_mul_exact", lambda facts: False)  # read by mxfp8_linear
    off = [seam.mxfp8_linear(x, w, tile=t) for t in tiles]
    assert launched == [True] * len(tiles) + [False] * len(tiles)
    for a, b in zip(on, off):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.gpu
def test_operands_tma_cannot_read_fall_back_to_the_tl_kernel_gpu():
    m, n, k = 8, 256, 768
    x, w, want = exact_block_inputs(m, n, k, seed=3)
    wide = torch.zeros(m, k + 1, dtype=torch.bfloat16, device="cuda")
    wide[:, 1:] = x
    shifted = wide[:, 1:]  # base 2 bytes past alignment: TMA cannot read it
    assert not mxfp8_wgmma.tma_ready(shifted)
    got = seam.mxfp8_linear(shifted, w, quantize="in_gemm")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    expanded = x[:1].expand(m, k)  # one row repeated (row stride 0): TMA cannot read it either
    assert not mxfp8_wgmma.tma_ready(expanded)
    got = seam.mxfp8_linear(expanded, w, quantize="in_gemm")
    assert torch.equal(got.view(torch.int16), want[:1].expand(m, n).view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("split,k", [(None, 6144), (4, 6144), (1, 768)],
                         ids=["picked split-K (spread combine)", "one combiner", "direct store"])
@pytest.mark.parametrize("apart", [False, True], ids=["own combine", "summed apart"])
def test_deterministic_and_in_bounds_gpu(monkeypatch, split, k, apart):
    """Random sums (not exact in fp32): two calls give the same bytes (the split-K combine sums in split
    order, not arrival order), and the output, inside a poisoned buffer, is written nowhere else; at the picked
    split (24) by the kernel's own spread combine and by the sum apart (the rule's choice)."""
    if apart and split is not None:
        pytest.skip("splits 1 and 4 are never summed apart")
    if not apart:
        monkeypatch.setattr(wgmma_config, "COMBINE_APART_MIN_SPLIT", {})  # read by wgmma_launch
    m, n = 13, 200  # M below its 16-row padding, N below two 128-row tiles
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16).cuda()
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=torch.Generator().manual_seed(6)).cuda())
    tile = pick_tile(m, n, k, x.device)
    if split is not None:
        tile = dataclasses.replace(tile, split_k=split)
    assert tile.wgmma
    pad = 4096
    buf = torch.full((m * n + 2 * pad,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = buf[pad:pad + m * n].view(m, n)
    seam.mxfp8_linear(x, w, out=out, tile=tile)
    again = seam.mxfp8_linear(x, w, tile=tile)
    assert torch.equal(out.view(torch.int16), again.view(torch.int16))
    assert not out.isnan().any() and buf[:pad].isnan().all() and buf[pad + m * n:].isnan().all()
    # the arrival counters are back at zero for the next launch
    assert wgmma_combiners(tile.block_m, tile.split_k) == {None: 16, 4: 1, 1: 1}[split]
    assert wgmma_launch(tile.block_m, k, tile.split_k, tile.num_stages).combine_apart == apart
    assert not split_k_scratch(x.device, 2, tile)[1].any()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(13, 200, 6144), (16, 1536, 6144), (64, 2560, 6144)],
                         ids=["M below padding, N 200", "split 22 (combine group 8: a tail)", "64 tokens"])
def test_spread_combine_writes_the_one_combiner_bytes_gpu(monkeypatch, m, n, k):
    """Random sums: the picked spread combine (2^j programs, a row slice each) and one combiner sum the same
    partials in the same order, so the bytes are equal; the counters end at zero either way. (The first two shapes'
    splits, 24 and 22, are summed apart as picked: the kernel's own combine is forced here.)"""
    monkeypatch.setattr(wgmma_config, "COMBINE_APART_MIN_SPLIT", {})  # read by wgmma_launch
    g = torch.Generator().manual_seed(m + n)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).cuda()
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=g).cuda())
    tile = pick_tile(m, n, k, x.device)
    assert tile.wgmma and wgmma_combiners(tile.block_m, tile.split_k) > 1
    spread = seam.mxfp8_linear(x, w, tile=tile)
    monkeypatch.setattr(wgmma_config, "wgmma_combiners", lambda *args, **kwargs: 1)  # read by wgmma_launch
    one = seam.mxfp8_linear(x, w, tile=tile)
    assert torch.equal(spread.view(torch.int16), one.view(torch.int16))
    assert not split_k_scratch(x.device, -(-n // 128), tile)[1].any()


@needs_tool
def test_streamed_slot_refilled_only_after_both_warpgroups_mmas():
    """The sm_90 PTX of streamed kernels (early steps 1 and 2; the resident ones alike): every TMA copy issued after
    an MMA wait has a CTA barrier between them, so neither warpgroup's wgmma still reads the slot (or ring stage)
    the copy overwrites; and such copies exist (the refills). A race here would pass the GPU tests unless timing
    exposed it. The property of the binary, not of one source line: Triton's shared-memory barrier analysis
    places a barrier there too (the kernels' explicit ``thread_barrier`` removed, this still passes)."""
    cases = [(64, 6, 2, 6144), (64, 2, 2, 640)]  # early steps 1 and 2 (wgmma_early_steps)
    assert [wgmma_launch(bm, k, sk, st).early_steps for bm, sk, st, k in cases] == [1, 2]
    results = with_tool(
        f"for bm, sk, st, k in {cases!r}:\n"
        "    for stream in (True, False):\n"
        "        lines = tool.resources('wgmma', bm, split_k=sk, num_stages=st, k=k, a_deq=True, a_stream=stream,\n"
        "                               ptx=True)['ptx'].splitlines()\n"
        "        ops = [next(w for w in l.split() if not w.startswith('@')) for l in lines if any(\n"
        "            op in l for op in ('wgmma.wait_group', 'bar.sync', 'barrier.sync', 'cp.async.bulk.tensor'))]\n"
        "        print(json.dumps([bm, sk, st, k, stream, ops]))\n"
    )
    assert len(results) == 2 * len(cases)
    for bm, sk, st, k, stream, ops in results:
        waited = any_wait = False  # an MMA wait since the last CTA barrier; any MMA wait so far
        refills = 0
        for op in ops:
            if op.startswith("wgmma.wait_group"):
                waited = any_wait = True
            elif op.startswith(("bar.sync", "barrier.sync")):
                waited = False
            else:
                assert not waited, (bm, sk, st, k, stream, ops)
                refills += any_wait
        assert refills, (bm, sk, st, k, stream, ops)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,stages", [(64, 4992, 6144, None), (33, 4992, 6144, None), (64, 2560, 6144, 1),
                                          (64, 2560, 6144, 3), (64, 6144, 640, 3), (64, 1536, 6144, 2),
                                          (48, 6144, 2048, 2), (48, 200, 512, 1), (40, 2560, 6144, 4),
                                          (36, 6144, 768, 2)])
def test_streamed_a_deq_writes_the_resident_bytes_gpu(monkeypatch, m, n, k, stages):
    """A_deq streamed through the ring's slots (at the picked tile where the rule takes it, else forced on the
    64-row tile, the only one the rule streams: ring depths 1-4, early steps 1 and 2, uneven splits: 2-3 and
    4-5 steps per program, M not a multiple of 64) gives the resident kernel's bytes: the same operands and
    MMAs; and the launch did stream."""
    w, a = _random_operands_with_a_deq(m, n, k)
    tile = pick_tile(m, n, k, w.values.device)
    if tile.warp_specialized:  # the unsplit tile at K <= 768: the plain kernel's pick before it
        tile = FORMER_SHORT_K_64_ROW_TILE
    if stages is not None:
        tile = dataclasses.replace(tile, num_stages=min(stages, mxfp8_wgmma.max_steps(k, tile.split_k)))
    launched, launch = [], mxfp8_wgmma.launch_mxfp8_linear_wgmma
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda *args, **kw: launched.append(kw["a_stream"]) or launch(*args, **kw))
    if stages is None:
        assert _streamed(m, n, k)
    else:
        monkeypatch.setattr(wgmma_config, "wgmma_a_stream", lambda *args: True)  # read by wgmma_launch
        monkeypatch.setattr(wgmma_config, "wgmma_smem_steps", lambda *args: 0)
    streamed = seam.mxfp8_linear(a, w, tile=tile)
    monkeypatch.setattr(wgmma_config, "wgmma_a_stream", lambda *args: False)
    resident = seam.mxfp8_linear(a, w, tile=tile)
    assert launched == [True, False]
    assert torch.equal(streamed.view(torch.int16), resident.view(torch.int16)), tile
    assert not split_k_scratch(w.values.device, -(-n // 128), tile)[1].any()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,streams,quantize", [
    *[(*shape, quantize) for shape in [(33, 4992, 6144, True), (64, 4992, 6144, True), (64, 6144, 2048, False),
                                        (49, 200, 1536, False)] for quantize in (None, "in_gemm")],
    # BF16 rows only: the 32-row tile and a 64-row tile the MXFP8 rule leaves to the kernel's own staging
    (17, 2560, 6144, False, "in_gemm"), (32, 6144, 768, False, "in_gemm"), (64, 2560, 6144, False, "in_gemm")])
def test_dequantize_first_writes_the_own_staging_bytes_gpu(monkeypatch, m, n, k, streams, quantize):
    """Without A_deq (MXFP8 rows, or BF16 rows quantized inside: by the dequantization launch, or by the kernel's
    own staging), where the rule takes it: the dequantization launch first and the kernel on its A_deq (streamed
    at N 4992, resident at K 1536-2048) give the bytes of the kernel staging the activations itself (the same
    BF16 operands, the same MMAs)."""
    g = torch.Generator().manual_seed(m + n)
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=g).cuda())
    x = (torch.randn(m, k, generator=g) * 3).to(torch.bfloat16).cuda()
    xq, xs = seam.mxfp8_quantize(x)
    inp = x if quantize else seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    kw = {"quantize": quantize} if quantize else {}
    launched, launch = [], mxfp8_wgmma.launch_mxfp8_linear_wgmma
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda *args, **kw: launched.append((kw["a_deq"], kw["a_stream"])) or launch(*args, **kw))
    dequantized, dequantize = [], gluon_launch.dequantized_activations
    monkeypatch.setattr(gluon_launch, "dequantized_activations",
                        lambda xq, xs, **kw: dequantized.append(xs is None) or dequantize(xq, xs, **kw))
    first = seam.mxfp8_linear(inp, w, **kw)
    monkeypatch.setattr(gluon_launch, "wgmma_dequantize_first", lambda *args, **kw: False)
    own = seam.mxfp8_linear(inp, w, **kw)
    assert launched == [(True, streams), (False, False)]
    assert dequantized == [quantize == "in_gemm"]  # BF16 rows quantized in the dequantization launch
    assert torch.equal(first.view(torch.int16), own.view(torch.int16))


def _wide_scale_weight(n: int, k: int, seed: int) -> seam.MXFP8Weight:
    """Blocks scaled 2^-140..2^12, some zeros, one block of amax 448 * 2^7: scale bytes 0..134, the range the BF16
    multiplies take (subnormal BF16 products and round-offs at the low end, 448 * 2^7 at the top)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k // 32, 32, generator=g) * torch.exp2(torch.randint(-140, 13, (n, k // 32, 1), generator=g).float())
    w[torch.rand(w.shape, generator=g) < 0.05] = 0.0
    w[0, 0, 0] = 448.0 * 2**7
    weight = seam.MXFP8Weight.from_bf16(w.reshape(n, k).cuda())
    assert mxfp8_wgmma.bf16_mul_exact(weight.byte_facts()) and int(weight.scales.max()) == 134
    return weight


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(6144, 768), (6144, 2048), (2560, 6144), (200, 512), (2432, 896)])
@pytest.mark.parametrize("m", [1, 8, 13, 33, 64])
def test_bf16_mul_writes_the_fp32_paths_bytes_gpu(monkeypatch, m, n, k):
    """At the decode kernel's pick (where the 16-row kernel takes the shape, the tile BF16 rows get there),
    BF16-multiply dequantization (forced on) and the fp32 path (forced off) give the same bytes on random sums (the
    BF16 operands are the same, so is every MMA), on BF16, E4M3 and A_deq inputs."""
    w = _wide_scale_weight(n, k, seed=m + n)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 4).to(torch.bfloat16).cuda()
    xq, xs = seam.mxfp8_quantize(x)
    inputs = [x, seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k)),
              seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))]
    tile = pick_tile(m, n, k, x.device, mma_rows=False)
    if tile.warp_specialized:  # the unsplit tile at K <= 768 takes the weight's facts alone: the plain former pick
        tile = FORMER_SHORT_K_64_ROW_TILE
    launched, launch = [], mxfp8_wgmma.launch_mxfp8_linear_wgmma
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda *args, **kw: launched.append(kw["bf16_mul"]) or launch(*args, **kw))
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(wgmma_config, "wgmma_bf16_mul", lambda *args, on=on: on)  # read by wgmma_launch
        outs[on] = [seam.mxfp8_linear(a, w, tile=tile).view(torch.int16) for a in inputs]
    assert tile.wgmma == (m > 1 or n >= WGMMA_ONE_TOKEN_MIN_N)  # else one token's GEMV: no kernel to compare
    assert launched == ([True] * 3 + [False] * 3 if tile.wgmma else [])
    for on, off in zip(outs[True], outs[False]):
        assert torch.equal(on, off), tile


@pytest.mark.gpu
def test_weights_bf16_multiplies_cannot_take_keep_the_fp32_path_gpu(monkeypatch):
    """Where the rule takes BF16 multiplies (N 6144 x K 768, 8 tokens, the decode kernel's tile: the one BF16 rows
    get there), mxfp8_linear launches them for a quantized weight, and not for a weight with scale bytes above 134
    or a NaN code, which still gets the exact bytes through fp32."""
    m, n, k = 8, 6144, 768
    t = pick_tile(m, n, k, torch.device("cuda"), mma_rows=False)
    assert wgmma_launch(t.block_m, k, t.split_k, t.num_stages).bf16_mul
    launched, launch = [], mxfp8_wgmma.launch_mxfp8_linear_wgmma
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda *args, **kw: launched.append(kw["bf16_mul"]) or launch(*args, **kw))
    x, w, want = exact_block_inputs(m, n, k, seed=11)
    for got in linear_both_paths(x, w, t):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    big = seam.MXFP8Weight.from_bf16(w.dequantize().to(torch.bfloat16) * 2.0**20)
    assert int(big.scales.max()) > 134 and not mxfp8_wgmma.bf16_mul_exact(big.byte_facts())
    for got in linear_both_paths(x, big, t):
        assert torch.equal(got.view(torch.int16), (want.double() * 2.0**20).to(torch.bfloat16).view(torch.int16))
    values = w.values.view(torch.uint8).clone()
    values[5, 100] = 0x7F
    nan = seam.MXFP8Weight(values, w.scales)
    assert not mxfp8_wgmma.bf16_mul_exact(nan.byte_facts())
    for got in linear_both_paths(x, nan, t):
        assert got[:, 5].isnan().all()
        assert torch.equal(torch.cat([got[:, :5], got[:, 6:]], 1).view(torch.int16),
                           torch.cat([want[:, :5], want[:, 6:]], 1).view(torch.int16))
    assert launched == [True, True, False, False, False, False]
