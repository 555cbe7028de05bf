"""The per-device workspace of the MXFP8 GEMM and fused QKV kernels: split-K partials and arrival counters (the
fused QKV kernel also stages multi-row NVFP4 stores in it), one allocation grown on demand
(``seam.kernels.workspace``)."""

from __future__ import annotations

import torch

from seam.kernels.mxfp8_gemm_config import Tile
from seam.kernels.workspace import split_workspace


def split_k_scratch(device: torch.device, tiles: int, tile: Tile) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 workspace, int32 arrival counters) for a launch of ``tiles`` output tiles with ``tile``:
    :func:`gemm_scratch` with ``tile.split_k`` fp32 partials per tile and a counter per tile (per 64-row half-tile
    on a warp-specialized tile, whose consumers each combine their own half)."""
    return gemm_scratch(device, tiles * tile.split_k * tile.block_m * tile.block_n,
                        tiles * (2 if tile.warp_specialized else 1))


def gemm_scratch(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 workspace, int32 arrival counters) of the MXFP8 GEMM and fused QKV kernels, at least ``floats`` and
    ``counters`` elements, grown on demand (``seam.kernels.workspace``: one allocation serves later launches and
    graph replays, one stream).

    The workspace holds split-K partials (the fused QKV kernel also stages multi-row NVFP4 stores in it:
    ``seam.kernels.qkv_config.workspace_floats``). A capture that would have to allocate or grow it raises:
    make an eager call at every M to be captured first (the need depends on M's tile, not monotonically:
    the prefill path's tiles need none), or call :func:`seam.qkv_warmup` for the QKV kernels.

    Raises:
        RuntimeError: the workspace must be allocated or grown while the current CUDA
            stream is capturing a graph.
    """
    return split_workspace(
        "mxfp8_gemm", device, floats, counters, grow_partials_to=floats, grow_counters_to=max(counters, 1024),
        capture_error="seam: the per-device workspace of the MXFP8 GEMM / QKV kernels on {device} must be "
        "allocated before CUDA-graph capture: make one eager call at each M to be captured first "
        "(or seam.qkv_warmup for the QKV kernels)",
    )
