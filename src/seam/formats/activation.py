"""QuantizedActivation: the MXFP8 rows one kernel hands to the next (``docs/spec/integration.md``)."""

from __future__ import annotations

import dataclasses

import torch

from seam import checks, runtime
from seam.formats.a_deq import A_DEQ_STEP
from seam.formats.mxfp8 import (
    E4M3_DTYPES,
    UE8M0_DTYPES,
    ScaleLayout,
    check_swizzled_scales,
    mxfp8_dequantize,
    scale_numel,
    swap_hint,
    swizzle_scales,
    unswizzle_scales,
)

_SOURCE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)  # tensors: == by identity, as torch.nn.Module
class QuantizedActivation:
    """MXFP8 rows of an activation, as produced by seam's fused kernels.

    ``values`` and ``scales`` must be the same rows' bytes. Swizzled scales interleave 32-row groups within
    128-row chunks, so ``QuantizedActivation(qa.values[8:12], qa.scales, ...)`` (a slice of the values with the
    whole batch's scales) reads other rows' scales, and no check can tell where the byte counts agree (any M up
    to 128 pads to the same count): cut rows with :meth:`rows`.

    Attributes:
        values: float8_e4m3fn [M, K] (uint8 bytes are taken as its view); any strides here, but
            consumers check their own needs (:func:`seam.mxfp8_linear` and the QKV op take contiguous
            rows only).
        scales: uint8 UE8M0 bytes (float8_e8m0fnu is taken as its uint8 view): flat
            ``[mxfp8_scale_numel(M, K)]`` when ``layout`` is swizzled (padding bytes zero),
            ``[M, K // 32]`` when row-major.
        dtype: dtype of the unquantized rows (BF16, the default and every seam producer's; FP16/FP32 allowed).
        shape: (M, K) of the unquantized rows, K a positive multiple of 32; None (the default): ``values``'
            shape, which must then be 2-D.
        layout: the scale layout, ``"swizzled"`` (the default, what ``mxfp8_linear`` and the QKV op read) or
            ``"row_major"`` (a str in any case, or :class:`seam.ScaleLayout`); :meth:`with_layout` converts.
        a_deq: optional BF16 [M, K] contiguous, K a multiple of 128: the same rows dequantized in the K order of
            seam's Hopper GEMMs (:func:`seam.formats.a_deq.a_deq_from_mxfp8`: each 128-column step's columns
            permuted, so not the natural-order product's operand), which they then read instead of dequantizing
            ``values`` themselves where its base is 16-byte aligned (as seam's producers allocate it; a misaligned
            copy is ignored, as other paths ignore it). It must hold exactly those bytes (seam's
            producers write both in one launch; only with ``SEAM_DEBUG`` do the consumers check them); None: not given.

    Raises:
        TypeError: values/scales not tensors of those dtypes, dtype not BF16/FP16/FP32, or M or K not
            a Python or NumPy int (bools and floats included), a_deq not a BF16 tensor.
        ValueError: shape not a pair (M, K) with M >= 0 and K a positive multiple of 32 (values not 2-D where
            shape is not given), tensor shapes
            or byte counts that do not match it (swizzled scales not flat included), scales or a_deq on another
            device than values, a_deq not contiguous or given where K is not a multiple of 128 or with
            row-major scales, an unknown ``layout`` (TypeError where it is not a str or ScaleLayout).

    Spec: ``docs/spec/integration.md`` (QuantizedActivation), ``docs/spec/mxfp8.md`` (Scale layouts).
    """

    values: torch.Tensor
    scales: torch.Tensor
    dtype: torch.dtype = torch.bfloat16
    shape: tuple[int, int] | None = None
    layout: ScaleLayout = ScaleLayout.SWIZZLED
    a_deq: torch.Tensor | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", ScaleLayout.parse(self.layout, "layout"))
        if self.dtype not in _SOURCE_DTYPES:
            raise TypeError(f"dtype must be torch.bfloat16, float16 or float32, got {self.dtype!r}")
        if self.shape is None:  # the rows' own shape: values must be a 2-D tensor to give one
            checks.tensor("values", self.values, dtype=E4M3_DTYPES, contiguous=False)
            if self.values.dim() != 2:
                raise ValueError(f"values must be [M, K] when shape is not given, got {list(self.values.shape)}"
                                 f"{swap_hint(self.values, self.scales)}")
            object.__setattr__(self, "shape", tuple(self.values.shape))
        try:
            dims = tuple(self.shape)
        except TypeError:
            dims = ()
        if len(dims) != 2:
            raise ValueError(f"shape must be (M, K) of non-negative ints, got {self.shape!r}")
        m, k = checks.integer("shape[0] (M)", dims[0]), checks.integer("shape[1] (K)", dims[1])
        if m < 0:
            raise ValueError(f"shape must be (M, K) of non-negative ints, got {self.shape!r}")
        shape = (m, k)
        object.__setattr__(self, "shape", shape)
        if k <= 0 or k % 32:
            raise ValueError(f"shape K={k} must be a positive multiple of 32 (the MXFP8 block)"
                             f"{swap_hint(self.values, self.scales)}")
        checks.tensor("values", self.values, dtype=E4M3_DTYPES, contiguous=False)
        checks.tensor("scales", self.scales, dtype=UE8M0_DTYPES, device=self.values.device, contiguous=False)
        if tuple(self.values.shape) != shape:
            raise ValueError(f"values has shape {list(self.values.shape)} but shape is (M, K) = {shape}: they must "
                             f"agree{swap_hint(self.values, self.scales)}")
        object.__setattr__(self, "values", self.values.view(torch.float8_e4m3fn))
        object.__setattr__(self, "scales", self.scales.view(torch.uint8))
        if self.layout is ScaleLayout.ROW_MAJOR:
            if tuple(self.scales.shape) != (m, k // 32):
                raise ValueError(f"scales must have shape [{m}, {k // 32}] (row-major), got {list(self.scales.shape)}"
                                 f"{swap_hint(self.values, self.scales)}")
        else:
            check_swizzled_scales("scales", self.scales, m, k, "layout")
        if self.a_deq is not None:
            checks.tensor("a_deq", self.a_deq, dtype=torch.bfloat16, shape=shape, device=self.values.device)
            if k % A_DEQ_STEP:
                raise ValueError(f"a_deq needs K a multiple of {A_DEQ_STEP}, got K={k}")
            if self.layout is not ScaleLayout.SWIZZLED:
                raise ValueError("a_deq goes with swizzled scales (the Hopper GEMMs'), got layout 'row_major'")

    def __repr__(self) -> str:  # the tensors' contents would flood a log
        m, k = self.shape
        a_deq = "None" if self.a_deq is None else "[M, K] BF16"
        return (f"QuantizedActivation(M={m}, K={k}, dtype={self.dtype}, layout='{self.layout.value}', "
                f"device={self.values.device}, a_deq={a_deq})")

    @property
    def device(self) -> torch.device:
        """The device of ``values`` (``scales`` and ``a_deq`` are on it too)."""
        return self.values.device

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The rows ``f32(e4m3) * 2^(s - 127)`` as ``dtype`` [M, K] (fp32 is exact; BF16 / FP16 round once), in
        natural K order whatever ``a_deq`` holds: :func:`seam.mxfp8_dequantize` of ``values`` and ``scales`` in
        their ``layout``, as :meth:`seam.MXFP8Weight.dequantize` for a weight.

        Raises:
            TypeError: dtype not a floating torch.dtype.
        """
        return mxfp8_dequantize(self.values, self.scales, scale_layout=self.layout, dtype=dtype)

    def rows(self, start: int, stop: int) -> QuantizedActivation:
        """Rows [start, stop) as an activation of their own, e.g. a micro-batch of a larger batch.

        ``values`` (and row-major ``scales``) are views. Swizzled scales interleave 32-row groups within each
        128-row chunk, so slicing ``values`` alone and keeping ``scales`` reads other rows' scales: here they
        are a view where ``start`` is a multiple of 128 and the cut ends at M or after whole 128-row chunks
        (the padding bytes stay zero), else a copy in the new M's layout (a few small torch launches).
        ``a_deq`` is a view of its rows (its K order is the same at every M). While ``torch.compile`` traces, the
        scales are always copied: that choice compares M, and a graph replayed at another M (without its guards)
        would keep the traced M's view of other rows' scales.

        Raises:
            TypeError: start or stop not an int.
            ValueError: not 0 <= start <= stop <= M.
        """
        start, stop = checks.integer("start", start), checks.integer("stop", stop)
        m, k = self.shape
        if not 0 <= start <= stop <= m:
            raise ValueError(f"rows must satisfy 0 <= start <= stop <= M={m}, got start={start}, stop={stop}")
        rows = stop - start
        tracing = runtime.tracing()
        if self.layout is ScaleLayout.ROW_MAJOR:
            scales = self.scales[start:stop]
        elif not tracing and start % 128 == 0 and (stop == m or rows % 128 == 0):
            chunk = scale_numel(128, k, self.layout)  # one 128-row chunk of every column
            first = start // 128 * chunk
            scales = self.scales[first:first + scale_numel(rows, k, self.layout)]
        else:
            scales = swizzle_scales(unswizzle_scales(self.scales, m, k)[start:stop].contiguous())
        a_deq = self.a_deq[start:stop] if self.a_deq is not None else None
        return QuantizedActivation(self.values[start:stop], scales, self.dtype, (rows, k), self.layout, a_deq)

    def with_layout(self, layout: ScaleLayout | str) -> QuantizedActivation:
        """The same rows with their scales in ``layout`` (``"swizzled"`` or ``"row_major"``): ``self`` where they
        are already, else a copy of the scales (a few small torch launches) beside the same ``values``. A conversion
        to row-major drops ``a_deq`` (it goes with swizzled scales only).

        E.g. ``mxfp8_linear`` reads swizzled scales: ``seam.mxfp8_linear(qa.with_layout("swizzled"), w)`` for rows
        quantized with ``scale_layout="row_major"`` (it also needs contiguous ``values``, which this keeps as they are).

        Raises:
            TypeError: layout not a str or :class:`seam.ScaleLayout`.
            ValueError: layout not ``"swizzled"`` (or ``"swizzled_128x4"``) or ``"row_major"`` (any case).
        """
        layout = ScaleLayout.parse(layout, "layout")
        if layout is self.layout:
            return self
        m, k = self.shape
        if layout is ScaleLayout.SWIZZLED:
            scales = swizzle_scales(self.scales)
        else:
            scales = unswizzle_scales(self.scales, m, k)
        return QuantizedActivation(self.values, scales, self.dtype, self.shape, layout)

    def require_layout(self, layout: ScaleLayout | str, name: str = "x") -> None:
        """Raise ValueError if the scales are not in ``layout`` (what a consumer reads); the message names
        :meth:`with_layout`, which converts them. ``layout`` as :meth:`with_layout` takes it (TypeError /
        ValueError otherwise)."""
        layout = ScaleLayout.parse(layout, "layout")
        if self.layout is not layout:
            raise ValueError(
                f"{name} has {self.layout.value} scales; this consumer needs {layout.value} "
                f"({name}.with_layout('{layout.value}') converts them)"
            )
