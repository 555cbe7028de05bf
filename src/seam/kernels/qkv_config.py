"""Launch rules of the fused QKV kernel (``seam.kernels.qkv_epilogue``) that are its own: which tiles
stage their NVFP4 rows through the workspace (so which launches need it), and the tile of the
epilogue-only launch on a given accumulator (``seam.ops.qkv.qkv_epilogue``).

The fused launch's GEMM tile, ``pick_qkv_tile``, stays in ``seam.kernels.mxfp8_gemm_config`` (one home
per rule): it is ``pick_tile``'s tl choice refit to the epilogue's registers, built from that
module's split-K rule, register budget and decode tiles, and the GEMM's tests check it beside
them. Runs are cited from ``docs/benchmarks-log.md``.
"""

from __future__ import annotations

import dataclasses

import triton.language as tl

from seam.kernels.mxfp8_gemm_config import Tile, small_tile

#: Multi-row tiles up to this many rows (16 and 32) stage their NVFP4 stores through the workspace
#: (``seam.kernels.qkv_epilogue._store_nvfp4_rows``): every group at once, where quantizing from the
#: accumulator's layouts miscompiled on sm_90 (runs 9, 12) and the group loop was slower (runs 17-18,
#: nkv 1 M 8: 16.85 -> 13.63 us); 64- and 128-row tiles keep the loop (staged: wrong bytes whole, 4-9%
#: slower in 32-row chunks at nkv 2, runs 17-18).
STAGED_NVFP4_MAX_ROWS = tl.constexpr(32)


def needs_workspace(tile: Tile) -> bool:
    """Whether a launch with ``tile`` uses the per-device workspace (split-K partials or staged NVFP4 rows)."""
    return tile.split_k > 1 or 1 < tile.block_m <= STAGED_NVFP4_MAX_ROWS.value


def epilogue_tile(m: int) -> Tile:
    """The tile :func:`seam.ops.qkv.qkv_epilogue` runs M tokens with by default (no GEMM, so no K split)."""
    return dataclasses.replace(small_tile(m), split_k=1)
