"""Launch rules of the mHC epilogue kernels: the :class:`LaunchShape` record and :func:`launch_shape`,
the picker that chooses a launch's grid, chunk width and warps, each rule with what set it.

Two launchers share them: ``seam.kernels.mhc``'s standalone kernel and ``seam.kernels.lamport_mhc``'s
Lamport consumer (same grids, same chunk code). The SM count is the one device fact they read
(:func:`seam.runtime.num_sms`: 132 on the H200, 1 under the interpreter, where tests patch it to force
the column split). Runs are cited from ``docs/benchmarks-log.md``. The kernels' split scratch
(``split_scratch``, ``new_split_scratch``) stays in ``seam.kernels.mhc``.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from seam import runtime

#: Scale rows zeroed per store in the padding loop (a [PAD_ROWS, scale columns] uint8 tile) and per
#: padding program (:func:`grid_rows`): one program for all padding rows is a serial tail (mHC at M 1:
#: 15.3 against 11.6 us at M 6; ``docs/benchmarks-log.md``, 2026-11-30, first multi-GPU run; fixed in
#: 57e846b).
PAD_ROWS = tl.constexpr(16)


def grid_rows(m: int, quantize: bool, split: int) -> int:
    """Rows of an mHC launch grid (rows, split): one per token, plus (MXFP8) rows of padding
    programs, about one program per PAD_ROWS swizzle padding rows."""
    pad = -(-m // 128) * 128 - m if quantize else 0
    return m + -(-(-(-pad // PAD_ROWS.value)) // split)


#: Elements of the [hc, BLOCK_H] fp32 mix tile of one chunk: 32 per thread at 16 warps
#: (sm_90 ptxas: at most 126 registers and no spills for hc 1..8 at hidden 5120; a compile, no
#: timed run). Smaller tiles mean more chunks, i.e. more dependent round trips per row.
MAX_TILE = 16384


def block_h(hidden: int, hc: int) -> int:
    """Chunk width: the whole row when its [hc, next_pow2(hidden)] tile fits MAX_TILE, else
    the widest power of two that does (masked tail). Fewer chunks mean fewer dependent
    memory round trips per row, which is what a decode-size call pays for."""
    return max(128, min(triton.next_power_of_2(hidden), MAX_TILE // hc))  # >= 128: the padded scale columns


def num_warps_for(hc: int, block: int) -> int:
    """16 warps for a full tile, fewer for small rows (at least 4, 16 fp32 per thread below 16)."""
    return max(4, min(16, hc * block // 512))


#: Narrowest chunk of the column split, a power of two >= 128 (chunk edges on 128-column
#: scale tiles). A split program has BLOCK_H / 256 warps, one 8-column BF16 vector per
#: thread and stream, so that the [hc, BLOCK_H] tile keeps a column's streams in one thread
#: (``seam.kernels.mhc.take_row``; sm_90 SASS at hc 4: 6 barriers in pass 1, 34 with twice the warps).
#: 1024 columns: the last program of a row runs pass 2 over the whole row with 4 warps.
SPLIT_MIN_COLS = 1024


@dataclasses.dataclass(frozen=True)
class LaunchShape:
    """One mHC launch configuration (the knobs that change the grid and the compiled code)."""

    split: int  #: programs per row (grid axis 1); 1: one program per row
    block: int  #: BLOCK_H
    norm_block: int  #: NORM_BLOCK, the pass 2 step
    num_warps: int


def launch_shape(m: int, hidden: int, hc: int, device: torch.device) -> LaunchShape:
    """The grid of an mHC launch of M rows on ``device``, with ``sms`` = :func:`seam.runtime.num_sms` (1
    under the interpreter: tests patch it to force the column split).

    Column split while one program per row would leave at least half the SMs idle
    (2 M <= sms): chunks of the narrowest power of two >= SPLIT_MIN_COLS with
    M * hidden / chunk <= ``sms`` (about one wave; a ragged last chunk can add up to M
    programs), at most :func:`block_h`; the last program's pass 2
    takes the whole row in one step up to hidden 2048 * warps. One program per row
    otherwise, or when the row is one such chunk. Hidden 5120 on 132 SMs: SPLIT 5 of 1024
    columns up to M 26, 3 of 2048 (the last one ragged) up to M 52, 2 of 4096 up to M 66
    (3 of 2048 at hc 8).

    Set by the TP 2 mHC boundary at M 1..32: 7.7-8.2 us split, 11.6-15.3 us one program per row
    (``docs/benchmarks-log.md``, 2026-11-30, TP 2 after the mHC column split, 03238a1).
    """
    full = block_h(hidden, hc)
    sms = runtime.num_sms(device)
    if 2 * m <= sms:
        block = min(full, max(SPLIT_MIN_COLS, triton.next_power_of_2(-(-hidden * m // sms))))
        split = -(-hidden // block)
        if split > 1 and block >= 128:  # max_split's bound (block_h is >= 128 unless MAX_TILE is patched)
            warps = max(1, min(16, block // 256))
            return LaunchShape(split, block, min(triton.next_power_of_2(hidden), 2048 * warps), warps)
    return LaunchShape(1, full, full, num_warps_for(hc, full))


def max_split(hidden: int) -> int:
    """The most programs per row any launch shape gives (chunks of >= 128 columns)."""
    return max(1, hidden // 128)
