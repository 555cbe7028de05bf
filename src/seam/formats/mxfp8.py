"""MXFP8: E4M3 values with one UE8M0 scale byte per 32 consecutive elements of a row.

Pure PyTorch, runnable on any device: the reference quantizer (step by step from
``docs/spec/mxfp8.md``, FlashInfer's rule), the dequantizer, and the two scale
layouts (row-major ``[M, K/32]`` and the 128x4-swizzled flat layout that
cuBLAS/CUTLASS block-scaled GEMMs read). The Triton quantizer in
``seam.kernels.mxfp8_quant`` must match :func:`mxfp8_quantize_ref` byte for byte.
"""

from __future__ import annotations

import enum
import struct

import torch

from seam import checks

MXFP8_BLOCK = 32  # elements per UE8M0 scale
E4M3_MAX = 448.0
# f32(1/448) (bits 0x3B124925) as the Python float of the same value: torch multiplies an fp32
# tensor by a Python scalar in fp32, so this is the one fp32 multiply the spec prescribes.
_INV_448 = struct.unpack("<f", struct.pack("<I", 0x3B124925))[0]


#: Dtypes accepted for E4M3 value bytes: float8_e4m3fn, and its uint8 view (a checkpoint's raw bytes).
E4M3_DTYPES = (torch.float8_e4m3fn, torch.uint8)
#: Dtypes accepted for UE8M0 scale bytes: uint8, and torch's float8_e8m0fnu where it exists
#: (the same bytes; seam's records keep the uint8 view).
UE8M0_DTYPES = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


class ScaleLayout(str, enum.Enum):
    """Where scale byte (row r, block column c) lives. Spec: ``docs/spec/mxfp8.md`` (Scale layouts)."""

    ROW_MAJOR = "row_major"  #: uint8 [M, K/32]
    SWIZZLED = "swizzled"  #: flat uint8 [mxfp8_scale_numel(M, K)], 128x4 atoms, padding zero

    @classmethod
    def parse(cls, value: "ScaleLayout | str", name: str = "scale_layout") -> "ScaleLayout":
        """The enum or its string value in any case (:func:`seam.checks.option`); ``"swizzled_128x4"`` (the name
        ``docs/spec/integration.md`` uses) is accepted too."""
        return checks.option(cls, value, name, {"swizzled_128x4": cls.SWIZZLED})


def scale_cols(hidden_size: int) -> int:
    """Scale bytes per row: ``hidden_size // 32`` (hidden_size must be a multiple of 32)."""
    if hidden_size <= 0 or hidden_size % MXFP8_BLOCK:
        raise ValueError(f"K (hidden size) must be a positive multiple of 32, got {hidden_size}")
    return hidden_size // MXFP8_BLOCK


def padded_scale_shape(num_tokens: int, hidden_size: int) -> tuple[int, int]:
    """(M_pad, P): rows padded to a multiple of 128, scale columns to a multiple of 4."""
    cols = scale_cols(hidden_size)
    return -(-num_tokens // 128) * 128, -(-cols // 4) * 4


def mxfp8_scale_numel(num_tokens: int, hidden_size: int) -> int:
    """Bytes of the 128x4-swizzled UE8M0 scales of ``num_tokens`` rows of ``hidden_size``.

    ``M_pad * P`` with ``M_pad = ceil(M/128)*128`` and ``P = ceil((K/32)/4)*4``.

    Raises:
        TypeError: ``num_tokens`` or ``hidden_size`` not an int.
        ValueError: ``num_tokens`` negative, or ``hidden_size`` not a positive multiple of 32.

    Spec: ``docs/spec/mxfp8.md`` (Scale layouts).
    """
    num_tokens = checks.integer("num_tokens", num_tokens)
    hidden_size = checks.integer("hidden_size", hidden_size)
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    m_pad, p = padded_scale_shape(num_tokens, hidden_size)
    return m_pad * p


def swap_hint(values: torch.Tensor, scales: torch.Tensor) -> str:
    """A suffix for a shape error where ``values`` and ``scales`` look passed in each other's place (E4M3 values
    are [rows, K]; swizzled scales flat, row-major ones [rows, K/32]), else "" (also where either is no tensor:
    its own check names it)."""
    if not (isinstance(values, torch.Tensor) and isinstance(scales, torch.Tensor)):
        return ""
    if values.dim() == 1 and scales.dim() == 2:
        return " (values and scales look swapped: values are [rows, K], swizzled scales flat)"
    if (values.dim() == 2 and scales.dim() == 2 and values.shape[0] == scales.shape[0]
            and scales.shape[1] == MXFP8_BLOCK * values.shape[1] > 0):
        return " (values and scales look swapped: values are [rows, K], row-major scales [rows, K/32])"
    return ""


def row_major_hint(
    scales: torch.Tensor, num_tokens: int, hidden_size: int, argument: str | None, *, written: bool = False
) -> str:
    """A suffix for a swizzled-scales shape error where ``scales`` has the row-major shape [M, K/32] instead, else
    "". ``argument``: the parameter that chooses the layout (None: the op writes swizzled scales only);
    ``written``: ``scales`` is an ``out=`` buffer (the op writes it) rather than an input."""
    if tuple(scales.shape) != (num_tokens, hidden_size // MXFP8_BLOCK):
        return ""
    hint = " (row-major scales? [M, K/32] is the row-major layout: "
    if argument is None:
        return hint + ("this op writes swizzled scales only, pass a flat buffer)" if written else
                       "this op reads swizzled scales only, lay them out with seam.swizzle_scales: flattening them "
                       "does not)")
    if written:
        return hint + f"pass {argument}='row_major' for row-major scales, or a flat buffer for swizzled ones)"
    return hint + (f"pass {argument}='row_major', or lay them out swizzled with seam.swizzle_scales: flattening them "
                   "does not)")


def check_swizzled_scales(
    name: str,
    scales: torch.Tensor,
    num_tokens: int,
    hidden_size: int,
    argument: str | None = "scale_layout",
    *,
    written: bool = False,
) -> None:
    """Raise ValueError unless the tensor ``scales`` has 128x4-swizzled scales' shape for ``num_tokens`` rows of
    ``hidden_size``: flat (1-D) of exactly ``mxfp8_scale_numel(num_tokens, hidden_size)`` bytes. Any other shape
    of that byte count is refused too: a row-major [M, K/32] tensor would be read or written in the swizzled
    order without a word (the message then says so, naming ``argument``, the layout's parameter; ``written``:
    an ``out=`` buffer, :func:`row_major_hint`).

    The ops' inputs and ``out=`` buffers, :class:`seam.QuantizedActivation` and :func:`unswizzle_scales` check
    swizzled scales with it (:class:`seam.MXFP8Weight` requires flat scales by its own check).
    """
    numel = mxfp8_scale_numel(num_tokens, hidden_size)
    if scales.dim() != 1 or scales.numel() != numel:
        raise ValueError(f"{name} must hold {numel} bytes as a flat [{numel}] tensor (swizzled scales are 1-D, "
                         f"128x4-swizzled, for [M={num_tokens}, K={hidden_size}]), got shape {list(scales.shape)}"
                         f"{row_major_hint(scales, num_tokens, hidden_size, argument, written=written)}")


def scale_numel(num_tokens: int, hidden_size: int, layout: ScaleLayout | str) -> int:
    """Scale bytes for either layout."""
    layout = ScaleLayout.parse(layout)
    if layout is ScaleLayout.SWIZZLED:
        return mxfp8_scale_numel(num_tokens, hidden_size)
    return num_tokens * scale_cols(hidden_size)


def swizzled_offsets(num_tokens: int, cols: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 [num_tokens, cols]: flat swizzled offset of scale (r, c), the spec's formula."""
    p = -(-cols // 4) * 4
    r = torch.arange(num_tokens, device=device, dtype=torch.int64)[:, None]
    c = torch.arange(cols, device=device, dtype=torch.int64)[None, :]
    return (r // 128) * 128 * p + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Row-major UE8M0 [M, cols] (uint8, or float8_e8m0fnu read as its bytes) -> flat 128x4-swizzled uint8
    [mxfp8_scale_numel(M, 32 * cols)], padding bytes zero: e.g. a checkpoint's row-major weight scales, for
    :class:`seam.MXFP8Weight` (:class:`seam.MXFP8Linear` swizzles them itself on load).

    Raises:
        TypeError: scales not a uint8 or float8_e8m0fnu tensor.
        ValueError: scales not 2-D, or without columns.

    Spec: ``docs/spec/mxfp8.md`` (Scale layouts).
    """
    checks.tensor("scales", scales, dtype=UE8M0_DTYPES, contiguous=False)
    if scales.dim() != 2:
        raise ValueError(f"scales must be row-major UE8M0 [M, cols], got shape {list(scales.shape)}")
    scales = scales.view(torch.uint8)
    m, cols = scales.shape
    if cols == 0:
        raise ValueError(f"scales must have at least one column (one per 32 values of a row), got shape {[m, 0]}")
    out = torch.zeros(mxfp8_scale_numel(m, cols * MXFP8_BLOCK), dtype=torch.uint8, device=scales.device)
    out[swizzled_offsets(m, cols, scales.device).flatten()] = scales.flatten()
    return out


def unswizzle_scales(scales: torch.Tensor, num_tokens: int, hidden_size: int) -> torch.Tensor:
    """Flat 128x4-swizzled UE8M0 (uint8, or float8_e8m0fnu read as its bytes) -> row-major uint8
    [num_tokens, hidden_size // 32].

    Raises:
        TypeError: scales not a uint8 or float8_e8m0fnu tensor; ``num_tokens`` or ``hidden_size`` not an int.
        ValueError: ``num_tokens`` negative, ``hidden_size`` not a positive multiple of 32, or scales not flat
            with ``mxfp8_scale_numel(num_tokens, hidden_size)`` bytes.

    Spec: ``docs/spec/mxfp8.md`` (Scale layouts).
    """
    checks.tensor("scales", scales, dtype=UE8M0_DTYPES, contiguous=False)
    check_swizzled_scales("scales", scales, num_tokens, hidden_size, None)
    cols = scale_cols(hidden_size)
    return scales.view(torch.uint8)[swizzled_offsets(num_tokens, cols, scales.device)]


def ue8m0_from_amax_ref(amax: torch.Tensor) -> torch.Tensor:
    """Scale bytes (int32) from fp32 block amaxes: spec steps 2-3."""
    n = amax.float() * _INV_448
    bits = n.view(torch.int32)
    e = (bits >> 23) & 0xFF
    f = bits & 0x7FFFFF
    bump = (f != 0) & ~((e == 0) & (f <= 0x400000))
    s = torch.clamp(e + bump.to(torch.int32), max=254)
    return torch.where(n > 0, s, torch.zeros_like(s))


def ue8m0_inverse_ref(s: torch.Tensor) -> torch.Tensor:
    """fp32 2^(127 - s) from bits, 0 where s == 0: spec step 4."""
    inv = ((254 - s.to(torch.int32)) << 23).view(torch.float32)
    return torch.where(s == 0, torch.zeros_like(inv), inv)


def ue8m0_to_float(s: torch.Tensor) -> torch.Tensor:
    """fp32 2^(s - 127) of scale bytes (s == 0: 2^-127, s == 255: NaN)."""
    s32 = s.to(torch.int32) & 0xFF
    v = torch.where(s32 == 0, torch.full_like(s32, 0x400000), s32 << 23).view(torch.float32)
    return torch.where(s32 == 255, torch.full_like(v, float("nan")), v)


def e4m3_saturate_ref(q: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn: NaN -> +448, clamp to +-448, round to nearest even.

    The clamp comes first because some PyTorch builds map |x| >= 480 to NaN.
    """
    q = torch.where(torch.isnan(q), torch.full_like(q, E4M3_MAX), q)
    return q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def mxfp8_quantize_ref(
    x: torch.Tensor, *, scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference MXFP8 quantizer (``docs/spec/mxfp8.md``), pure PyTorch.

    Args:
        x: BF16/FP16/FP32 [M, K], K a multiple of 32.
        scale_layout: ``"swizzled"`` (flat ``[mxfp8_scale_numel(M, K)]``, padding zero)
            or ``"row_major"`` (``[M, K // 32]``).

    Returns:
        (values float8_e4m3fn [M, K], scales uint8).
    """
    layout = ScaleLayout.parse(scale_layout)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    m, k = x.shape
    cols = scale_cols(k)
    blocks = x.float().reshape(m, cols, MXFP8_BLOCK)
    mag = torch.where(torch.isnan(blocks), torch.zeros_like(blocks), blocks.abs())
    s = ue8m0_from_amax_ref(mag.amax(dim=-1) if m else mag.sum(dim=-1))
    q = blocks * ue8m0_inverse_ref(s)[..., None]
    values = e4m3_saturate_ref(q).reshape(m, k)
    scales = s.to(torch.uint8)
    if layout is ScaleLayout.SWIZZLED:
        scales = swizzle_scales(scales)
    return values, scales


def mxfp8_dequantize(
    values: torch.Tensor,
    scales: torch.Tensor,
    *,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """``f32(e4m3) * 2^(s - 127)`` per element, cast to ``dtype``. Pure PyTorch, any device.

    Args:
        values: float8_e4m3fn (or its uint8 bytes) [M, K], K a multiple of 32.
        scales: uint8 (or float8_e8m0fnu) in ``scale_layout``: swizzled flat ``[mxfp8_scale_numel(M, K)]``,
            row-major ``[M, K // 32]``.
        scale_layout: layout of ``scales``.
        dtype: output dtype, BF16 by default (fp32 is exact; bf16/fp16 round once).

    Returns:
        [M, K] in ``dtype``: NaN where the E4M3 byte is 0x7F / 0xFF or the scale byte is 255.

    Raises:
        TypeError: values not float8_e4m3fn (or its uint8 bytes), scales not uint8 or
            float8_e8m0fnu, dtype not a floating torch.dtype, ``scale_layout`` not a str or ScaleLayout.
        ValueError: shapes that do not fit the layout, scales on another device than values, an
            unknown ``scale_layout``.

    Spec: ``docs/spec/mxfp8.md`` (Quantize one block, Scale layouts).
    """
    layout = ScaleLayout.parse(scale_layout)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    checks.tensor("values", values, dtype=E4M3_DTYPES, contiguous=False)
    checks.tensor("scales", scales, dtype=UE8M0_DTYPES, device=values.device, contiguous=False)
    values, scales = values.view(torch.float8_e4m3fn), scales.view(torch.uint8)
    if values.dim() != 2:
        raise ValueError(f"values must be float8_e4m3fn [M, K], got shape {list(values.shape)}"
                         f"{swap_hint(values, scales)}")
    m, k = values.shape
    checks.multiple_of("values.shape[1] (K)", k, 32)
    cols = scale_cols(k)
    if layout is ScaleLayout.SWIZZLED:
        check_swizzled_scales("scales", scales, m, k)
        rows = scales[swizzled_offsets(m, cols, scales.device)]  # checked above: unswizzle_scales would again
    else:
        if tuple(scales.shape) != (m, cols):
            raise ValueError(f"row-major scales must be [{m}, {cols}], got {tuple(scales.shape)}")
        rows = scales
    scale = ue8m0_to_float(rows).repeat_interleave(MXFP8_BLOCK, dim=1)
    return (values.float() * scale).to(dtype)
