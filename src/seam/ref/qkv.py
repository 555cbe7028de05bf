"""Pure-PyTorch reference of the QKV+indexer GEMM and its epilogue (``docs/spec/qkv_epilogue.md``).

Same rounding points as ``seam.kernels.qkv_epilogue``, step by step, on any device:
- sum of squares: ``x*x`` rounded, then a pairwise tree over the 128 dims in index
  order (adjacent pairs first); ``* (1/128)`` (exact), ``+ f32(eps)``;
  ``r = 1 / sqrt(v)`` with a correctly rounded sqrt and a correctly rounded divide
  (seam's definition of the spec's rsqrt); ``n = x*r``; ``out = n + n*f32(w)``;
- RoPE: ``x*cos - y*sin`` and ``y*cos + x*sin`` with the products rounded first;
- q BF16 RNE; q FP8 ``e4m3_sat(x * f32(1/q_fp8_scale))``; index_q ``e4m3_sat(x)``;
- k / v / index_k: :func:`seam.formats.nvfp4.nvfp4_quantize_ref` into the paged caches.
"""

from __future__ import annotations

import torch

from seam.formats.mxfp8 import e4m3_saturate_ref, mxfp8_dequantize
from seam.formats.nvfp4 import HEAD_DIM, f32_reciprocal, write_entries
from seam.ref.norm import sqrt_rn


def qkv_gemm_ref(xq: torch.Tensor, xsf: torch.Tensor, wq: torch.Tensor, wsf: torch.Tensor) -> torch.Tensor:
    """fp32 [M, N] = f32(A_deq) @ f32(B_deq)^T from MXFP8 operands with swizzled scales."""
    a = mxfp8_dequantize(xq, xsf, scale_layout="swizzled", dtype=torch.float32)
    b = mxfp8_dequantize(wq, wsf, scale_layout="swizzled", dtype=torch.float32)
    return a @ b.t()


def tree_sum_sq(x: torch.Tensor) -> torch.Tensor:
    """[..., 128] -> [...]: pairwise-tree sum of ``x*x`` in index order (adjacent pairs first)."""
    s = x * x
    while s.shape[-1] > 1:
        s = s.reshape(*s.shape[:-1], s.shape[-1] // 2, 2).sum(dim=-1)
    return s[..., 0]


def gemma_rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm of fp32 heads [..., 128] with BF16 weight [128]."""
    v = tree_sum_sq(x) * (1.0 / HEAD_DIM) + torch.tensor(eps, dtype=torch.float32, device=x.device)
    r = 1.0 / sqrt_rn(v)
    n = x * r[..., None]
    return n + n * w.float()


def rope_ref(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> torch.Tensor:
    """Partial NeoX RoPE on dims [0, 64) of fp32 heads [M, H, 128]; dims [64, 128) pass through."""
    cs = cos_sin_cache[positions].float()  # [M, 64]
    cos = cs[:, None, :32]
    sin = cs[:, None, 32:]
    a = x[..., :32]
    b = x[..., 32:64]
    return torch.cat((a * cos - b * sin, b * cos + a * sin, x[..., 64:]), dim=-1)


def qkv_epilogue_ref(
    acc: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    *,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: torch.Tensor | None = None,
    q_fp8_out: torch.Tensor | None = None,
    q_fp8_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """The epilogue on a given accumulator [M, N] (fp32, or BF16 upcast exactly); writes the outputs in place.

    Arguments as :func:`seam.qkv_index_fused_epilogue` (unvalidated).
    """
    m, n = acc.shape
    nkv = (n // HEAD_DIM - 1) // 19
    heads = acc.float().reshape(m, n // HEAD_DIM, HEAD_DIM)  # sizes, not -1: M may be 0
    q = heads[:, : 16 * nkv]
    k = heads[:, 16 * nkv : 17 * nkv]
    v = heads[:, 17 * nkv : 18 * nkv]
    iq = heads[:, 18 * nkv : 19 * nkv]
    ik = heads[:, 19 * nkv :]
    q = rope_ref(gemma_rms_norm_ref(q, q_norm_weight, eps), positions, cos_sin_cache)
    k = rope_ref(gemma_rms_norm_ref(k, k_norm_weight, eps), positions, cos_sin_cache)
    iq = rope_ref(gemma_rms_norm_ref(iq, index_q_norm_weight, eps), positions, cos_sin_cache)
    ik = rope_ref(gemma_rms_norm_ref(ik, index_k_norm_weight, eps), positions, cos_sin_cache)
    if q_out is not None:
        q_out.copy_(q.reshape(m, 16 * nkv * HEAD_DIM).to(torch.bfloat16))
    if q_fp8_out is not None:
        inv = torch.tensor(f32_reciprocal(q_fp8_scale), dtype=torch.float32, device=acc.device)
        q_fp8_out.copy_(e4m3_saturate_ref(q.reshape(m, 16 * nkv * HEAD_DIM) * inv))
    index_q_out.copy_(e4m3_saturate_ref(iq.reshape(m, nkv * HEAD_DIM)))
    for h in range(nkv):
        write_entries(kv_cache, slot_mapping, k[:, h], k_scale, False, slot=2 * h)
        write_entries(kv_cache, slot_mapping, v[:, h], v_scale, True, slot=2 * h + 1)
    write_entries(index_cache, index_slot_mapping, ik[:, 0], 1.0, False)
