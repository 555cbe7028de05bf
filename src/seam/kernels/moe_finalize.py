"""MoE finalize: one TP rank's BF16 contribution, ``bf16(sum_k f32(gemm2[idx[t, k]]) * f32(w[t, k]) +
f32(shared[t]))`` (``docs/spec/lamport.md``, MoE finalize publish).

:func:`moe_finalize_fragment` is the formula on one token's columns; the Lamport publish kernel
(``seam.kernels.lamport``) stores its result into the peers' mailboxes, and :func:`launch_moe_finalize`
writes it to memory: the finalize of the all-reduce ops' fallback (no peer access, TP 1), which a
``torch.distributed`` sum then reads.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam.kernels.numerics import to_bf16_rne, to_f32


@triton.jit
def moe_finalize_fragment(
    gemm2_ptr,  # bf16 [rows, hidden], permuted expert GEMM2 output
    weights_ptr,  # fp32 or bf16 [M, TOP_K]
    idx_ptr,  # int32 [M, TOP_K] expanded -> permuted row, -1 = expert not on this rank
    shared_ptr,  # bf16 [M, hidden]
    token,
    cols,
    mask,
    hidden,
    rows,  # gemm2 rows: an index outside [0, rows) is skipped like -1
    TOP_K: tl.constexpr,
):
    """BF16 contribution of ``token``'s columns: bf16(sum_k f32(row_k) * f32(w_k) + f32(shared)), k in order.

    Products are separate from their adds only when the kernel is launched with
    ``enable_fp_fusion=False``; skipped experts (idx < 0) are left out entirely, so an
    inf/NaN in an unused row cannot leak in. So is an index past gemm2's rows, which only
    ``SEAM_LAMPORT_DEBUG=1`` reports: the kernel never reads out of bounds.
    """
    token64 = token.to(tl.int64)
    acc = tl.zeros(cols.shape, tl.float32)
    for k in tl.static_range(TOP_K):
        row = tl.load(idx_ptr + token64 * TOP_K + k)
        used = (row >= 0) & (row < rows)
        w = to_f32(tl.load(weights_ptr + token64 * TOP_K + k))
        x = tl.load(gemm2_ptr + row.to(tl.int64) * hidden + cols, mask=mask & used, other=0.0)
        acc = tl.where(used, acc + to_f32(x) * w, acc)
    shared = tl.load(shared_ptr + token64 * hidden + cols, mask=mask, other=0.0)
    acc = acc + to_f32(shared)
    return to_bf16_rne(acc)


@triton.jit(do_not_specialize=["rows"])  # varies with M: no recompile per routed-row count
def moe_finalize_kernel(gemm2_ptr, weights_ptr, idx_ptr, shared_ptr, out_ptr, hidden, rows,
                        TOP_K: tl.constexpr, BLOCK_N: tl.constexpr):
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < hidden
    frag = moe_finalize_fragment(gemm2_ptr, weights_ptr, idx_ptr, shared_ptr, token, cols, mask, hidden, rows, TOP_K)
    tl.store(out_ptr + token.to(tl.int64) * hidden + cols, frag, mask=mask)


def finalize_block(hidden: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) of one program's columns, the publish kernel's too."""
    return min(triton.next_power_of_2(hidden), 1024), 4


def launch_moe_finalize(gemm2: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, shared: torch.Tensor,
                        out: torch.Tensor) -> None:
    """Write ``out`` (BF16 [M, hidden], contiguous) = the finalize of checked operands: ``gemm2`` BF16
    [rows, hidden], ``weights`` FP32 or BF16 [M, top_k], ``idx`` int32 [M, top_k], ``shared`` BF16 [M, hidden],
    all contiguous on one device. Bit-identical to :func:`seam.ref.lamport.moe_finalize_ref` but for the bits of a
    NaN (the kernel rounds through :func:`seam.kernels.numerics.to_bf16_rne`; torch's casts keep other NaN bits)."""
    m, hidden = shared.shape
    if m == 0:
        return
    block_n, num_warps = finalize_block(hidden)
    moe_finalize_kernel[(m, triton.cdiv(hidden, block_n))](
        gemm2, weights, idx, shared, out, hidden, gemm2.shape[0], TOP_K=weights.shape[1], BLOCK_N=block_n,
        num_warps=num_warps, enable_fp_fusion=False,
    )
