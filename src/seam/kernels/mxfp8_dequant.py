"""MXFP8 -> BF16 dequantization (``docs/spec/mxfp8.md``, ``bf16_rne(f32(e4m3) * 2^(s - 127))``) and the
MXFP8 GEMM's prefill path built on it (``seam.kernels.mxfp8_gemm_config.PREFILL_MM_MIN_M``).

The dequantized operands are the values every seam GEMM path multiplies on its tensor cores,
so one cuBLAS GEMM on them with fp32 accumulation (its split-K partials too), rounded to BF16
once, equals those kernels up to fp32 summation order (bit-identical where the sums are exact).
Bytes moved by the dequantization per element: one read (E4M3) and 1/32 scale byte, two written (BF16
activations quantized in the same launch: two read, two written).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.formats.a_deq import A_DEQ_STEP
from seam.kernels.a_deq import store_a_deq
from seam.kernels.numerics import (
    mxfp8_quantize_tile,
    swizzled_scale_offset,
    to_bf16_rne,
    to_f32,
)


@triton.jit
def _tile(R, K, pid_r, pid_k, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """(rows int64, cols, mask) of the BLOCK_R x BLOCK_K tile (pid_r, pid_k) of an [R, K] operand."""
    rows = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)  # R * K may exceed 2^31
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    return rows, cols, (rows[:, None] < R) & (cols[None, :] < K)


@triton.jit
def load_mxfp8_tile(values_ptr, scales_ptr, R, K, stride_vr, rows, cols, mask, pid_k, BLOCK_K: tl.constexpr):
    """(E4M3 bits, UE8M0 scale bytes) of the tile at ``rows`` x ``cols`` (:func:`_tile`) of one operand."""
    scols = pid_k * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
    v = tl.load(values_ptr + rows[:, None] * stride_vr + cols[None, :], mask=mask, other=0)
    s_mask = (rows[:, None] < R) & (scols[None, :] < K // 32)
    s = tl.load(scales_ptr + swizzled_scale_offset(rows[:, None], scols[None, :], (K // 32 + 3) // 4 * 4),
                mask=s_mask, other=0)
    return v, s


# R and R_W (rows) only bound masks and split the grid: not specialized, so one launch per (A_BF16, K) compiles
# the kernel every M of the ring and prefill paths runs
@triton.jit(do_not_specialize=["R", "R_W"])
def mxfp8_dequant_kernel(
    values_ptr,  # uint8 view of float8_e4m3fn [R, K], row stride stride_vr (the activations); BF16 with A_BF16
    scales_ptr,  # uint8 128x4-swizzled scales of [R, K] (unused with A_BF16)
    out_ptr,  # bf16 [R, K], contiguous
    w_values_ptr,  # the same for a second operand [R_W, K] (the weight; R_W 0: none)
    w_scales_ptr,
    w_out_ptr,
    R,
    R_W,
    K,
    stride_vr,
    stride_wr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,  # multiple of 32
    USE_PDL: tl.constexpr,
    A_BF16: tl.constexpr,  # the activations are BF16: quantized to MXFP8 here, then dequantized (no E4M3 copy)
    PERMUTED: tl.constexpr,  # both copies in A_deq's K order (seam.formats.a_deq.k_permutation)
):
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    a_programs = tl.cdiv(R, BLOCK_R)
    if pid_r >= a_programs:
        # The weight is a constant of the step (MXFP8Weight): read before the PDL wait, written after it
        # (the previous kernel may still read the memory this output reuses).
        rows, cols, mask = _tile(R_W, K, pid_r - a_programs, pid_k, BLOCK_R, BLOCK_K)
        v, s = load_mxfp8_tile(w_values_ptr, w_scales_ptr, R_W, K, stride_wr, rows, cols, mask, pid_k, BLOCK_K)
        if USE_PDL:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        store_a_deq(w_out_ptr, rows * K, cols, v, s, mask, BLOCK_R, BLOCK_K, PERMUTED)
    else:
        if USE_PDL:
            # The next kernel (the ring GEMM) may launch now and stream its weights; its own wait still
            # waits for all of this one. The values may be written by the previous kernel: read after the wait.
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        rows, cols, mask = _tile(R, K, pid_r, pid_k, BLOCK_R, BLOCK_K)
        if A_BF16:
            # the bytes seam.mxfp8_quantize writes, dequantized as they would be (the blocks are row-local)
            x = tl.load(values_ptr + rows[:, None] * stride_vr + cols[None, :], mask=mask, other=0.0)
            v, s = mxfp8_quantize_tile(to_f32(x), BLOCK_R, BLOCK_K)
        else:
            v, s = load_mxfp8_tile(values_ptr, scales_ptr, R, K, stride_vr, rows, cols, mask, pid_k, BLOCK_K)
        store_a_deq(out_ptr, rows * K, cols, v, s, mask, BLOCK_R, BLOCK_K, PERMUTED)


@triton.jit
def round_bf16_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = BF16 round-to-nearest-even of fp32 src (flat, n elements), NaN as every seam kernel writes it."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, to_bf16_rne(tl.load(src_ptr + offs, mask=mask, other=0.0)), mask=mask)


def launch_mxfp8_dequant(
    values: torch.Tensor, scales: torch.Tensor | None, out: torch.Tensor, weight: tuple[torch.Tensor, ...] = (),
    *, permuted: bool = False,
) -> None:
    """out [R, K] (BF16, contiguous) = the dequantized E4M3 ``values`` [R, K] (unit column stride) with
    128x4-swizzled ``scales``, or (``scales`` None) BF16 ``values`` quantized to MXFP8 and dequantized in
    the same program, as ``seam.mxfp8_quantize`` then this launch would give them; ``weight``: (values,
    scales, out) of a second operand [R_W, K] (E4M3) dequantized by the same launch (the prefill GEMM's
    weight: one launch fewer). ``permuted``: both copies in A_deq's K order (``seam.formats.a_deq``). Operands
    validated by the caller, K a multiple of 32.

    Raises:
        ValueError: ``permuted`` with K not a multiple of 128 (the permutation moves columns within 128-column
            steps), before any launch."""
    r, k = values.shape
    if permuted and k % A_DEQ_STEP:
        raise ValueError(f"permuted A_deq needs K a multiple of {A_DEQ_STEP}, got K={k}")
    a_bf16 = scales is None
    if a_bf16:
        scales = out  # unused
    w_values, w_scales, w_out = weight or (out, out, out)
    r_w = w_values.shape[0] if weight else 0
    if r + r_w == 0:
        return
    block_k = min(triton.next_power_of_2(k), 512)
    block_r = 8192 // block_k  # 8K elements per program
    grid = (triton.cdiv(r, block_r) + triton.cdiv(r_w, block_r), triton.cdiv(k, block_k))
    use_pdl = runtime.supports_pdl(values.device)
    mxfp8_dequant_kernel[grid](
        values if a_bf16 else values.view(torch.uint8), scales.view(torch.uint8), out, w_values.view(torch.uint8),
        w_scales.view(torch.uint8), w_out, r, r_w, k, values.stride(0), w_values.stride(0),
        BLOCK_R=block_r, BLOCK_K=block_k, USE_PDL=use_pdl, A_BF16=a_bf16, PERMUTED=permuted, num_warps=8,
        launch_pdl=use_pdl,
    )


def dequantized_activations(
    xq: torch.Tensor, xs: torch.Tensor | None, weight: tuple[torch.Tensor, ...] = (), *, permuted: bool = False
) -> torch.Tensor:
    """A_deq [M, K] BF16 (temporary) of MXFP8 ``xq`` / ``xs``; ``xs`` None: ``xq`` is the BF16 activation,
    quantized to MXFP8 in the same launch (the in-GEMM rule's bytes). ``weight``: as
    :func:`launch_mxfp8_dequant`'s; ``permuted``: in A_deq's K order (K a multiple of 128,
    ``seam.formats.a_deq``)."""
    a = torch.empty(xq.shape, dtype=torch.bfloat16, device=xq.device)
    launch_mxfp8_dequant(xq, xs, a, weight, permuted=permuted)
    return a


def _mm_f32(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out [M, N] (fp32) = a [M, K] @ w [N, K]^T of BF16 operands: cuBLAS with fp32 output on a GPU, the
    fp32 copies of the same values on the CPU."""
    if out.is_cuda:
        return torch.mm(a, w.t(), out_dtype=torch.float32, out=out)
    return torch.mm(a.float(), w.float().t(), out=out)


def _mm_bf16(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out [M, N] BF16 = a [M, K] @ w [N, K]^T of BF16 operands on a GPU, rounded once: cuBLAS accumulates
    in fp32, and its split-K partials are reduced in fp32 too, because PyTorch's switch that lets cuBLAS
    reduce them in BF16 (on by default) is off for the call and restored after it."""
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_bf16_reduced_precision_reduction
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        return torch.mm(a, w.t(), out=out)
    finally:
        matmul.allow_bf16_reduced_precision_reduction = before


#: Smallest K at which the prefill path multiplies its operands in A_deq's K order (and so reads a given A_deq:
#: :func:`reads_a_deq`); below it natural order: the weight's permuted copy cost more there. H100 (2026-12-05, ``docs/benchmarks-log.md`` run 248, the weight's
#: dequantization alone, us, natural / permuted): N 6144 x K 768 4.80 / 5.56; at K >= 2048 -0.7 to +4 %
#: (N 1536 x 6144 8.53 / 8.59, 2560 x 6144 15.39 / 16.05, 6144 x 2048 11.19 / 11.11, 4992 x 6144 33.43 / 33.85).
PERMUTED_MIN_K = 2048


def reads_a_deq(k: int) -> bool:
    """Whether the prefill path at this K multiplies in A_deq's K order, and so reads a given A_deq
    (:func:`launch_mxfp8_linear_bf16_mm`): K a multiple of 128 from :data:`PERMUTED_MIN_K`."""
    return k % A_DEQ_STEP == 0 and k >= PERMUTED_MIN_K


def launch_mxfp8_linear_bf16_mm(
    xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor,
    a_deq: torch.Tensor | None = None,
) -> None:
    """out[M, N] = bf16(A_deq @ W_deq^T) for validated operands (swizzled scales): both dequantized to
    BF16 here by one launch (``xs`` None: ``xq`` is the BF16 activation, MXFP8-quantized in that launch; one
    launch against two, H200 log run 97: 0.83-1.02x the path's time at M 129-512 on the MiniMax layers,
    faster at 11 of 12, 0.96-1.00x at 2048), then one cuBLAS
    GEMM accumulating in fp32 and rounding to BF16 once (:func:`_mm_bf16`), or with fp32 output, left
    unrounded, for an fp32 ``out``. Where K is a multiple of 128 from :data:`PERMUTED_MIN_K` both copies are in
    A_deq's K order (``seam.formats.a_deq``), so a given ``a_deq`` (BF16 [M, K], contiguous: the activations'
    A_deq) is multiplied as is and only the weight is dequantized, with the same bytes out; elsewhere ``a_deq`` is
    ignored. On the CPU (the interpreter's tests) the
    GEMM runs on the fp32 copies of the same values, rounded by :func:`round_bf16_kernel`. Temporary memory:
    2 * (M + N) * K bytes of BF16 operands (2 * N * K where it reads ``a_deq``)."""
    m, k = xq.shape
    permuted = reads_a_deq(k)
    w = torch.empty(wq.shape, dtype=torch.bfloat16, device=out.device)
    if a_deq is not None and permuted:  # the weight alone: the activations' launch programs are none
        launch_mxfp8_dequant(xq[:0], xs, a_deq[:0], (wq, ws, w), permuted=True)
        a = a_deq
    else:
        a = dequantized_activations(xq, xs, (wq, ws, w), permuted=permuted)  # one launch dequantizes both
    if out.dtype == torch.float32:  # the unrounded sums (the fused QKV op's accumulator)
        _mm_f32(a, w, out)
        return
    if out.is_cuda:
        _mm_bf16(a, w, out)
        return
    acc = _mm_f32(a, w, torch.empty((m, wq.shape[0]), dtype=torch.float32, device=out.device))
    # seam's rounding (seam.kernels.numerics), not torch's copy_: the same NaN bits as the GEMM kernels
    block = 4096
    round_bf16_kernel[(triton.cdiv(acc.numel(), block),)](acc, out, acc.numel(), BLOCK=block, num_warps=8)
