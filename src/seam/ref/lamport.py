"""Pure-PyTorch reference of the Lamport all-reduce and its consumers (``docs/spec/lamport.md``).

Step by step with the kernels' rounding points: the MoE finalize sums products rounded
to fp32 in k order, each rank's BF16 contribution has -0.0 replaced by +0.0, the rank
sum is taken in fp32 in rank order, the residual is added to the fp32 sum before any
rounding, and the RMS is taken over the BF16-rounded prenorm. Runs on any device.
"""

from __future__ import annotations

import torch

from seam.formats.mxfp8 import mxfp8_quantize_ref


def moe_finalize_ref(
    gemm2_permuted: torch.Tensor,
    expert_weights: torch.Tensor,
    expanded_idx_to_permuted_idx: torch.Tensor,
    shared_output: torch.Tensor,
) -> torch.Tensor:
    """One rank's BF16 contribution: bf16(sum_k f32(gemm2[idx[t,k]]) * f32(w[t,k]) + f32(shared[t])).

    k in order, each product rounded to fp32 before its add; idx < 0 terms are skipped, and so
    are indices past gemm2's rows, as the kernel skips them (only debug mode reports them).
    """
    m, top_k = expanded_idx_to_permuted_idx.shape
    n = gemm2_permuted.shape[0]
    acc = torch.zeros(shared_output.shape, dtype=torch.float32, device=shared_output.device)
    for k in range(top_k):
        idx = expanded_idx_to_permuted_idx[:, k].long()
        used = ((idx >= 0) & (idx < n))[:, None]
        if n == 0:  # nothing routed to this rank: every term is skipped
            continue
        rows = gemm2_permuted[torch.where(used[:, 0], idx, 0)].float()
        prod = rows * expert_weights[:, k : k + 1].float()
        acc = torch.where(used, acc + prod, acc)
    acc = acc + shared_output.float()
    return acc.to(torch.bfloat16)


def positive_zero_ref(x: torch.Tensor) -> torch.Tensor:
    """BF16 x with -0.0 replaced by +0.0 (publish step 2)."""
    bits = x.view(torch.int16)
    return torch.where(bits == -32768, torch.zeros_like(bits), bits).view(torch.bfloat16)


def lamport_sum_ref(contributions: list[torch.Tensor]) -> torch.Tensor:
    """fp32 rank sum ``acc = (((0 + f32(c_0)) + f32(c_1)) + ...)`` of the published BF16 rows."""
    acc = torch.zeros(contributions[0].shape, dtype=torch.float32, device=contributions[0].device)
    for c in contributions:
        acc = acc + positive_zero_ref(c).float()
    return acc


def all_reduce_ref(contributions: list[torch.Tensor]) -> torch.Tensor:
    """Consumer (c): ``bf16(acc)``."""
    return lamport_sum_ref(contributions).to(torch.bfloat16)


def rms_norm_ref(
    acc: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *, gemma: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Consumer (b): (normed, residual_out).

    prenorm = bf16(acc + f32(residual)); inv_rms = rsqrt(sum(f32(prenorm)^2) / hidden + eps);
    normed = bf16(f32(prenorm) * inv_rms * w) with w = f32(weight) (+ 1 when ``gemma``).
    """
    prenorm = (acc + residual.float()).to(torch.bfloat16)
    p = prenorm.float()
    inv_rms = torch.rsqrt((p * p).sum(-1, keepdim=True) / p.shape[-1] + eps)
    w = weight.float() + 1.0 if gemma else weight.float()
    normed = (p * inv_rms * w).to(torch.bfloat16)
    return normed, prenorm


def gemma_rms_norm_mxfp8_ref(
    acc: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Consumer (a): (values e4m3, swizzled scales, normed bf16, residual_out).

    The MXFP8 part is ``mxfp8_quantize_ref(normed)`` (128x4 swizzled scales, padding zero).
    """
    normed, residual_out = rms_norm_ref(acc, residual, weight, eps, gemma=True)
    values, scales = mxfp8_quantize_ref(normed, scale_layout="swizzled")
    return values, scales, normed, residual_out
