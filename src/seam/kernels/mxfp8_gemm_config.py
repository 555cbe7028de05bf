"""Launch rules of the MXFP8 GEMM kernels: the :class:`Tile` record and the pickers that choose
the kernel and its tile for a shape, each with the H200 measurement that set it.

Six paths share them: ``seam.kernels.mxfp8_gemm``'s tl kernel (every M, every NVIDIA target and the interpreter),
``seam.kernels.mxfp8_mma_rows``'s 16-row Gluon kernel (Hopper, M <= 16 at K 512 or 768, 2 <= M <= 8 at K 3072, 4096
or 6144, :func:`pick_mma_rows_tile`), ``seam.kernels.mxfp8_wgmma``'s Gluon decode kernel (Hopper, 2 <= M <= 128,
one token at N >= :data:`WGMMA_ONE_TOKEN_MIN_N`; its streamed tiles at most K splits warp-specialized,
``seam.kernels.mxfp8_wgmma_ws``, :func:`wgmma_warp_specialized`, and over token tiles to 2048 tokens,
:func:`pick_token_tiles`, :func:`pick_prefill_token_tiles`), ``seam.kernels.mxfp8_wgmma_ring``'s Gluon ring kernel
(Hopper, 129 <= M <= 256 on wide layers), the prefill path of ``seam.kernels.mxfp8_dequant`` (BF16 dequantization
and one cuBLAS GEMM, M >= :data:`PREFILL_MM_MIN_M` on CUDA) and ``seam.kernels.qkv_epilogue``'s fused QKV kernel
(the tl mainloop with the QKV+indexer epilogue). :func:`pick_tile` chooses
among the first five; :func:`pick_qkv_tile` refits its tl choice to the fused kernel's registers. What a Gluon
tile derives at launch, and the M and K bounds the Gluon pickers share, are in :mod:`seam.kernels.wgmma_config`.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton

from seam import runtime
from seam.kernels import mxfp8_dequant, mxfp8_mma_rows, mxfp8_wgmma, mxfp8_wgmma_ring, mxfp8_wgmma_ws, wgmma_config
from seam.kernels.wgmma_config import (
    RESIDENT_MAX_M,
    STREAMED_BLOCK_M,
    STREAMED_MIN_K,
    TAIL_MAX_M,
    TOKEN_TILES_MAX_M,
    WGMMA_MAX_M,
    WS_MAX_SPLIT,
)


@dataclasses.dataclass(frozen=True)
class Tile:
    """One GEMM tile configuration (the launch knobs that change compiled code)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int  #: software-pipeline depth of the K loop (``tl.range`` stages; 1: none)
    split_k: int = 1  #: programs per output tile along K (tl: whole BLOCK_K steps each; Gluon: any split)
    #: per-thread register cap (Triton's ``maxnreg``); None: the compiler's choice. 128 lets two
    #: 8-warp programs share an SM (65536 registers); both pickers use it (:func:`pick_tile` on 64-row
    #: tiles split at most two ways, ``pick_qkv_tile``).
    max_registers: int | None = None
    #: MMA tiles only: F16 operands (``e4m3 * 2^(s - c)`` per row,
    #: :func:`seam.kernels.mxfp8_gemm.mxfp8_mainloop`), same bytes out.
    f16_operands: bool = False
    #: A Gluon kernel (Hopper only). With ``block_n`` 16 the 16-row kernel (:mod:`seam.kernels.mxfp8_mma_rows`,
    #: :data:`MMA_ROWS_TILE` at K's warps, :func:`pick_mma_rows_tile`, :attr:`mma_rows`). Else ``block_n`` =
    #: ``block_k`` = 128, 8 warps, ``num_stages`` its TMA ring depth, ``split_k`` any count up to K / 128: with
    #: ``block_m`` in ``seam.kernels.mxfp8_wgmma.BLOCK_MS`` (8, 16, 32, 64, the 64 + tail tiles 72, 80, 96, and 128:
    #: M padded, the MMA's N side; warp-specialized also the wide tiles 136, 144, 160, 192 and 256) the
    #: decode kernel (:mod:`seam.kernels.mxfp8_wgmma`, :func:`pick_wgmma_tile`); with 256 not warp-specialized the
    #: ring kernel (:mod:`seam.kernels.mxfp8_wgmma_ring`, :func:`pick_ring_tile`), any M.
    wgmma: bool = False
    #: The prefill path (:data:`BF16_MM_TILE` only): both operands dequantized to BF16 by
    #: :mod:`seam.kernels.mxfp8_dequant`, then one cuBLAS GEMM accumulating in fp32 (``torch.mm``).
    bf16_mm: bool = False
    #: A ``wgmma`` tile of 32-256 rows run warp-specialized (:mod:`seam.kernels.mxfp8_wgmma_ws`, ``block_m`` in its
    #: ``BLOCK_MS``; :func:`wgmma_warp_specialized`): the decode kernel's bytes (its partials too, for the fused QKV
    #: op), A_deq streamed (written first by the dequantization launch where none comes); the wide tiles (128 + 8-128
    #: tokens) are this kernel's only.
    warp_specialized: bool = False

    @property
    def ring(self) -> bool:
        """A ``wgmma`` tile of the ring kernel (``block_m`` 256), not of the decode kernel (nor a warp-specialized
        wide tile)."""
        return self.wgmma and self.block_m > WGMMA_MAX_M and not self.warp_specialized

    @property
    def mma_rows(self) -> bool:
        """A ``wgmma`` tile of the 16-row kernel (``block_n`` 16, :mod:`seam.kernels.mxfp8_mma_rows`)."""
        return self.wgmma and self.block_n == mxfp8_mma_rows.BLOCK_N.value

    def reads_a_deq(self, k: int) -> bool:
        """Whether this tile's path reads a given (TMA-readable) A_deq in place of the MXFP8 rows at K ``k``: the
        Gluon decode kernel and its warp-specialized form do, the prefill path where it multiplies in A_deq's K order
        (:func:`seam.kernels.mxfp8_dequant.reads_a_deq`: from K 2048); the 16-row kernel, the ring kernel and the tl
        kernel ignore it (``seam.kernels.gluon_launch.launch_gluon``,
        ``seam.kernels.mxfp8_gemm.launch_mxfp8_linear``)."""
        if self.bf16_mm:
            return mxfp8_dequant.reads_a_deq(k)
        return self.wgmma and not (self.ring or self.mma_rows)

    def to_args(self) -> tuple:
        """The fields in order, as the flat arguments of a custom op (which cannot take a Tile)."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    @classmethod
    def from_args(cls, *args) -> Tile:
        """The Tile of :meth:`to_args`'s arguments."""
        return cls(*args)


def small_tile(m: int) -> Tile:
    """Decode tiles, one 128-wide head of N: BLOCK_M 16 for M <= 16, 32 up to M 64, else 64.

    BLOCK_K 64, 8 warps, a 3-stage pipelined K loop (:func:`seam.kernels.mxfp8_gemm.mxfp8_mainloop`). Sweep on the
    H200 (2026-11-30, ``docs/benchmarks-log.md``): at M 64 two 32-row tiles split over two waves
    beat one 64-row tile (fused QKV at nkv 2: 46.9 against 63.3 us; even at nkv 1); the
    64-row tile stays best at M 256. 3 stages beat 2 and 4 at every M tried.
    """
    block_m = 16 if m <= 16 else 32 if m <= 64 else 64
    return Tile(block_m, 128, 64, 8, 3)


#: Prefill tiles (BLOCK_K 32 keeps the 128-row QKV epilogue's spills small on sm_90). At
#: M 2048 3 stages beat 4 and the unpipelined loop (fused QKV at nkv 1: 411 / 420 / 448 us).
LARGE_TILE = Tile(128, 128, 32, 8, 3)
#: The single-token decode tile: BLOCK_M 1 selects the CUDA-core GEMV mainloop
#: (:func:`seam.kernels.mxfp8_gemm.mxfp8_gemv_mainloop`); M >= 2 takes the dot tiles. Tile sweep on the H200
#: (2026-11-30, N 2560, K 6144, M 1, ``docs/benchmarks-log.md``): the fused QKV kernel 11.45 us at
#: 8 warps, split 12 (4 warps spill: 71 us; the 2026-11-29 mainloop with a [128, BLOCK_K]
#: accumulator: 15.2 us at 4 warps). A [BLOCK_M, 128, BLOCK_K] CUDA-core form for M 2..8
#: measured 1.5-4x slower than the 16-row dot tile, so only M = 1 takes this path.
GEMV_TILE = Tile(1, 128, 128, 8, 1)
#: Register cap under which two 8-warp programs share an SM (65536 / (256 * 128)).
TWO_PER_SM_REGISTERS = 128
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)


def tiles_and_k_steps(m: int, n: int, k: int, tile: Tile) -> tuple[int, int]:
    """(output tiles of an [m, n] launch, BLOCK_K steps of K) for :func:`pick_split_k`; K that is not
    a whole number of steps counts as one step (it is not split)."""
    return -(-m // tile.block_m) * -(-n // tile.block_n), (k // tile.block_k if k % tile.block_k == 0 else 1)


def pick_split_k(tiles: int, k_steps: int, sms: int, waves: int = 1) -> int:
    """Most K splits that fit ``waves`` programs per SM (``tiles * split <= waves * sms``: as
    later waves, or resident together where registers allow), each split keeping >= 2 BLOCK_K steps."""
    best = 1
    for s in SPLIT_K_CHOICES:
        if k_steps % s or k_steps // s < 2 or tiles * s > waves * sms:
            continue
        best = s
    return best


#: Waves of split-K programs for the decode tiles (1, 16 and 32 rows, M <= 64). Measured on the
#: H200 (2026-11-29, N 2560, K 6144, M 1, 16x128x64 tile, 8 warps): split 6 (one wave) 19.6 us,
#: split 12 (two waves) 12.9 us, split 24 15.8 us for mxfp8_linear; 24.8 vs 19.2 us for
#: the fused QKV kernel. For the fused kernel on :data:`GEMV_TILE` (2026-11-30): split 6 14.4,
#: 8 12.9, 12 11.5, 16 15.2, 24 20.8 us (``mxfp8_linear`` alone would prefer 24: 7.2 against
#: 8.5 us at 12). 64-row tiles keep one wave (at M 256 the fused kernel lost with two, uncapped;
#: with two programs per SM under a register cap it wins: ``pick_qkv_tile``).
DECODE_WAVES = 2
#: Ring depth of the 64 + tail tiles: it also holds more shared memory than two programs of an SM may
#: (``seam.kernels.mxfp8_wgmma.TWO_PER_SM_BYTES``), so one program per SM (:func:`pick_wgmma_tile`).
TAIL_STAGES = 4
#: Ring depth of the warp-specialized tiles (``seam.kernels.mxfp8_wgmma_ws``; 32-128 rows): one program per SM
#: (measured at this depth, runs 190-191; the 32-token tile runs 330-336).
WS_STAGES = 4
#: Fewest weight rows N at which one token takes the Gluon decode kernel's 8-row tile rather than the tl
#: GEMV (:data:`GEMV_TILE`). H200 (2026-12-02, ``docs/benchmarks-log.md`` runs 122-123, M 1, the GEMM alone,
#: us, GEMV / 8-row tile staging the MXFP8 row / given A_deq): N 2560 x K 6144 8.67 / 8.12 / 7.48; N 4992 x
#: 6144 14.09 / 12.70 / 11.34; N 6144 x 2048 7.73 / 7.13 / 6.42; N 6144 x 768 4.82 / 4.60 / 4.54; narrower,
#: no clear win: N 2048 x 6144 7.43 / 7.35 / 7.86, N 2048 x 2048 4.76 / 5.08 / 4.84, N 1792 x 6144 7.12 /
#: 7.08 / 6.84, N 1536 x 6144 6.89 / 7.47 / 6.89 (K split 16-22 ways: programs of 2-3 steps).
WGMMA_ONE_TOKEN_MIN_N = 2560
WGMMA_STAGES = 2
#: Most K steps (K / 128) at which the 64-row tile given A_deq runs warp-specialized over the whole K, no split
#: (:func:`ws_whole_k`).
WS_WHOLE_K_MAX_STEPS = 8
#: The same on MXFP8 or BF16 rows without their A_deq, where the tile's path writes it in a launch of its own first:
#: K <= 768 (at K 1024 that launch made it mixed, log run 321).
WS_WHOLE_K_ROWS_MAX_STEPS = 6
#: The unsplit tile also needs at least 1 / this of the SMs to hold one of its programs (one per N tile): on 132
#: SMs 22 tiles, N >= 2689 (the narrowest measured where it won: N 3072).
WS_WHOLE_K_SM_SHARE = 6
#: K steps at which 17-32 tokens given A_deq and 65-128 tokens below :data:`STREAMED_MIN_K` (where two 64-token tiles
#: would hold more than 7/8 of the SMs) take a warp-specialized tile unsplit (:func:`ws_short_k`): K 512-768 (log
#: runs 328-331); at K 256 the 32-token tile lost, and fewer steps would hold a ring shallow enough for two programs to
#: share an SM, which the streamed tiles never do.
WS_SHORT_K_STEPS = range(4, 7)
#: Those tiles also need N tiles (one program each) of at least 1 / this of the SMs: on 132 SMs 44 tiles, N >= 5505
#: (won at N 6144-9856, 48-77 tiles; at N 3072-4608, 24-36 tiles, 0.94-1.04x: won at N 4608 x K 768 at 24-32
#: tokens, lost at 17 tokens and at N 3072).
WS_SHORT_K_SM_SHARE = 3
#: The warp-specialized kernel's smallest token tile, for 17-32 tokens given A_deq: unsplit at short K where
#: :func:`ws_short_k` holds, and at the one-wave split from :data:`STREAMED_MIN_K` where :func:`ws_small_split` does.
WS_SMALL_BLOCK_M = 32
#: Most K split of that tile from :data:`STREAMED_MIN_K` (:func:`ws_small_split`; log runs 335-336: it won at one-wave
#: splits 1-3, lost at 4-6).
WS_SMALL_MAX_SPLIT = 3
#: Fewest K steps (K 1536) at which 65-128 tokens below :data:`STREAMED_MIN_K` split K over their two 64-token tiles
#: (:func:`two_token_tiles_split`): at K 1024 the unsplit tiles were the faster after SwiGLU at every N measured (log
#: runs 341-342).
TWO_TOKEN_TILES_SPLIT_MIN_STEPS = 12
#: Those splits, the larger first, where each program keeps at least :data:`TWO_TOKEN_TILES_SPLIT_MIN_PROGRAM_STEPS`
#: K steps and the programs hold at most :data:`TWO_TOKEN_TILES_SPLIT_SM_SHARE` of the SMs (at K 1536: N 1024 split
#: 4, 64 programs; N 2048 and 2560 split 2, 64 and 80; N 2048 at split 4, 128 programs, lost after SwiGLU).
TWO_TOKEN_TILES_SPLITS = (4, 2)
TWO_TOKEN_TILES_SPLIT_MIN_PROGRAM_STEPS = 3
TWO_TOKEN_TILES_SPLIT_SM_SHARE = (2, 3)
#: Where the unsplit streamed tile (:func:`ws_short_k`) takes the shape, the two 64-token tiles only while their
#: programs hold at most this share of the SMs: after SwiGLU + MXFP8 they won at 96-112 programs on 132 SMs and lost
#: at 128 (N 8192 x K 768: 1.05-1.16x; log runs 341-342).
TWO_TOKEN_TILES_SHORT_K_SM_SHARE = (7, 8)
#: Fewest N tiles of those two token tiles: N 1024, the narrowest measured (a narrower layer keeps the prefill path).
TWO_TOKEN_TILES_MIN_TILES = 8
#: A 64-token program's fixed cost (staging its activations, storing and combining its partial) in K steps:
#: fit to the H200 sweep of run 53 (``docs/benchmarks-log.md``), where it orders every split as measured.
WGMMA_PROGRAM_COST_STEPS = 3


#: The 16-row kernel's tile (:mod:`seam.kernels.mxfp8_mma_rows`: 16 weight rows and the whole K per program, no
#: split-K); ``block_m`` (8 or 16 tokens) follows M and ``num_warps`` K (:func:`pick_mma_rows_tile`).
MMA_ROWS_TILE = Tile(8, 16, 128, 2, 1, wgmma=True)
#: Narrowest N the 16-row kernel takes at its short K: the narrowest measured (runs 268-269).
MMA_ROWS_MIN_N = 256
#: Narrowest N it takes at its long K (``wgmma_config.MMA_ROWS_LONG_KS``): the narrowest measured after both producers
#: (runs 278 and 281; run 277 from 512 at K 6144, after the norm only).
MMA_ROWS_LONG_MIN_N = 1024


def mma_rows_tile(m: int, k: int) -> Tile:
    """The 16-row kernel's tile for M tokens at K: :data:`MMA_ROWS_TILE` on M's token tile and K's warps."""
    return dataclasses.replace(MMA_ROWS_TILE, block_m=mxfp8_mma_rows.block_m_for(m),
                               num_warps=mxfp8_mma_rows.warps_for(k))


def mma_rows_per_sm(k: int, block_m: int = 8) -> int:
    """Programs of the 16-row kernel at K on ``block_m`` tokens one SM takes in its one wave: as many as fit
    (``mxfp8_mma_rows.programs_per_sm``), at the long K at most ``wgmma_config.MMA_ROWS_LONG_PER_SM``."""
    fit = mxfp8_mma_rows.programs_per_sm(k, block_m)
    return min(fit, wgmma_config.MMA_ROWS_LONG_PER_SM.get(k, fit))


def pick_mma_rows_tile(m: int, n: int, k: int, sms: int) -> Tile | None:
    """The 16-row kernel's tile (:func:`mma_rows_tile`: 8 or 16 tokens, K's warps) where
    :func:`~seam.kernels.wgmma_config.mma_rows_k` takes M and K (1-16 tokens at K 512 or 768, 2-8 at K 3072, 4096 or
    6144: set by its chains after a producer), N is at least :data:`MMA_ROWS_MIN_N` (:data:`MMA_ROWS_LONG_MIN_N` at the
    long K) and its N / 16 programs fit one wave of the SMs (:func:`mma_rows_per_sm`; at 9-16 tokens at most 1.5 an SM,
    ``wgmma_config.MMA_ROWS_TOKENS16_MAX_WAVE``: N <= 3168 on 132 SMs), else None.

    It sums K inside each program, so it has no split-K combine. H100 (2026-12-06, ``docs/benchmarks-log.md`` runs
    268-269, MXFP8 rows, weights past L2, us, this tile / the decode kernel's): alone, 99 of 100 points at N 256-7168, K
    256-1536 and M 1-8 took 0.45-0.95x the time (N 1024 x K 256 M 1 1.34 / 2.95, N 6144 x K 768 M 8 3.44 / 4.26, N 6144
    x K 1536 M 8 5.24 / 5.52), the hundredth 1.10x (N 6144 x K 256 M 8 2.72 / 2.47; M 1 2.03 / 2.50). Every shape
    measured whose programs took two waves was slower (N 4992 x K 3072, 2 per SM: 10.66 / 8.72; N 2560 x K 6144, 1 per
    SM: 11.89 / 8.70; at 8 warps 10.17 / 8.70 at one token, 11.51 / 8.94 at 8, run 276). In one wave at the long K from
    two tokens, after a norm + MXFP8 writing its "auto" A_deq, it was faster at 13 of 15 points and at most 1.03x slower
    (run 278), after the MoE router (no PDL) within 0.98-1.02x (run 281; ``wgmma_config.MMA_ROWS_LONG_KS``). Rows that
    carry an A_deq take it too, ignoring it: after SwiGLU + MXFP8 at K 768 it beat the decode kernel reading the
    producer's A_deq at every N 1024-6144 and M 1-8 (runs 268, 270), and the producers' "auto" writes none there
    (``wgmma_config.a_deq_pays``). The kernel reads MXFP8 rows (BF16 ones only where ``mxfp8_linear`` quantizes them in
    a launch of their own) and writes BF16, not the fused QKV op's partials: ``pick_tile``'s ``mma_rows`` says where it
    may."""
    if not wgmma_config.mma_rows_k(m, k):
        return None
    tile = mma_rows_tile(m, k)
    programs = -(-n // mxfp8_mma_rows.BLOCK_N.value)
    min_n = MMA_ROWS_MIN_N if k <= wgmma_config.MMA_ROWS_MAX_K else MMA_ROWS_LONG_MIN_N
    per_sm = mma_rows_per_sm(k, tile.block_m)
    if tile.block_m > 8:
        per_sm = min(per_sm, wgmma_config.MMA_ROWS_TOKENS16_MAX_WAVE)
    if not (n >= min_n and programs <= sms * per_sm):
        return None
    return tile


def pick_wgmma_tile(m: int, n: int, k: int, sms: int, *, a_deq: bool = False, partials: bool = False) -> Tile | None:
    """The Gluon decode kernel's tile for 2 <= M <= :data:`WGMMA_MAX_M` (one token too where N >=
    :data:`WGMMA_ONE_TOKEN_MIN_N`, on the 2-token tile) and K a multiple of 128, else None.

    Its fixed costs (prologue, split-K combine) and its per-step conversion latency are exposed at one
    program per SM, so a shallow ring (2 stages) with more programs resident per SM beats a deep one
    (H200, 2026-12-01, ``docs/benchmarks-log.md`` runs 33-34: N 2560, K 6144, M 8: 8.5 us at split 12 /
    2 stages against 10.6 at split 6 / 8 stages; N 6144, K 2048: 7.8 against 10.7). Up to 32 tokens the
    K split fills two waves of programs; where that leaves programs of fewer than two K steps, at most one wave
    of programs of at least two (2026-12-04, ``docs/benchmarks-log.md``, us at 8 tokens given A_deq: N 6144 x K 768
    split 2 3.66, the two waves' 4 (1-2 steps) 4.50, 3 4.32 (run 128); after its SwiGLU + MXFP8 producer 4.65
    against 5.28, 1-32 tokens 0.37-1.15 us faster (run 130); N 2048 x 2048 split 8 3.79 against 16's 4.85 (run
    129); N 1792 x 2048 split 8 3.66, 9 3.83, 16 4.10 (run 130)). This moves every shape with fewer than 4 x
    (SMs // tiles) K steps (e.g. N 2560 x K 2048, split 12 -> 6; not measured there). Fewer, longer programs did
    not pay where two waves already give two steps: N 1536 x 6144 split 11 (one program per SM) took 5.85
    against split 22's 6.91 alone (run 129) but 10.36 against 9.82 after its norm + MXFP8 producer (run 130).
    At 64 tokens each program's resident activations take most of its shared memory (one program per SM), and
    the split minimizes waves x (steps per program + :data:`WGMMA_PROGRAM_COST_STEPS`) among those that fit
    beside the ring (run 53, M 64, K 6144, us:
    N 2560 split 6 14.50, 5 15.65, 12 17.85; N 3072 split 5 15.86, 6 24.84, 10 20.23; N 4992 split 6
    26.43, 5 28.91, 12 28.16). A shape with no split that fits (a very wide K at 64 tokens) stays on
    the tl kernel.

    65-128 tokens run two token tiles (grid axis 1) of the warp-specialized 64-row tile where
    :func:`two_token_tiles_split` says: below :data:`STREAMED_MIN_K` from K 256 on N >= 1024 within a wave, and at
    97-128 tokens from it where their one-wave split keeps 9/10 of the 128-token tile's programs (log runs 340-342);
    not for ``partials``. Otherwise below :data:`STREAMED_MIN_K`, 65-128 tokens take these streamed tiles
    warp-specialized and unsplit where :func:`ws_short_k` does (K 512-768, wide N; log run 328), else none (the
    prefill path). 17-32 tokens given A_deq
    take the warp-specialized :data:`WS_SMALL_BLOCK_M`-token tile unsplit where :func:`ws_short_k` does (log runs
    330-331), and from :data:`STREAMED_MIN_K` at the one-wave split where :func:`ws_small_split` does (1-3; runs
    335-336); else, and always for ``partials``, the plain decode kernel's 32-row tile.

    From 65 tokens (K >= :data:`STREAMED_MIN_K`; from 97, see below) one :data:`STREAMED_BLOCK_M`-token tile streams
    A_deq beside the weight ring (:func:`~seam.kernels.wgmma_config.wgmma_a_stream`); its split fills one wave of
    programs of >= 4 K steps each, with 3 stages where the split is at most 2, else 2 (:func:`streamed_stages`;
    warp-specialized at splits up to :data:`WS_MAX_SPLIT`, below, 4 stages). It replaced the ring
    kernel's 128-token tile (``seam.kernels.mxfp8_wgmma_ring``, which converts every weight step into shared memory)
    at 65-128 tokens: with the weights as the register operand a step moves about 128 KB through shared memory, not
    193. H200 (2026-12-04, ``docs/benchmarks-log.md`` runs 176-177, the GEMM alone given A_deq, weights past L2,
    same split, us at M 65 and 128, ring kernel / this tile at 2 stages / at 3): N 6144 x K 2048 (split 2) 15.38 /
    19.11 / 14.31, 16.43 / 18.50 / 14.23; N 8192 x 2048 (2) 16.16 / 17.35 / 15.29, 17.03 / 18.13 / 15.11; N 6144 x
    4096 (2) 24.81 / 32.07 / 22.82, 25.72 / 29.86 / 21.89; N 9856 x 6144 (1) 59.66 / 52.93 / 48.80, 58.69 / 48.43 /
    48.36; N 2560 x 6144 (6) 15.56 / 13.15 / 13.70, 16.21 / 14.06 / 14.36; N 4992 x 6144 (3) 25.08 / 21.48 / 22.14,
    25.59 / 21.73 / 22.00; N 1536 x 6144 (11) 12.37 / 11.24 / 11.84, 12.74 / 11.15 / 11.63; N 3072 x 6144 (5) 17.33
    / 15.57 / 16.15, 17.83 / 15.40 / 15.98; N 2048 x 6144 (8) 13.59 / 12.33 / 12.86, 14.47 / 12.53 / 13.04; N 4096 x
    4096 (4) 15.60 / 15.11 / 15.47, 16.66 / 14.35 / 15.00; N 3072 x 2048 (4) 10.29 / 8.85 / 9.39, 11.11 / 9.86 /
    9.70 (the one point where the rule's depth is not the faster; at 96 tokens the same order, run 176).

    65-96 tokens take a 64 + tail tile instead (``seam.kernels.mxfp8_wgmma.TAIL_TILES``: 72, 80 or 96, the tail
    rounded up to 8, 16 or 32 tokens): the same split, 4 stages (:data:`TAIL_STAGES`), the MMA work of 64 + tail
    tokens rather than 128. Where two programs fit on an SM (2-3 stages, run 184's probe at 128 registers), under
    PDL the next launch's early programs double up on SMs while others idle; 4 stages hold more shared memory
    than two programs may, so one per SM whatever the registers (110-144 registers). H200 (2026-12-04,
    ``docs/benchmarks-log.md`` run 184, the GEMM alone given A_deq, weights past L2, us at M 65 / 80 / 96, 128-token
    tile / 64 + tail at 2 stages / at 2 without PDL / at 4): N 6144 x K 2048 (split 2) 14.09 / 16.77 / 13.42 /
    11.92, 13.53 / 16.29 / 13.72 / 11.82, 13.59 / 16.86 / 14.24 / 12.38; N 4992 x 6144 (3) 21.28 / 28.73 / 22.17 /
    20.03, 21.29 / 28.07 / 21.50 / 20.01, 21.40 / 28.61 / 21.98 / 20.04; N 2560 x 6144 (6) 13.57 / 16.93 / 14.07 /
    12.83, 13.40 / 16.70 / 13.93 / 12.54, 13.64 / 17.31 / 14.77 / 13.23; N 1536 x 6144 (11) 11.32 / 9.74 / 11.51 /
    10.25, 11.17 / 9.90 / 11.71 / 10.34, 10.98 / 9.88 / 11.86 / 10.43; N 3072 x 6144 (5) 15.79 / 19.25 / 15.32 /
    14.03, 14.99 / 18.99 / 15.29 / 13.85, 15.13 / 19.68 / 15.74 / 14.38: 4 stages are 0.85-0.97x the 128-token
    tile's time at all 15 points; 1.5-2x the split with two programs per SM was slower at N 2560 and 3072 (run 184).
    97-128 tokens keep the 128-token tile (a 64-token tail saves no MMA work).

    Where the split is at most :data:`WS_MAX_SPLIT`, these tiles run warp-specialized (``seam.kernels.mxfp8_wgmma_ws``,
    :func:`wgmma_warp_specialized`) at :data:`WS_STAGES` stages; so does the 64-row tile (33-64 tokens) where the
    activations come with their A_deq (``a_deq``), at the one-wave split (:func:`one_wave_split`) and K >=
    :data:`STREAMED_MIN_K`, and unsplit where :func:`ws_whole_k` takes the shape (K <= 1024 given A_deq, K <= 768
    on rows without it), but not for a GEMM that only stores its partials (``partials``: the fused QKV op, whose
    epilogue sums them anyway, so the unsplit tile would save no combine; not measured there).
    """
    if not 1 <= m <= WGMMA_MAX_M or k % 128 or (m == 1 and n < WGMMA_ONE_TOKEN_MIN_N):
        return None
    tiles, steps = -(-n // 128), k // 128
    if m > RESIDENT_MAX_M:
        if k < STREAMED_MIN_K:
            split = 1 if ws_short_k(tiles, steps, sms) else None
        else:
            split = one_wave_split(tiles, steps, sms)
        two = None if partials else two_token_tiles_split(m, tiles, steps, sms, split)
        if two is not None:
            return Tile(RESIDENT_MAX_M, 128, 128, 8, min(WS_STAGES, mxfp8_wgmma_ws.max_stages(RESIDENT_MAX_M, k, two)),
                        two, wgmma=True, warp_specialized=True)
        if k < STREAMED_MIN_K:
            if partials or split is None:
                return None
            return Tile(streamed_block_m(m), 128, 128, 8, min(WS_STAGES, steps), 1, wgmma=True, warp_specialized=True)
        block_m = streamed_block_m(m)
        ws = wgmma_warp_specialized(block_m, split, k, a_deq=a_deq)
        if ws:
            stages = WS_STAGES
        else:
            stages = TAIL_STAGES if block_m < STREAMED_BLOCK_M else streamed_stages(split)
        return Tile(block_m, 128, 128, 8, min(stages, mxfp8_wgmma.max_steps(k, split)), split, wgmma=True,
                    warp_specialized=ws)
    block_m = max(8, triton.next_power_of_2(m))
    if not partials and (block_m == RESIDENT_MAX_M and ws_whole_k(tiles, steps, sms, a_deq=a_deq)
                         or block_m == WS_SMALL_BLOCK_M and a_deq and ws_short_k(tiles, steps, sms)):
        return Tile(block_m, 128, 128, 8, min(WS_STAGES, steps), 1, wgmma=True, warp_specialized=True)
    split = one_wave_split(tiles, steps, sms)
    if wgmma_warp_specialized(block_m, split, k, a_deq=a_deq) or (
            block_m == WS_SMALL_BLOCK_M and not partials and ws_small_split(split, k, a_deq=a_deq)):
        return Tile(block_m, 128, 128, 8, min(WS_STAGES, mxfp8_wgmma.max_steps(k, split)), split, wgmma=True,
                    warp_specialized=True)

    def ring(split: int) -> int:  # no deeper than a program's steps
        return min(WGMMA_STAGES, mxfp8_wgmma.max_steps(k, split))

    def fits(split: int) -> bool:
        return mxfp8_wgmma.max_stages(block_m, k, split) >= ring(split)

    if block_m <= 32:
        split = min(steps, max(1, 2 * (sms // tiles)))
        if steps < 2 * split:  # programs of fewer than two K steps: at most one wave, of >= 2 steps each
            split = max(1, min(sms // tiles, steps // 2))
        while not fits(split) and split < steps:
            split += 1  # shorter K ranges until the resident activations leave room for the ring
    else:
        def cost(split: int) -> int:
            waves = -(-tiles * split // sms)
            return waves * (mxfp8_wgmma.max_steps(k, split) + WGMMA_PROGRAM_COST_STEPS)

        split = min((s for s in range(1, steps + 1) if fits(s)), key=cost, default=steps)
    if not fits(split):
        return None
    return Tile(block_m, 128, 128, 8, ring(split), split, wgmma=True)


def _two_accumulators(first: int, tokens: int) -> int:
    """A tile of ``first`` tokens on one accumulator and the rest of ``tokens``, rounded up to a power of two of at
    least 8 (the MMA's smallest N), on a second: the 64 + tail and the wide tiles."""
    return first + max(8, triton.next_power_of_2(tokens - first))


def streamed_block_m(tokens: int) -> int:
    """The streamed decode tile for 65-128 tokens (:func:`pick_wgmma_tile`; a token tile's share of M,
    :func:`pick_token_tiles`): a 64 + tail tile up to :data:`TAIL_MAX_M` tokens (the tail rounded up to 8, 16 or 32),
    else :data:`STREAMED_BLOCK_M`."""
    return _two_accumulators(64, tokens) if tokens <= TAIL_MAX_M else STREAMED_BLOCK_M


def wide_block_m(tokens: int) -> int:
    """The warp-specialized kernel's wide tile for 129-256 tokens (``seam.kernels.mxfp8_wgmma_ws.WIDE_TILES``): 128 on
    one accumulator and the tokens past them, rounded up to 8, 16, 32, 64 or 128, on the second.

    Raises:
        ValueError: ``tokens`` outside 129-256 (no wide tile holds them)."""
    if not 128 < tokens <= mxfp8_wgmma_ws.WIDE_TILES[-1]:
        raise ValueError(f"the wide tiles take 129-{mxfp8_wgmma_ws.WIDE_TILES[-1]} tokens, got {tokens}")
    return _two_accumulators(128, tokens)


def wgmma_warp_specialized(block_m: int, split_k: int, k: int, *, a_deq: bool) -> bool:
    """Whether :func:`pick_wgmma_tile` takes a decode-kernel tile warp-specialized (``seam.kernels.mxfp8_wgmma_ws``: a
    TMA producer warp, two consumer warpgroups that never wait for each other; ``Tile.warp_specialized``): the
    streamed tiles (above :data:`RESIDENT_MAX_M` tokens) at K splits up to :data:`WS_MAX_SPLIT`, and the 64-row tile
    there too where the activations come with their A_deq (``a_deq``) and K >= :data:`STREAMED_MIN_K` (the kernel
    reads A_deq only: without one, the plain decode kernel's own staging costs less than a dequantization launch first).
    The picker also takes the 64-row tile warp-specialized and unsplit at K <= 1024 given A_deq and K <= 768 without
    (:func:`ws_whole_k`), which this predicate does not cover. The fused QKV op takes this predicate's tiles
    (``pick_qkv_tile``), not the unsplit one (``partials``).

    H200 (2026-12-04, ``docs/benchmarks-log.md`` runs 190-191, ``mxfp8_linear`` given A_deq, weights past L2, us at M
    65 / 96 / 128, the plain decode kernel's streamed tiles / warp-specialized at 4 stages, the same split and
    bytes): faster at 37 of 38 points of ten shapes split 1-6 ways, 0.74-1.0x (N 9856 x 6144 split 1 43.43 / 45.92 / 48.27 -> 33.83 /
    34.64 / 35.79; N 6144 x 4096 (2) 19.66 / 19.45 / 21.74 -> 14.88 / 16.24 / 18.25; N 8192 x 2048 (2) 12.78 / 13.62 /
    15.04 -> 10.62 / 11.97 / 13.85; N 6144 x 2048 (2) 12.17 / 12.24 / 14.20 -> 10.03 / 10.97 / 12.57; N 4992 x 6144
    (3) 19.15 / 19.46 / 21.52 -> 15.61 / 17.16 / 18.73; N 4096 x 4096 (4) 12.56 / 13.17 / 14.10 -> 11.14 / 12.25 /
    13.73; N 2560 x 6144 (6) 11.85 / 12.58 / 13.92 -> 10.97 / 12.27 / 13.74; N 3072 x 6144 (5) at 65 / 96 / 128 13.58
    / 14.54 / 15.25 -> 11.95 / 12.81 / 14.63; N 2560 x 2048 (4) 7.31 / 8.09 / 9.69 -> 7.17 / 7.99 / 9.09; also at 80
    and 100 tokens at N 6144 x 2048, 4992 x 6144, 2560 x 6144 and 3072 x 6144), the one loss N 3072 x 2048 (4) 7.68 /
    8.46 / 9.84 -> 7.59 / 8.64 / 9.72. At more, shorter programs it loses or ties: N 1536 x 6144 (split 11, 4-5 steps
    each) 9.58 / 10.17 / 11.15 -> 9.93 / 10.95 / 12.59, N 2048 x 6144 (8) 11.05 / 12.03 / 12.41 -> 10.71 / 11.68 /
    13.37.

    The 64-row tile given A_deq (same runs, us at M 40 / 64, the plain decode kernel's pick / warp-specialized at the
    one-wave split, 4 stages): faster at all 20 points of the ten shapes whose one-wave split is at most 6, 0.75-0.98x:
    N 9856 x 6144 (split 5 / 1) 31.86 / 33.08 -> 28.07 / 26.44; N 4992 x 6144 (6 / 3) 14.94 / 15.43 -> 13.62 / 14.19;
    N 6144 x 4096 (5 / 2) 13.35 / 13.46 -> 12.36 / 12.33; N 3072 x 2048 (4 / 4) 8.94 / 9.02 -> 6.72 / 7.02; N 6144 x
    2048 (2 / 2) 9.45 / 9.74 -> 7.88 / 8.38; N 8192 x 2048 (2 / 2) 10.10 / 10.12 -> 8.76 / 9.19; N 3072 x 6144 (5 / 5)
    11.83 / 11.45 -> 10.05 / 10.22; N 2560 x 6144 (6 / 6) 10.28 / 10.17 -> 9.04 / 9.33; N 4096 x 4096 (4 / 4) 10.95 /
    10.28 -> 9.79 / 10.07; N 2560 x 2048 (6 / 4) 7.03 / 7.19 -> 6.28 / 6.52. Not at N 1536 x 6144 (one-wave split 11:
    7.86 / 7.93 -> 8.23 / 8.79) or N 2048 x 6144 (8: 9.15 / 8.99 -> 8.96 / 9.35), which the split bound keeps off."""
    if split_k > WS_MAX_SPLIT or not RESIDENT_MAX_M <= block_m <= WGMMA_MAX_M:
        return False
    return block_m > RESIDENT_MAX_M or (a_deq and k >= STREAMED_MIN_K)


def ws_whole_k(tiles: int, steps: int, sms: int, *, a_deq: bool = True) -> bool:
    """Whether :func:`pick_wgmma_tile` runs the 64-row tile (33-64 tokens) warp-specialized with no K split (each
    program the whole K, no combine): at most :data:`WS_WHOLE_K_MAX_STEPS` K steps (K <= 1024) given A_deq
    (``a_deq``), at most :data:`WS_WHOLE_K_ROWS_MAX_STEPS` (K <= 768) on MXFP8 or BF16 rows without it (the tile's
    path then writes A_deq in a launch of its own first: ``seam.kernels.gluon_launch.dequantizes_first``), and
    ``tiles`` N tiles (one program each) at least 1 / :data:`WS_WHOLE_K_SM_SHARE` of the ``sms`` SMs.

    Such a program streams its weights at one SM's rate, so its time follows K (H100, log run 320, after SwiGLU +
    MXFP8 at 33-64 tokens: 4.6-4.9 us at K 256, 6.9-7.8 at K 768, about the same at N 1024-6144): it wins where the
    plain kernel splits the few steps over many programs and combines them. H100 (2026-12-07,
    ``docs/benchmarks-log.md`` runs 319-320, ``mxfp8_linear`` given A_deq, weights past L2, the plain kernel's pick /
    this tile, us at 33 / 64 tokens after SwiGLU + MXFP8 writing its "auto" A_deq (PDL)): N 6144 x K 768 8.28 / 9.05
    -> 7.69 / 7.57 (back to back 6.62 / 7.20 -> 4.99 / 5.01); N 6144 x 512 7.29 / 8.11 -> 6.79 / 6.61; N 6144 x 256
    5.83 / 6.62 -> 4.91 / 4.89; N 3072 x 768 8.36 / 8.77 -> 7.27 / 7.22; N 4096 x 1024 9.83 / 10.60 -> 8.23 / 8.25;
    N 6144 x 1024 8.54 / 9.33 -> 8.66 / 8.54 (at 33 tokens 1.4 % slower, fenced too). Not taken: N 2048 at K
    512-1536 and N 1024 at K 768-1536 (16 and 8 programs: 1.01-1.62x after SwiGLU), nor K 1536 (N 6144: 0.99 / 1.04x
    fenced / after SwiGLU at 33 tokens, 0.98 / 0.99x at 64). N 2048 x K 256 (two steps) won too (5.22 / 5.80 -> 4.64
    / 4.63), the one narrow shape that did; it is left out with the rest of N 2048.

    On rows without A_deq (H100, 2026-12-07, log run 321, ``mxfp8_linear`` alone, the plain pick / this tile after its
    own A_deq launch, us back to back | fenced at 33 / 64 tokens): MXFP8 rows N 6144 x K 768 7.34 | 10.65 / 8.08 |
    11.27 -> 6.21 | 10.02 / 6.25 | 9.75; N 3072 x 768 6.95 | 10.52 / 7.62 | 10.96 -> 6.15 | 9.46 / 6.16 | 9.42; BF16
    rows N 6144 x 768 7.73 | 10.53 / 8.43 | 11.29 -> 6.30 | 10.02 / 6.33 | 9.83; N 3072 x 768 7.32 | 10.62 / 7.91 |
    11.05 -> 6.17 | 9.37 / 6.23 | 9.43. At K 1024 (N 4096) it was mixed: MXFP8 rows at 33 tokens 6.71 | 10.39 -> 7.18 |
    10.57, at 64 7.42 | 11.14 -> 7.16 | 10.44; BF16 rows 0.90 | 1.00x and 0.80 | 0.92x.

    Not measured: N 2689-3071, K 128 (one step; the plain pick there is unsplit too), K 256-512 on rows without A_deq
    (shorter than the measured 768, where the A_deq launch is cheaper still), N above 66 tiles (where the plain pick
    is unsplit as well: run 319 had the warp-specialized kernel ahead of the plain one at split 1, 7.57 against 8.03
    us after SwiGLU) and SM counts other than 132. At K >= :data:`STREAMED_MIN_K` the tile keeps its one-wave split
    given A_deq (:func:`wgmma_warp_specialized`)."""
    most = WS_WHOLE_K_MAX_STEPS if a_deq else WS_WHOLE_K_ROWS_MAX_STEPS
    return steps <= most and tiles * WS_WHOLE_K_SM_SHARE >= sms


def ws_small_split(split_k: int, k: int, *, a_deq: bool) -> bool:
    """Whether :func:`pick_wgmma_tile` runs 17-32 tokens on the warp-specialized :data:`WS_SMALL_BLOCK_M`-token tile at
    the one-wave split ``split_k`` (:func:`one_wave_split`, as the 64-row tile's :func:`wgmma_warp_specialized`): given
    A_deq (``a_deq``), K >= :data:`STREAMED_MIN_K`, ``split_k`` at most :data:`WS_SMALL_MAX_SPLIT`; else the plain
    decode kernel's 32-row tile (two programs an SM). Not for the fused QKV op's partials
    (not measured there).

    H100 (2026-12-07, ``docs/benchmarks-log.md`` runs 335-336, ``mxfp8_linear`` given A_deq, weights past L2, us at
    32 / 24 or 17 tokens, the pick / this tile, back to back | fenced | after SwiGLU + MXFP8 (PDL, "auto" A_deq)):
    one-wave split 1: N 9856 x K 6144 at 32 tokens 30.41 | 33.82 | 33.29 -> 25.56 | 29.49 | 29.22 (0.84-0.88x at 17
    too); split 2: N 6144 x K 4096 13.29 | 16.86 | 16.06 -> 12.25 | 15.81 | 15.66 (17 tokens 0.88-0.95x), N 6144 x K
    3072 0.90-0.99x, N 6144 x K 2048 1.00-1.07x back to back but 0.93-0.96x fenced and after SwiGLU, N 8192 x K 2048
    0.93-0.97x back to back and fenced, 1.02-1.03x after SwiGLU (the one loss there); split 3: the TP 2 QKV N 4992 x K
    6144 15.20 | 19.27 | 19.13 -> 14.30 | 18.16 | 18.06 (0.93-0.94x at 24 tokens). At split 4 mixed (N 4096 x K
    4096 0.85-1.01x; N 4096 x K 2048 1.08-1.10x after SwiGLU), at 6 lost (N 2560 x K 6144: 1.05-1.10x fenced and
    after SwiGLU; N 3072 x K 6144, one-wave split 5, was run at split 4: 1.05-1.06x fenced)."""
    return a_deq and k >= STREAMED_MIN_K and split_k <= WS_SMALL_MAX_SPLIT


def ws_short_k(tiles: int, steps: int, sms: int) -> bool:
    """Whether :func:`pick_wgmma_tile` runs a warp-specialized tile unsplit, one program per N tile, at short K: K
    steps in :data:`WS_SHORT_K_STEPS` and ``tiles`` N tiles at least 1 / :data:`WS_SHORT_K_SM_SHARE` of the ``sms``
    SMs. There 17-32 tokens given A_deq take the :data:`WS_SMALL_BLOCK_M`-token tile (else the plain decode kernel's
    32-row tile, split), and 65-128 tokens below :data:`STREAMED_MIN_K` the streamed tile for their M (a 64 + tail
    tile to 96 tokens, else 128), given A_deq or after the launch that writes it, where two 64-token tiles would hold
    more than :data:`TWO_TOKEN_TILES_SHORT_K_SM_SHARE` of the SMs (:func:`two_token_tiles_split`; on 132 SMs from 58
    N tiles); else those two tiles.

    17-32 tokens: the split 32-row tile stores and combines fp32 partials, and its two plain warpgroups meet at a
    barrier every K step. H100 (2026-12-07, log runs 330-331, ``mxfp8_linear`` given A_deq, weights past L2, us, the
    pick / the 32-token tile unsplit, back to back | fenced | after SwiGLU + MXFP8 (PDL, "auto" A_deq); 24 and 32
    tokens): N 6144 x K 768 at 32 tokens 5.43 | 8.48 | 7.14 -> 4.18 | 7.84 | 6.59 (run 328); N 9856 x K 768 5.80 | 10.28
    | 9.11 -> 5.04 | 8.48 | 7.36; N 8192 x K 768 5.75 | 8.97 | 7.68 -> 4.61 | 8.22 | 7.02; N 8192 x K 512 4.95 | 8.11 |
    6.86 -> 3.10 | 7.61 | 6.28; N 6144 x K 640 fenced and after SwiGLU 0.90-0.93x, at 17 tokens too; every point from N
    6144 at K 512-768 0.81-0.97x after SwiGLU. At N 4096-4608 0.94-1.02x (won at N 4608 x K 768 at 24-32 tokens,
    0.94-0.975x; N 4224 x K 768 at 17 tokens 1.02x after SwiGLU, N 3072 x K 768 at 24 tokens 1.02x, run 329); at K 256
    (N 6144) 1.03x after SwiGLU.

    65-128 tokens: the prefill path pays a BF16 copy of the weight and two more launches; the unsplit program streams
    the weight once.
    H100 (2026-12-07, ``docs/benchmarks-log.md`` run 328, ``mxfp8_linear``, weights past L2, us, the prefill path /
    this tile, back to back | fenced | after SwiGLU + MXFP8 (PDL; "auto" on MXFP8 rows, which writes no A_deq at
    these M, so the tile's path writes it)): N 6144 x K 768 at 65 tokens on MXFP8 rows 10.51 | 12.13 | 11.90 -> 7.38
    | 10.95 | 9.57, given A_deq 10.51 | 12.13 | 12.07 -> 6.02 | 9.65 | 8.64; at 128 tokens on MXFP8 rows 10.10 |
    11.75 | 11.71 -> 8.26 | 11.85 | 10.50, given A_deq 10.11 | 11.75 | 11.71 -> 6.86 | 10.59 | 9.70. Narrower N was
    mixed at 96 tokens: N 3072 x K 768 on MXFP8 rows 7.98 | 9.58 | 9.60 -> 7.58 | 11.00 | 9.62, given A_deq -> 6.09 |
    9.71 | 8.77; N 4096 x K 1024 on MXFP8 rows 9.73 | 11.34 | 11.34 -> 9.07 | 12.45 | 11.07, given A_deq -> 7.63 |
    11.20 | 10.23. Split 2 was slower than split 1 at every point. Not measured: N 5505-6143 and above 6144, K 512-640,
    129-256 tokens at short K, 17-32 tokens on MXFP8 rows without A_deq ("auto" writes it there at these K), SM counts
    other than 132; the fused QKV op's partials (``partials``) keep their split tiles and the prefill path."""
    return steps in WS_SHORT_K_STEPS and tiles * WS_SHORT_K_SM_SHARE >= sms


def two_token_tiles_split(m: int, tiles: int, steps: int, sms: int, streamed_split: int | None) -> int | None:
    """The K split at which :func:`pick_wgmma_tile` runs 65-128 tokens over two token tiles (grid axis 1) of the
    warp-specialized 64-token tile, or None where it keeps the streamed tile it picked at ``streamed_split`` (None:
    no streamed tile, the prefill path). ``tiles`` N tiles of 128 rows (at least :data:`TWO_TOKEN_TILES_MIN_TILES`),
    ``steps`` K steps of 128, ``sms`` SMs.

    Each program converts its weight tile for 64 tokens, so two token tiles convert every weight twice; they still
    win where the streamed tile's K split is what fills the SMs: two token tiles double the programs without a
    split-K combine, and each program's MMA has 64 tokens, not 72-128.

    - Below :data:`STREAMED_MIN_K` (K 256-1920), 65-128 tokens, unsplit (from :data:`TWO_TOKEN_TILES_SPLIT_MIN_STEPS` K
      steps split 4 or 2 where :data:`TWO_TOKEN_TILES_SPLITS` says). Against the prefill path (both operands
      dequantized, cuBLAS BF16) they took 0.40-0.73x its time back to back and 0.59-0.88x after SwiGLU + MXFP8 at all 48
      points of 16 shapes (N 1024-8192 x K 256-1536; fenced 0.57-1.01x, the loss at N 1024 x K 768); where
      :func:`ws_short_k` takes the unsplit streamed tile, 0.83-1.00x at N 6144-7168 x K 512-768 (12 points, all three
      timings) while their programs hold at most :data:`TWO_TOKEN_TILES_SHORT_K_SM_SHARE` of the SMs.
    - From :data:`STREAMED_MIN_K`, 97-128 tokens (the 128-token tile; the 64 + tail tiles at 65-96 were mixed) at
      the one-wave split of the two tiles' programs (at most :data:`WS_MAX_SPLIT`), where that wave holds at least
      9 / 10 of the streamed tile's programs: 0.78-0.99x back to back at 32 points of eleven shapes at 97-128 tokens
      (fenced 0.79-1.02x, after SwiGLU + MXFP8 0.80-0.99x at 10). Fewer lost: N 3072 x K 6144 at split 2 against 5,
      1.04-1.08x; N 4992 x K 6144 at split 1 against 3, 1.17-1.27x.

    H100 (2026-12-07, ``docs/benchmarks-log.md`` runs 340-342, ``mxfp8_linear`` given A_deq, weights past L2, us at
    128 tokens, the pick before / two token tiles, back to back | fenced | after SwiGLU + MXFP8 writing A_deq (PDL)):
    N 6144 x K 2048 12.94 | 17.60 -> 10.49 | 14.28 (at 97 tokens the chain 17.48 -> 14.09); N 8192 x K 2048 (112
    tokens) 14.33 | 18.27 | 19.03 -> 11.22 | 14.42 | 15.26; N 6144 x K 4096 18.60 | 23.01 -> 18.20 | 21.64; N 1536 x
    K 6144 (split 11 -> 5) 11.35 | 14.94 -> 10.43 | 14.40; N 2560 x K 6144 (6 -> 3) 14.00 | 18.52 -> 13.91 | 17.64;
    N 6144 x K 768 (the unsplit streamed tile) 6.93 | 10.89 | 9.75 -> 5.73 | 9.23 | 8.24; N 8192 x K 768 7.06 |
    11.19 | 10.05 -> 6.45 | 9.70 | 10.59 (so not there); N 6144 x K 1536 (the prefill path) 16.34 | 17.86 | 18.00
    -> 8.72 | 12.18 | 12.15; N 2048 x K 1536 (split 2) 10.02 | 11.36 | 11.30 -> 6.96 | 10.61 | 9.58; N 4096 x K
    256 6.67 | 8.07 | 7.89 -> 2.68 | 6.14 | 4.86. Not measured: K 128 (one step; left out), 129-256 tokens, MXFP8 or
    BF16 rows without A_deq (the tiles' path writes it first, as the streamed tile's does), SM counts other than
    132. The fused QKV op's partials keep the streamed tiles (:func:`pick_wgmma_tile`): there two tiles lost at 97-128
    tokens (H200, run 344, the op given A_deq, N 2560 at split 3 1.06-1.08x back to back, 1.02-1.03x fenced; N 4992
    1.45-1.81x at splits 1-3), whose epilogue sums the partials anyway."""
    if not TWO_TOKEN_TILES_MIN_TILES <= tiles <= sms // 2 or steps < 2:
        return None
    if steps * mxfp8_wgmma.BLOCK_K.value < STREAMED_MIN_K:
        share, whole = TWO_TOKEN_TILES_SHORT_K_SM_SHARE
        if streamed_split is not None and 2 * tiles * whole > share * sms:
            return None
        if steps >= TWO_TOKEN_TILES_SPLIT_MIN_STEPS:
            share, whole = TWO_TOKEN_TILES_SPLIT_SM_SHARE
            for split in TWO_TOKEN_TILES_SPLITS:
                fits = 2 * tiles * split * whole <= share * sms
                if fits and steps // split >= TWO_TOKEN_TILES_SPLIT_MIN_PROGRAM_STEPS:
                    return split
        return 1
    if m <= TAIL_MAX_M:
        return None
    split = min(WS_MAX_SPLIT, one_wave_split(2 * tiles, steps, sms))
    return split if 10 * 2 * split >= 9 * streamed_split else None


def one_wave_split(tiles: int, steps: int, sms: int) -> int:
    """The K split of the tiles past :data:`RESIDENT_MAX_M` tokens (the streamed tile, the ring kernel): the most
    programs of ``tiles`` N tiles that fit one wave on ``sms`` SMs, each keeping >= 4 of the ``steps`` K steps
    (the ring kernel's fastest splits, log run 54)."""
    return max(1, min(sms // tiles, steps // 4))


def streamed_stages(split_k: int) -> int:
    """Ring depth of the plain decode kernel's streamed tile (:data:`STREAMED_BLOCK_M`) at a K split, where it runs it
    (splits above :data:`WS_MAX_SPLIT`): 3 where the split is at most 2 (there 2 stages
    were 1.0-1.4x slower), else 2 (3 were 0.98-1.06x slower; :func:`pick_wgmma_tile`)."""
    return 3 if split_k <= 2 else 2


def pick_token_tiles(m: int, n: int, k: int, sms: int) -> Tile | None:
    """The warp-specialized decode kernel's tile for :data:`WGMMA_MAX_M` < M <= :data:`TOKEN_TILES_MAX_M` (K a
    multiple of 128, at least :data:`STREAMED_MIN_K`), else None: ceil(M / 128) token tiles (grid axis 1) of the
    decode tile for their share of M (a 64 + tail tile up to 96 tokens each, else 128), where one program per N
    tile and token tile fits one wave of ``sms``; the K split then fills that wave with programs of >= 4 steps, at
    most :data:`WS_MAX_SPLIT` ways; :data:`WS_STAGES` stages. A_deq, K-permuted, comes from the producers
    (:func:`~seam.kernels.wgmma_config.a_deq_pays`) or is written first by the GEMM's dequantization launch.

    Against the prefill path (dequantize, cuBLAS) and the ring kernel it replaces there, the weights stream once per
    token tile as the register operand and no BF16 weight copy is written. H200 (2026-12-04, ``docs/benchmarks-log.md``
    runs 199-200, a probe of this kernel over 128-token tiles (one accumulator, or 64 + 64 tokens where marked), the
    dequantization launch included, weights past L2, us, prefill path or ring kernel as picked / this rule's split,
    humming W8A16 in brackets where run 199 timed it):
    N 2560 x K 6144 (split 3 at 2 token tiles, 2 at 3) M 129 27.53 / 22.77 (64 + 64 tokens per tile), 160 25.34 /
    23.24 (64 + 64; 21.62), 256 29.03 / 22.28 (23.73), 384 36.67 / 28.67; N 4992 x 6144 (split 1) 129 42.62 /
    43.07, 256 42.90 / 39.33 (36.51), 384 62.92 / 43.45; N 6144 x 2048 (split 1) 129 19.43 / 17.46, 256 22.06 /
    16.35 (21.01); N 1536 x 6144 (split 5 at 2 tiles, 3 at 3) 129 18.63 / 20.50, 256 21.76 / 18.21 (20.59), 384
    24.62 / 21.65. Where one program per tile takes more than a wave it lost (N 6144 x 2048 at 384 tokens, 144
    programs: 26.65 / 29.73), and past 384 tokens it was behind the prefill path or humming at three of four
    shapes (512 tokens: N 2560 40.01 against 37.71, N 4992 and 6144 x 2048 more than a wave). At 129-192 tokens the
    rule takes 64 + tail tiles (72-96 tokens each), as the decode kernel does at 65-96 tokens.

    H200 (run 201, ``mxfp8_linear`` on MXFP8 rows, this pick / the pick before it, us, at M 129 / 192 / 256 /
    384): N 2560 x 6144 18.40 / 20.19 / 22.10 / 28.06 against 27.85 / 28.96 / 29.43 / 36.69; N 4992 x 6144 36.31 /
    37.64 / 39.04 / 43.61 against 42.23 / 43.26 / 43.13 / 63.13; N 6144 x 2048 (to 256) 14.23 / 15.37 / 16.28
    against 19.55 / 23.98 / 22.05; N 1536 x 6144 15.27 / 16.82 / 18.21 / 21.96 against 18.84 / 20.95 / 22.08 / 24.76:
    0.64-0.91x at all 15 points (BF16 rows 0.65-0.95x).

    Up to 256 tokens, one wide tile (:func:`wide_block_m`: 128 + 8, 16, 32, 64 or 128 tokens on one weight conversion)
    instead, where its one-wave split puts at least 1.5x as many programs in the wave as the token tiles' (split 1 of
    two token tiles leaves N 4992's 39 x 2 programs on 132 SMs; the wide tile takes 39 x 3; the one win measured, so
    the bound; between 1x and 1.5x, e.g. N 3072 x 6144's 120 against 96, is not measured).
    H100 (2026-12-05, ``docs/benchmarks-log.md`` runs 208 and 211, ``mxfp8_linear`` given A_deq, weights past L2, us at
    M 129 / 160 / 192, the token tiles / the wide tile at its split, 3 stages; humming W8A16 in the same process in
    brackets): N 4992 x 6144 (token tiles split 1, wide 3) 33.52 / 35.11 / 34.20 -> 27.48 / 26.72 / 27.25 (24.92 /
    26.56 / 32.16); at equal program counts the token tiles stay faster: N 2560 x 6144 (split 3 / 6, 120 programs
    each) 15.70 / 15.66 / 16.67 against 19.22 / 18.64 / 18.11, N 6144 x 2048 (1 / 2, 96) 12.22 / 12.82 / 13.04
    against 16.43 / 16.29 / 16.56, and N 1536 x 6144 (5 / 6: 120 against 72 programs) 11.98 / 12.17 / 13.15 against
    16.64 / 16.42 / 16.35. The wide tile sized to M, at the ring depth shared memory allows (4 stages at 136-144
    tokens, 3 at 160-192): H100 (runs 234-235, N 4992 x 6144, split 3, the same bytes as the 192-token tile's, us,
    192 tokens -> the sized tile; humming W8A16 in brackets, run 234's process): M 129 27.57 -> 136: 23.15 (25.11); M
    136 26.74 -> 22.29; M 144 26.54 -> 144: 22.38 (23.62 at 3 stages); M 152 26.51 -> 160: 24.42; M 160 26.57 ->
    24.11 (26.40). The 256-token tile (128 + 128, 2 stages) at 193-256 tokens there (H100, run 237, us, the token
    tiles at split 1 -> the 256-token tile at split 3, on MXFP8 rows / given A_deq): M 193 38.48 -> 37.26 / 36.68 ->
    34.98; M 224 38.76 -> 36.90 / 35.27 -> 35.38; M 256 38.61 -> 37.10 / 35.45 -> 36.00 (humming 37.25); it lost
    where the programs tie (N 2560 x 6144 at 256 tokens, split 6: 27.33 against 22.99, N 1536 and 6144 x 2048
    too)."""
    if not WGMMA_MAX_M < m <= TOKEN_TILES_MAX_M or k % 128 or k < STREAMED_MIN_K:
        return None
    tiles, steps = -(-n // 128), k // 128
    token_tiles = -(-m // STREAMED_BLOCK_M)
    programs = tiles * token_tiles
    if programs > sms:
        return None
    block_m = streamed_block_m(-(-m // token_tiles))  # each token tile's share of M: 65 tokens or more
    split = min(WS_MAX_SPLIT, one_wave_split(programs, steps, sms))
    if m <= mxfp8_wgmma_ws.WIDE_TILES[-1]:  # one token tile's programs against the wide tile's
        wide_split = min(WS_MAX_SPLIT, one_wave_split(tiles, steps, sms))
        if 2 * tiles * wide_split >= 3 * programs * split:
            block_m, split = wide_block_m(m), wide_split
    # wide tiles: 4 stages at 136-144, 3 at 160-192, 2 at 256
    stages = min(WS_STAGES, mxfp8_wgmma_ws.max_stages(block_m, k, split))
    return Tile(block_m, 128, 128, 8, stages, split, wgmma=True, warp_specialized=True)


#: Most tokens of :func:`pick_prefill_token_tiles` (above, the prefill path: there it stayed ahead at 5 of 8 points,
#: 1.03-1.10x the token tiles' time elsewhere, log run 239).
PREFILL_TOKEN_TILES_MAX_M = 2048
#: Time of one K step (128) of a warp-specialized program on each token tile it may take above
#: :data:`~seam.kernels.wgmma_config.TOKEN_TILES_MAX_M` tokens, us: H100 (log run 239, K 6144, the dequantization
#: launch's time taken off, waves of programs at split 1; the H200 has the same SMs and clock).
PREFILL_STEP_US = {128: 0.85, 192: 1.13, 256: 1.55}
#: The split-K combine's cost per split in that model, us, where the split is above 1 (run 239: the token tiles
#: split 2-4 ways took 5-15 us more than the step model).
PREFILL_SPLIT_US = 2.0
#: Bytes per weight element that the prefill path moves and the token tiles do not (its dequantization launch reads
#: the E4M3 byte and writes a BF16 copy), and the rate they move at (H100 SXM, bytes per us): the prefill path's fixed
#: price. On an H200 (4.8 TB/s, log run 252) the H200's rate would change the pick at 6 points of 24 on four layers
#: at 385-2048 tokens: this one won at 3, lost at 2 (1.05x, 1.07x), tied at 1; where both take the token tiles they
#: lose at 5 of 14 points there (1.01-1.07x).
PREFILL_WEIGHT_BYTES = 3
PREFILL_WEIGHT_BYTES_PER_US = 3.35e6


@functools.cache  # a pure function of its sizes, weighed on every eager call past 384 tokens (about 5 us)
def pick_prefill_token_tiles(m: int, n: int, k: int, sms: int) -> Tile | None:
    """The warp-specialized kernel's tile for :data:`~seam.kernels.wgmma_config.TOKEN_TILES_MAX_M` < M <=
    :data:`PREFILL_TOKEN_TILES_MAX_M` (K a multiple of 128, at least ``STREAMED_MIN_K``), or None where the prefill
    path is expected to be faster: ceil(M / block_m) token tiles of 128, 192 or 256 tokens (the 192 and 256 ones
    :data:`seam.kernels.mxfp8_wgmma_ws.WIDE_TILES`), each at split 1 and, where split 1 fills less than 3/4 of a wave
    of ``sms``, at the least split of 2 or 3 that fills 3/4 of it (else 4, which may fill less). Of those it takes the
    one a wave model calls fastest: waves x K steps per program x :data:`PREFILL_STEP_US` (plus
    :data:`PREFILL_SPLIT_US` per split above 1); then it runs
    that tile where the SM time the model leaves idle (wave tails, padded tokens) costs no more than the prefill
    path's weight dequantization (:data:`PREFILL_WEIGHT_BYTES` per weight at :data:`PREFILL_WEIGHT_BYTES_PER_US`),
    the one cost the token tiles do not pay: both dequantize the activations first, and both run one fp32 sum per
    output rounded once, so they differ in the order of the sum (split-K) only.

    H100 (2026-12-05, ``docs/benchmarks-log.md`` run 239, ``mxfp8_linear`` on MXFP8 rows, weights past L2, us, the
    prefill path -> this pick, at M 385 / 512 / 768 / 1024 / 1536 / 2048): N 1536 x K 6144 (gate_up) 26.47 / 33.92
    -> 27.91 / 35.52 -> 36.63 / 42.55 / 57.51 / 73.33 -> 65.69 (cuBLAS BF16 on pre-dequantized weights: 56.03); N
    2560 x 6144 (qkv) 42.84 -> 36.55 / 44.79 -> 36.12 / 56.27 -> 43.65 / 67.35 -> 57.74 / 89.85 -> 76.97 / 111.61;
    N 6144 x 2048 (o_proj) 30.23 -> 27.83 / 33.41 -> 26.04 / 42.05 -> 39.71 / 51.05 -> 49.74 / 68.18 -> 65.77 /
    88.76 -> 87.80; N 4992 x 6144 (the TP 2 QKV) 75.38 -> 64.21 / 82.42 -> 56.44 / 100.57 -> 73.26 / 121.95 ->
    113.94 / 171.92 -> 150.30 / 212.83 -> 219.71. 0.68-1.03x the prefill path's time where it picks the token
    tiles (1.03 at N 1536 768 tokens and N 4992 2048 tokens); where it keeps the prefill path the token tiles
    took 0.97-1.30x. At 3072-4096 tokens the model's tile took 0.98-1.21x the prefill path's."""
    if not TOKEN_TILES_MAX_M < m <= PREFILL_TOKEN_TILES_MAX_M or k % 128 or k < STREAMED_MIN_K:
        return None
    tiles, steps = -(-n // 128), k // 128

    def cost(block_m: int, split: int) -> tuple[float, float]:
        programs = tiles * -(-m // block_m) * split
        waves = -(-programs // sms)
        us = waves * steps / split * PREFILL_STEP_US[block_m] + (PREFILL_SPLIT_US * split if split > 1 else 0.0)
        return us, 1 - m * tiles * split / (block_m * waves * sms)  # the time, the SM time left idle

    candidates = []
    for block_m in PREFILL_STEP_US:
        programs = tiles * -(-m // block_m)
        candidates.append((block_m, 1))
        if 4 * programs < 3 * sms:
            candidates.append((block_m, next((s for s in (2, 3) if 4 * programs * s >= 3 * sms), 4)))
    (us, idle), (block_m, split) = min(((cost(*c), c) for c in candidates), key=lambda t: t[0][0])
    if idle * us > PREFILL_WEIGHT_BYTES * n * k / PREFILL_WEIGHT_BYTES_PER_US:
        return None
    stages = min(WS_STAGES, mxfp8_wgmma_ws.max_stages(block_m, k, split))  # 4 at 128 tokens, 3 at 192, 2 at 256
    return Tile(block_m, 128, 128, 8, stages, split, wgmma=True, warp_specialized=True)


#: The ring kernel (``seam.kernels.mxfp8_wgmma_ring``: weights and dequantized activations through one TMA ring)
#: takes WGMMA_MAX_M < M <= RING_MAX_M at K >= STREAMED_MIN_K, 256 tokens per program, where each program still
#: runs RING_256_MIN_STEPS K steps.
RING_MAX_M = 256
RING_256_MIN_STEPS = 16


def pick_ring_tile(m: int, n: int, k: int, sms: int) -> Tile | None:
    """The ring kernel's tile for :data:`WGMMA_MAX_M` < M <= :data:`RING_MAX_M` (K a multiple of 128, at least
    :data:`STREAMED_MIN_K`), else None: one 256-token M tile, as many stages as fit (2), the K split filling one
    wave of programs with >= 4 steps each, where each program then runs >= :data:`RING_256_MIN_STEPS` steps (else
    None: the prefill path).

    H200 (2026-12-01, ``docs/benchmarks-log.md`` run 61, prefill path / this tile at M 129, 160, 192, 256, us): the
    two shapes with 16 or more steps per program win at every M, N 4992 x K 6144 (split 3, 16 steps) 56.1 / 48.1,
    58.3 / 48.0, 58.7 / 48.4, 58.6 / 48.4 and N 9856 x 6144 (split 1) 95.4 / 88.4, 104.9 / 88.2, 104.6 / 88.2,
    103.3 / 88.8; with 10 steps (N 3072 x 6144, split 5) it lost at 129 (34.7 / 36.7) and won above; with 4-8
    steps (N 1536 and 2560 x 6144, N 6144 x 2048) it lost 1.03-1.7x. The splits are those that were fastest for
    the ring kernel's 128-token tile (run 54: of 1-6 at N 2560, 4992 x K 6144 and 6144 x 2048), which took 65-128
    tokens until the decode kernel's streamed tile replaced it (:func:`pick_wgmma_tile`).
    """
    if not WGMMA_MAX_M < m <= RING_MAX_M or k % 128 or k < STREAMED_MIN_K:
        return None
    split = one_wave_split(-(-n // 128), k // 128, sms)
    if mxfp8_wgmma.max_steps(k, split) < RING_256_MIN_STEPS:
        return None
    return Tile(256, 128, 128, 8, mxfp8_wgmma_ring.max_stages(256), split, wgmma=True)


#: From this M up, a CUDA device (not the interpreter) takes the prefill path, :data:`BF16_MM_TILE`, where no
#: Gluon tile takes the shape: dequantize A and W to BF16 (exact, the values every GEMM path multiplies) and
#: multiply them with cuBLAS (``torch.mm`` accumulating in fp32, rounded to BF16 once). H200 (2026-12-01,
#: ``docs/benchmarks-log.md`` run 43, us, tl kernel's pick / this path with fp32 output and a rounding launch):
#: qkv 2560 x 6144 at M 96 32.3 / 26.2, 192 54.7 / 32.4, 2048 295.4 / 111.3; gate_up 1536 x 6144 M 96 29.1 /
#: 21.1, 2048 184.4 / 73.2; o_proj 6144 x 2048 M 96 26.8 / 22.6, 2048 176.5 / 106.0; down 6144 x 768 M 128
#: 11.3 / 13.6, 192 17.7 / 15.4, 2048 69.3 / 63.4. With BF16 output and one dequantization launch (runs 81,
#: 97) it also wins at 65-128 tokens where no Gluon kernel applies (K < 2048; runs 156-157, MXFP8 rows, us,
#: tl / this path, M 65 / 128): down 6144 x 768 11.18 / 8.92, 11.27 / 9.72; 4096 x 1024 12.82 / 9.52, 11.66 /
#: 9.61; 7168 x 1536 20.29 / 16.22, 20.61 / 16.27; 12288 x 1024 21.61 / 17.72, 25.14 / 18.07; 256 x 256 5.02 /
#: 4.59, 5.05 / 4.57: faster at all 30 points of ten shapes (0.66-0.97x; BF16 rows 0.63-0.93x).
PREFILL_MM_MIN_M = 65
#: Whether this torch's ``mm`` takes ``out_dtype``, with and without ``out`` (the prefill path's fp32 output).
_MM_OUT_DTYPE = {"dtype", "dtype_out"} <= set(torch.ops.aten.mm.overloads())
#: The prefill path's tile (its other fields are unused).
BF16_MM_TILE = Tile(128, 128, 128, 8, 1, bf16_mm=True)


def bf16_mm_supported(device: torch.device) -> bool:
    """Whether the prefill path is picked on ``device``: an NVIDIA GPU, not the interpreter (where the
    tl kernel stays the tested path; a caller may still ask for :data:`BF16_MM_TILE` there), with a
    torch whose ``mm`` takes ``out_dtype`` (the ``aten::mm.dtype`` and ``dtype_out`` overloads, torch >= 2.8)."""
    return (device.type == "cuda" and torch.version.cuda is not None and not runtime.INTERPRET
            and _MM_OUT_DTYPE)


def covers(tile: Tile, m: int, *, partials: bool = False) -> bool:
    """Whether ``tile``'s kernel computes all M rows: every tile does but the plain decode kernel's (``wgmma``,
    neither ``ring`` nor ``warp_specialized``), which runs ``block_m`` tokens and no more. ``partials``: into the
    fused QKV op's split-K partials, whose epilogue reads one M tile of them from the ring kernel too (the
    warp-specialized kernel's every token tile).

    The launchers pick again where a tile does not (``seam.kernels.mxfp8_gemm.launch_mxfp8_linear``,
    ``seam.kernels.qkv_epilogue.launch_qkv_epilogue``): a tile picked while tracing is recorded in the graph for
    the traced M, and an engine that skips Dynamo's guards (vLLM runs its compiled graph at every batch size)
    replays it at other M."""
    one_m_tile = not tile.warp_specialized if partials else not (tile.ring or tile.warp_specialized)
    return not (tile.wgmma and one_m_tile and m > tile.block_m)


def pick_tile(m: int, n: int, k: int, device: torch.device, *, tl_only: bool = False, a_deq: bool = False,
              mma_rows: bool = True, partials: bool = False) -> Tile:
    """On Hopper at 1-16 tokens the 16-row kernel's tile where it applies (below); :data:`GEMV_TILE` for one token
    (on Hopper only below N :data:`WGMMA_ONE_TOKEN_MIN_N`); else small
    tiles unless 128-row tiles need fewer waves on this device's SMs; then split K to fill the SMs (two
    waves for the 1-, 16- and 32-row decode tiles, :data:`DECODE_WAVES`).

    A 64-row tile streams the same weights as a 128-row one and costs about 3/5 of
    its time at these shapes, so the small config wins whenever
    ``3/5 * waves(small) <= waves(large)``.

    A 64-row tile with K split at most 2 ways gets the :data:`TWO_PER_SM_REGISTERS` budget:
    ptxas then takes 123 registers instead of 108 (sm_90, no spills either way, two
    programs per SM either way), and on the H200 (2026-12-01, ``docs/benchmarks-log.md`` run 31,
    same output bytes) the kernel was 3-5.5% faster at all 9 unsplit shapes measured (the
    four layer shapes of ``seam bench linear``, M 128-2048) and 12-21% faster at all 4
    two-way splits; at 3 splits it was neutral (0.993-0.997x), at 4 slower (1.10x),
    and so was the 128-row tile (1.13x).

    On a Hopper GPU, M <= 16 at K 512 or 768 (2 <= M <= 8 at K 3072, 4096 or 6144) takes the 16-row kernel where
    :func:`pick_mma_rows_tile` does and ``mma_rows`` allows (MXFP8 rows into BF16; False: BF16 rows quantized in the
    GEMM, the fused QKV op's partials); else M <= 64 takes the Gluon decode kernel (:func:`pick_wgmma_tile`; one token
    where N >= :data:`WGMMA_ONE_TOKEN_MIN_N`), and so does 65 <= M <= 128 where K >= 2048 (at K 512-768 on wide N
    too: :func:`ws_short_k`; from K 256 over two 64-token tiles: :func:`two_token_tiles_split`); 129 <= M <= 384 the
    warp-specialized decode kernel over token tiles where K >= 2048 and one program per N tile and token tile fits a
    wave (:func:`pick_token_tiles`), else up to 256 the Gluon ring kernel where :func:`pick_ring_tile` takes the shape;
    385 <= M <= 2048 that kernel's token tiles where :func:`pick_prefill_token_tiles` takes them; on any CUDA GPU, M >=
    :data:`PREFILL_MM_MIN_M` (65) takes the prefill path (:data:`BF16_MM_TILE`) otherwise; ``tl_only`` keeps the pick to
    the tl kernel. ``a_deq``: the activations come with their A_deq (``seam.formats.a_deq``), which the warp-specialized
    64-row tile needs at K >= 2048 (:func:`wgmma_warp_specialized`) and unsplit at K 896-1024 (:func:`ws_whole_k`);
    ``partials``: the GEMM only stores its split-K partials (the fused QKV op), which keeps the unsplit tile out
    (:func:`pick_wgmma_tile`). N = 0 (nothing to compute) takes no Gluon tile: their K splits
    divide the SMs by the N tiles.
    """
    sms = runtime.num_sms(device)
    if not tl_only and n > 0 and wgmma_config.wgmma_supported(device):  # tests patch the module's
        wgmma_tile = ((pick_mma_rows_tile(m, n, k, sms) if mma_rows else None)
                      or pick_wgmma_tile(m, n, k, sms, a_deq=a_deq, partials=partials)
                      or pick_token_tiles(m, n, k, sms) or pick_ring_tile(m, n, k, sms)
                      or pick_prefill_token_tiles(m, n, k, sms))
        if wgmma_tile is not None:
            return wgmma_tile
    if not tl_only and m >= PREFILL_MM_MIN_M and bf16_mm_supported(device):
        return BF16_MM_TILE
    tile = GEMV_TILE if m == 1 else small_tile(m)
    if m > tile.block_m:
        waves_small = -(-(-(-m // tile.block_m) * -(-n // tile.block_n)) // sms)
        waves_large = -(-(-(-m // LARGE_TILE.block_m) * -(-n // LARGE_TILE.block_n)) // sms)
        if 3 * waves_small > 5 * waves_large:
            tile = LARGE_TILE
    waves = DECODE_WAVES if tile.block_m <= 32 else 1
    split_k = pick_split_k(*tiles_and_k_steps(m, n, k, tile), sms, waves)
    cap = TWO_PER_SM_REGISTERS if tile.block_m == 64 and split_k <= 2 else None
    return dataclasses.replace(tile, split_k=split_k, max_registers=cap)


#: Largest one-wave K split (one program per SM) at which a 32- or 64-row tile still takes
#: :data:`TWO_PER_SM_REGISTERS` and two programs per SM instead.
_CAP_MAX_ONE_WAVE_SPLIT = {32: 3, 64: 2}


#: Most tokens at which the fused QKV op runs :func:`pick_prefill_token_tiles`' tiles (above, the prefill path): its
#: epilogue on their partials costs more than on the prefill path's accumulator as M grows. H100 (2026-12-05,
#: ``docs/benchmarks-log.md`` run 246, the op on MXFP8 rows, us, the token tiles / the prefill path): nkv 1 M 512
#: 41.91 / 50.81, M 1024 72.39 / 78.00; nkv 2 M 512 69.89 / 94.82, M 1024 141.51 / 141.32, M 2048 283.49 / 249.94.
QKV_TOKEN_TILES_MAX_M = 1024


def pick_qkv_tile(m: int, n: int, k: int, device: torch.device, *, tl_only: bool = False) -> Tile:
    """The fused QKV op's tile for M tokens: :func:`pick_tile`'s Gluon decode or prefill tile where it
    picks one (the op then runs that GEMM into an fp32 accumulator and the epilogue kernel on it,
    ``seam.kernels.qkv_epilogue.launch_qkv_epilogue``; the warp-specialized token tiles' partials the epilogue reads
    across token tiles, the wide tiles' included), but the prefill path's above :data:`QKV_TOKEN_TILES_MAX_M` tokens (where
    torch has it: ``bf16_mm_supported``; else the token tiles stay); else,
    or with ``tl_only``, its tl choice refit to the registers the fused kernel's epilogue takes.

    At 65-384 tokens, the same GEMM tile as ``mxfp8_linear`` (H100, 2026-12-05, ``docs/benchmarks-log.md`` run 207,
    the op given A_deq, weights past L2, us, the pick before (the 128-token tile at 65-128 and over token tiles, the
    ring kernel at 129-256 tokens of N 4992) -> this pick, with the epilogue tile after each,
    ``seam.kernels.qkv_config.epilogue_tile_after``, before -> now): nkv 1 (N 2560) M 65 15.60 -> 14.11, 128 17.54
    (the same tile), 129 27.71 -> 20.05, 192 25.51 -> 20.85, 256 25.79 -> 23.05, 384 34.13 -> 29.77; nkv 2 (N 4992)
    M 65 25.83 -> 20.71, 128 27.05 -> 24.29, 129 48.84 -> 42.59, 192 48.95 -> 46.16, 256 50.28 -> 46.50, 384 62.06
    -> 54.06 (at nkv 2 129-192 tokens those are the token tiles; the op then took the 192-token tile there, as
    ``mxfp8_linear`` did, and now its wide tile sized to M (run 236: 26.83 / 29.70 us at 129 / 160 tokens); the
    192-token tile took 27.45 / 27.43 us alone at 129 / 192 tokens against the token tiles' 33.51 /
    34.22, run 208; the op on it, run 214: 31.00 / 30.26 / 30.83 at 129 / 160 / 192 against the token tiles' 43.14 /
    44.39 / 46.29). The ring kernel with the same 4-row epilogue tile took 46.27 /
    45.37 / 48.03 at 129 / 192 / 256 tokens there: the token tiles win at 129 and tie above, so the op runs one GEMM
    rule with ``mxfp8_linear`` (and reads the producers' A_deq there). ``mxfp8_linear`` alone in the same run: nkv 1 11.37 / 14.46 / 15.95 / 17.01 / 18.68 /
    24.88, nkv 2 17.48 / 20.76 / 33.53 / 34.22 / 35.29 / 41.79.

    The two-launch path wins at every M it takes but one token at nkv 1 (H200, 2026-12-01, ``docs/benchmarks-log.md`` runs 48-49,
    us, this path / the one-kernel tl tile, K 6144, nkv 1 then 2): M 8 10.79 / 13.19, 15.35 / 20.18;
    M 64 17.98 / 25.41, 33.50 / 41.30; M 256 38.46 / 70.40, 65.40 / 135.53; M 2048 126.5 / 322.2,
    237.6 / 579.3 (run 51, with the Gluon GEMM's partials summed by the epilogue: M 8 10.39, 15.72; M 64
    14.96, 30.41); run 55, the ring kernel's partials: M 65 28.5 / 50.5, 39.3 / 75.2; M 128 30.4 / 50.8,
    41.9 / 76.5). One token follows ``pick_tile`` too (every QKV N, (19 nkv + 1) * 128, is >= 2560, so the
    Gluon tile on Hopper; run 123: nkv 1 9.49 / 9.41, within the runs' spread, nkv 2 14.25 / 14.45); the fused
    GEMV kernel stays where the Gluon kernel does not run.

    The refit:
    Left to itself ptxas gives the fused kernel's 32- and 64-row tiles 164 and 242
    registers per thread (96853ea; the GEMM alone, ``mxfp8_linear``: 100 and 108 at
    5ce5581; ``tools/sm90_resources.py``), so
    one 8-warp program fills an SM. Capped at :data:`TWO_PER_SM_REGISTERS` (no spills at
    16 and 32 rows, 400-480 bytes of stack at 64 depending on outputs and split) two
    programs share each SM, and the K split is picked for two per SM. Capping wins where
    one program per SM would leave K split at most 3 ways (32 rows) or 2 ways (64 rows),
    and loses above that. Fused QKV on the H200 (2026-12-01, ``docs/benchmarks-log.md``, us, nkv 1
    then 2): M 32 split 6 uncapped 18.8 (pick_tile's split 12: 21.8), nkv 2 capped 25.8
    (32.8); M 64 capped 25.4 (30.7), nkv 2 41.5 (41.4); M 128 uncapped 52.7 (capped
    62.3), nkv 2 capped split 3 80.6 (104.5); M 256 capped split 3 70.7 (102.0). 16-row
    tiles (126-128 registers uncapped) always take the cap: 3% faster at nkv 1. The
    one-token GEMV (75-77 registers, three programs per SM already) and the 128-row
    prefill tile keep pick_tile's choice, and so does pick_tile's choice between 64- and
    128-row tiles (measured without the cap). The thresholds were measured at K 6144
    only.

    Capped 64-row tiles also take F16 operands (``Tile.f16_operands``, same bytes out):
    their K loop has a quarter fewer instructions and no more registers to lose (H200,
    2026-12-01, us, BF16 then F16 operands): nkv 1 M 1024 243.1 / 204.6, M 2048 379.1 /
    321.8; nkv 2 M 512 242.7 / 205.6; M 128-256 (split 3) within 2%. Elsewhere they did
    not pay: 16- and 32-row tiles -5% to +5%, uncapped tiles lost up to 23% (ptxas gave
    the second loop more registers: 102 -> 132 for ``mxfp8_linear``'s 64-row tile at e8dc001).
    """
    if not tl_only:
        tile = pick_tile(m, n, k, device, mma_rows=False, partials=True)  # the op's GEMM writes split-K partials
        if tile.wgmma and m > QKV_TOKEN_TILES_MAX_M and bf16_mm_supported(device):
            return BF16_MM_TILE
        if tile.wgmma or tile.bf16_mm:
            return tile
    tile = pick_tile(m, n, k, device, tl_only=True)  # the fused epilogue runs on the tl kernel
    if tile.block_m == 16:
        return dataclasses.replace(tile, max_registers=TWO_PER_SM_REGISTERS)
    limit = _CAP_MAX_ONE_WAVE_SPLIT.get(tile.block_m)
    if limit is None:
        return tile
    sms = runtime.num_sms(device)
    tiles, k_steps = tiles_and_k_steps(m, n, k, tile)
    one_wave = pick_split_k(tiles, k_steps, sms, waves=1)
    if one_wave > limit:
        return dataclasses.replace(tile, split_k=one_wave)
    two_per_sm = pick_split_k(tiles, k_steps, sms, waves=2)
    return dataclasses.replace(
        tile, split_k=two_per_sm, max_registers=TWO_PER_SM_REGISTERS, f16_operands=tile.block_m == 64
    )
