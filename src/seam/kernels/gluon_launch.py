"""Launch of the Gluon MXFP8 GEMM kernels for a picked ``wgmma`` tile (Hopper): the 16-row kernel
(``seam.kernels.mxfp8_mma_rows``), the decode kernel (``seam.kernels.mxfp8_wgmma``), its warp-specialized form
(``seam.kernels.mxfp8_wgmma_ws``) or the ring kernel (``seam.kernels.mxfp8_wgmma_ring``), with the dequantization
launch before it where the launch rules say (``seam.kernels.wgmma_config``), into the output or the split-K partials,
and where its rule combines a decode tile's partials apart (``WgmmaLaunch.combine_apart``) the launch that sums them
(``seam.kernels.split_k_sum``). ``seam.kernels.mxfp8_gemm.launch_mxfp8_linear`` and the fused QKV op
(``seam.kernels.qkv_epilogue``) call it; where TMA cannot read an operand it launches nothing and they run the tl
kernel."""

from __future__ import annotations

import torch
import triton

from seam import runtime
from seam.kernels import mxfp8_wgmma, mxfp8_wgmma_ring, mxfp8_wgmma_ws
from seam.kernels.mxfp8_mma_rows import launch_mxfp8_mma_rows
from seam.kernels.gemm_workspace import split_k_scratch
from seam.kernels.mxfp8_dequant import dequantized_activations
from seam.kernels.mxfp8_gemm_config import Tile
from seam.kernels.split_k_sum import launch_split_k_sum
from seam.kernels.wgmma_config import RESIDENT_MAX_M, wgmma_dequantize_first, wgmma_launch


def a_deq_readable(a_deq: torch.Tensor | None) -> bool:
    """Whether the Gluon kernels can read ``a_deq`` (given, and TMA-readable: :func:`launch_gluon` ignores any
    other), which the pickers' ``a_deq`` takes."""
    return a_deq is not None and mxfp8_wgmma.tma_ready(a_deq)


def dequantizes_first(tile: Tile, m: int, n: int, k: int, device: torch.device, *, bf16_rows: bool) -> bool:
    """Whether :func:`launch_gluon`, given ``tile`` and no A_deq for an [m, k] x [n, k] product on ``device``
    (activations MXFP8, or BF16 with ``bf16_rows``), runs the dequantization launch before the decode kernel
    (:func:`~seam.kernels.wgmma_config.wgmma_dequantize_first`)."""
    if not tile.wgmma or tile.ring or tile.mma_rows:
        return False
    if tile.warp_specialized:  # it reads A_deq only
        return True
    programs = triton.cdiv(n, tile.block_n) * triton.cdiv(m, tile.block_m) * tile.split_k
    return wgmma_dequantize_first(tile.block_m, k, tile.split_k, tile.num_stages, programs, runtime.num_sms(device),
                                  bf16_rows=bf16_rows)


def launch_gluon(
    xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor | None,
    tile: Tile, use_pdl: bool, *, partials: bool = False, a_deq: torch.Tensor | None = None,
    weight_bf16_mul: bool = False,
) -> torch.Tensor | None:
    """Run a ``wgmma`` tile's Gluon kernel on validated operands (``xs`` None: BF16 ``xq``): the decode kernel
    (``block_m`` <= 128, or its warp-specialized wide tiles, 136-256) or the ring kernel (256 not warp-specialized), into ``out`` or, with
    ``partials`` (``out`` unused), each
    program's fp32 split-K partial into the workspace, returned as [N tiles, split_k, token tiles x block_m, 128]
    (token tiles: the warp-specialized kernel's, ceil(M / block_m); one elsewhere). ``a_deq``
    (BF16 [M, K], :mod:`seam.formats.a_deq`): the same activations already dequantized, which the decode kernel
    and its warp-specialized form read instead of dequantizing ``xq``; the ring kernel, which reads natural K order,
    ignores it. ``weight_bf16_mul``:
    :func:`seam.kernels.mxfp8_wgmma.bf16_mul_exact` holds for the weight, so the kernel may dequantize it by
    BF16 multiplies where its launch rule says (``WgmmaLaunch.bf16_mul``). Without an A_deq the decode kernel
    reads, one is written first by the dequantization launch where
    :func:`~seam.kernels.wgmma_config.wgmma_dequantize_first` says (same bytes; that launch reads rows of
    any stride). An ``mma_rows`` tile runs :mod:`seam.kernels.mxfp8_mma_rows` on the MXFP8 rows, ignoring an A_deq
    (it beat the decode kernel reading one, ``pick_mma_rows_tile``); None for BF16 rows and ``partials``. A
    ``warp_specialized`` tile runs :mod:`seam.kernels.mxfp8_wgmma_ws` on A_deq (always: written first where none
    comes). A decode tile whose rule says ``combine_apart`` stores its partials and :mod:`seam.kernels.split_k_sum`
    sums them into ``out`` (two launches, PDL-chained; the bytes of the kernel's own combine). Returns None,
    launching nothing, where TMA cannot read an operand the kernel reads as is (the caller runs the tl kernel)."""
    m, n = xq.shape[0], wq.shape[0]
    if tile.mma_rows:  # MXFP8 rows in, BF16 out; it reads the activations with plain loads
        if (xs is None or partials or xq.stride(1) != 1
                or not (mxfp8_wgmma.tma_ready(wq) and mxfp8_wgmma.tma_ready(ws))):
            return None
        launch_mxfp8_mma_rows(xq, xs, wq, ws, out, tile.num_warps, use_pdl, bf16_mul=weight_bf16_mul,
                              block_m=tile.block_m)
        return out
    if not a_deq_readable(a_deq) or not tile.reads_a_deq(xq.shape[1]):
        a_deq = None
    else:
        xq, xs = a_deq, None
    if not (mxfp8_wgmma.tma_ready(wq) and mxfp8_wgmma.tma_ready(ws)):
        return None
    if a_deq is None and dequantizes_first(tile, m, n, xq.shape[1], wq.device, bf16_rows=xs is None):
        # reads rows of any stride, writes a contiguous A_deq that TMA reads
        a_deq = dequantized_activations(xq, xs, permuted=True)
        xq, xs = a_deq, None
    # the ring kernel reads the activations from its own dequantized copy
    if not tile.ring and not mxfp8_wgmma.operands_ready(xq, xs, wq, ws):
        return None
    tiles = triton.cdiv(n, tile.block_n) * triton.cdiv(m, tile.block_m)
    # the decode kernel's A_deq streaming rule (wgmma_a_stream) applies to its tiles of 64 rows and more only
    sms = runtime.num_sms(wq.device) if not tile.ring and tile.block_m >= RESIDENT_MAX_M else 0
    streams = a_deq is not None and sms > 0  # the decode kernel given A_deq may stream it (wgmma_a_stream)
    rules = wgmma_launch(tile.block_m, xq.shape[1], tile.split_k, tile.num_stages, partials=partials, one_token=m == 1,
                         a_deq_programs=tiles * tile.split_k if streams else 0, sms=sms if streams else 0,
                         warp_specialized=tile.warp_specialized)
    if partials or tile.split_k > 1:
        work, counters = split_k_scratch(wq.device, tiles, tile)
    else:
        work, counters = out, out  # unused
    # the decode kernel's partials, summed after it where its rule combines them apart (never the ring kernel's: its
    # tiles are past the rule's rows; nor the warp-specialized kernel's: wgmma_launch knows it)
    stores_partials = partials or rules.combine_apart
    args = (xq, xs, wq, ws, work if stores_partials else out, tile.block_m, tile.split_k, tile.num_stages, work,
            counters, use_pdl, rules.combine)
    if tile.ring:
        mxfp8_wgmma_ring.launch_mxfp8_linear_wgmma_ring(*args, partials=partials, combiners=rules.combiners,
                                                        bf16_mul=rules.bf16_mul and weight_bf16_mul)
    elif tile.warp_specialized:  # A_deq streamed (xq here, xs None); BF16 multiplies where the weight allows (runs
        # 190-191 measured it so)
        mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws(xq, wq, ws, args[4], *args[5:], combiners=rules.combiners,
                                                    bf16_mul=weight_bf16_mul, partials=partials)
    else:
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(*args, partials=stores_partials, combiners=rules.combiners,
                                              smem_steps=rules.smem_steps, early_steps=rules.early_steps,
                                              a_deq=a_deq is not None, bf16_mul=rules.bf16_mul and weight_bf16_mul,
                                              a_stream=rules.a_stream)
    if not stores_partials:
        return out
    # [N tiles, split, token tiles x block_m, 128] (the warp-specialized kernel's; one token tile else)
    n_tiles, token_tiles = triton.cdiv(n, tile.block_n), triton.cdiv(m, tile.block_m)
    acc = work[: tiles * tile.split_k * tile.block_m * 128].view(n_tiles, tile.split_k, token_tiles * tile.block_m, 128)
    if partials:
        return acc
    launch_split_k_sum(acc, out, use_pdl)
    return out
