"""NVFP4 quantization and cache-entry stores as ``@triton.jit`` helpers (``docs/spec/qkv_epilogue.md``).

Byte for byte equal to :func:`seam.formats.nvfp4.nvfp4_quantize_ref`: every step is a
correctly rounded fp32 operation (``div_rn``, RNE ``*``), the one round-toward-zero
product uses libdevice's ``mul_rz`` on the GPU and an exact fp64 emulation under the
interpreter, and E2M1 rounding is done by comparisons against the midpoints.
"""

from __future__ import annotations

import triton
import triton.language as tl

from seam import runtime
from seam.kernels.numerics import bits_f32, e4m3_bits_to_f32, e4m3_saturate_bits, f32_bits

# Static switch: the interpreter has no libdevice, so mul_rz is emulated there.
EMULATE_MUL_RZ = tl.constexpr(runtime.INTERPRET)

_SF_FLOOR = tl.constexpr(0.001953125)  # 2^-9, smallest E4M3 subnormal


@triton.jit
def mul_rz(a, b):
    """fp32 ``a * b`` rounded toward zero.

    On the GPU Triton links libdevice with FTZ, so subnormal operands and products
    flush to zero; they lie far below the smallest E2M1 step and give code 0 either way.
    """
    if EMULATE_MUL_RZ:
        # fp64 product of fp32 operands is exact; step the RNE result one ulp toward
        # zero when it landed farther from zero than the exact product.
        exact = a.to(tl.float64) * b.to(tl.float64)
        near = (a * b).to(tl.float32)
        away = tl.abs(near.to(tl.float64)) > tl.abs(exact)
        stepped = bits_f32(f32_bits(near) - 1)
        return tl.where(away, stepped, near)
    else:
        return tl.extra.cuda.libdevice.mul_rz(a, b)


@triton.jit
def e2m1_code(x):
    """fp32 -> E2M1 code (uint8 in [0, 16)): RNE by midpoint comparisons, saturating at 6.

    A midpoint is passed at equality only when the code below it is odd (ties to
    even); NaN gives 0; zero magnitude gets a cleared sign bit.
    """
    a = tl.abs(x)
    mag = (
        (a > 0.25).to(tl.uint32)
        + (a >= 0.75).to(tl.uint32)
        + (a > 1.25).to(tl.uint32)
        + (a >= 1.75).to(tl.uint32)
        + (a > 2.5).to(tl.uint32)
        + (a >= 3.5).to(tl.uint32)
        + (a > 5.0).to(tl.uint32)
    )
    sign = (f32_bits(x) >> 31) & (mag > 0).to(tl.uint32)
    return (mag | (sign << 3)).to(tl.uint8)


@triton.jit
def nvfp4_quantize_group(v, inv_g, R: tl.constexpr):
    """NVFP4-quantize fp32 [R, 16], one scale group per row.

    ``inv_g`` is fp32 ``1/g`` computed on the host. Returns (packed data uint8 [R, 8],
    the even element in the low nibble; E4M3 scale byte uint8 [R]).

    The group's amax is a 2-D reduction broadcast back over 2-D rows on purpose: a
    [R, C // 16, 16] form reduced over its last axis and broadcast back gave wrong E2M1
    codes on sm_90 when the values came from the 32- and 128-row accumulator layouts of the
    QKV GEMM (scales right, data wrong), 2026-11-29. The pair packing sums a [R, 8, 2] view,
    the form the Gemma norm's tree sum uses; both are checked at every tile on the GPU by
    the integer-operand tests of ``tests/test_qkv.py``.
    """
    mag = tl.where(v != v, 0.0, tl.abs(v))
    amax = tl.max(mag, axis=1)
    a = tl.maximum(tl.math.div_rn(amax, 6.0) * inv_g, _SF_FLOOR)
    sf = e4m3_saturate_bits(a)
    r = tl.math.div_rn(1.0, e4m3_bits_to_f32(sf)) * inv_g
    codes = e2m1_code(mul_rz(v, tl.broadcast_to(r[:, None], (R, 16)))).to(tl.int32)
    nibble_shift = (tl.arange(0, 16) % 2) * 4
    # adjacent pairs summed: disjoint nibbles, so the sum is the packed byte
    packed = tl.sum(tl.reshape(codes << nibble_shift[None, :], (R, 8, 2)), axis=2)
    return packed.to(tl.uint8), sf


@triton.jit
def v_scale_offset(t, j):
    """Offset of V scale byte j of token t in the slot's scale area (4-token quad swizzle)."""
    return (t // 4 * 4 + j // 2) * 8 + (j % 2) * 4 + t % 4
