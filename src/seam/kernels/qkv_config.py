"""Launch rules of the fused QKV kernel (``seam.kernels.qkv_epilogue``) that are its own: which tiles
stage their NVFP4 rows through the workspace (so which launches need it), the tile of the
epilogue-only launch on a given accumulator (``seam.ops.qkv.qkv_epilogue``), and the epilogue kernel's
tile after the fused op's own GEMM launch (:func:`epilogue_tile_after`).

The fused launch's GEMM tile, ``pick_qkv_tile``, stays in ``seam.kernels.mxfp8_gemm_config`` (one home
per rule): it is ``pick_tile``'s tl choice refit to the epilogue's registers, built from that
module's split-K rule, register budget and decode tiles, and the GEMM's tests check it beside
them. Runs are cited from ``docs/benchmarks-log.md``.
"""

from __future__ import annotations

import triton.language as tl

from seam.kernels.mxfp8_gemm_config import Tile

#: Multi-row tiles up to this many rows (4, 16 and 32) stage their NVFP4 stores through the workspace
#: (``seam.kernels.qkv_epilogue._store_nvfp4_rows``): every group at once, where quantizing from the
#: accumulator's layouts miscompiled on sm_90 (runs 9, 12) and the group loop was slower (runs 17-18,
#: nkv 1 M 8: 16.85 -> 13.63 us); 64- and 128-row tiles keep the loop (staged: wrong bytes whole, 4-9%
#: slower in 32-row chunks at nkv 2, runs 17-18).
STAGED_NVFP4_MAX_ROWS = tl.constexpr(32)


#: Rows per warp a staging tile may have: 32 rows on 4 warps (8 per warp) wrote other K / V / index_k
#: cache bytes than the reference on the H200 (run 48: 1,686-4,078 bytes per launch, the epilogue alone on
#: random accumulators; q and index_q exact), while 16 rows on 4 warps and 16 or 32 on 8 (at most 4 per
#: warp) matched it byte for byte, and 4 or 8 rows on 4 warps after the Gluon GEMMs (runs 207, 212). Tiles past
#: this bound are refused (``seam.ops.qkv``), not run.
STAGED_MAX_ROWS_PER_WARP = 4


def stages_nvfp4_rows(tile: Tile) -> bool:
    """Whether ``tile``'s NVFP4 stores go through the workspace (:data:`STAGED_NVFP4_MAX_ROWS`)."""
    return 1 < tile.block_m <= STAGED_NVFP4_MAX_ROWS.value


def needs_workspace(tile: Tile) -> bool:
    """Whether a launch with ``tile`` uses the per-device workspace (split-K partials, the Gluon GEMM's partials
    at any split, or staged NVFP4 rows)."""
    return tile.wgmma or tile.split_k > 1 or stages_nvfp4_rows(tile)


def workspace_floats(m: int, tile: Tile, heads: int) -> int:
    """fp32 workspace elements a launch of the fused kernel with ``tile`` (a ``pick_qkv_tile`` tile, or an
    :func:`epilogue_tile` on a given accumulator) needs at M tokens and ``heads`` 128-wide heads. After a
    Gluon GEMM any staged rows of the epilogue (:func:`epilogue_tile_after`) lie past the GEMM's partials:
    its programs stage while other heads' programs still read partials."""
    def floats(t: Tile) -> int:
        return heads * -(-m // t.block_m) * t.split_k * t.block_m * 128 if needs_workspace(t) else 0

    if tile.wgmma:  # the Gluon GEMM's partials (its token tiles' rows), then the epilogue on them
        return heads * tile.split_k * -(-m // tile.block_m) * tile.block_m * 128 + floats(epilogue_tile_after(tile))
    if tile.bf16_mm:  # the prefill GEMM writes its own accumulator
        return floats(epilogue_tile_after(tile))
    return floats(tile)


#: The epilogue-only launch (an fp32 or BF16 accumulator in memory, no GEMM) is bound by its programs'
#: latency, not by bytes: one-token programs (the kernel's GEMV-tile epilogue, no workspace) up to 64 tokens,
#: 16-row 4-warp programs above. H200 sweep (docs/benchmarks-log.md run 47, us, nkv 1 / nkv 2; the former
#: 16-, 32- and 64-row 8-warp tiles in brackets): M 8 one row 2 warps 1.84 / 1.95 (3.72 / 3.66), one warp
#: 2.01 / 1.96; M 64 one row 1 warp 2.26 / 3.66 (4.69 / 4.88), 2 warps 2.76 / 3.67; M 256 16 rows 4 warps
#: 4.82 / 6.58 (15.33 / 19.68), one row 6.99 / 12.76; M 2048 16 rows 4 warps 18.31 / 35.71 (35.95 / 83.80).
#: 32 rows with 4 warps wrote other cache bytes than every other tile there (not picked).
EPILOGUE_ONE_ROW_MAX_M = 64


def epilogue_tile(m: int) -> Tile:
    """The tile :func:`seam.ops.qkv.qkv_epilogue` (and the fused op's epilogue kernel after the prefill GEMM:
    :func:`epilogue_tile_after`) runs M tokens with: see
    :data:`EPILOGUE_ONE_ROW_MAX_M` (no GEMM, so no K split)."""
    if m <= EPILOGUE_ONE_ROW_MAX_M:
        return Tile(1, 128, 128, 2 if m <= 16 else 1, 1)
    return Tile(16, 128, 64, 4, 1)


#: The K split up to which the epilogue after a Gluon GEMM of more than 64 rows runs 4-row programs
#: (:func:`epilogue_tile_after`).
EPILOGUE_FOUR_ROWS_MAX_SPLIT = 3


def epilogue_tile_after(gemm: Tile) -> Tile:
    """The epilogue kernel's tile after the fused op's GEMM launch ``gemm`` (a ``wgmma`` or ``bf16_mm`` tile),
    a function of the GEMM tile alone, so ``qkv_warmup`` compiles it with the GEMM at any M.

    On the split-K partials of a Gluon GEMM: one row on 2 warps, whose programs sum the partials and start while the
    GEMM's last programs run, where :func:`epilogue_tile` (tuned without a GEMM before it) is slower (H200,
    ``docs/benchmarks-log.md`` runs 102-104, same bytes, fused QKV minus ``mxfp8_linear``, epilogue_tile -> one row: nkv
    1 M 32 2.68 -> 1.88, M 64 2.13 -> 1.80, nkv 2 M 32 2.72 -> 1.87). But after a tile of more than 64 rows (the 64 +
    tail, 128-token and ring tiles; token tiles; the 192-token tile: run 214) split at most
    :data:`EPILOGUE_FOUR_ROWS_MAX_SPLIT` ways, 4 rows on 4 warps: a quarter of the programs, each summing fewer partials
    per row than at the decode tiles' splits of 6-12 (H100, 2026-12-05, run 207, the fused op given A_deq, us, one row 2
    warps / 4 rows 4 warps, the GEMM tile ``pick_qkv_tile``'s; 8 rows on 4 warps were faster where marked, 16 on 8 at
    384 tokens only (nkv 1 29.62, nkv 2 52.39), 16 on 4 nowhere): nkv 2 (N 4992) M 65 (split 3) 21.37 / 20.71, 128 (3)
    27.05 / 24.29, 129 (1) 46.22 / 42.59, 256 (1) 53.78 / 46.50, 384 (1) 62.06 / 54.06 (8 rows: 50.98); nkv 1 (N 2560) M
    129 (3) 20.26 / 20.05, 192 (3) 23.18 / 20.85, 256 (3) 25.79 / 23.05, 384 (2) 34.13 / 29.77 (8 rows: 29.39); the ring
    kernel's 256-token tile (split 3, 16 rows before) at nkv 2 M 129 / 192 / 256 48.84 / 46.27, 48.95 / 45.37, 50.28 /
    48.03 (8 rows: 46.68). At split 6 one row stays: nkv 1 M 65 14.11 / 15.29, M 128 17.54 / 17.58. The same bytes at
    every tile (the run compared them). The prefill GEMM's accumulator (not measured after a GEMM):
    :func:`epilogue_tile` of its rows."""
    if gemm.wgmma and gemm.block_m > 64 and gemm.split_k <= EPILOGUE_FOUR_ROWS_MAX_SPLIT:
        return Tile(4, 128, 128, 4, 1)
    if gemm.wgmma:
        return Tile(1, 128, 128, 2, 1)
    return epilogue_tile(gemm.block_m)
