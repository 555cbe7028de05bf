"""Exact rounding helpers shared by every seam kernel (``@triton.jit`` device functions).

Every fp32 -> BF16 and fp32 -> E4M3 rounding in seam goes through this module, and so
does the MXFP8 block rule of ``docs/spec/mxfp8.md``. On a GPU the hardware
conversions are already round-to-nearest-even (``cvt.rn.bf16.f32``,
``cvt.rn.satfinite.e4m3x2.f32``), so the native casts are used. Under the Triton
interpreter they are not (fp32 -> bf16 truncates, fp8 rounding is approximate:
``docs/platform.md``), so the same results are built from integer bit arithmetic,
which the interpreter executes exactly. ``tests/test_numerics.py`` checks both paths
against torch's conversions over every BF16 pattern and every E4M3 rounding boundary.

Only exact operations appear here (integer ops, compares, fp32 multiply by powers of
two), but for :func:`sigmoid`: Triton's own approximate ``tl.sigmoid`` on a GPU, computed with fewer
instructions and checked bit for bit against it at every fp32 input (the GPU test).
"""

from __future__ import annotations

import struct

import triton
import triton.language as tl

from seam import runtime

# Static switch read inside jit functions: bit-level conversions under the interpreter.
EMULATE_CONVERSIONS = tl.constexpr(runtime.INTERPRET)

# f32(1/448), the fp32 with bits 0x3B124925: the one multiplier the MXFP8 rule allows. Spelled
# as that fp32's exact value, so it needs no conversion on either target, and the helpers stay
# free of layout-carrying constants (``tl.full``): Gluon kernels call them too.
_INV_448 = tl.constexpr(struct.unpack("<f", struct.pack("<I", 0x3B124925))[0])
E4M3_MAX = tl.constexpr(448.0)


@triton.jit
def f32_bits(x):
    """The IEEE bits of an fp32 tensor as uint32."""
    return x.to(tl.uint32, bitcast=True)


@triton.jit
def bits_f32(b):
    """An fp32 tensor from uint32 bits."""
    return b.to(tl.float32, bitcast=True)


@triton.jit
def bf16_to_f32(x):
    """Exact BF16 -> fp32. The interpreter's cast mangles BF16 subnormals (1e-38 -> 8.3e-39,
    9e-41 -> 0), so there the fp32 bits are built as ``bits << 16``; native casts are exact.

    Not two BF16 per register by a shift and a mask on a GPU (2 sm_90 instructions per pair against the cast's 3):
    on the H200 that made the norm + MXFP8 12-13 % slower at 2048-8192 rows and SwiGLU no faster (log run 259).
    """
    if EMULATE_CONVERSIONS:
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def to_f32(x):
    """Exact widening of a BF16, FP16 or FP32 tensor to fp32 (BF16 through :func:`bf16_to_f32`)."""
    if x.dtype == tl.bfloat16:
        return bf16_to_f32(x)
    else:
        return x.to(tl.float32)


@triton.jit
def to_bf16_rne(x):
    """fp32 -> BF16, round to nearest even (NaN -> a quiet NaN, as torch does)."""
    if EMULATE_CONVERSIONS:
        b = f32_bits(x)
        is_nan = (b & 0x7FFFFFFF) > 0x7F800000
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        rounded = tl.where(is_nan, 0x7FC0, rounded)
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(tl.bfloat16, fp_downcast_rounding="rtne")


@triton.jit
def sigmoid(x):
    """``tl.sigmoid(x)`` = ``1 / (1 + exp(-x))``, the same bits on sm_90 with fewer instructions.

    On a GPU Triton computes ``ex2.approx.f32(-x * log2e)``, adds 1 and divides with ``div.full.f32``; the
    non-flushing ex2 adds range fix-ups for results below 2^-126, the division fix-ups for divisors below 2^-126
    and above 2^126. Here ``ex2.approx.ftz.f32`` (a flushed result leaves ``1 + e`` at exactly 1, as the
    unflushed one does) of ``x * -log2e`` (``-x * log2e`` but for the sign of a zero, which ex2 maps to 1
    either way), and the division's own steps for a divisor ``d = 1 + e`` that is at least 1: ``rcp.approx``
    of d / 4, then times 1 / 4. ``div.full.f32``'s SASS scales so only past 2^126, behind a compare; below it the
    scaling changes no bit (d / 4 and 4 / d stay normal, and the reciprocal's mantissa does not depend on the
    exponent), so it is done unconditionally. sm_90 SASS per element: 6 instructions against 12.
    ``tests/test_numerics.py`` compares it with ``tl.sigmoid`` at every fp32 input on the GPU (log run 255). Under
    the interpreter: ``tl.sigmoid`` itself.
    """
    if EMULATE_CONVERSIONS:
        return tl.sigmoid(x)
    else:
        return tl.inline_asm_elementwise(
            """{
            .reg .f32 d;
            mul.rn.f32 d, $1, 0fBFB8AA3B;  // -f32(log2(e)), Triton's exp multiplier negated
            ex2.approx.ftz.f32 d, d;
            add.rn.f32 d, d, 0f3F800000;
            mul.rn.f32 d, d, 0f3E800000;
            rcp.approx.ftz.f32 $0, d;
            mul.rn.f32 $0, $0, 0f3E800000;
            }""",
            "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def round_bf16(x):
    """fp32 -> fp32 holding the nearest-even BF16 value (a rounding point kept in fp32)."""
    return bf16_to_f32(to_bf16_rne(x))


@triton.jit
def e4m3_rne_bits(q):
    """E4M3 (float8_e4m3fn) bits of fp32 values (no NaN), round to nearest even; -0.0 gives 0x80. Under the
    interpreter the values must be in [-448, 448] already; on a GPU (sm_89 and later: ``cvt.rn.satfinite``)
    larger magnitudes saturate to +-448 as clamping first would.
    """
    if EMULATE_CONVERSIONS:
        b = f32_bits(q)
        sign = (b >> 24) & 0x80
        mag_bits = b & 0x7FFFFFFF
        mag = bits_f32(mag_bits)
        # Subnormal range (< 2^-6): steps of 2^-9. mag * 512 is exact; adding and
        # subtracting 2^23 rounds it to an integer, ties to even (IEEE add).
        sub = (mag * 512.0 + 8388608.0) - 8388608.0
        sub_code = sub.to(tl.uint32)  # 0..8; 8 is the smallest normal, code 0x08
        # Normal range: keep 3 mantissa bits with RNE on the fp32 bits, then rebias
        # the exponent from 127 to 7 ((127 - 7) << 3 = 960).
        nrm = (mag_bits + 0x7FFFF + ((mag_bits >> 20) & 1)) >> 20
        nrm_code = nrm - 960
        code = tl.where(mag < 0.015625, sub_code, nrm_code)
        return (code | sign).to(tl.uint8)
    else:
        return q.to(tl.float8e4nv).to(tl.uint8, bitcast=True)


@triton.jit
def e4m3_saturate_bits(x):
    """E4M3 bits of any fp32: NaN -> +448, clamp to [-448, 448], round to nearest even."""
    if EMULATE_CONVERSIONS:
        q = tl.where(x != x, E4M3_MAX, x)
        q = tl.minimum(tl.maximum(q, -E4M3_MAX), E4M3_MAX)
    else:
        # The GPU's min (min.f32) returns the operand that is not NaN, so one min maps NaN of either sign to +448
        # (a compare and a select per element fewer); the conversion (cvt.rn.satfinite) clamps the rest itself:
        # past 448 RNE gives 448 or overflows, either way to the largest finite, as clamping first would.
        q = tl.minimum(x, E4M3_MAX)
    return e4m3_rne_bits(q)


@triton.jit
def e4m3_bits_to_f32(code):
    """Exact fp32 value of E4M3 bits (uint8 or wider integer). 0x7F/0xFF decode to NaN."""
    c = code.to(tl.uint32) & 0xFF
    sign = (c & 0x80) << 24
    exp = (c >> 3) & 0xF
    man = c & 0x7
    # normal: (exp - 7 + 127) << 23 | man << 20; subnormal: man * 2^-9 (exact in fp32)
    normal = bits_f32(((exp + 120) << 23) | (man << 20))
    subnormal = man.to(tl.float32) * 0.001953125
    mag = tl.where(exp == 0, subnormal, normal)
    mag = tl.where((c & 0x7F) == 0x7F, float("nan"), mag)
    return bits_f32(f32_bits(mag) | sign)


@triton.jit
def e4m3_to_f32(bits):
    """Exact fp32 of E4M3 bytes (uint8): the bit decoding under the interpreter, the hardware cast on a GPU."""
    if EMULATE_CONVERSIONS:
        return e4m3_bits_to_f32(bits)
    else:
        return bits.to(tl.float8e4nv, bitcast=True).to(tl.float32)


#: Largest UE8M0 scale byte :func:`e4m3_scaled_bf16` takes: its multiplier 2^(s - 7) must be a normal BF16.
SCALED_BF16_MAX_SCALE = tl.constexpr(134)


@triton.jit
def e4m3_scaled_bf16(bits, s):
    """BF16 ``e4m3 * 2^(s - 127)`` (round to nearest even) of E4M3 bytes (uint8) and their UE8M0 scale bytes
    ``s`` (any integer type, broadcast to ``bits``), the value :func:`to_bf16_rne` gives of
    ``e4m3_to_f32(bits) * ue8m0_to_f32(s)``, for bytes other than the NaN codes 0x7F / 0xFF and
    ``s <= SCALED_BF16_MAX_SCALE`` only (elsewhere the result is a wrong finite number).

    On a GPU without fp32: each byte's bits become the BF16 ``e4m3 * 2^-120`` (sign to bit 15, the 7-bit
    magnitude shifted by 4: E4M3 subnormals land on BF16 subnormals, the same value), then one BF16 multiply
    by ``2^(s - 7)`` per pair (``mul.rn.bf16x2``, which keeps subnormal inputs and rounds once, like the
    fp32 path's single rounding of an exact product): 4 instructions per pair instead of 6 (unpack to F16,
    two widenings, two fp32 multiplies, one pack). ``tests/test_numerics.py`` compares it with the fp32 path
    at every byte and scale byte on the GPU. Under the interpreter: the fp32 path itself.
    """
    if EMULATE_CONVERSIONS:
        return to_bf16_rne(e4m3_to_f32(bits) * ue8m0_to_f32(s))
    else:
        mul = ((s.to(tl.uint32) + 120) << 7).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        # prmt 0x9180 / 0xB3A2: bytes 0-1 / 2-3 as 16-bit lanes [sign-fill, byte]; << 4 and the mask leave the
        # sign at bit 15 and the magnitude at bits 4-10 (the sign-fill bits that cross a lane are masked off).
        return tl.inline_asm_elementwise(
            """{
            .reg .b32 lo, hi;
            prmt.b32 lo, $2, 0, 0x9180;
            prmt.b32 hi, $2, 0, 0xB3A2;
            shl.b32 lo, lo, 4;
            shl.b32 hi, hi, 4;
            and.b32 lo, lo, 0x87F087F0;
            and.b32 hi, hi, 0x87F087F0;
            mul.rn.bf16x2 $0, lo, $3;
            mul.rn.bf16x2 $1, hi, $4;
            }""",
            "=r,=r,r,r,r", [bits, mul], dtype=tl.bfloat16, is_pure=True, pack=4)


@triton.jit
def ue8m0_from_amax(amax):
    """UE8M0 scale byte (int32 in [0, 254]) of a 32-element block from its fp32 amax.

    ``docs/spec/mxfp8.md`` steps 2-3: n = amax * f32(1/448); exponent of n rounded
    up when its mantissa is non-zero, except fp32 subnormals at or below 2^-127.
    """
    n = amax * _INV_448
    nb = f32_bits(n)
    e = ((nb >> 23) & 0xFF).to(tl.int32)
    f = nb & 0x7FFFFF
    bump = (f != 0) & ~((e == 0) & (f <= 0x400000))
    s = tl.minimum(e + bump.to(tl.int32), 254)
    return tl.where(n > 0.0, s, 0)


@triton.jit
def ue8m0_inverse(s):
    """fp32 2^(127 - s) for a scale byte s, built from bits; 0 when s == 0 (spec step 4)."""
    inv = bits_f32(((254 - s) << 23).to(tl.uint32))
    return tl.where(s == 0, 0.0, inv)


@triton.jit
def ue8m0_to_f32(s):
    """fp32 2^(s - 127) for a scale byte s (s == 0 is the subnormal 2^-127, 255 is NaN)."""
    s32 = s.to(tl.uint32) & 0xFF
    v = bits_f32(tl.where(s32 == 0, 0x400000, s32 << 23).to(tl.uint32))
    return tl.where(s32 == 255, float("nan"), v)


@triton.jit
def mxfp8_quantize_tile(x, ROWS: tl.constexpr, COLS: tl.constexpr):
    """MXFP8-quantize an fp32 tile [ROWS, COLS] (COLS a multiple of 32) row by row.

    Returns (values as E4M3 bits uint8 [ROWS, COLS], scale bytes uint8 [ROWS, COLS // 32]).
    The block amax ignores NaN; ``docs/spec/mxfp8.md`` steps 1-5.
    """
    values, s = mxfp8_quantize_blocks(tl.reshape(x, (ROWS, COLS // 32, 32)))
    return tl.reshape(values, (ROWS, COLS)), s


@triton.jit
def mxfp8_quantize_blocks(blocks):
    """MXFP8-quantize fp32 blocks [R, B, 32] (32 elements each): (E4M3 bits uint8 [R, B, 32], scale bytes
    uint8 [R, B]). ``docs/spec/mxfp8.md`` steps 1-5; the block amax ignores NaN."""
    mag = tl.abs(blocks)
    if EMULATE_CONVERSIONS:  # numpy's max propagates NaN; the GPU's max (max.f32) returns the other operand
        mag = tl.where(blocks != blocks, 0.0, mag)
    # An all-NaN block's amax is NaN on the GPU: ue8m0_from_amax's n > 0 test gives it scale 0, as amax 0 would.
    amax = tl.max(mag, axis=2)
    s = ue8m0_from_amax(amax)
    inv = ue8m0_inverse(s)
    return e4m3_saturate_bits(blocks * inv[:, :, None]), s.to(tl.uint8)


@triton.jit
def mxfp8_dequantize_tile(values, scales, ROWS: tl.constexpr, COLS: tl.constexpr):
    """fp32 [ROWS, COLS] = e4m3 * 2^(s - 127) of E4M3 bits ``values`` [ROWS, COLS] and their scale bytes
    ``scales`` [ROWS, COLS // 32] (as :func:`mxfp8_quantize_tile` returns them): exact for every code and byte."""
    f = tl.reshape(e4m3_to_f32(values), (ROWS, COLS // 32, 32)) * ue8m0_to_f32(scales)[:, :, None]
    return tl.reshape(f, (ROWS, COLS))


@triton.jit
def swizzled_scale_offset(r, c, padded_cols):
    """Byte offset of scale (row r, block column c) in the 128x4 swizzled layout.

    ``padded_cols`` is P = ceil(cols / 4) * 4 (``docs/spec/mxfp8.md``).
    """
    return (
        (r // 128) * (128 * padded_cols)
        + (c // 4) * 512
        + (r % 32) * 16
        + ((r % 128) // 32) * 4
        + c % 4
    )


@triton.jit
def store_row_scales(scales_ptr, scales, rows, row_ok, scols, num_scols, SWIZZLED: tl.constexpr):
    """Store the scale bytes ``scales`` [R, C] of rows ``rows`` ([R], ``row_ok`` those < M) at scale columns
    ``scols`` [C] of a matrix with ``num_scols`` scale columns: 128x4-swizzled up to the padded column count P =
    ceil(num_scols / 4) * 4 (the columns past the row come from masked lanes: zero, the padding's value), or
    row-major [M, num_scols] (``docs/spec/mxfp8.md``)."""
    if SWIZZLED:
        padded_cols = (num_scols + 3) // 4 * 4
        offs = swizzled_scale_offset(rows[:, None], scols[None, :], padded_cols)
        mask = row_ok[:, None] & (scols[None, :] < padded_cols)
    else:
        offs = rows[:, None] * num_scols + scols[None, :]
        mask = row_ok[:, None] & (scols[None, :] < num_scols)
    tl.store(scales_ptr + offs, scales, mask=mask)


@triton.jit
def zero_scale_padding_rows(
    scales_ptr,  # uint8 flat 128x4-swizzled scales of M rows
    M,
    j,  # this padding program's index: it zeroes rows [M + j * PAD_ROWS, M + (j + 1) * PAD_ROWS)
    scols,  # [C] scale columns this program covers
    padded_cols,  # P = ceil(scale columns / 4) * 4
    PAD_ROWS: tl.constexpr,
):
    """Zero the scale bytes of this program's swizzle padding rows that lie in [M, ceil(M/128)*128).

    Nothing is read: the padding rows only need zeros (``docs/spec/mxfp8.md``).
    """
    rows = (M + j * PAD_ROWS + tl.arange(0, PAD_ROWS)).to(tl.int64)
    m_pad = (M + 127) // 128 * 128
    offs = swizzled_scale_offset(rows[:, None], scols[None, :], padded_cols)
    mask = (rows[:, None] < m_pad) & (scols[None, :] < padded_cols)
    tl.store(scales_ptr + offs, tl.zeros((PAD_ROWS, scols.shape[0]), tl.uint8), mask=mask)
