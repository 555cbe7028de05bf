"""Kernels that run the ``seam.kernels.numerics`` helpers element-wise over a tensor.

They exist so the helpers can be checked on their own, exhaustively, against torch's
conversions (``tests/test_numerics.py``) on both the GPU and the interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam.kernels import numerics


@triton.jit
def _convert_kernel(x_ptr, bf16_ptr, e4m3_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(bf16_ptr + offs, numerics.to_bf16_rne(x), mask=mask)
    tl.store(e4m3_ptr + offs, numerics.e4m3_saturate_bits(x), mask=mask)


@triton.jit
def _widen_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, numerics.bf16_to_f32(tl.load(x_ptr + offs, mask=mask, other=0.0)), mask=mask)


@triton.jit
def _decode_kernel(code_ptr, e4m3_ptr, ue8m0_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = tl.load(code_ptr + offs, mask=mask, other=0)
    tl.store(e4m3_ptr + offs, numerics.e4m3_bits_to_f32(c), mask=mask)
    tl.store(ue8m0_ptr + offs, numerics.ue8m0_to_f32(c), mask=mask)


@triton.jit
def _scale_kernel(amax_ptr, s_ptr, inv_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(amax_ptr + offs, mask=mask, other=0.0)
    s = numerics.ue8m0_from_amax(a)
    tl.store(s_ptr + offs, s, mask=mask)
    tl.store(inv_ptr + offs, numerics.ue8m0_inverse(s), mask=mask)


@triton.jit
def _sigmoid_kernel(x_ptr, ours_ptr, triton_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(ours_ptr + offs, numerics.sigmoid(x), mask=mask)
    tl.store(triton_ptr + offs, tl.sigmoid(x), mask=mask)


@triton.jit
def _scaled_bf16_kernel(code_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = tl.load(code_ptr + offs, mask=mask, other=0)
    s = tl.load(s_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, numerics.e4m3_scaled_bf16(c, s), mask=mask)


_BLOCK = 1024


def convert(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [n] -> (to_bf16_rne as bf16 [n], e4m3_saturate_bits as uint8 [n])."""
    bf16 = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    e4m3 = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    _convert_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, bf16, e4m3, x.numel(), BLOCK=_BLOCK)
    return bf16, e4m3


def widen(x: torch.Tensor) -> torch.Tensor:
    """bf16 [n] -> bf16_to_f32 as fp32 [n]."""
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _widen_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, out, x.numel(), BLOCK=_BLOCK)
    return out


def decode(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 codes [n] -> (e4m3_bits_to_f32, ue8m0_to_f32) as fp32 [n] each."""
    e4m3 = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    ue8m0 = torch.empty_like(e4m3)
    _decode_kernel[(triton.cdiv(codes.numel(), _BLOCK),)](codes, e4m3, ue8m0, codes.numel(), BLOCK=_BLOCK)
    return e4m3, ue8m0


def scales(amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 amax [n] -> (ue8m0_from_amax int32 [n], ue8m0_inverse fp32 [n])."""
    s = torch.empty(amax.shape, dtype=torch.int32, device=amax.device)
    inv = torch.empty(amax.shape, dtype=torch.float32, device=amax.device)
    _scale_kernel[(triton.cdiv(amax.numel(), _BLOCK),)](amax, s, inv, amax.numel(), BLOCK=_BLOCK)
    return s, inv


def sigmoid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [n] -> (numerics.sigmoid, tl.sigmoid) as fp32 [n] each."""
    ours, reference = torch.empty_like(x), torch.empty_like(x)
    _sigmoid_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, ours, reference, x.numel(), BLOCK=_BLOCK)
    return ours, reference


def scaled_bf16(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """E4M3 codes and UE8M0 scale bytes, uint8 [n] each -> e4m3_scaled_bf16 as bf16 [n]."""
    out = torch.empty(codes.shape, dtype=torch.bfloat16, device=codes.device)
    _scaled_bf16_kernel[(triton.cdiv(codes.numel(), _BLOCK),)](codes, scales, out, codes.numel(), BLOCK=_BLOCK)
    return out
