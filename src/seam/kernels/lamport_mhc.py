"""Lamport consumer with the mHC epilogue (``docs/spec/lamport.md``, Consumer B).

The publish side is the Lamport core's (``seam.kernels.lamport``: plain or MoE finalize
publish). This consumer is the core's protocol with ``seam.kernels.mhc``'s epilogue and
its two grids (``seam.kernels.mhc_config.launch_shape``): per token and chunk of ``BLOCK_H``
columns, :func:`lamport_collect` spins until every rank's fragment is in this rank's
mailbox, re-arms it and returns the rank-order fp32 sum; ``reduced = bf16(sum)`` then
feeds the post-mix, and the collapse is normalized (+MXFP8) as in the standalone kernel.
One program per token walks its row (hidden 5120: one chunk at hc 1 and 2, two at hc 4,
three at hc 8); at decode M a (token, chunk) grid gives each program one chunk, collected
and re-armed by that program alone, and the token's last program to arrive normalizes the row.
post/pre are loaded before the PDL wait and each chunk's residual streams before its
spin, so those loads overlap the wait for the peers.

Bytes per token row of hidden H: 2H x TP mailbox read and re-armed, 2H x hc residual
read, 2H x hc residual_out written, 2H layer_input (+ H + H/32 MXFP8) written; split
mode: + 4 x SPLIT workspace + a 4-byte counter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.kernels.lamport import check_mailbox, lamport_collect, lamport_consumer_generation
from seam.kernels.mhc import (
    mhc_load_mixes,
    mhc_load_streams,
    mhc_mix_chunk,
    mhc_norm_long_row,
    mhc_norm_one_chunk,
    mhc_stage_layer_input,
    mxfp8_zero_scale_padding,
)
from seam.kernels.mhc_config import grid_rows, launch_shape
from seam.kernels.numerics import round_bf16


@triton.jit
def lamport_mhc_consumer_kernel(
    # Lamport state of this rank
    mailbox_ptr,  # bf16 [3, TP, capacity, H], this rank's own mailbox
    stage_state_ptr,  # int32 [NEXT, ACTIVE]
    error_ptr,  # int32 [1] timeout flag of the bounded spin
    # mHC inputs
    residual_ptr,  # bf16 [M, HC, H]
    post_ptr,  # fp32 [M, HC]
    comb_ptr,  # fp32 [M, HC, HC], [source, target]
    pre_ptr,  # fp32 [M, HC] or None (residual only)
    weight_ptr,  # bf16 [H] or None (residual only)
    # outputs
    residual_out_ptr,  # bf16 [M, HC, H]
    layer_input_ptr,  # bf16 [M, H] or None (residual only)
    values_ptr,  # uint8 [M, H] or None (no MXFP8)
    scales_ptr,  # uint8 swizzled [mxfp8_scale_numel(M, H)] or None
    ws_ptr,  # fp32 [M, SPLIT] or None (SPLIT == 1 or residual only)
    counter_ptr,  # int32 [M], zero between launches, or None (as ws_ptr)
    # sizes and scalars
    M,
    capacity,
    eps,
    # constexprs
    H: tl.constexpr,
    HC: tl.constexpr,
    TP: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SPLIT: tl.constexpr,  # programs per token (grid axis 1); > 1: column split, one chunk each
    NORM_BLOCK: tl.constexpr,  # pass 2 step
    WRITE_LAYER_INPUT: tl.constexpr,
    QUANTIZE: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
    SPIN_LIMIT: tl.constexpr,  # 0: spin until the data lands; > 0: bounded (debug)
    USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    row = pid.to(tl.int64)
    if pid < M:
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        # the mixes may be the previous kernel's output: after the wait, still ahead of the spin on the peers
        post, pre = mhc_load_mixes(post_ptr, pre_ptr, row, HC, WRITE_LAYER_INPUT)
        chunk = tl.program_id(1)
        g = lamport_consumer_generation(stage_state_ptr, (pid == 0) & (chunk == 0))
        if SPLIT > 1 or H <= BLOCK_H:
            # One chunk per program: the whole row, or (split) chunk program_id(1) of it.
            cols = chunk * BLOCK_H + tl.arange(0, BLOCK_H)
            mask = cols < H
            # Issued before the spin, so the stream loads overlap the wait for the peers.
            streams = mhc_load_streams(residual_ptr, row, cols, mask, H, HC)
            acc = lamport_collect(mailbox_ptr, g, pid, cols, mask, capacity, H, error_ptr, TP, SPIN_LIMIT)
            # The all-reduced output is BF16 (as the unfused all-reduce returns it) before the mix.
            collapse = mhc_mix_chunk(
                round_bf16(acc), streams, post, comb_ptr, pre, residual_out_ptr, row, cols, mask, H, HC,
                WRITE_LAYER_INPUT,
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
                acc = lamport_collect(mailbox_ptr, g, pid, cols, mask, capacity, H, error_ptr, TP, SPIN_LIMIT)
                collapse = mhc_mix_chunk(
                    round_bf16(acc), streams, post, comb_ptr, pre, residual_out_ptr, row, cols, mask, H, HC,
                    WRITE_LAYER_INPUT,
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
        if USE_PDL:
            # the scales may be memory that the previous kernel still reads
            tl.extra.cuda.gdc_wait()
        # Programs past M zero the swizzle padding scale rows, PAD_ROWS each.
        mxfp8_zero_scale_padding(
            scales_ptr, M, (pid - M) * SPLIT + tl.program_id(1), (tl.num_programs(0) - M) * SPLIT,
            (H // 32 + 3) // 4 * 4, SCALE_BLOCK,
        )


def launch_lamport_mhc_consumer(
    mailbox: torch.Tensor,
    mailbox_address: int,
    stage_state: torch.Tensor,
    error: torch.Tensor,
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
    split_ws: torch.Tensor,
    split_counters: torch.Tensor,
    spin_limit: int = 0,
) -> None:
    """Collect M = residual.shape[0] tokens from ``mailbox`` and run the mHC epilogue (validated inputs).

    ``split_ws``, ``split_counters``: the (workspace, counters) of
    ``seam.kernels.mhc.new_split_scratch`` for at least M rows and
    ``seam.kernels.mhc_config.max_split(hidden)`` programs per row, owned by the caller; launches
    sharing them must be stream-ordered.
    Flat annotated arguments, so ``seam.ops.allreduce_mhc`` registers this launcher as is; ``mailbox_address``:
    as ``seam.kernels.lamport.check_mailbox``.
    """
    check_mailbox(mailbox, mailbox_address)
    _, tp, capacity, hidden = mailbox.shape
    m, hc, _ = residual.shape
    shape = launch_shape(m, hidden, hc, residual.device)
    ws, counters = (split_ws, split_counters) if shape.split > 1 and layer_input is not None else (None, None)
    if ws is not None and (ws.numel() < m * shape.split or counters.numel() < m):
        raise ValueError(f"split_ws / split_counters hold {counters.numel()} rows x {ws.numel()} partials, "
                         f"need {m} x {m * shape.split}")
    quantize = values is not None
    use_pdl = runtime.supports_pdl(residual.device)
    lamport_mhc_consumer_kernel[(grid_rows(m, quantize, shape.split), shape.split)](
        mailbox,
        stage_state,
        error,
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
        capacity,
        norm_eps,
        H=hidden,
        HC=hc,
        TP=tp,
        BLOCK_H=shape.block,
        SPLIT=shape.split,
        NORM_BLOCK=shape.norm_block,
        WRITE_LAYER_INPUT=pre is not None,
        QUANTIZE=quantize,
        SCALE_BLOCK=triton.next_power_of_2(-(-hidden // 128) * 4),  # the padded scale columns
        SPIN_LIMIT=spin_limit,
        USE_PDL=use_pdl,
        num_warps=shape.num_warps,
        enable_fp_fusion=False,
        launch_pdl=use_pdl,
    )
