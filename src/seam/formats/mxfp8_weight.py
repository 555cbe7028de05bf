"""MXFP8Weight: a linear layer's weight as MXFP8 (``docs/spec/mxfp8.md``), the B operand of seam's GEMMs.

E4M3 values [N, K] K-major (row n holds output feature n's K inputs), one UE8M0 scale
per 32 consecutive K elements in the 128x4-swizzled layout (rows = N), padding zero.
Pure PyTorch: the quantization runs the reference quantizer on whatever device ``w``
lives on (a one-time, load-time cost).
"""

from __future__ import annotations

import dataclasses

import torch

from seam import checks
from seam.formats.mxfp8 import E4M3_DTYPES, UE8M0_DTYPES, mxfp8_dequantize, mxfp8_quantize_ref, mxfp8_scale_numel


@dataclasses.dataclass(frozen=True)
class MXFP8Weight:
    """MXFP8 weight record.

    A weight is read as a constant of the step: on Hopper the Gluon GEMMs stream it, and the prefill path's
    dequantization reads it, before their PDL wait, while the kernels launched before them may still run,
    so its bytes must not come from a kernel of the same stream that may still be running (a checkpoint's
    weights, quantized once, are; an activation just quantized by the previous launch is not).

    Attributes:
        values: float8_e4m3fn [N, K], contiguous (K-major); uint8 bytes are taken as its view.
        scales: uint8 flat ``[mxfp8_scale_numel(N, K)]``, 128x4-swizzled, padding zero
            (float8_e8m0fnu is taken as its uint8 view).

    Raises:
        TypeError: values or scales not tensors of those dtypes.
        ValueError: shapes, strides, K not a positive multiple of 32, different devices.
    """

    values: torch.Tensor
    scales: torch.Tensor

    def __post_init__(self) -> None:
        v = checks.tensor("values", self.values, dtype=E4M3_DTYPES, contiguous=False).view(torch.float8_e4m3fn)
        object.__setattr__(self, "values", v)
        if v.dim() != 2:
            raise ValueError(f"values must be float8_e4m3fn [N, K], got shape {list(v.shape)}")
        if not v.is_contiguous():
            raise ValueError(f"values must be contiguous (K-major), got strides {v.stride()}")
        n, k = v.shape
        if k <= 0 or k % 32:
            raise ValueError(f"K must be a positive multiple of 32, got {k}")
        want = mxfp8_scale_numel(n, k)
        s = checks.tensor("scales", self.scales, dtype=UE8M0_DTYPES).view(torch.uint8)
        object.__setattr__(self, "scales", s)
        if s.numel() != want or s.dim() != 1:
            raise ValueError(f"scales must be flat uint8 of {want} bytes (swizzled [N={n}, K={k}]), got {list(s.shape)}")
        if s.device != v.device:
            raise ValueError(f"scales is on {s.device}, values on {v.device}")

    @classmethod
    def from_bf16(cls, w: torch.Tensor) -> "MXFP8Weight":
        """Quantize a BF16/FP16/FP32 weight [N, K] (K a multiple of 32) per ``docs/spec/mxfp8.md``.

        Raises:
            TypeError: w not a BF16/FP16/FP32 tensor.
            ValueError: w not 2-D, or K not a positive multiple of 32.
        """
        checks.tensor("w", w, dtype=(torch.bfloat16, torch.float16, torch.float32), contiguous=False)
        if w.dim() != 2:
            raise ValueError(f"w must be a 2-D [N, K] tensor, got shape {list(w.shape)}")
        checks.multiple_of("w.shape[1] (K)", w.shape[1], 32)
        values, scales = mxfp8_quantize_ref(w, scale_layout="swizzled")
        return cls(values.contiguous(), scales)

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K)."""
        return tuple(self.values.shape)

    def __repr__(self) -> str:  # the tensors' contents would flood a log
        n, k = self.shape
        return f"MXFP8Weight(N={n}, K={k}, device={self.values.device})"

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``f32(e4m3) * 2^(s - 127)`` as ``dtype`` [N, K] (fp32 is exact)."""
        return mxfp8_dequantize(self.values, self.scales, scale_layout="swizzled", dtype=dtype)
