"""MXFP8 quantizer (docs/spec/mxfp8.md): Triton kernel vs reference bytes, spec edge cases,
torchao's RCEIL as an independent oracle, layouts, round trips and bad input."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seam
from seam.compare import bytes_equal
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.formats.mxfp8 import mxfp8_quantize_ref, swizzled_offsets, ue8m0_to_float

LAYOUTS = ["swizzled", "row_major"]


def _check_kernel_matches_ref(x, layout):
    v, s = seam.mxfp8_quantize(x, scale_layout=layout)
    rv, rs = mxfp8_quantize_ref(x.cpu(), scale_layout=layout)
    assert bytes_equal(v.cpu(), rv), "E4M3 values differ from the reference"
    assert bytes_equal(s.cpu(), rs), "UE8M0 scales differ from the reference"
    return v.cpu(), s.cpu()


def _edge_blocks() -> torch.Tensor:
    """One 32-element block per row, each a case from the spec's edge-case list (fp32)."""
    g = torch.Generator().manual_seed(0)
    rnd = lambda: torch.randn(32, generator=g)  # noqa: E731
    rows = {
        "all_zero": torch.zeros(32),
        "tiny_1e-38": torch.full((32,), 1e-38) * torch.sign(rnd()),
        "tiny_1e-40": torch.full((32,), 1e-40),
        "one_subnormal_in_normal": torch.cat([torch.tensor([1e-40]), rnd()[1:]]),
        "amax_448": torch.cat([torch.tensor([448.0]), rnd()[1:]]),
        "amax_448x2^-3": torch.cat([torch.tensor([56.0]), rnd()[1:] * 0.1]),
        "amax_448_plus_ulp": torch.cat([torch.nextafter(torch.tensor([448.0]), torch.tensor([1e9])), rnd()[1:]]),
        "amax_448x2^-130": torch.full((32,), 448.0 * 2.0**-130),
        "amax_448x2^-127": torch.full((32,), 448.0 * 2.0**-127),
        "dominated": torch.cat([torch.tensor([1000.0]), torch.full((31,), 1e-3)]),
        "ties": torch.tensor([1.0625, 1.1875, 0.0029296875, -1.0625, 17.0, 19.0, 0.01953125 * 3 / 2] + [1.0] * 25),
        "plus_inf": torch.cat([torch.tensor([float("inf")]), rnd()[1:]]),
        "minus_inf": torch.cat([torch.tensor([-float("inf")]), -rnd()[1:].abs()]),
        "nan": torch.cat([torch.tensor([float("nan")]), rnd()[1:]]),
        "all_nan": torch.full((32,), float("nan")),
        "neg_zero": torch.full((32,), -0.0),
        "mixed_zero": torch.tensor([0.0, -0.0] * 16) + torch.tensor([0.0] * 31 + [3.0]),
        "huge": torch.full((32,), 3.0e38),
        "partly_zero": torch.cat([torch.zeros(16), rnd()[16:]]),
    }
    return list(rows), torch.stack(list(rows.values()))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_edge_blocks_match_reference(device, layout, dtype):
    _names, x = _edge_blocks()
    x = x.to(dtype)
    # 4 blocks per row: the edge block in each position of a scale group of 4
    x = torch.cat([x, x.roll(1, 0), x.roll(2, 0), x.roll(3, 0)], dim=1)
    _check_kernel_matches_ref(x.to(device), layout)


def test_edge_block_semantics():
    names, x = _edge_blocks()
    v, s = mxfp8_quantize_ref(x, scale_layout="row_major")
    s = dict(zip(names, s[:, 0].tolist()))
    vb = dict(zip(names, v.view(torch.uint8)))
    assert s["all_zero"] == 0 and vb["all_zero"].eq(0).all()
    assert s["tiny_1e-40"] == 0 and vb["tiny_1e-40"].eq(0).all()  # amax <= 448*2^-127 -> zeros
    assert s["amax_448x2^-127"] == 0 and vb["amax_448x2^-127"].eq(0).all()
    assert s["amax_448"] == 127 and vb["amax_448"][0] == 0x7E  # exact power of two: no bump
    assert s["amax_448_plus_ulp"] == 128  # one ulp above: bump
    assert s["amax_448x2^-3"] == 124
    assert s["plus_inf"] == 254 and vb["plus_inf"][0] == 0x7E
    assert s["minus_inf"] == 254 and vb["minus_inf"][0] == 0x7E  # -inf * 0 = NaN -> +448
    assert vb["minus_inf"][1:].eq(0x80).all()  # finite negatives * +0 = -0
    assert vb["nan"][0] == 0x7E  # NaN ignored by amax, quantizes to +448
    assert s["all_nan"] == 0 and vb["all_nan"].eq(0x7E).all()
    assert vb["neg_zero"].eq(0x80).all() and s["neg_zero"] == 0
    assert s["huge"] == 247  # 3e38 / 448 = 1.3 * 2^119: exponent 246, bumped
    assert vb["dominated"][1:].eq(0).all()  # 1e-3 * 2^-1 underflows E4M3
    # read back (README, "Non-finite values"): an inf of either sign is +inf, the rest of its block 0; a NaN finite
    back = dict(zip(names, seam.mxfp8_dequantize(*mxfp8_quantize_ref(x, scale_layout="row_major"),
                                                 scale_layout="row_major", dtype=torch.float32)))
    for name in ("plus_inf", "minus_inf"):
        assert back[name][0] == float("inf") and back[name][1:].eq(0).all(), name
    assert torch.isfinite(back["nan"]).all() and back["all_nan"].eq(448 * 2.0**-127).all()


@pytest.mark.parametrize("m", [1, 127, 128, 129])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_around_swizzle_tile(device, m, layout):
    g = torch.Generator().manual_seed(m)
    x = (torch.randn(m, 96, generator=g) * torch.logspace(-3, 3, 96)).bfloat16()  # 3 scale cols
    v, s = _check_kernel_matches_ref(x.to(device), layout)
    if layout == "swizzled":
        assert s.numel() == seam.mxfp8_scale_numel(m, 96) == math.ceil(m / 128) * 128 * 4
        used = torch.zeros(s.numel(), dtype=torch.bool)
        used[swizzled_offsets(m, 3).flatten()] = True
        assert s[~used].eq(0).all(), "padding scale bytes must be zero"


def test_padding_bytes_overwritten(device):
    """Preexisting garbage in a caller's scale buffer must be replaced by zeros in the padding."""
    x = torch.randn(3, 160).bfloat16().to(device)  # 5 cols -> P = 8
    numel = seam.mxfp8_scale_numel(3, 160)
    values = torch.empty(3, 160, dtype=torch.float8_e4m3fn, device=device)
    scales = torch.full((numel,), 0xAB, dtype=torch.uint8, device=device)
    seam.mxfp8_quantize(x, out=(values, scales))
    _rv, rs = mxfp8_quantize_ref(x.cpu())
    assert bytes_equal(scales.cpu(), rs)


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="this torch has no float8_e8m0fnu")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_out_scales_as_e8m0(device, layout):
    """``out=`` scales may be torch's UE8M0 dtype, as inputs' scales may: its bytes are written, their uint8
    view returned; other one-byte dtypes stay a TypeError, naming the buffer."""
    x = torch.randn(5, 96).bfloat16().to(device)
    want_v, want_s = seam.mxfp8_quantize(x, scale_layout=layout)
    values = torch.empty_like(want_v)
    scales = torch.zeros(want_s.shape, dtype=torch.float8_e8m0fnu, device=device)
    v, s = seam.mxfp8_quantize(x, scale_layout=layout, out=(values, scales))
    assert v is values and s.dtype == torch.uint8 and s.data_ptr() == scales.data_ptr()
    assert bytes_equal(scales.view(torch.uint8), want_s) and bytes_equal(values, want_v)
    with pytest.raises(TypeError, match=r"out\[1\] \(scales\) must have dtype torch.uint8 or torch.float8_e8m0fnu"):
        seam.mxfp8_quantize(x, scale_layout=layout, out=(values, scales.view(torch.int8)))


def test_strided_rows(device):
    base = torch.randn(6, 128).bfloat16().to(device)
    x = base[:, :64]  # row stride 128, unit column stride
    v, s = seam.mxfp8_quantize(x)
    rv, rs = mxfp8_quantize_ref(x.cpu().contiguous())
    assert bytes_equal(v.cpu(), rv) and bytes_equal(s.cpu(), rs)


def test_torchao_rceil_agrees_where_spec_says(device):
    """torchao to_mx(RCEIL) + to_blocked is an independent implementation of the same rule.

    They differ only for scale byte 0 (torchao keeps the values) and inf/NaN blocks (255).
    """
    pytest.importorskip("torchao")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.utils import to_blocked

    g = torch.Generator().manual_seed(3)
    m, k = 130, 256
    x = (torch.randn(m, k, generator=g) * torch.logspace(-20, 20, k).repeat_interleave(1)).bfloat16()
    x[5, :32] = 448.0
    x[6, 32:64] = 0.0
    x[7, 64:96] = torch.tensor(448.0 * 2**-60).bfloat16()
    scale, data = to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)
    v, s = seam.mxfp8_quantize(x.to(device), scale_layout="row_major")
    s = s.cpu()
    keep = (s != 0).repeat_interleave(32, dim=1)
    assert torch.equal(s[s != 0], scale.view(torch.uint8).reshape(m, k // 32)[s != 0])
    assert torch.equal(v.cpu().view(torch.uint8)[keep], data.view(torch.uint8)[keep])
    blocked = to_blocked(scale.view(torch.uint8).reshape(m, k // 32)).flatten()
    _v, s_sw = seam.mxfp8_quantize(x.to(device))
    mask = s_sw.cpu() != 0
    assert torch.equal(s_sw.cpu()[mask], blocked[mask])


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 300),
    cols=st.integers(1, 9),
)
def test_swizzle_unswizzle_inverse(m, cols):
    g = torch.Generator().manual_seed(m * 10 + cols)
    rows = torch.randint(0, 256, (m, cols), generator=g, dtype=torch.int32).to(torch.uint8)
    flat = seam.swizzle_scales(rows)
    assert flat.numel() == seam.mxfp8_scale_numel(m, cols * 32)
    assert torch.equal(seam.unswizzle_scales(flat, m, cols * 32), rows)
    offs = swizzled_offsets(m, cols).flatten()
    assert offs.unique().numel() == offs.numel()  # a bijection onto its image
    if hasattr(torch, "float8_e8m0fnu"):  # E8M0 scales are read as their bytes, both ways; uint8 comes back
        e8m0 = seam.swizzle_scales(rows.view(torch.float8_e8m0fnu))
        assert e8m0.dtype == torch.uint8 and torch.equal(e8m0, flat)
        assert torch.equal(seam.unswizzle_scales(flat.view(torch.float8_e8m0fnu), m, cols * 32), rows)


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 40),
    cols=st.integers(1, 6),
    log_scale=st.floats(-30, 30),
    seed=st.integers(0, 2**16),
)
def test_round_trip_error_bound(m, cols, log_scale, seed):
    """|dequant(quant(x)) - x| <= half an E4M3 step of the block: 2^(s-127) * 2^-4 * 2^e,
    checked as <= 2^-4 * |x| for normal E4M3 results and <= 2^(s-127-10) absolute below."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, cols * 32, generator=g) * 2.0**log_scale).float()
    v, s = mxfp8_quantize_ref(x, scale_layout="row_major")
    y = seam.mxfp8_dequantize(v, s, scale_layout="row_major", dtype=torch.float32)
    scale = ue8m0_to_float(s).repeat_interleave(32, dim=1)
    bound = torch.maximum(x.abs() * 2.0**-4, scale * 2.0**-10)
    ok = (y - x).abs() <= bound
    underflow = s.repeat_interleave(32, dim=1) == 0  # whole block flushed to zero by rule
    assert bool((ok | underflow).all())


@pytest.mark.parametrize("m", [1, 3, 130])
@pytest.mark.parametrize("k", [2880, 4160])
def test_rows_wider_than_one_column_program(device, m, k):
    """K past the quantizer's 2048-column BLOCK_K (gpt-oss's 2880, 4160): several column programs per row, the
    last one ragged and holding the swizzle padding columns; other tests stay below 2048 on CPU."""
    g = torch.Generator().manual_seed(m + k)
    x = torch.randn(m, k, generator=g) * torch.logspace(-4, 4, k)
    x[0, 2048:2080] = 0.0  # blocks of the second column program: zeros, -0.0, a dominating element, inf, NaN
    x[0, 2080:2112] = -0.0
    x[-1, 2112], x[-1, 2113:2144] = 1e4, 1e-6
    x[-1, 2150], x[0, k - 1] = float("inf"), float("nan")
    for layout in LAYOUTS:
        _check_kernel_matches_ref(x.bfloat16().to(device), layout)


def test_kernel_random_property(device):
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        m = int(torch.randint(1, 200, (1,), generator=g))
        k = 32 * int(torch.randint(1, 20, (1,), generator=g))
        x = (torch.randn(m, k, generator=g) * 10.0 ** float(torch.randint(-8, 8, (1,), generator=g))).bfloat16()
        for layout in LAYOUTS:
            _check_kernel_matches_ref(x.to(device), layout)


# ---- bad input: clear errors, nothing written ------------------------------------------


def test_rejects_bad_input(device):
    x = torch.randn(4, 64).bfloat16().to(device)
    with pytest.raises(ValueError, match="multiple of 32"):
        seam.mxfp8_quantize(torch.randn(4, 48).bfloat16().to(device))
    with pytest.raises(TypeError, match="dtype"):
        seam.mxfp8_quantize(torch.randn(4, 64).double().to(device))
    with pytest.raises(TypeError, match="torch.Tensor"):
        seam.mxfp8_quantize([1.0] * 64)
    with pytest.raises(ValueError, match="2-D"):
        seam.mxfp8_quantize(torch.randn(2, 4, 64).bfloat16().to(device))
    with pytest.raises(ValueError, match="column stride"):
        seam.mxfp8_quantize(torch.randn(64, 4).bfloat16().to(device).t())
    with pytest.raises(ValueError, match="scale_layout"):
        seam.mxfp8_quantize(x, scale_layout="blocked")
    values = torch.full((4, 64), 1.0, device=device).to(torch.float8_e4m3fn)
    small = torch.full((7,), 9, dtype=torch.uint8, device=device)
    with pytest.raises(ValueError, match="scales.*must hold 512 bytes"):
        seam.mxfp8_quantize(x, out=(values, small))
    assert values.view(torch.uint8).eq(0x38).all() and small.eq(9).all()  # untouched
    with pytest.raises(TypeError, match=r"out\[0\].*float8_e4m3fn"):
        seam.mxfp8_quantize(x, out=(values.view(torch.uint8), small))
    flat = torch.zeros(8, dtype=torch.uint8, device=device)  # the right byte count, not [M, K // 32]
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\) must have shape \[4, 2\]"):
        seam.mxfp8_quantize(x, scale_layout="row_major", out=(values, flat))
    assert flat.eq(0).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        seam.mxfp8_scale_numel(4, 100)
    with pytest.raises(TypeError, match="num_tokens must be an int"):
        seam.mxfp8_scale_numel(1.5, 64)
    with pytest.raises(ValueError, match=r"values.shape\[1\] \(K\) must be a positive multiple of 32"):
        seam.mxfp8_dequantize(torch.zeros(4, 48, dtype=torch.uint8, device=device), small)
    with pytest.raises(ValueError, match=r"w.shape\[1\] \(K\) must be a positive multiple of 32"):
        seam.MXFP8Weight.from_bf16(torch.zeros(4, 48, device=device))
    for bad_dtype in ("bfloat16", torch.int32):
        with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
            seam.mxfp8_dequantize(values, small, dtype=bad_dtype)
    with pytest.raises(ValueError, match="unswizzle|bytes"):
        seam.unswizzle_scales(small, 4, 64)
    with pytest.raises(TypeError, match="scales must have dtype torch.uint8"):
        seam.unswizzle_scales(small.to(torch.int16), 4, 64)
    with pytest.raises(TypeError, match="scales must have dtype torch.uint8"):
        seam.swizzle_scales(torch.zeros(4, 2, device=device))
    for bad in (torch.zeros(4, 2, device=device), torch.zeros(4, 2, dtype=torch.int8, device=device)):
        with pytest.raises(TypeError, match="scales must have dtype torch.uint8 or torch.float8_e8m0fnu"):
            seam.mxfp8_dequantize(values, bad, scale_layout="row_major")
    with pytest.raises(TypeError, match="values must have dtype"):
        seam.mxfp8_dequantize(values.float(), small)


def test_inf_and_nan_rows_raise_no_warning(device, recwarn):
    """Under the interpreter the kernels run in NumPy, whose inf * 0 and NaN arithmetic warned in the
    caller's code ("invalid value encountered in multiply"); compiled kernels never warn."""
    x = torch.zeros(2, 64, device=device)
    x[0, 0], x[1, 33] = float("inf"), float("nan")
    values, scales = seam.mxfp8_quantize(x, scale_layout="row_major")
    seam.gemma_fused_add_rms_norm_mxfp8(x.bfloat16(), x.bfloat16(), torch.ones(64, device=device).bfloat16(), 1e-6)
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []
    assert bytes_equal(values, mxfp8_quantize_ref(x.cpu(), scale_layout="row_major")[0].to(device))


def test_empty_input(device):
    v, s = seam.mxfp8_quantize(torch.empty(0, 64, dtype=torch.bfloat16, device=device))
    assert v.shape == (0, 64) and s.numel() == 0


def test_quantized_activation_record(device):
    x = torch.randn(3, 64).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    qa = seam.QuantizedActivation(v, s, torch.bfloat16, (3, 64), "swizzled")
    qa.require_layout("swizzled")
    with pytest.raises(ValueError, match=r"qa has swizzled scales; this consumer needs row_major "
                                         r"\(qa.with_layout\('row_major'\) converts them\)"):
        qa.require_layout("row_major", "qa")
    with pytest.raises(ValueError, match="scales must hold"):
        seam.QuantizedActivation(v, s[:10], torch.bfloat16, (3, 64), "swizzled")
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        seam.QuantizedActivation([1.0], s, torch.bfloat16, (3, 64))
    with pytest.raises(TypeError, match="values must have dtype"):
        seam.QuantizedActivation(v.view(torch.int8), s, torch.bfloat16, (3, 64))
    raw = seam.QuantizedActivation(v.view(torch.uint8), s, torch.bfloat16, (3, 64))  # bytes: e4m3's view
    assert raw.values.dtype == torch.float8_e4m3fn and torch.equal(raw.values.view(torch.uint8), v.view(torch.uint8))
    with pytest.raises(TypeError, match="scales must have dtype"):
        seam.QuantizedActivation(v, s.float(), torch.bfloat16, (3, 64))
    with pytest.raises(TypeError, match="dtype must be"):
        seam.QuantizedActivation(v, s, "bf16", (3, 64))
    with pytest.raises(ValueError, match=r"values has shape \[3, 64\] but shape is \(M, K\) = \(3, 32\)"):
        seam.QuantizedActivation(v, s, torch.bfloat16, (3, 32))
    with pytest.raises(ValueError, match="multiple of 32"):
        seam.QuantizedActivation(v, s, torch.bfloat16, (3, 48))
    if hasattr(torch, "float8_e8m0fnu"):  # the same scale bytes under torch's UE8M0 dtype: kept as uint8
        qa = seam.QuantizedActivation(v, s.view(torch.float8_e8m0fnu), torch.bfloat16, (3, 64))
        assert qa.scales.dtype == torch.uint8 and torch.equal(qa.scales, s)
    for bad_shape in ((3, True, 64), (3,), 3, (-1, 64)):
        with pytest.raises(ValueError, match=r"shape must be \(M, K\)"):
            seam.QuantizedActivation(v, s, torch.bfloat16, bad_shape)
    # sizes follow checks.integer like every other size argument: bools and floats are TypeErrors
    for bad_shape, name, got in (((3, 64.0), "K", "float"), ((True, 64), "M", "bool"), ((3.0, 64.0), "M", "float")):
        with pytest.raises(TypeError, match=rf"shape\[[01]\] \({name}\) must be an int, got {got}"):
            seam.QuantizedActivation(v, s, torch.bfloat16, bad_shape)
    assert seam.QuantizedActivation(v, s, torch.bfloat16, (np.int64(3), np.int32(64))).shape == (3, 64)
    rv, rs = seam.mxfp8_quantize(x, scale_layout="row_major")
    assert seam.QuantizedActivation(rv, rs, torch.bfloat16, (3, 64), "row_major").layout.value == "row_major"
    with pytest.raises(ValueError, match=r"scales must have shape \[3, 2\] \(row-major\)"):
        seam.QuantizedActivation(rv, rs.reshape(-1), torch.bfloat16, (3, 64), "row_major")
    # dtype and shape by default: BF16 rows of values' own shape
    short = seam.QuantizedActivation(v, s)
    assert (short.dtype, short.shape) == (torch.bfloat16, (3, 64)) and torch.equal(short.scales, s)
    assert seam.QuantizedActivation(v, s, torch.float16).shape == (3, 64)
    assert seam.QuantizedActivation(rv, rs, layout="row_major").layout.value == "row_major"
    with pytest.raises(ValueError, match=r"values must be \[M, K\] when shape is not given, got \[3, 64, 1\]"):
        seam.QuantizedActivation(v.unsqueeze(-1), s)
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        seam.QuantizedActivation([1.0], s)


@pytest.mark.parametrize("m", [0, 1, 3, 130])
def test_quantized_activation_dequantize_is_each_value_times_its_block_scale(device, m):
    """dequantize() is f32(e4m3) * 2^(s - 127) of every element in natural K order (BF16 rounds that once), with
    swizzled or row-major scales, with A_deq beside them (which it does not read), for cut rows too; device is the
    values'."""
    k = 128
    x = torch.randn(m, k).bfloat16()
    if m:
        x[0, 0] = 1e4  # one dominating element: its block's other values go subnormal or to zero
        x[-1, 32:64] = 0  # an all-zero block
    x = x.to(device)
    v, s = seam.mxfp8_quantize(x)
    rv, rs = seam.mxfp8_quantize(x, scale_layout="row_major")
    want = rv.float() * torch.exp2(rs.float() - 127).repeat_interleave(32, dim=1)
    qa = seam.QuantizedActivation(v, s, a_deq=a_deq_from_mxfp8(v, s))
    for rec in (qa, qa.with_layout("row_major"), seam.QuantizedActivation(rv, rs, layout="row_major")):
        assert rec.device == x.device
        got = rec.dequantize()
        assert got.dtype == torch.float32 and got.shape == (m, k) and torch.equal(got, want)
        assert torch.equal(rec.dequantize(torch.bfloat16), want.bfloat16())
    if m >= 3:
        assert torch.equal(qa.rows(1, 3).dequantize(), want[1:3])
    with pytest.raises(TypeError, match="dtype"):
        qa.dequantize(torch.int32)


@pytest.mark.parametrize("m, k", [(0, 128), (1, 128), (40, 128), (130, 128), (33, 96), (129, 160)])
def test_quantized_activation_with_layout_is_the_other_layouts_quantization(device, m, k):
    """with_layout converts the scales to the bytes the quantizer writes in that layout (padding zero), keeps the
    values, returns the record itself where nothing changes, and drops A_deq on the way to row-major; the
    converted record is what mxfp8_linear reads, with the bytes of the rows quantized swizzled."""
    from seam.formats.a_deq import a_deq_from_mxfp8

    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 3).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    rv, rs = seam.mxfp8_quantize(x, scale_layout="row_major")
    row_major = seam.QuantizedActivation(rv, rs, layout="row_major")
    swizzled = row_major.with_layout("SWIZZLED")
    assert swizzled.layout.value == "swizzled" and bytes_equal(swizzled.scales, s) and swizzled.values.data_ptr() == rv.data_ptr()
    assert swizzled.with_layout("swizzled") is swizzled and row_major.with_layout("row_major") is row_major
    qa = seam.QuantizedActivation(v, s, a_deq=a_deq_from_mxfp8(v, s) if k % 128 == 0 else None)
    back = qa.with_layout("row_major")
    assert back.layout.value == "row_major" and bytes_equal(back.scales, rs) and back.a_deq is None
    with pytest.raises(ValueError, match="layout"):
        qa.with_layout("blocked")
    with pytest.raises(TypeError, match="layout"):
        qa.with_layout(None)
    w = seam.MXFP8Weight.from_bf16((torch.randn(64, k) * 0.1).bfloat16().to(device))
    with pytest.raises(ValueError, match=r"x.with_layout\('swizzled'\) converts them"):
        seam.mxfp8_linear(row_major, w)
    assert bytes_equal(seam.mxfp8_linear(swizzled, w), seam.mxfp8_linear(seam.QuantizedActivation(v, s), w))


def test_records_name_swapped_or_misread_scales(device):
    """The mistakes a shape check alone reports obscurely: values and scales passed in each other's place (as
    uint8 bytes both pass the dtype checks), and row-major scales where swizzled ones are expected, get a hint;
    a record's repr names its sizes instead of printing its tensors."""
    x = torch.randn(40, 96).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    raw = v.view(torch.uint8)
    with pytest.raises(ValueError, match="values and scales look swapped"):
        seam.QuantizedActivation(s, raw, torch.bfloat16, (40, 96))
    with pytest.raises(ValueError, match=r"not given, got \[512\] \(values and scales look swapped"):
        seam.QuantizedActivation(s, raw)  # shape from values: the swap is named there too
    with pytest.raises(ValueError, match="values and scales look swapped"):
        seam.MXFP8Weight(s, raw)
    with pytest.raises(ValueError, match="values and scales look swapped"):
        seam.mxfp8_dequantize(s, raw)
    row_major = seam.unswizzle_scales(s, 40, 96)
    with pytest.raises(ValueError, match=r"row-major scales\? \[M, K/32\] is the row-major layout: pass "
                                         r"scale_layout='row_major', or lay them out swizzled"):
        seam.mxfp8_dequantize(v, row_major)
    with pytest.raises(ValueError, match=r"row-major scales\? \[M, K/32\] is the row-major layout: pass "
                                         r"layout='row_major', or lay them out swizzled with seam.swizzle_scales"):
        seam.QuantizedActivation(v, row_major, torch.bfloat16, (40, 96))
    with pytest.raises(ValueError, match=r"\[40, 3\] \(row-major scales\? .*lay them out with seam.swizzle_scales: "
                                         r"flattening them does not\)"):
        seam.MXFP8Weight(v, row_major)  # a weight: swizzled only
    rv, rs = seam.mxfp8_quantize(x, scale_layout="row_major")  # row-major scales in values' place: named too
    for swapped in (lambda: seam.QuantizedActivation(rs, rv.view(torch.uint8), layout="row_major"),
                    lambda: seam.MXFP8Weight(rs, rv.view(torch.uint8))):
        with pytest.raises(ValueError, match=r"look swapped: values are \[rows, K\], row-major scales \[rows, K/32\]"):
            swapped()
    with pytest.raises(ValueError, match="scales must hold 512 bytes") as err:
        seam.mxfp8_dequantize(v, s[:100])
    assert "row-major" not in str(err.value) and "swapped" not in str(err.value)
    qa = seam.QuantizedActivation(v, s, torch.bfloat16, (40, 96))
    assert repr(qa) == (f"QuantizedActivation(M=40, K=96, dtype=torch.bfloat16, layout='swizzled', device={v.device}, "
                        "a_deq=None)")



def test_records_compare_by_identity(device):
    """The records that hold tensors compare and hash by identity, as torch.nn.Module does: a generated
    field-wise == compared tensors and raised "Boolean value of Tensor with more than one value is ambiguous"."""
    from seam.ops.allreduce_moe import MoEOutput, UnfinalizedMoEOutput

    v, s = seam.mxfp8_quantize(torch.randn(4, 64).bfloat16().to(device))
    routed = UnfinalizedMoEOutput(torch.zeros(2, 64, device=device), torch.ones(4, 1, device=device),
                                  torch.zeros(4, 1, dtype=torch.int32, device=device))
    shared = torch.zeros(4, 64, device=device)
    pairs = [(seam.QuantizedActivation(v, s), seam.QuantizedActivation(v, s)),
             (seam.MXFP8Weight(v, s), seam.MXFP8Weight(v, s)), (routed, dataclasses.replace(routed)),
             (MoEOutput(routed, shared), MoEOutput(routed, shared))]
    for a, b in pairs:
        assert a == a and a != b and not (a == b), type(a).__name__
        assert len({a, b, a}) == 2, type(a).__name__


def test_odd_arguments_get_the_checks_own_errors(device):
    """Arguments no check expected: a None beside a tensor (the swap hint read its shape), an int past the float
    range (float() overflowed), a sparse tensor (reported by its strides), a bad layout name (named as another
    argument), scales without columns (reported as K)."""
    x = torch.randn(4, 64).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    with pytest.raises(ValueError, match=r"values must be \[M, K\] when shape is not given, got \[64\]$"):
        seam.QuantizedActivation(v[0], None)
    with pytest.raises(ValueError, match=r"shape K=33 must be a positive multiple of 32 \(the MXFP8 block\)$"):
        seam.QuantizedActivation(None, s, shape=(4, 33))
    with pytest.raises(ValueError, match=r"eps must be a finite float .* got an int of 1329 bits"):
        seam.gemma_rms_norm(x, x[0], 10**400)
    if device == "cpu":  # sparse CUDA tensors need cuSPARSE builds; the check is on the layout either way
        with pytest.raises(TypeError, match=r"x must be a dense \(strided\) tensor, got layout torch.sparse_coo"):
            seam.gemma_rms_norm(x.to_sparse(), x[0], 1e-6)
    with pytest.raises(ValueError, match=r"^layout must be 'row_major', 'swizzled' or 'swizzled_128x4', got 'bogus'"):
        seam.QuantizedActivation(v, s).require_layout("bogus")
    with pytest.raises(ValueError, match=r"scales must have at least one column .* got shape \[4, 0\]"):
        seam.swizzle_scales(torch.zeros(4, 0, dtype=torch.uint8, device=device))

def test_swizzled_scales_must_be_flat(device):
    """Swizzled scales are flat [mxfp8_scale_numel(M, K)]. At M = 128, K = 128 the row-major [M, K/32] scales
    have the swizzled byte count, and were read as swizzled bytes without a word (QuantizedActivation,
    mxfp8_dequantize); now any shape but the flat one is refused, naming the row-major layout where it is
    [M, K/32]. MXFP8Weight already required flat scales."""
    x = torch.randn(128, 128).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    assert s.shape == (512,)
    rm = seam.unswizzle_scales(s, 128, 128)
    assert rm.shape == (128, 4)
    flat_msg = r"scales must hold 512 bytes as a flat \[512\] tensor \(swizzled scales are 1-D"
    hint = "row-major layout: pass "
    for shape, hinted in (((128, 4), True), ((4, 128), False), ((2, 64, 4), False), ((1, 512), False)):
        bad = rm if shape == (128, 4) else s.view(shape)
        with pytest.raises(ValueError, match=flat_msg) as err:
            seam.QuantizedActivation(v, bad, torch.bfloat16, (128, 128))
        assert (hint + "layout='row_major'" in str(err.value)) is hinted
        with pytest.raises(ValueError, match=flat_msg) as err:
            seam.mxfp8_dequantize(v, bad)
        assert (hint + "scale_layout='row_major'" in str(err.value)) is hinted
        with pytest.raises(ValueError, match=r"scales must be flat uint8 of 512 bytes"):
            seam.MXFP8Weight(v, bad)
    # the row-major scales under their own layout, and swizzled with seam.swizzle_scales, are the same rows
    want = seam.mxfp8_dequantize(v, s)
    assert bytes_equal(seam.mxfp8_dequantize(v, rm, scale_layout="row_major"), want)
    assert bytes_equal(seam.mxfp8_dequantize(v, seam.swizzle_scales(rm)), want)
    assert bytes_equal(seam.QuantizedActivation(v, rm, torch.bfloat16, (128, 128), "row_major").scales, rm)
    qa = seam.QuantizedActivation(v, seam.swizzle_scales(rm), torch.bfloat16, (128, 128))
    assert bytes_equal(qa.scales, s)


def test_quantized_activation_rows_are_the_rows_quantized_alone(device):
    """QuantizedActivation.rows(start, stop) equals quantizing those rows alone, byte for byte (swizzled scales
    re-laid for the new M, padding zero), from any start; it shares the parent's bytes where the 128-row chunks
    allow; A_deq is kept at every cut (its K order is the same at every M) and equals the cut rows' own; the GEMM on
    a cut equals the GEMM on the rows quantized alone."""
    from seam.formats.a_deq import a_deq_from_mxfp8

    x = (torch.randn(500, 256, generator=torch.Generator().manual_seed(3)) * 4).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    qa = seam.QuantizedActivation(v, s, torch.bfloat16, (500, 256), a_deq=a_deq_from_mxfp8(v, s))
    rv, rs = seam.mxfp8_quantize(x, scale_layout="row_major")
    qa_rm = seam.QuantizedActivation(rv, rs, torch.bfloat16, (500, 256), "row_major")
    for start, stop, shares in ((0, 500, True), (100, 500, False), (128, 500, True), (128, 256, True), (0, 4, False),
                                (2, 6, False), (130, 200, False), (10, 80, False), (499, 500, False), (7, 7, False)):
        want_v, want_s = seam.mxfp8_quantize(x[start:stop].contiguous())
        cut = qa.rows(start, stop)
        assert cut.shape == (stop - start, 256) and bytes_equal(cut.values, want_v) and bytes_equal(cut.scales, want_s)
        assert (cut.scales.untyped_storage().data_ptr() == s.untyped_storage().data_ptr()) == shares, (start, stop)
        assert bytes_equal(cut.a_deq, a_deq_from_mxfp8(want_v, want_s)), (start, stop)
        cut_rm = qa_rm.rows(start, stop)
        assert bytes_equal(cut_rm.scales, seam.mxfp8_quantize(x[start:stop].contiguous(), scale_layout="row_major")[1])
    w = seam.MXFP8Weight.from_bf16((torch.randn(128, 256) * 0.1).bfloat16().to(device))
    alone = seam.QuantizedActivation(*seam.mxfp8_quantize(x[2:6].contiguous()), torch.bfloat16, (4, 256))
    assert bytes_equal(seam.mxfp8_linear(qa.rows(2, 6), w), seam.mxfp8_linear(alone, w))
    for bad, exc in (((-1, 4), ValueError), ((5, 4), ValueError), ((0, 501), ValueError), ((0.0, 4), TypeError)):
        with pytest.raises(exc, match="start|stop"):
            qa.rows(*bad)


def test_torch_compile(device):
    def f(x):
        v, s = seam.mxfp8_quantize(x * 2)
        return v, s

    x = torch.randn(5, 64).bfloat16().to(device)
    backend = "inductor" if device.type == "cuda" else "aot_eager"
    v, s = torch.compile(f, backend=backend, fullgraph=True)(x)
    rv, rs = mxfp8_quantize_ref((x * 2).cpu())
    assert bytes_equal(v.cpu(), rv) and bytes_equal(s.cpu(), rs)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 192, 2048, 8193])
def test_gpu_full_shapes(m):
    x = (torch.randn(m, 6144, device="cuda") * 3).bfloat16()
    for layout in LAYOUTS:
        _check_kernel_matches_ref(x, layout)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay():
    x = torch.randn(64, 6144, device="cuda").bfloat16()
    values = torch.empty(64, 6144, dtype=torch.float8_e4m3fn, device="cuda")
    scales = torch.empty(seam.mxfp8_scale_numel(64, 6144), dtype=torch.uint8, device="cuda")
    seam.mxfp8_quantize(x, out=(values, scales))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        seam.mxfp8_quantize(x, out=(values, scales))
    for i in range(50):
        x.copy_(torch.randn(64, 6144, device="cuda") * (i + 1))
        g.replay()
        rv, rs = mxfp8_quantize_ref(x.cpu())
        assert bytes_equal(values.cpu(), rv) and bytes_equal(scales.cpu(), rs)


def test_bf16_subnormal_inputs(device):
    """BF16 subnormals must widen exactly (the interpreter's own cast flushes them)."""
    x = torch.full((2, 64), 2.0**-127, dtype=torch.bfloat16)
    x[0, 0] = 2.0**-110
    x[1, 32:] = torch.tensor(9e-41).bfloat16()
    x[1, 40] = 1e-38
    for layout in LAYOUTS:
        _check_kernel_matches_ref(x.to(device), layout)


def test_scale_layout_names_in_any_case():
    """A new user's "Swizzled" or "ROW_MAJOR" names the layout; other names still raise, naming the argument."""
    from seam.formats.mxfp8 import ScaleLayout

    assert ScaleLayout.parse("Swizzled") is ScaleLayout.SWIZZLED
    assert ScaleLayout.parse("SWIZZLED_128x4") is ScaleLayout.SWIZZLED
    assert ScaleLayout.parse("ROW_MAJOR", "scale_layout") is ScaleLayout.ROW_MAJOR
    with pytest.raises(ValueError, match="layout must be 'row_major', 'swizzled' or 'swizzled_128x4', got 'columns'"):
        ScaleLayout.parse("columns", "layout")
    with pytest.raises(TypeError, match="scale_layout must be a str or seam.ScaleLayout, got int"):
        ScaleLayout.parse(3)


def test_option_names_in_any_case_for_every_op():
    """One rule for every string option (a new-user trial found three): the gate/up layout and the linear's
    quantize mode take any case too, and name the argument otherwise."""
    from seam.ops.linear import LinearQuantize
    from seam.ops.swiglu import GateUpLayout

    assert GateUpLayout.parse("SPLIT") is GateUpLayout.SPLIT
    assert LinearQuantize.parse("In_GEMM") is LinearQuantize.IN_GEMM
    with pytest.raises(ValueError, match="layout must be 'split' or 'interleaved', got 'halves'"):
        GateUpLayout.parse("halves")
    with pytest.raises(TypeError, match="quantize must be a str or seam.LinearQuantize, got NoneType"):
        LinearQuantize.parse(None)


def test_dequantize_names_scales_on_another_device():
    values, scales = mxfp8_quantize_ref(torch.randn(4, 64))
    with pytest.raises(ValueError, match="scales"):
        seam.mxfp8_dequantize(values, scales.to("meta"))
