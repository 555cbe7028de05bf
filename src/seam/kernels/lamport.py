"""Lamport one-shot TP all-reduce with unicast peer stores (``docs/spec/lamport.md``).

Contract of the shared ``@triton.jit`` pieces (stable: the mHC consumer builds on them)
---------------------------------------------------------------------------------
State of one rank (``seam.comm.LamportRankState``):

* ``mailbox``: BF16 ``[3, TP, capacity, hidden]``, contiguous, in peer-addressable memory;
  slot ``[g][p][token]`` holds rank p's contribution row for generation g. Every lane
  starts as the sentinel 0x8000 (BF16 -0.0) and is put back to it after being read.
* ``peer_offsets``: int64 ``[TP]`` on the device: element offset of rank p's mailbox
  from this rank's own mailbox pointer (``own_ptr + peer_offsets[p]`` is rank p's
  mailbox; entry ``rank`` is 0). The interpreter uses real host addresses, so the same
  arithmetic works for simulated ranks on the CPU.
* ``stage_state``: int32 ``[2]`` = ``[NEXT, ACTIVE]``, starts ``[0, 0]``.
* ``error``: int32 ``[1]``, set to 1 by a bounded spin that timed out (debug mode).

Pieces:

* :func:`lamport_publish_generation` (publish prologue, after ``gdc_wait``): reads
  ``g = NEXT``; the program that passes ``is_writer`` stores ``ACTIVE = g``.
* :func:`lamport_publish_fragment`: stores a BF16 fragment of one token's contribution
  (-0.0 replaced by +0.0) into ``mailbox_p[g][rank][token][cols]`` of every rank p.
* :func:`seam.kernels.moe_finalize.moe_finalize_fragment`: the MoE finalize contribution of one token's
  columns as BF16 (spec formula, k order; launch the kernel with
  ``enable_fp_fusion=False`` so each product is rounded to fp32 before its add).
* :func:`lamport_consumer_generation` (consumer, after ``gdc_wait``): returns
  ``g = ACTIVE``; the program with ``is_token0`` stores ``NEXT = (g + 1) % 3``. Only
  consumers write NEXT, only publishes write ACTIVE, so the two never race.
* :func:`lamport_collect`: for one token and a column block (any shape; ``mask`` marks
  real lanes), spins on volatile loads of ``mailbox_self[g][p][token][cols]`` for
  p = 0..TP-1 until no BF16 lane is 0x8000, re-arms what it read, and returns the fp32
  rank sum ``(((0 + f32(x_0)) + f32(x_1)) + ...)`` in rank order. ``SPIN_LIMIT`` > 0
  bounds each wait to that many re-loads; on timeout it stores 1 into ``error_ptr``
  and continues with whatever it read (the host checks the flag and raises).

A consumer kernel is: loads independent of peers -> ``gdc_wait`` ->
:func:`lamport_consumer_generation` -> :func:`lamport_collect` per column block ->
epilogue. Under PDL every program stores only after ``gdc_wait`` (its output buffers may
reuse memory the previous kernel still reads). This module has the publish kernel (plain
contribution or MoE finalize; grid ``(M, column blocks)``) and one consumer kernel (grid:
one program per token holding the whole row, plus, for the MXFP8 epilogue, one program per
``PAD_ROWS`` swizzled padding scale rows past M, which it zeroes) with the epilogues
(c) all-reduce, (b) residual + RMSNorm and (a) residual + Gemma RMSNorm + MXFP8, selected
by a constexpr.

Bytes moved per token row of hidden H: publish reads 2H (plain) or 2H(top_k + 1)
(finalize) and writes 2H x TP (one copy per peer); the consumer reads 2H x TP (own
mailbox) + 2H (residual), re-arms 2H x TP, and writes its outputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam.kernels.a_deq import store_a_deq
from seam.kernels.moe_finalize import finalize_block, moe_finalize_fragment
from seam.kernels.numerics import mxfp8_quantize_tile, round_bf16, swizzled_scale_offset, to_bf16_rne, to_f32

#: Generations in the mailbox rotation.
GENERATIONS = 3
#: int16 bits of the sentinel (BF16 -0.0, 0x8000).
SENTINEL_BITS = -32768
# The compiler only lets jit code read globals that are constexpr.
_SENTINEL = tl.constexpr(SENTINEL_BITS)

#: Swizzle padding scale rows zeroed by each consumer program past M.
PAD_ROWS = 16

# Consumer epilogues (constexpr EPILOGUE; the tl.constexpr copies are what jit code can read).
EPILOGUE_ALL_REDUCE = 0  # (c) out = bf16(acc)
EPILOGUE_RMS_NORM = 1  # (b) residual_out = bf16(acc + residual); out = bf16(rmsnorm)
EPILOGUE_RMS_NORM_MXFP8 = 2  # (a) as (b), normed -> MXFP8 (optional BF16 normed)
_ALL_REDUCE = tl.constexpr(EPILOGUE_ALL_REDUCE)
_RMS_NORM = tl.constexpr(EPILOGUE_RMS_NORM)
_RMS_NORM_MXFP8 = tl.constexpr(EPILOGUE_RMS_NORM_MXFP8)
_GENERATIONS = tl.constexpr(GENERATIONS)


# ---------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------
@triton.jit
def lamport_slot(g, p, token, capacity, hidden, TP: tl.constexpr):
    """Element offset (int64) of row ``[g][p][token]`` in a ``[3, TP, capacity, hidden]`` mailbox."""
    return ((g.to(tl.int64) * TP + p) * capacity + token) * hidden


@triton.jit
def lamport_positive_zero(x):
    """BF16 x with every -0.0 lane replaced by +0.0 (a real -0.0 must not read as the sentinel)."""
    bits = x.to(tl.int16, bitcast=True)
    return tl.where(bits == _SENTINEL, 0, bits).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def lamport_publish_generation(stage_state_ptr, is_writer):
    """Publish prologue: ``g = stage_state[NEXT]``; the ``is_writer`` program stores ``ACTIVE = g``."""
    g = tl.load(stage_state_ptr)
    if is_writer:
        tl.store(stage_state_ptr + 1, g)
    return g


@triton.jit
def lamport_publish_fragment(
    mailbox_ptr,  # bf16, this rank's mailbox [3, TP, capacity, hidden]
    peer_offsets_ptr,  # int64 [TP]: element offset of each rank's mailbox from mailbox_ptr
    g,  # generation from lamport_publish_generation
    rank,  # this rank's index (the p-slot it writes in every mailbox)
    token,
    cols,  # column indices of the fragment (any shape)
    mask,  # real lanes of cols
    frag,  # bf16 values, cols' shape
    capacity,
    hidden,
    TP: tl.constexpr,
):
    """Store ``frag`` (after -0.0 -> +0.0) into ``mailbox_p[g][rank][token][cols]`` of every rank p."""
    frag = lamport_positive_zero(frag)
    offs = lamport_slot(g, rank, token, capacity, hidden, TP) + cols
    for p in tl.static_range(TP):
        peer = tl.load(peer_offsets_ptr + p)
        tl.store(mailbox_ptr + peer + offs, frag, mask=mask)


@triton.jit
def lamport_consumer_generation(stage_state_ptr, is_token0):
    """Consumer prologue: ``g = stage_state[ACTIVE]``; token 0's program stores ``NEXT = (g + 1) % 3``."""
    g = tl.load(stage_state_ptr + 1)
    if is_token0:
        tl.store(stage_state_ptr, (g + 1) % _GENERATIONS)
    return g


@triton.jit
def lamport_collect(
    mailbox_ptr,  # bf16, this rank's own mailbox [3, TP, capacity, hidden]
    g,  # generation from lamport_consumer_generation
    token,
    cols,  # column indices (any shape)
    mask,  # real lanes of cols
    capacity,
    hidden,
    error_ptr,  # int32 [1]: set to 1 when a bounded spin times out
    TP: tl.constexpr,
    SPIN_LIMIT: tl.constexpr,  # 0: spin until the data lands; > 0: re-loads per rank before timeout
):
    """Wait for every rank's fragment of ``token``/``cols``, re-arm it, return the fp32 rank-order sum."""
    acc = tl.zeros(cols.shape, tl.float32)
    for p in tl.static_range(TP):
        ptrs = mailbox_ptr + lamport_slot(g, p, token, capacity, hidden, TP) + cols
        x = tl.load(ptrs, mask=mask, other=0.0, volatile=True)
        pending = tl.max(((x.to(tl.int16, bitcast=True) == _SENTINEL) & mask).to(tl.int32))
        spins = pending * 0  # int32 scalar, the type the loop carries
        while pending != 0:
            x = tl.load(ptrs, mask=mask, other=0.0, volatile=True)
            pending = tl.max(((x.to(tl.int16, bitcast=True) == _SENTINEL) & mask).to(tl.int32))
            if SPIN_LIMIT > 0:
                spins += 1
                if spins >= SPIN_LIMIT:
                    tl.store(error_ptr, 1)
                    pending = pending * 0
        acc = acc + to_f32(x)
        # Re-arm right after the read: nothing reads this slot again before the
        # generation comes back round (three calls later).
        tl.store(ptrs, tl.full(cols.shape, _SENTINEL, tl.int16).to(tl.bfloat16, bitcast=True), mask=mask)
    return acc


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["gemm2_rows"])  # varies with M: no recompile per routed-row count
def lamport_publish_kernel(
    # inputs: x [M, hidden] bf16 (plain), or the MoE finalize operands
    x_ptr,
    gemm2_ptr,
    weights_ptr,
    idx_ptr,
    # Lamport state of this rank
    mailbox_ptr,
    peer_offsets_ptr,
    stage_state_ptr,
    # sizes
    capacity,
    hidden,
    rank,
    gemm2_rows,  # FINALIZE
    # constexprs
    TP: tl.constexpr,
    FINALIZE: tl.constexpr,  # x is shared_output and the routed rows are added first
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < hidden
    if USE_PDL:
        # The contribution comes from the previous kernel; let the consumer start its
        # independent loads as soon as this grid is resident.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    g = lamport_publish_generation(stage_state_ptr, (token == 0) & (tl.program_id(1) == 0))
    if FINALIZE:
        frag = moe_finalize_fragment(
            gemm2_ptr, weights_ptr, idx_ptr, x_ptr, token, cols, mask, hidden, gemm2_rows, TOP_K
        )
    else:
        frag = tl.load(x_ptr + token.to(tl.int64) * hidden + cols, mask=mask, other=0.0)
    lamport_publish_fragment(mailbox_ptr, peer_offsets_ptr, g, rank, token, cols, mask, frag, capacity, hidden, TP)


@triton.jit
def lamport_consumer_kernel(
    # Lamport state of this rank
    mailbox_ptr,
    stage_state_ptr,
    error_ptr,
    # epilogue inputs
    residual_ptr,  # bf16 [M, hidden] (RMS norm epilogues)
    weight_ptr,  # bf16 [hidden] (RMS norm epilogues)
    # outputs
    out_ptr,  # bf16 [M, hidden]: the sum (all-reduce) or normed (RMS norm epilogues; optional for MXFP8)
    residual_out_ptr,  # bf16 [M, hidden]
    values_ptr,  # uint8 view of e4m3 [M, hidden]
    scales_ptr,  # uint8, 128x4 swizzled, padding rows zero
    a_deq_ptr,  # bf16 [M, hidden]: A_deq of the MXFP8 rows (seam.formats.a_deq; written with WRITE_A_DEQ)
    # sizes
    M,
    capacity,
    hidden,
    eps,
    # constexprs
    TP: tl.constexpr,
    EPILOGUE: tl.constexpr,
    GEMMA: tl.constexpr,  # weight is applied as (1 + w)
    STORE_NORMED: tl.constexpr,  # MXFP8 epilogue also writes BF16 normed into out_ptr
    WRITE_A_DEQ: tl.constexpr,  # MXFP8 epilogue also writes A_deq (hidden a multiple of 128)
    SPIN_LIMIT: tl.constexpr,
    BLOCK_H: tl.constexpr,  # next power of two >= hidden: one program holds a whole row
    PAD_ROWS: tl.constexpr,  # swizzle padding rows zeroed per program past M
    USE_PDL: tl.constexpr,
):
    token = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < hidden
    row = token.to(tl.int64) * hidden
    if token < M:
        if EPILOGUE != 0:
            # the norm weight is no kernel's output: fetched before the PDL wait
            w = to_f32(tl.load(weight_ptr + cols, mask=mask, other=0.0))
            if GEMMA:
                w = w + 1.0
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        if EPILOGUE != 0:
            # the residual may be the previous kernel's output: after the wait, still ahead of the spin on the peers
            res = to_f32(tl.load(residual_ptr + row + cols, mask=mask, other=0.0))
        g = lamport_consumer_generation(stage_state_ptr, token == 0)
        acc = lamport_collect(mailbox_ptr, g, token, cols, mask, capacity, hidden, error_ptr, TP, SPIN_LIMIT)
        if USE_PDL:
            tl.extra.cuda.gdc_launch_dependents()
        if EPILOGUE == _ALL_REDUCE:
            tl.store(out_ptr + row + cols, to_bf16_rne(acc), mask=mask)
        else:
            prenorm = round_bf16(acc + res)
            tl.store(residual_out_ptr + row + cols, to_bf16_rne(prenorm), mask=mask)
            inv_rms = tl.math.rsqrt(tl.sum(prenorm * prenorm) / hidden + eps)
            normed = round_bf16(prenorm * inv_rms * w)
            if EPILOGUE == _RMS_NORM or STORE_NORMED:
                tl.store(out_ptr + row + cols, to_bf16_rne(normed), mask=mask)
            if EPILOGUE == _RMS_NORM_MXFP8:
                # Scale columns up to the padded count (hidden / 32 rounded up to 4): the blocks past
                # the row are masked zeros, whose scale byte is 0, the padding's value.
                scols = tl.arange(0, BLOCK_H // 32)
                padded_scols = (hidden // 32 + 3) // 4 * 4
                s_offs = swizzled_scale_offset(token, scols, padded_scols)
                values, scales = mxfp8_quantize_tile(tl.reshape(normed, (1, BLOCK_H)), 1, BLOCK_H)
                tl.store(values_ptr + row + cols, tl.reshape(values, (BLOCK_H,)), mask=mask)
                tl.store(scales_ptr + s_offs, tl.reshape(scales, (BLOCK_H // 32,)), mask=scols < padded_scols)
                if WRITE_A_DEQ:
                    store_a_deq(a_deq_ptr, tl.zeros((1,), tl.int64) + row, cols, values, scales, mask[None, :],
                                1, BLOCK_H, True)
    else:
        if EPILOGUE == _RMS_NORM_MXFP8:
            if USE_PDL:
                # scales may reuse memory that the previous kernel still reads.
                tl.extra.cuda.gdc_wait()
            # Programs past M zero the scales of the swizzled padding rows M..M_pad-1, PAD_ROWS
            # each: one program zeroing all 128 rows took 25 us on the H200 (2026-11-29).
            # (Names differ from the other branch: the compiler merges same-named variables.)
            pad_rows = M + (token - M) * PAD_ROWS + tl.arange(0, PAD_ROWS)
            pad_cols = tl.arange(0, BLOCK_H // 32)
            pad_scols = (hidden // 32 + 3) // 4 * 4
            pad_offs = swizzled_scale_offset(pad_rows[:, None], pad_cols[None, :], pad_scols)
            m_pad = (M + 127) // 128 * 128
            pad_mask = (pad_rows[:, None] < m_pad) & (pad_cols[None, :] < pad_scols)
            tl.store(scales_ptr + pad_offs, tl.zeros((PAD_ROWS, BLOCK_H // 32), tl.uint8), mask=pad_mask)


# ---------------------------------------------------------------------------------------
# Launchers (inputs validated by seam.ops.allreduce_base and its subclasses)
# ---------------------------------------------------------------------------------------
def check_mailbox(mailbox: torch.Tensor, address: int) -> None:
    """Raise RuntimeError unless ``mailbox`` is the rank's own mailbox, at ``address``
    (``LamportRankState.address``): the kernels reach the peers' mailboxes at offsets from it, so a copy (a
    ``torch.compile`` backend that functionalizes the op's mutated arguments without writing them back in place,
    such as ``aot_eager``) would have them write other memory and read a stale mailbox."""
    if mailbox.data_ptr() != address:
        raise RuntimeError(
            "the Lamport mailbox reached the kernel as a copy, not the rank's own buffer (a torch.compile backend "
            "that does not run seam's ops in place, e.g. aot_eager): its peers are addressed from it. Compile "
            "with the inductor backend, or call the op outside the compiled region"
        )


def launch_lamport_publish(
    m: int,
    x: torch.Tensor,
    mailbox: torch.Tensor,
    mailbox_address: int,
    peer_offsets: torch.Tensor,
    stage_state: torch.Tensor,
    rank: int,
    gemm2: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    idx: torch.Tensor | None = None,
    use_pdl: bool = False,
) -> None:
    """Publish M rows: ``x`` is the contribution, or ``shared_output`` when gemm2/weights/idx are given.
    Flat annotated arguments (no keyword-only tensors), so ``seam.ops.allreduce_base`` registers it as is.
    ``mailbox_address``: the rank's mailbox's address (:func:`check_mailbox`)."""
    check_mailbox(mailbox, mailbox_address)
    _, tp, capacity, hidden = mailbox.shape
    finalize = gemm2 is not None
    top_k = weights.shape[1] if finalize else 1
    block_n, num_warps = finalize_block(hidden)
    grid = (m, triton.cdiv(hidden, block_n))
    lamport_publish_kernel[grid](
        x,
        gemm2 if finalize else x,
        weights if finalize else x,
        idx if finalize else x,
        mailbox,
        peer_offsets,
        stage_state,
        capacity,
        hidden,
        rank,
        gemm2.shape[0] if finalize else 0,
        TP=tp,
        FINALIZE=finalize,
        TOP_K=top_k,
        BLOCK_N=block_n,
        USE_PDL=use_pdl,
        num_warps=num_warps,
        enable_fp_fusion=False,
        launch_pdl=use_pdl,
    )


def launch_lamport_consumer(
    m: int,
    epilogue: int,
    mailbox: torch.Tensor,
    mailbox_address: int,
    stage_state: torch.Tensor,
    error: torch.Tensor,
    residual: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    gemma: bool = False,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    spin_limit: int = 0,
    use_pdl: bool = False,
    a_deq: torch.Tensor | None = None,
) -> None:
    """Collect M rows from this rank's mailbox and run ``epilogue`` (EPILOGUE_* constant). Registered as is
    (``seam.ops.allreduce_base``): flat annotated arguments, each output optional (``a_deq``: with the MXFP8
    epilogue, A_deq of its rows, ``seam.formats.a_deq``; ``mailbox_address``: as :func:`check_mailbox`)."""
    check_mailbox(mailbox, mailbox_address)
    _, tp, capacity, hidden = mailbox.shape
    block_h = max(triton.next_power_of_2(hidden), 128)  # >= 128: holds the padded scale columns
    # MXFP8: programs past M zero the swizzle padding scale rows, PAD_ROWS each.
    pad = -(-m // 128) * 128 - m if epilogue == EPILOGUE_RMS_NORM_MXFP8 else 0
    rows = m + -(-pad // PAD_ROWS)
    dummy = mailbox
    num_warps = max(4, min(16, block_h // 512))
    lamport_consumer_kernel[(rows,)](
        mailbox,
        stage_state,
        error,
        residual if residual is not None else dummy,
        weight if weight is not None else dummy,
        out if out is not None else dummy,
        residual_out if residual_out is not None else dummy,
        values.view(torch.uint8) if values is not None else dummy,
        scales if scales is not None else dummy,
        a_deq if a_deq is not None else dummy,
        m,
        capacity,
        hidden,
        eps,
        TP=tp,
        EPILOGUE=epilogue,
        GEMMA=gemma,
        STORE_NORMED=out is not None,
        WRITE_A_DEQ=a_deq is not None,
        SPIN_LIMIT=spin_limit,
        BLOCK_H=block_h,
        PAD_ROWS=PAD_ROWS,
        USE_PDL=use_pdl,
        num_warps=num_warps,
        launch_pdl=use_pdl,
    )
