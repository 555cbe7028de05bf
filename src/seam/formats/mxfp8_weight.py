"""MXFP8Weight: a linear layer's weight as MXFP8 (``docs/spec/mxfp8.md``), the B operand of seam's GEMMs.

E4M3 values [N, K] K-major (row n holds output feature n's K inputs), one UE8M0 scale
per 32 consecutive K elements in the 128x4-swizzled layout (rows = N), padding zero.
Pure PyTorch: the quantization runs the reference quantizer on whatever device ``w``
lives on (a one-time, load-time cost).
"""

from __future__ import annotations

import dataclasses

import torch
from torch._subclasses.fake_tensor import is_fake

from seam import checks, runtime
from seam.formats.mxfp8 import (
    E4M3_DTYPES,
    UE8M0_DTYPES,
    mxfp8_dequantize,
    mxfp8_quantize_ref,
    mxfp8_scale_numel,
    row_major_hint,
    swap_hint,
)


@dataclasses.dataclass(frozen=True)
class ByteFacts:
    """Facts of a weight's bytes that let a kernel take a cheaper exact path (measured once per record)."""

    max_scale: int  #: the largest UE8M0 scale byte (the padding's zeros included)
    nan_codes: bool  #: whether a value is an E4M3 NaN code (0x7F or 0xFF)


@dataclasses.dataclass(frozen=True, eq=False)  # tensors: == by identity, as torch.nn.Module
class MXFP8Weight:
    """MXFP8 weight record.

    A weight is read as a constant of the step: on Hopper the Gluon GEMMs stream it, and the prefill path's
    dequantization reads it, before their PDL wait, while the kernels launched before them may still run,
    so its bytes must not come from a kernel of the same stream that may still be running (a checkpoint's
    weights, quantized once, are; an activation just quantized by the previous launch is not).

    Construction also measures :meth:`byte_facts` (one host sync), which decide whether the Hopper Gluon
    GEMMs may dequantize by BF16 multiplies; not while ``torch.compile`` traces or a CUDA graph captures.

    Attributes:
        values: float8_e4m3fn [N, K], contiguous (K-major); uint8 bytes are taken as its view.
        scales: uint8 flat ``[mxfp8_scale_numel(N, K)]``, 128x4-swizzled, padding zero
            (float8_e8m0fnu is taken as its uint8 view).

    Raises:
        TypeError: values or scales not tensors of those dtypes.
        ValueError: shapes, strides, K not a positive multiple of 32, different devices.

    Spec: ``docs/spec/mxfp8.md`` (Scale layouts), ``docs/spec/integration.md`` (MXFP8 linear that accepts pre-quantized
    input).
    """

    values: torch.Tensor
    scales: torch.Tensor
    _facts: tuple | None = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        v = checks.tensor("values", self.values, dtype=E4M3_DTYPES, contiguous=False).view(torch.float8_e4m3fn)
        object.__setattr__(self, "values", v)
        if v.dim() != 2:
            hint = swap_hint(v, self.scales) if isinstance(self.scales, torch.Tensor) else ""
            raise ValueError(f"values must be float8_e4m3fn [N, K], got shape {list(v.shape)}{hint}")
        if not v.is_contiguous():
            raise ValueError(f"values must be contiguous (K-major), got strides {v.stride()}")
        n, k = v.shape
        if k <= 0 or k % 32:
            hint = swap_hint(v, self.scales) if isinstance(self.scales, torch.Tensor) else ""
            raise ValueError(f"K must be a positive multiple of 32, got {k}{hint}")
        want = mxfp8_scale_numel(n, k)
        s = checks.tensor("scales", self.scales, dtype=UE8M0_DTYPES).view(torch.uint8)
        object.__setattr__(self, "scales", s)
        if s.numel() != want or s.dim() != 1:
            raise ValueError(f"scales must be flat uint8 of {want} bytes (swizzled [N={n}, K={k}]), got {list(s.shape)}"
                             f"{row_major_hint(s, n, k, None)}{swap_hint(v, s)}")
        if s.device != v.device:
            raise ValueError(f"scales is on {s.device}, values on {v.device}")
        object.__setattr__(self, "_facts", _measure(v, s))

    @classmethod
    def from_bf16(cls, w: torch.Tensor) -> "MXFP8Weight":
        """Quantize a BF16/FP16/FP32 weight [N, K] (K a multiple of 32) per ``docs/spec/mxfp8.md``: E4M3 values,
        one UE8M0 scale per 32 along K (128x4-swizzled). As that spec (FlashInfer's rule) says, nothing here is
        refused for not being finite: a NaN element becomes +448 times its block's scale, and a block holding
        +-inf gets the largest scale, its infinities both +448 and its finite elements 0. Check a weight
        (``torch.isfinite(w).all()``) before quantizing it where that matters.

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

    def byte_facts(self) -> ByteFacts | None:
        """The :class:`ByteFacts` measured at construction, or None where there are none to trust: the record
        was built while ``torch.compile`` traced or a CUDA graph captured (no host sync there) or of meta or
        fake tensors, or ``values`` or ``scales`` were written in place or given other storage since (their
        version counters or addresses moved). Writes that move neither go unseen: through ``.data[...]``, NumPy,
        DLPack or a raw kernel, and any write to tensors made under ``torch.inference_mode()`` (no version
        counter); build a new record after those (with ``SEAM_DEBUG``, ``mxfp8_linear`` measures them again at
        each call and raises if they changed). A CUDA graph keeps the path it captured."""
        if self._facts is None or runtime.tracing():
            return None
        facts, versions = self._facts
        return facts if versions == _versions(self.values, self.scales) else None

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``f32(e4m3) * 2^(s - 127)`` as ``dtype`` [N, K] (fp32 is exact; BF16 / FP16 round once): the weight
        every seam GEMM path multiplies (:func:`seam.mxfp8_dequantize`).

        Args:
            dtype: a floating torch.dtype.

        Raises:
            TypeError: dtype not a floating torch.dtype.
        """
        return mxfp8_dequantize(self.values, self.scales, scale_layout="swizzled", dtype=dtype)


def _versions(*tensors: torch.Tensor) -> tuple[tuple[int | None, int], ...]:
    """Each tensor's version counter (None for an inference tensor) and address (``.data =`` keeps the version)."""
    return tuple((None if t.is_inference() else t._version, t.data_ptr()) for t in tensors)


def _measure(values: torch.Tensor, scales: torch.Tensor) -> tuple[ByteFacts, tuple] | None:
    """(:class:`ByteFacts`, the tensors' versions), in one host sync; None where there are no bytes to read (meta
    and fake tensors: ``FakeTensorMode``, ``make_fx``) or no sync may happen."""
    if (values.is_meta or runtime.tracing() or is_fake(values)
            or values.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None
    return measure_byte_facts(values, scales), _versions(values, scales)


def measure_byte_facts(values: torch.Tensor, scales: torch.Tensor) -> ByteFacts:
    """The :class:`ByteFacts` of E4M3 ``values`` and UE8M0 ``scales`` (uint8 views) as they are now: one host sync."""
    nan = ((values.view(torch.uint8) & 0x7F) == 0x7F).any()
    top = scales.max() if scales.numel() else torch.zeros((), dtype=torch.uint8, device=scales.device)
    nan_codes, max_scale = torch.stack([nan.to(torch.int32), top.to(torch.int32)]).tolist()
    return ByteFacts(max_scale, bool(nan_codes))
