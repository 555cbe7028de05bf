"""Public MXFP8 quantizer: validation, output allocation, launch (``docs/spec/mxfp8.md``)."""

from __future__ import annotations

import torch

from seam import checks
from seam.formats.mxfp8 import UE8M0_DTYPES, ScaleLayout, check_swizzled_scales, scale_cols, scale_numel
from seam.kernels.mxfp8_quant import launch_mxfp8_quant
from seam.ops.registry import register

FLOAT_INPUTS = (torch.bfloat16, torch.float16, torch.float32)


_quantize = register("mxfp8_quantize", ("values", "scales"), launch_mxfp8_quant)


def check_mxfp8_out(
    out: tuple[torch.Tensor, torch.Tensor] | None,
    m: int,
    k: int,
    layout: ScaleLayout,
    device: torch.device,
    name: str = "out",
    inputs: list[tuple[str, torch.Tensor | None]] = (),
    layout_arg: str | None = "scale_layout",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate (or allocate) MXFP8 output buffers (values [M, K] E4M3, scales uint8).

    Buffers must be contiguous, 16-byte aligned (``docs/spec/mxfp8.md``), apart from each
    other and from every tensor in ``inputs``; row-major scales [M, K // 32], swizzled ones
    flat ``[mxfp8_scale_numel(M, K)]`` (any other shape of those bytes is refused: a row-major
    [M, K // 32] buffer would silently receive swizzled bytes). Scales may be float8_e8m0fnu: the
    uint8 view of the same bytes is returned (and written). ``out`` must be a tuple or list of the
    two buffers (TypeError otherwise). ``layout_arg``: the op's parameter that chooses the scale
    layout, named in the hint for a row-major-shaped swizzled buffer (None: the op has none).
    """
    numel = scale_numel(m, k, layout)
    if out is None:
        values = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=device)
        scales = torch.empty(numel, dtype=torch.uint8, device=device)
        if layout is ScaleLayout.ROW_MAJOR:
            scales = scales.view(m, scale_cols(k))
        return values, scales
    values, scales = checks.out_buffers(name, out, ("values", "scales"))
    checks.tensor(f"{name}[0] (values)", values, dtype=torch.float8_e4m3fn, shape=(m, k), device=device, align=16,
                  written=True)
    if layout is ScaleLayout.ROW_MAJOR:
        checks.tensor(f"{name}[1] (scales)", scales, dtype=UE8M0_DTYPES, shape=(m, scale_cols(k)), device=device,
                      align=16, written=True)
    else:
        checks.tensor(f"{name}[1] (scales)", scales, dtype=UE8M0_DTYPES, device=device, align=16, written=True)
        check_swizzled_scales(f"{name}[1] (scales)", scales, m, k, layout_arg, written=True)
    if scales.dtype != torch.uint8:  # a uint8 buffer is returned as the same object
        scales = scales.view(torch.uint8)
    checks.outputs_apart([(f"{name}[0] (values)", values), (f"{name}[1] (scales)", scales)], list(inputs))
    return values, scales


def mxfp8_quantize(
    x: torch.Tensor,
    *,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize rows to MXFP8: E4M3 values and one UE8M0 scale per 32 elements.

    ``s = ceil-exponent(amax / 448)`` per block (FlashInfer's rule, ``docs/spec/mxfp8.md``),
    ``values = e4m3(x * 2^(127 - s))`` saturating, NaN -> +448; a block holding +-inf gets scale 254,
    and its +-inf and NaN become +448, its finite elements 0 (spec step 5). One Triton launch;
    bit-identical to :func:`seam.ref.mxfp8_quantize_ref`.

    Args:
        x: BF16, FP16 or FP32 [M, K] with K a multiple of 32; rows contiguous (row stride
            may exceed K).
        scale_layout: ``"swizzled"`` (default): flat uint8 ``[mxfp8_scale_numel(M, K)]`` in
            the 128x4 layout, padding bytes written as 0; ``"row_major"``: uint8 [M, K // 32].
        out: optional (values, scales) buffers of those shapes (a tuple or list; swizzled scales flat, not
            [M, K // 32]), written in place (scales may be float8_e8m0fnu; the uint8 view of its bytes is
            returned).

    Returns:
        (values float8_e4m3fn [M, K], scales uint8).

    Raises:
        TypeError: x not a tensor or not BF16/FP16/FP32, out not a tuple or list of two buffers,
            scale_layout not a str or :class:`seam.ScaleLayout`.
        ValueError: x not 2-D, K not a multiple of 32, non-unit column stride, device
            without kernels, an unknown scale_layout, or out buffers of the wrong size/alignment, not contiguous,
            requiring grad while grad mode is on, or overlapping x or each other (a wrong out dtype is a TypeError).

    Spec: ``docs/spec/mxfp8.md`` (Quantize one block, Scale layouts).
    """
    layout = ScaleLayout.parse(scale_layout)
    checks.tensor("x", x, dtype=FLOAT_INPUTS, contiguous=False)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise ValueError(f"x must have unit column stride, got strides {x.stride()}")
    m, k = x.shape
    checks.multiple_of("K (x.shape[1])", k, 32)
    device = checks.kernel_device("x", x)
    values, scales = check_mxfp8_out(out, m, k, layout, device, inputs=[("x", x)])
    _quantize(x, values, scales, layout is ScaleLayout.SWIZZLED)
    return values, scales
