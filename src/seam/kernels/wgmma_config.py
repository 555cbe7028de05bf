"""Launch rules of the Gluon (Hopper ``wgmma``) MXFP8 GEMM kernels, once a tile is picked: whether they run on a
device, the M and K bounds their tiles share (and where the 16-row kernel may run, :func:`mma_rows_k`), which
producers write A_deq for them (:func:`a_deq_pays`), and what a
launch derives from its tile (:func:`wgmma_launch`: ring steps before the PDL wait, BF16 multiplies, A_deq streamed or
resident, dequantization first, split-K combiners), each with the H200 measurement that set it.

The pickers that choose a tile (``pick_wgmma_tile``, ``pick_token_tiles``, ``pick_ring_tile``,
``pick_prefill_token_tiles``, ``pick_tile``) are
in :mod:`seam.kernels.mxfp8_gemm_config`; the kernels are ``seam.kernels.mxfp8_wgmma`` (decode),
``seam.kernels.mxfp8_wgmma_ws`` (warp-specialized), ``seam.kernels.mxfp8_wgmma_ring`` (ring) and
``seam.kernels.mxfp8_mma_rows`` (16-row).
"""

from __future__ import annotations

import dataclasses

import torch

from seam import runtime
from seam.kernels import mxfp8_wgmma


def wgmma_supported(device: torch.device) -> bool:
    """Whether the Gluon decode kernel runs on ``device``: a Hopper GPU (sm_90), not the interpreter."""
    if runtime.INTERPRET or device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device)[0] == 9


#: Largest tile of the Gluon decode kernel whose activations may stay resident in shared memory (8-64 rows);
#: above it the kernel runs :data:`STREAMED_BLOCK_M`.
RESIDENT_MAX_M = 64
#: The Gluon decode kernel's largest tile (97..128 tokens), which always streams A_deq beside its weight ring
#: (:func:`wgmma_a_stream`), at K >= :data:`STREAMED_MIN_K`.
STREAMED_BLOCK_M = 128
#: Most tokens of the decode kernel's 64 + tail tiles (``seam.kernels.mxfp8_wgmma.TAIL_TILES``: 65..96 tokens), which
#: stream A_deq like :data:`STREAMED_BLOCK_M`.
TAIL_MAX_M = 96
#: Largest K split at which tiles run warp-specialized (:func:`~seam.kernels.mxfp8_gemm_config.wgmma_warp_specialized`).
WS_MAX_SPLIT = 6
#: Largest M of the Gluon decode kernel (the MMA's N side: one 128-token tile).
WGMMA_MAX_M = STREAMED_BLOCK_M
#: Smallest K at which M above :data:`RESIDENT_MAX_M` takes a Gluon kernel (the streamed decode tile, the ring
#: kernel) on any N; below it the prefill path, but at 65-128 tokens for two 64-token tiles where they fit a wave and
#: K 512-768 on wide N (``mxfp8_gemm_config.two_token_tiles_split``, ``ws_short_k``).
STREAMED_MIN_K = 2048
#: Most tokens that :func:`~seam.kernels.mxfp8_gemm_config.pick_token_tiles` runs on the warp-specialized decode
#: kernel, over token tiles.
TOKEN_TILES_MAX_M = 384
#: Fewest tokens at which a producer writing A_deq (``seam.formats.a_deq``) for the Hopper GEMMs pays off (one token
#: where K <= :data:`A_DEQ_ONE_TOKEN_MAX_K`, nine where :func:`mma_rows_k` holds at short K), and the most
#: (:data:`TOKEN_TILES_MAX_M`; past it the producer's store costs about what the GEMM saves, :func:`a_deq_pays`).
A_DEQ_MIN_M = 2
A_DEQ_MAX_M = TOKEN_TILES_MAX_M
#: Smallest K at which 65-128 tokens below :data:`STREAMED_MIN_K` have their producer write A_deq (:func:`a_deq_pays`):
#: two K steps, the shortest at which ``mxfp8_gemm_config.two_token_tiles_split`` takes two 64-token tiles.
A_DEQ_TWO_TOKEN_TILES_MIN_K = 256
#: Widest K at which one token's producer writes A_deq: the layers with such inputs (o_proj, and down where the
#: 16-row kernel does not take it) are wide (N >= :data:`~seam.kernels.mxfp8_gemm_config.WGMMA_ONE_TOKEN_MIN_N`, so
#: one token runs the Gluon decode tile, which reads it); at K 6144 the input may feed a narrow projection (gate_up,
#: N 1536) whose one-token GEMV would not.
A_DEQ_ONE_TOKEN_MAX_K = 2048
#: The short K range of the 16-row kernel (``seam.kernels.mxfp8_mma_rows``, :func:`mma_rows_k`), set by its chains
#: after a PDL producer. H100 (2026-12-06, ``docs/benchmarks-log.md`` runs 267-270, us, producer + GEMM, that kernel on
#: the MXFP8 rows / the decode kernel reading the producer's A_deq, M 1 / 2 / 8): after SwiGLU + MXFP8, N 6144 x K 768
#: 4.38 / 4.68, 4.31 / 4.73, 4.32 / 4.78; N 4096 x K 512 3.33 / 4.19, 3.32 / 4.16, 3.34 / 4.37; but N 6144 x K 256
#: 2.94 / 2.50, 3.01 / 2.89, 3.02 / 2.81, K 1024 4.79 / 5.35, 4.87 / 5.38, 5.88 / 5.47 and K 1536 5.98 / 6.07, 6.13 /
#: 6.09, 6.30 / 6.29; after norm + MXFP8 slower at 12 of 15 points at K 1024 and 1536 (1.07-1.17x) and at 8 tokens at
#: K 512 (N 6144: 6.32 / 5.65; 1 and 2 tokens 3.60 / 4.61, 3.73 / 4.69), and at K 2048 (N 6144: 7.22 / 7.02, 9.57 /
#: 8.53). Alone it was faster at 99 of 100 points at K 256-1536 (``mxfp8_gemm_config.pick_mma_rows_tile``).
MMA_ROWS_MIN_K = 512
MMA_ROWS_MAX_K = 768
#: Its long K, from two tokens, where its programs fit one wave (4 warps to K 4096, 8 at 6144): set by its chains
#: after a norm + MXFP8 of hidden K, the norm writing A_deq as "auto" does (from two tokens at these K: the decode
#: kernel reads it, this kernel does not), and after a producer without PDL (the MoE router of ``seam bench step``).
#: H100 (2026-12-06, ``docs/benchmarks-log.md``, us, this kernel / the decode kernel, M 2 / 4 / 8): after the norm
#: (run 278, through ``mxfp8_linear``) gate_up N 1536 x K 6144 9.35 / 10.12, 10.15 / 10.24, 10.42 / 10.93; N 2048 x K
#: 3072 0.81-0.83x; N 4096 x K 3072 0.95-0.96x; N 1024 x K 4096 0.94x; N 2048 x K 6144 0.99-1.03x; after the router
#: (run 281, M 2 / 8) 0.98-1.02x at N 1024-4096; the MiniMax step at 8 tokens 70.22 against 70.99 us per rank (run
#: 280). One token stays on the decode kernel's pick: after the norm 0.83-1.03x, but after the router 1.03-1.05x at K
#: 4096 and 6144 (0.96-0.99x at K 3072) and in the step 58.60 against 57.79. K 7168 from two tokens lost after the
#: norm (N 2048 1.11 / 1.18 / 1.00, N 1024 0.94 / 1.07 / 1.02); K 5120 was mixed (run 284: 0.90-0.97x at N 1024 and
#: 2048, 1.01-1.04x at N 1536); between the ranges it lost after a producer (K 1024-2048, above).
#: Each long K maps to the most of its programs one SM takes in that wave: as many as fitted while it staged its
#: activations in shared memory (measured there, run 278). Held in registers, more fit (3 at K 4096, 2 at K 6144);
#: two an SM at K 6144 lost at 8 tokens after the norm (N 2560-4096, runs 285-286), and at 1-8 tokens fenced (run 358:
#: 2.1-3.4 us slower at N 2560-4096, one token included, though 0.65-1.3 us faster back to back at N 2560-3072); three at
#: K 4096 were not measured.
MMA_ROWS_LONG_PER_SM = {3072: 2, 4096: 2, 6144: 1}
MMA_ROWS_LONG_KS = tuple(MMA_ROWS_LONG_PER_SM)
MMA_ROWS_LONG_MIN_M = 2
#: Most tokens it takes at its long K: one 8-token tile (its 16-token one is not measured there; at K 6144 it does not
#: fit: staged, 237 KB of shared memory; sm_90 compile).
MMA_ROWS_LONG_MAX_M = 8
#: Most tokens at which it takes every layer of its short K (N >= 256): the producers' "auto" writes no A_deq there.
MMA_ROWS_EVERY_N_MAX_M = 8
#: Most tokens it takes at its short K: 9-16 on its 16-token tile (``mxfp8_mma_rows.BLOCK_MS``), where its programs
#: number at most :data:`MMA_ROWS_TOKENS16_MAX_WAVE` an SM.
MMA_ROWS_SHORT_MAX_M = 16
#: Most programs of the 16-token tile per SM: the most measured where it won. Each program reads every token's row
#: (16 x K bytes from L2, as much as its weight strip); after SwiGLU + MXFP8 it lost at 2.9 programs an SM and won at
#: 1-1.45 (H100, 2026-12-06, ``docs/benchmarks-log.md`` run 314, us, the decode kernel's pick reading the producer's
#: A_deq / this tile, its producer writing none, 9 and 16 tokens: N 6144 x K 768 (384 programs) 5.56 / 6.23, 5.17 /
#: 6.18; N 6144 x K 512 4.83 / 6.28, 4.74 / 6.41; N 3072 x K 512 (192) 4.38 / 3.98, 4.84 / 3.95; N 2048 x K 768 (128)
#: 5.13 / 4.15, 5.10 / 4.27). N 3168 on 132 SMs. Past it (H200, run 315, 12 and 16 tokens, with the producer's
#: "auto" A_deq) mixed after SwiGLU + MXFP8 at 1.7-2.9 an SM: faster at N 4096-5120 x K 768, slower at N 3584 and 6144.
MMA_ROWS_TOKENS16_MAX_WAVE = 1.5


def mma_rows_k(m: int, k: int) -> bool:
    """Whether the 16-row kernel may take M tokens at K: 1 <= M <= :data:`MMA_ROWS_SHORT_MAX_M` and K in
    :data:`MMA_ROWS_MIN_K` .. :data:`MMA_ROWS_MAX_K`, a multiple of 256 (its 128-column steps split over 2 warps,
    ``mxfp8_mma_rows.warps_for``), or :data:`MMA_ROWS_LONG_MIN_M` .. :data:`MMA_ROWS_LONG_MAX_M` tokens at K in
    :data:`MMA_ROWS_LONG_KS` (4 or 8 warps). Where on N: ``seam.kernels.mxfp8_gemm_config.pick_mma_rows_tile``."""
    if MMA_ROWS_MIN_K <= k <= MMA_ROWS_MAX_K and k % 256 == 0:
        return 1 <= m <= MMA_ROWS_SHORT_MAX_M
    return k in MMA_ROWS_LONG_KS and MMA_ROWS_LONG_MIN_M <= m <= MMA_ROWS_LONG_MAX_M


def a_deq_pays(m: int, k: int, device: torch.device) -> bool:
    """Whether the producer of an M x K activation should write its A_deq (``seam.formats.a_deq``), on a
    Hopper GPU: where the Gluon decode kernel reads it, from :data:`A_DEQ_MIN_M` tokens (from one at K <=
    :data:`A_DEQ_ONE_TOKEN_MAX_K`) but not where :func:`mma_rows_k` holds at its short K up to
    :data:`MMA_ROWS_EVERY_N_MAX_M` tokens (the 16-row kernel runs there
    on the MXFP8 rows; H100, 2026-12-06, log run 268, SwiGLU + MXFP8 -> GEMM at K 768, us, it without A_deq / the
    decode kernel with: N 6144 M 1 4.49 / 4.65, M 8 4.56 / 4.79; N 3072 3.44 / 4.09, 3.45 / 4.37; N 1024 2.89 / 4.89,
    2.97 / 4.13; the rule knows K, not N or the consumer: there the decode kernel runs without A_deq where N < 256,
    past the 16-row kernel's one wave, and in the fused QKV op; at its long K the producer still writes A_deq from two
    tokens, for the layers one wave does not cover: a norm of hidden 6144 feeds gate_up, N 1536, where the 16-row
    kernel ignores it, and the QKV projection, N 2560, and its fused op, which read it), where the GEMM's saved
    staging outweighs the producer's extra BF16 store, up to
    :data:`RESIDENT_MAX_M` tokens; and above, up to :data:`A_DEQ_MAX_M` tokens at K >= :data:`STREAMED_MIN_K` (to
    128 tokens from K 256, below), where its streamed tile (to 128 tokens) or its token tiles (129-384) then skip their
    dequantization launch
    (measured to 128 tokens with the ring kernel, which had the same launch and took those M until 2026-12-04; a
    ring kernel picked for a wide layer at 129-256 ignores A_deq, whose K order it does not read). Past 384 tokens
    the GEMMs read a given A_deq too (the token tiles, and the prefill path where K >= 2048), but there the
    producer's store costs about what they save (H100, 2026-12-05, log run 248, norm + MXFP8 -> ``mxfp8_linear``,
    weights rotated, us, without -> with, M 512 / 1024 / 2048): N 1536 x K 6144 36.87 -> 35.85 / 56.04 -> 55.80 /
    95.04 -> 93.13; N 2560 x K 6144 45.14 -> 44.22 / 74.26 -> 73.67 / 139.12 -> 139.27; N 4992 x K 6144 66.04 ->
    65.40 / 127.91 -> 129.33 / 248.92 -> 253.88 (the norm's store 1.3-1.6 us at 512, 6.6-6.9 at 1024, 8.9-9.0 at
    2048), so "auto" stops at 384. At 65-128 tokens below :data:`STREAMED_MIN_K` (from
    :data:`A_DEQ_TWO_TOKEN_TILES_MIN_K`) the GEMM reads it too: on two 64-token tiles, or the streamed tile at short K
    on wide N (``mxfp8_gemm_config.two_token_tiles_split``, ``ws_short_k``), whose path otherwise writes it in a launch
    of its own first (H100, 2026-12-07, log runs 341-342: the chains there had SwiGLU + MXFP8 write it); layers
    narrower than N 1024 or too wide for one wave take the prefill path there, which ignores it below K 2048 (a
    per-layer choice: ``seam.ops.linear.wants_a_deq``). At 129-384 tokens (H200, 2026-12-05,
    log run 204, norm + MXFP8 -> ``mxfp8_linear`` on the token tiles, weights rotated, us, without -> with): N 2560 x
    K 6144 M 160 22.72 -> 21.55, 256 26.43 -> 24.41, 384 34.22 -> 32.57; N 1536 x K 6144 18.52 -> 17.21, 21.71 ->
    20.02, 27.78 -> 26.39.

    H200 (2026-12-02, ``docs/benchmarks-log.md`` run 110, producer + GEMM per step, CUDA graph of
    back-to-back pairs, us without -> with, bytes equal): norm + MXFP8 -> ``mxfp8_linear`` N 2560 x K 6144
    M 8 10.88 -> 12.44, M 16 13.22 -> 12.63, M 32 14.94 -> 13.39, M 64 17.33 -> 14.69; N 1536 M 8 10.14 ->
    11.71, M 16 11.71 -> 11.68, M 64 14.16 -> 12.66; norm -> fused QKV nkv 1 M 8 11.19 -> 12.05, M 16
    14.50 -> 13.95, M 64 19.17 -> 16.93 (nkv 2 faster at every M, M 8 18.11 -> 15.97); SwiGLU + MXFP8 ->
    down (N 6144 x K 768) M 8 5.24 -> 4.91, M 16 6.60 -> 5.51, M 64 9.79 -> 8.76. The norm's store costs
    0.5 us at these M. Below 9 tokens since the 8-row tiles wait for their A_deq copies at once
    (``mxfp8_wgmma.A_DEQ_WAIT_ALL_MAX_M``; run 115): norm -> ``mxfp8_linear`` N 2560 M 1 11.17 -> 11.25 (two
    runs' mean), M 2 10.94 -> 10.78, M 8 10.82 -> 10.78; N 1536 M 1 8.75 -> 9.15, M 2 10.12 -> 9.86, M 8
    10.16 -> 10.06; fused QKV nkv 1 M 1 12.01 -> 12.43, M 2 11.01 -> 10.36, M 8 11.24 -> 10.74; nkv 2 M 1
    17.02 -> 17.44, M 2 15.76 -> 14.75, M 8 18.22 -> 17.33. One token lost there: its GEMM was the tl GEMV,
    which does not read A_deq, so the store (0.3 us) bought nothing. Since one token takes the Gluon tile
    at N >= :data:`~seam.kernels.mxfp8_gemm_config.WGMMA_ONE_TOKEN_MIN_N` (run 122, producer + GEMM, MXFP8 without
    A_deq into the GEMV -> with A_deq into the 8-row tile): norm -> N 6144 x K 2048 8.72 -> 7.20, -> N 6144 x K 768 5.93 -> 4.96,
    -> N 2560 x K 6144 11.20 -> 11.06, -> N 4992 x 6144 15.47 -> 14.62, but -> N 1536 x 6144 8.72 -> 9.79
    (with A_deq into the 8-row tile; its GEMV would ignore the store): one token writes A_deq at K <=
    :data:`A_DEQ_ONE_TOKEN_MAX_K` only. The ring kernel
    (run 112, natural-order A_deq, same method): norm -> ``mxfp8_linear`` N 2560 x K 6144 M 65 21.39 ->
    20.30, M 100 22.06 -> 20.70, M 128 22.69 -> 20.66; N 1536 18.20 -> 17.15, 18.23 -> 16.96, 17.99 ->
    16.78; norm -> fused QKV nkv 1 23.50 -> 22.45, 24.19 -> 22.72, 25.17 -> 22.93; nkv 2 33.68 -> 32.35,
    34.94 -> 33.93, 36.46 -> 35.57 (the norm's store 0.35-1.0 us there).
    """
    if k % 128 or not wgmma_supported(device):  # first: elsewhere no comparison with M (a traced M's guards)
        return False
    # the 16-row kernel runs there on the MXFP8 rows: at every N >= 256 to 8 tokens; at 9-16 only on the narrower
    # layers (MMA_ROWS_TOKENS16_MAX_WAVE), so the producer still writes A_deq for the wider ones
    if k <= MMA_ROWS_MAX_K and m <= MMA_ROWS_EVERY_N_MAX_M and mma_rows_k(m, k):
        return False
    min_m = 1 if k <= A_DEQ_ONE_TOKEN_MAX_K else A_DEQ_MIN_M
    return min_m <= m <= A_DEQ_MAX_M and (m <= RESIDENT_MAX_M or k >= STREAMED_MIN_K
                                          or m <= WGMMA_MAX_M and k >= A_DEQ_TWO_TOKEN_TILES_MIN_K)


def wgmma_early_steps(block_m: int, k: int, split_k: int, smem_steps: int) -> int:
    """Weight steps the Gluon decode kernel takes into registers ahead of its loop (0, 1 or 2), after
    the ``smem_steps`` of :func:`wgmma_smem_steps`: their ring-stage waits and shared-memory loads come just
    after the activations' copies are issued (after the PDL wait), while those are in flight. Each costs
    registers held across the activation staging.

    H200 (2026-12-01, ``docs/benchmarks-log.md`` run 66, picked tiles, us, 0 / 1 / 2 steps): 8 and 16
    tokens take 1 (N 6144 x K 2048 M 8 8.07 / 7.75, N 6144 x 768 M 8 5.42 / 5.14: faster at 8 of 10
    points, 1.2-1.3% slower at two); 2 holds more than 128 registers, so one program per SM (1.4-1.7x
    slower). 32 tokens take 0 (1 already holds 167 registers: N 2560 x 6144 12.11 / 14.56, run 65), but 1
    after shared-memory steps (:func:`wgmma_smem_steps`; 120-124 registers there, run 72: N 6144 x K 2048
    9.26 / 9.19 us, K 768 6.27 / 6.18).
    64 tokens (one program per SM) take 1 (0.01-0.34 us faster) or, where a program runs <= 3 steps, 2
    (N 6144 x 768 10.64 / 10.30 / **7.42**; with 4-8 steps 2 is 1.3-2 us slower). Measured in graphs of
    back-to-back calls with these steps before the PDL wait, where a call's programs start during the previous
    one. Since session 52 they follow the activations' copies (H100, log runs 308-309, us before / after: N 2560 x
    K 6144 M 1 after a launch without PDL 12.37 / 11.86, after the norm 11.35 / 11.22; N 6144 x K 2048 M 16
    11.11 / 10.87 and 10.03 / 9.85, M 8 after the norm 8.50 / 8.59; back to back within 0.1; the MiniMax decode
    step 228.85 / 225.42 us for 4 ranks at one token, 287.39 / 283.89 at 16).
    The 64 + tail tiles take 1 (never 2: the launcher refuses it), as measured on the 128-token tile, which takes 1
    (runs 176-177, us 0 / 1, 3 stages: N 6144 x K 2048 M 65 13.71 / 14.31, M 96 14.44 / 13.64, M 128 14.96 / 14.23):
    1 was faster at 9 of 12 points at K 6144 in run 176 and at all 12 at 128 tokens in run 177 (six shapes, 2 and 3
    stages), 0 at 9 of 12 at 65 tokens there (by 0.04-1.7 us; the M at which that turns was not measured).
    """
    if block_m == 32:
        return 1 if smem_steps else 0
    if block_m == 64 and mxfp8_wgmma.max_steps(k, split_k) <= 3:
        return 2
    return 1


#: Largest K at which the Gluon decode kernel converts weight steps into shared memory before its PDL wait.
SMEM_STEPS_MAX_K = 2048


def wgmma_smem_steps(block_m: int, k: int, split_k: int, stages: int) -> int:
    """Weight steps the Gluon decode kernel converts to BF16 into shared-memory slots (32 KB each, an
    operand ``wgmma`` reads from shared memory) before its PDL wait, ahead of the register steps of
    :func:`wgmma_early_steps`: 2 at 8 tokens and 1 at 16-32 where K <= :data:`SMEM_STEPS_MAX_K`, fewer
    where the slots would leave no room for a second program on the SM
    (:data:`seam.kernels.mxfp8_wgmma.TWO_PER_SM_BYTES`), else 0.

    The register steps come after the wait (:func:`wgmma_early_steps`); these shared-memory steps stay
    before it, so in a PDL chain they run while the previous kernel finishes (and where no PDL kernel
    precedes, the activations' copies are issued only after their ring stages have landed). H200 (2026-12-01,
    ``docs/benchmarks-log.md`` run 72, back-to-back calls, picked tiles, us without -> with): N 6144 x
    K 2048 M 8 7.75 -> 7.16, M 16 8.32 -> 7.99, M 32 9.61 -> 9.19; N 6144 x K 768 M 8 5.18 -> 4.55,
    M 16 5.77 -> 5.35, M 32 6.75 -> 6.18; M 64 within 1%. At K 6144 (N 1536-4992) nowhere faster by more
    than 2% and up to 30% slower at 16-32 tokens (N 4992 M 32 15.92 -> 20.69: a program's shared memory
    outgrows two per SM); 2 slots at 16 tokens, K 2048: 10.9 us.
    """
    if k > SMEM_STEPS_MAX_K or block_m > 32:
        return 0
    steps = 2 if block_m == 8 else 1
    while steps and mxfp8_wgmma.shared_bytes(block_m, k, split_k, stages, steps) > mxfp8_wgmma.TWO_PER_SM_BYTES:
        steps -= 1
    return steps


def wgmma_bf16_mul(block_m: int, k: int, split_k: int, stages: int, smem_steps: int) -> bool:
    """Whether a Gluon kernel dequantizes its weight tiles by BF16 multiplies
    (:func:`seam.kernels.numerics.e4m3_scaled_bf16`, the same bytes; only for a weight whose bytes allow it,
    :func:`seam.kernels.mxfp8_wgmma.bf16_mul_exact`): tiles above :data:`RESIDENT_MAX_M` rows always (the ring
    kernel, which converts every step into shared memory, and the decode kernel's streamed tile, one program per
    SM: measured so in runs 176-177); the decode kernel's other tiles where it converts steps into shared memory
    before its PDL wait (``smem_steps``) or where its program has an SM to itself: by its shared memory
    (:data:`~seam.kernels.mxfp8_wgmma.TWO_PER_SM_BYTES`), or by its registers, the 64-row tile's programs of 2-3 K steps
    that take 2 early steps (:func:`wgmma_early_steps`).

    Fewer instructions per step (220 against 293 in the 8-token loop's sm_90 SASS; none of the fp32
    multiplies and widenings), but more of them on the integer pipe. H200 (2026-12-04, ``docs/benchmarks-log.md``
    run 132, the GEMM alone, weights past L2, us fp32 -> BF16 multiplies, BF16 x / A_deq): where it is taken,
    N 6144 x K 2048 M 1 7.52 -> 6.52 / 6.38 -> 5.77, M 8 7.53 -> 6.55 / 6.42 -> 5.79, M 64 16.97 -> 16.27 /
    9.73 -> 9.11; N 6144 x K 768 M 1-32 3-6% faster; N 2560 x K 6144 M 64 17.64 -> 16.76 / 10.48 -> 10.08;
    N 4992 x K 6144 M 64 31.88 -> 30.53 / 20.72 -> 20.13. Where two programs share an SM without shared-memory
    steps it is slower: N 2560 x K 6144 M 8 8.64 -> 9.42 / 7.48 -> 7.75, N 4992 x K 6144 M 8 13.48 -> 15.32 /
    11.39 -> 12.28, N 1536 x K 6144 M 8 7.71 -> 8.12 / 6.92 -> 7.11 (at M 32 mixed: 0.93-0.96 on BF16 x,
    1.09-1.13 on A_deq). The ring kernel given A_deq (run 134): 1.2-4.2% faster at every picked tile measured
    (N 2560, 3072, 4992, 1536 x K 6144 and N 6144 x K 2048, 65-256 tokens; N 4992 M 256 42.41 -> 40.79).

    The 64-row tile's programs of 2-3 K steps with 2 early steps hold 255 registers through fp32 and spill 16-24
    bytes (sm_90; 140-168 registers by BF16 multiplies, no spills): one program per SM either way. H200
    (2026-12-07, ``docs/benchmarks-log.md`` run 344, the GEMM alone, weights past L2, 33 and 64 tokens on MXFP8 rows
    and given A_deq, 12 of the 13 such launches the picker takes at 2-64 tokens on 132 SMs, in 9 shapes from N 896 x
    K 2432 to N 4352 x K 896): BF16 multiplies took 0.82-0.93x the fp32 time back to back and 0.89-0.96x fenced at
    all 30 points (N 2432 x K 896 M 33 6.19 -> 5.64 us, N 1280 x K 3584 M 64 given A_deq 7.28 -> 5.95). One early
    step through fp32 instead (no spills either) was 1.08-1.36x back to back, but where the programs' partials are
    summed apart (split 10) 0.81-0.89x, within 0.03 of BF16 multiplies.
    """
    if block_m > RESIDENT_MAX_M:
        return True
    if wgmma_early_steps(block_m, k, split_k, smem_steps) == 2 and mxfp8_wgmma.max_steps(k, split_k) >= 2:
        return True
    return smem_steps > 0 or mxfp8_wgmma.shared_bytes(block_m, k, split_k, stages, smem_steps) > \
        mxfp8_wgmma.TWO_PER_SM_BYTES


def wgmma_a_stream(block_m: int, k: int, split_k: int, stages: int, programs: int, sms: int) -> bool:
    """Whether the decode kernel, given A_deq, streams it through ``stages`` slots beside its weight ring
    (``A_STREAM``, the same bytes) instead of holding its whole K range resident: always on its streamed tiles (the
    64 + tail tiles and :data:`STREAMED_BLOCK_M`, whose activations never fit resident), and on its 64-row tile
    (33-64 tokens) where the resident activations leave one program per SM
    (:data:`~seam.kernels.mxfp8_wgmma.TWO_PER_SM_BYTES`) and the launch's ``programs`` need more than one wave of
    them on ``sms`` SMs, while streamed ones let two share an SM.

    At 64 rows the picker's split (:func:`~seam.kernels.mxfp8_gemm_config.pick_wgmma_tile`) keeps the resident
    activations (16.9 KB a step) in shared memory beside the ring; where N is wide that split takes two waves. H200 (2026-12-04,
    ``docs/benchmarks-log.md`` run 139d, the GEMM alone given A_deq, weights past L2, the weight dequantized by
    BF16 multiplies, as :func:`wgmma_bf16_mul` takes it from the resident bytes; us resident / streamed at the
    same split and 2 stages): N 4992 x K 6144 M 64 (split 6, 234 programs) 19.84 / 15.42 (streamed through fp32
    instead: 16.76, run 144; BF16 multiplies stay). Where the resident split
    already runs in one wave, streaming is slower (2 / 4 stages): N 2560 x 6144 M 64 10.08 / 13.95 / 10.53,
    N 3072 x 6144 M 64 11.48 / 15.97 / 12.22, N 6144 x 2048 M 64 9.18 / 13.08 / 9.36; and at 32 rows (two
    programs per SM either way) N 4992 13.13 / 13.90. Smaller tiles of wider shapes (16-32 rows at N >= 8192,
    where the same two-wave count holds) were not measured and stay resident.
    """
    if RESIDENT_MAX_M < block_m <= WGMMA_MAX_M:
        return True
    if block_m != RESIDENT_MAX_M or programs <= sms:
        return False
    two = mxfp8_wgmma.TWO_PER_SM_BYTES
    return (mxfp8_wgmma.shared_bytes(block_m, k, split_k, stages, 0) > two
            and mxfp8_wgmma.shared_bytes(block_m, k, split_k, stages, 0, a_stream=True) <= two)


#: K range in which the decode kernel's 64-row tile, given activations without A_deq, has them dequantized by a
#: launch first even where it would not stream them (:func:`wgmma_dequantize_first`).
DEQUANTIZE_FIRST_K = (1536, 2048)
#: Smallest decode tile (rows) on which BF16 activations (``xs`` None) are always quantized and dequantized by a
#: launch first (:func:`wgmma_dequantize_first`).
DEQUANTIZE_FIRST_BF16_MIN_BLOCK_M = 32


def wgmma_dequantize_first(block_m: int, k: int, split_k: int, stages: int, programs: int, sms: int, *,
                           bf16_rows: bool) -> bool:
    """Whether the decode kernel, given MXFP8 (or BF16, ``bf16_rows``) activations without their A_deq, has a
    launch before it write that A_deq (``seam.kernels.mxfp8_dequant.dequantized_activations``, permuted; BF16
    rows quantized there) and reads it instead of staging them itself: where it would stream a given A_deq
    (:func:`wgmma_a_stream`: its own staging holds its whole K range resident, one program per SM, in two
    waves; on the streamed tile always), on the 64-row tile at K in :data:`DEQUANTIZE_FIRST_K`, and for BF16
    rows on every tile of at least :data:`DEQUANTIZE_FIRST_BF16_MIN_BLOCK_M` rows. The bytes are the same (the same BF16 operands and MMAs).

    BF16 rows (2026-12-04, ``docs/benchmarks-log.md`` runs 159-160 and 163, us, ``quantize="auto"`` before
    (a quantization launch, then the kernel staging the MXFP8 rows) / this launch first): at 17-64 tokens
    (32- and 64-row tiles) faster or equal at all 30 points of six shapes, 0.86-1.0x (N 2560 x 6144 M 32
    12.45 / 11.91, M 64 14.33 / 13.21; N 1536 x 6144 M 24 11.39 / 9.78; N 6144 x 768 M 64 8.72 / 7.81; N 3072 x
    6144 M 64 15.84 / 14.35; 1.0 where the rule above already took it). Against the kernel quantizing them
    itself (``quantize="auto"`` up to 16 tokens): on 8-row tiles slower at 15 of 24 points (up to 1.27x, K 768),
    on 16-row tiles mixed (N 4992 x 6144 0.90x, N 6144 x 768 1.25x; run 163 at nine more shapes: 0.84x at N 6144
    x 4096, 1.10-1.21x at N 2560 x 2048 and 2048 x 6144). Not measured on small layers (N x K well below 1536 x
    768), where the extra launch weighs more; a ``tile`` override of 32 or 64 rows takes this rule at any M.

    H200 (2026-12-04, ``docs/benchmarks-log.md`` runs 150 and 152, ``mxfp8_linear`` alone on MXFP8 rows, weights
    past L2, us own staging / dequantized first): where it streams, N 4992 x 6144 M 48 24.56 / 18.07, M 64 24.63 /
    18.53 (BF16 rows quantized by ``quantize="auto"``'s separate launch: 26.93 / 20.78), N 6144 x 4096 M 64 22.34 /
    16.20. At 64 tokens and K 1536-2048 (not streamed): N 6144 x 2048 11.93 / 10.58, 3072 x 2048 12.10 / 10.81,
    4096 x 2048 11.96 / 10.99, 8192 x 2048 12.48 / 11.70, 12288 x 2048 24.89 / 21.42, 7168 x 1536 10.42 / 9.55
    (6-14% faster; 48 tokens, the same tile: N 6144 x 2048 12.07 / 10.52). Elsewhere it loses or ties: K 1024
    and 768 (N 4096 x 1024 6.98 / 7.88), K 6144 (N 1536 9.54 / 10.10, 2048 10.84 / 10.85, 2560 12.29 / 12.19),
    K 4096 (4096 x 4096 12.57 / 12.15, left out), and at 16-32 tokens it is slower at 15 of 20 points.
    """
    if bf16_rows and block_m >= DEQUANTIZE_FIRST_BF16_MIN_BLOCK_M:
        return True
    if wgmma_a_stream(block_m, k, split_k, stages, programs, sms):
        return True
    return block_m == RESIDENT_MAX_M and DEQUANTIZE_FIRST_K[0] <= k <= DEQUANTIZE_FIRST_K[1]


_COMBINE_GROUP = {8: 4, 16: 8, 32: 4, 64: 2, 72: 1, 80: 1, 96: 1, 128: 1, 136: 1, 144: 1, 160: 1, 192: 1, 256: 1}


def combine_group(block_m: int, split_k: int) -> int:
    """Split-K partials loaded per round trip by the program that combines a tile's splits."""
    return min(split_k, _COMBINE_GROUP[block_m])


#: Split-K partial sizes (split_k x block_m, in 512-byte units: 128 fp32 rows per token) from which a tile's
#: partials are combined by several of its programs, a row slice each, rather than by the last to arrive.
SPREAD_COMBINE_MIN = 160


def wgmma_combiners(block_m: int, split_k: int, *, partials: bool = False) -> int:
    """Programs of a Gluon kernel's output tile that combine its split-K partials (``wgmma_combine.store_tile``): 1,
    the last to arrive (the whole tile), or, from :data:`SPREAD_COMBINE_MIN`, the tile's last 2^j programs for the
    largest 2^j <= min(split_k, 16), each waiting for every arrival and then summing its row slice in split order
    (same bytes). 1 where nothing is combined (split 1, or ``partials``: the QKV op's partials-only launch), so
    those launches compile one kernel.

    One program loading every partial takes split_k x block_m x 512 bytes through its SM (N 2560 x K 6144
    at 64 tokens, split 6: 192 KB). H200 (2026-12-01, ``docs/benchmarks-log.md`` run 68, us, 1 / spread):
    decode 64 tokens N 2560 x K 6144 14.51 / 13.15, N 1536 x 6144 (split 10) 11.57 / 10.07; 32 tokens
    N 2560 12.14 / 10.35; ring kernel 65 tokens N 2560 24.23 / 21.05, N 1536 (split 11) 24.34 / 17.75,
    256-token tiles N 4992 M 200 48.17 / 45.11. Below the threshold one combiner was the faster (8 tokens,
    split 12: 8.17 / 8.69; 64 tokens, split 2: 12.63 / 12.75). Of the two, the rule takes the faster at 34
    of the 35 points measured (not at N 6144 x 768, 16 tokens, split 4: 5.83 / 5.68); 2 combiners beat 16
    at N 1536 x 6144, 8 tokens, split 22 (7.28 / 7.54).
    """
    if partials or split_k * block_m < SPREAD_COMBINE_MIN:
        return 1
    return 1 << (min(split_k, 16).bit_length() - 1)


#: The fewest K splits at which the decode kernel's tile of this many rows has a launch of its own sum its partials
#: (:func:`wgmma_combines_apart`); tiles of other row counts never do.
COMBINE_APART_MIN_SPLIT = {8: 16, 16: 10, 32: 10, 64: 10}
#: The same for an 8-row tile that carries one token.
ONE_TOKEN_COMBINE_APART_MIN_SPLIT = 10


def wgmma_combines_apart(block_m: int, split_k: int, *, one_token: bool = False, partials: bool = False) -> bool:
    """Whether the decode kernel's tile stores its split-K partials and a launch of its own sums them
    (``seam.kernels.split_k_sum``, PDL-chained; same bytes), where its own combine (the tile's last program to
    arrive loading every partial back) is not run: from :data:`COMBINE_APART_MIN_SPLIT` splits (8-row tiles from
    16, 16-64-row tiles from 10; an 8-row tile from 10 where the launch has ``one_token``, M = 1), never for
    ``partials`` (the fused QKV op sums them in its epilogue).

    One token: H100 (2026-12-06, ``docs/benchmarks-log.md`` runs 310-311, after the decode kernel requested its
    activations first; two runs of five alternations, us, apart / its own combine, the first run): N 2560 x K 6144
    (split 12) 7.98 / 8.64 alone, 10.86 / 11.85 before a kernel that waits for it, 10.54 / 11.25 after the norm +
    MXFP8 (PDL); N 3072 (split 10) 8.96 / 9.48, 11.86 / 12.95, 11.41 / 11.56; the second run within 0.12 us of
    these. At 2 and 8 tokens on the same tile it lost after the norm (10.48 / 10.22, 10.83 / 10.53), as in run 299.

    H100 (2026-12-06, ``docs/benchmarks-log.md`` runs 297, 299 and 300, ``mxfp8_linear`` as picked, weights past L2,
    us, a launch of its own / the kernel's own combine, alone | after the norm + MXFP8 | after the MoE router, no
    PDL). Run 297: gate_up N 1536 x K 6144 (split 22) at 16 tokens 6.91 / 7.99 | 10.02 / 11.28 | 34.83 / 36.86; N
    512 x K 6144 (split 24) at 2 tokens 4.09 / 5.12 | 6.13 / 7.50 | 27.22 / 28.48: faster at all 36 points of four
    shapes at 2-32 tokens (0.38-2.03 us). Run 299, beyond that rule: after the router faster at all 11 points
    measured; after the norm the 8-row tile at splits 10-12 lost at 2-8 tokens (N 2560 x K 6144 at 8 tokens 11.14 /
    10.66; run 294: 11.17 / 10.85), while 16-64-row tiles won (N 2560 at 32 tokens, split 12: 13.14 / 15.08; N 1024 x
    K 4096 at 64 tokens, split 16: 10.13 / 11.66). Run 300, this rule against run 297's at 10 points where they
    differ (16-64-row tiles at splits 10-16; 64-row tiles at higher splits, e.g. N 512 x K 6144's 24, not
    measured): after the router faster at all 10 (0.39-1.43 us), after the norm at 9 (N 2560 at 9 tokens 11.14 /
    11.10; at 32 tokens 13.10 / 15.05), alone at 7 (the 32-row tile at split 12 and the 64-row one at 33 tokens lost
    0.08-0.53 us); the MiniMax step at 64 tokens 84.87 / 85.65 us per rank. Splits 4-6 lost alone (run 294, N 6144
    x K 2048: 7.44 / 6.13, 7.69 / 6.28): there the extra launch costs more than the combine saves."""
    if partials:
        return False
    if one_token and block_m == 8:
        return split_k >= ONE_TOKEN_COMBINE_APART_MIN_SPLIT
    return split_k >= COMBINE_APART_MIN_SPLIT.get(block_m, split_k + 1)


@dataclasses.dataclass(frozen=True)
class WgmmaLaunch:
    """What a Gluon kernel's launch derives from its tile by the rules above: one place for the launcher
    (``seam.kernels.gluon_launch.launch_gluon``) and for ``tools/sm90_resources.py``, which compiles the
    same kernels."""

    combine: int  #: :func:`combine_group`
    combiners: int  #: :func:`wgmma_combiners`
    smem_steps: int = 0  #: :func:`wgmma_smem_steps` (the decode kernel; 0 for the ring kernel)
    early_steps: int = 0  #: :func:`wgmma_early_steps` (the decode kernel; 0 for the ring kernel)
    bf16_mul: bool = False  #: :func:`wgmma_bf16_mul`
    a_stream: bool = False  #: :func:`wgmma_a_stream` (the decode kernel given A_deq)
    combine_apart: bool = False  #: :func:`wgmma_combines_apart` (the decode kernel)


def wgmma_launch(block_m: int, k: int, split_k: int, stages: int, *, partials: bool = False, one_token: bool = False,
                 a_deq_programs: int = 0, sms: int = 0, warp_specialized: bool = False) -> WgmmaLaunch:
    """The :class:`WgmmaLaunch` of a Gluon tile: the decode kernel for ``block_m`` <= :data:`WGMMA_MAX_M` (its
    streamed tiles, the 64 + tail ones and :data:`STREAMED_BLOCK_M`, stream A_deq wherever they read one), the ring
    kernel above (the warp-specialized wide tiles, 136-256, read only their split-K combine's rules here).
    ``a_deq_programs``: the launch's program count where it reads A_deq, else 0, on a GPU of ``sms`` SMs
    (:func:`wgmma_a_stream`). ``warp_specialized``: the tile runs on the warp-specialized kernel, which combines its
    partials itself (no :func:`wgmma_combines_apart`; the picker gives it splits of at most 6, a caller's tile any).
    ``one_token``: the launch has M = 1 (:func:`wgmma_combines_apart`)."""
    # the decode kernel then stores partials only
    apart = not warp_specialized and wgmma_combines_apart(block_m, split_k, one_token=one_token, partials=partials)
    combine, combiners = combine_group(block_m, split_k), wgmma_combiners(block_m, split_k, partials=partials or apart)
    if block_m > WGMMA_MAX_M:
        return WgmmaLaunch(combine, combiners, bf16_mul=wgmma_bf16_mul(block_m, k, split_k, stages, 0))
    smem_steps = wgmma_smem_steps(block_m, k, split_k, stages)
    a_stream = a_deq_programs > 0 and wgmma_a_stream(block_m, k, split_k, stages, a_deq_programs, sms)
    return WgmmaLaunch(combine, combiners, smem_steps, wgmma_early_steps(block_m, k, split_k, smem_steps),
                       wgmma_bf16_mul(block_m, k, split_k, stages, smem_steps), a_stream, apart)
