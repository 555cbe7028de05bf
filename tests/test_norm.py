"""Fused add + (Gemma) RMSNorm (+ MXFP8), docs/spec/norm_act.md: residual_out bit-identical,
normed within 1 BF16 ulp of the reference, MXFP8 bytes identical to mxfp8_quantize of the
same call's normed row (with and without also_bf16), edge rows, out= buffers, bad input,
torch.compile."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seam
from seam.compare import bf16_ulp_diff, bytes_equal, ulp_summary
from seam.kernels.norm_quant import norm_config
from seam.ref import norm as ref

EPS = 1e-6
LAYOUTS = ["swizzled", "row_major"]


def _inputs(m, hidden, device, seed=0, x_scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, hidden, generator=g) * x_scale).bfloat16()
    r = torch.randn(m, hidden, generator=g).bfloat16()
    w = (torch.randn(hidden, generator=g) * 0.1).bfloat16()
    return x.to(device), r.to(device), w.to(device)


def _bits_equal_nan(a, b):
    """Bytes equal except that NaN positions only need to match: the NaN payload of a
    BF16 rounding differs between targets (torch keeps it, the GPU writes 0x7FFF)."""
    a, b = a.cpu(), b.cpu()
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    return bytes_equal(torch.where(nan, 0, a), torch.where(nan, 0, b))


def _edge_rows(hidden):
    """(x, residual) BF16 rows, one per edge case of the spec (all-zero, tiny, inf/NaN, -0.0,
    one dominating element), each followed by random columns so that blocks differ."""
    g = torch.Generator().manual_seed(1)
    rnd = torch.randn(hidden, generator=g)
    zero = torch.zeros(hidden)
    dominating = torch.full((hidden,), 1e-3)
    dominating[5] = 3.0e4
    half_nan = rnd.clone()
    half_nan[: hidden // 2] = float("nan")
    rows = {
        "all_zero": (zero, zero),
        "neg_zero": (torch.full((hidden,), -0.0), torch.full((hidden,), -0.0)),
        "cancel_to_zero": (rnd, -rnd),
        "tiny": (torch.full((hidden,), 1e-38), torch.full((hidden,), 1e-40)),
        "tiny_mixed": (rnd * 1e-30, rnd * 1e-39),
        "dominating": (dominating, zero),
        "inf": (torch.where(torch.arange(hidden) == 3, float("inf"), rnd), zero),
        "neg_inf": (torch.where(torch.arange(hidden) == 40, -float("inf"), rnd), rnd),
        "nan": (torch.where(torch.arange(hidden) == 7, float("nan"), rnd), rnd),
        "half_nan": (half_nan, zero),
        "random": (rnd * 5, rnd),
    }
    x = torch.stack([v[0] for v in rows.values()]).bfloat16()
    r = torch.stack([v[1] for v in rows.values()]).bfloat16()
    return list(rows), x, r


def _check_fused(x, r, w, layout, gemma=True):
    """Run the fused op both ways and check every output against the spec's rules."""
    v, s, n, ro = seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, gemma=gemma, also_bf16=True, scale_layout=layout)
    v2, s2, ro2 = seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, gemma=gemma, scale_layout=layout)
    ref_n, ref_ro = ref.fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), EPS, gemma=gemma)
    assert bytes_equal(ro.cpu(), ref_ro), "residual_out is not bit-identical"
    assert bytes_equal(ro2.cpu(), ref_ro), "residual_out (no also_bf16) is not bit-identical"
    ok, summary = ulp_summary(n.cpu(), ref_n)
    assert ok, f"normed beyond 1 BF16 ulp: {summary}"
    # only the reduction order differs (rstd by an fp32 ulp): a normed byte moves rarely (norm_config's measurement:
    # 0.001% at most), so the 1-ulp bound alone would pass a normed rounded by truncation instead of RNE
    equal = float((bf16_ulp_diff(n.cpu(), ref_n) == 0).float().mean())
    assert equal > 0.9, f"normed not the reference's RNE: {summary}"
    qv, qs = seam.mxfp8_quantize(n, scale_layout=layout)
    rv, rs = seam.ref.mxfp8_quantize_ref(n.cpu(), scale_layout=layout)
    assert bytes_equal(v.cpu(), rv) and bytes_equal(s.cpu(), rs), "MXFP8 != reference quantizer of the same normed"
    assert bytes_equal(v, qv) and bytes_equal(s, qs), "MXFP8 != mxfp8_quantize(normed) of the same call"
    assert bytes_equal(v2, v) and bytes_equal(s2, s), "also_bf16=False changed the MXFP8 bytes"
    return summary


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [1, 127, 128, 129])
def test_gemma_add_norm_mxfp8_rows(device, m, layout):
    x, r, w = _inputs(m, 96, device, seed=m)  # hidden 96: 3 scale columns, 1 padding column
    summary = _check_fused(x, r, w, layout)
    print(f"M={m} {layout}: normed {summary}")


@pytest.mark.parametrize("gemma", [True, False])
@pytest.mark.parametrize("hidden", [32, 256, 800])
def test_plain_and_gemma_weight(device, hidden, gemma):
    x, r, w = _inputs(5, hidden, device, seed=hidden)
    _check_fused(x, r, w, "swizzled", gemma=gemma)


def test_model_hidden_6144(device):
    # The model width (not a power of two: masked 8192-wide tile).
    x, r, w = _inputs(2, 6144, device)
    print("H=6144 normed", _check_fused(x, r, w, "swizzled"))


@pytest.mark.parametrize("m, hidden", [(12, 6144), (11, 5120), (9, 4128)])
def test_masked_quarters_skipped(device, m, hidden):
    # One row per program whose tile's last quarter is all masked: that quarter takes no normalize, quantize or
    # store work (norm_config's LIVE_QUARTERS); 4128's padding scale columns (129 -> 132) in the third quarter.
    assert norm_config(m, hidden)[3] == 3
    x, r, w = _inputs(m, hidden, device, seed=hidden)
    names, ex, er = _edge_rows(hidden)
    x[: min(m, len(names))], r[: min(m, len(names))] = ex[:m].to(device), er[:m].to(device)
    for layout in LAYOUTS:
        v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True, scale_layout=layout)
        ref_n, ref_ro = ref.gemma_fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), EPS)
        assert _bits_equal_nan(ro, ref_ro)
        ok, summary = ulp_summary(n.cpu(), ref_n)
        assert ok, summary
        qv, qs = seam.mxfp8_quantize(n, scale_layout=layout)
        assert bytes_equal(v, qv) and bytes_equal(s, qs)


@pytest.mark.parametrize("m, hidden", [(1, 4100), (9, 6143), (3, 6144), (2, 6150), (1, 8200)])
def test_bf16_norms_write_every_column_beside_the_masked_quarter(device, m, hidden):
    # The BF16 norms take any hidden: the row's last columns (4100: 4096-4099, not a whole 32-column block) lie
    # in the third quarter and are written like the rest (6150 and 8200 keep the whole tile). The outputs start
    # as NaN, so a column no program stores shows.
    assert norm_config(m, hidden)[3] == (3 if hidden <= 6144 else 4)
    x, r, w = _inputs(m, hidden, device, seed=hidden)
    n, ro = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=(n, ro))
    ref_n, ref_ro = ref.gemma_fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), EPS)
    assert bytes_equal(ro.cpu(), ref_ro)
    ok, summary = ulp_summary(n.cpu(), ref_n)
    assert ok and not torch.isnan(n).any(), summary
    alone = torch.full_like(x, float("nan"))
    seam.gemma_rms_norm(x, w, EPS, out=alone)
    ok, summary = ulp_summary(alone.cpu(), ref.gemma_rms_norm_ref(x.cpu(), w.cpu(), EPS))
    assert ok and not torch.isnan(alone).any(), summary


def test_gemma_wrapper_equals_gemma_flag(device):
    x, r, w = _inputs(3, 64, device)
    a = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)
    b = seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, gemma=True, also_bf16=True)
    assert all(bytes_equal(p, q) for p, q in zip(a, b))
    assert len(seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS)) == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_edge_rows(device, layout):
    names, x, r = _edge_rows(96)
    w = (torch.randn(96, generator=torch.Generator().manual_seed(2)) * 0.1).bfloat16()
    v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(
        x.to(device), r.to(device), w.to(device), EPS, also_bf16=True, scale_layout=layout
    )
    ref_n, ref_ro = ref.gemma_fused_add_rms_norm_ref(x, r, w, EPS)
    assert _bits_equal_nan(ro, ref_ro)
    for i, name in enumerate(names):
        ok, summary = ulp_summary(n[i].cpu(), ref_n[i])
        assert ok, f"{name}: {summary}"
    qv, qs = seam.mxfp8_quantize(n, scale_layout=layout)
    assert bytes_equal(v, qv) and bytes_equal(s, qs)
    # -0.0 + -0.0 stays -0.0 in residual_out
    assert (ro[names.index("neg_zero")].cpu().view(torch.int16) == -32768).all()


def test_zero_eps_zero_row(device):
    # eps = 0 on an all-zero row: rsqrt(0) = inf, 0 * inf = NaN in kernel and reference alike.
    x = torch.zeros(2, 64, dtype=torch.bfloat16, device=device)
    w = torch.zeros(64, dtype=torch.bfloat16, device=device)
    n, ro = seam.gemma_fused_add_rms_norm(x, x.clone(), w, 0.0)
    assert torch.isnan(n).all() and bytes_equal(ro, x)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_x_reaches_the_mxfp8_rows_finite(value, device):
    """README, "Non-finite values": residual_out keeps the NaN / inf; normed is NaN across a NaN's row, and NaN at an
    inf with +-0 in the rest of its row (the RMS is inf). The MXFP8 rows store those NaNs as the finite +448 (0x7e)
    at scale 0 (the block's amax ignores NaN), so they read back as 448 x 2^-127, the +-0 as +-0."""
    x, r, w = _inputs(2, 64, device, seed=5)
    x[0, 9] = value
    v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True, scale_layout="row_major")
    assert torch.isnan(ro[0, 9]) if value != value else ro[0, 9].item() == value
    nan = torch.isnan(n[0])
    assert nan.all() if value != value else (nan.nonzero().flatten().tolist() == [9] and (n[0][~nan] == 0).all())
    assert not torch.isnan(n[1]).any() and (s[0] == 0).all()
    assert (v[0].view(torch.uint8)[nan] == 0x7E).all() and (v[0].float()[~nan] == 0).all()
    deq = seam.QuantizedActivation(v, s, layout="row_major").dequantize()
    assert torch.isfinite(deq).all() and (deq[0][nan] == 448 * 2.0**-127).all()


def test_gemma_rms_norm_and_add_norm(device):
    x, r, w = _inputs(9, 160, device)
    ok, summary = ulp_summary(seam.gemma_rms_norm(x, w, EPS).cpu(), ref.gemma_rms_norm_ref(x.cpu(), w.cpu(), EPS))
    assert ok, summary
    n, ro = seam.gemma_fused_add_rms_norm(x, r, w, EPS)
    rn, rro = ref.gemma_fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), EPS)
    assert bytes_equal(ro.cpu(), rro)
    ok, summary = ulp_summary(n.cpu(), rn)
    assert ok, summary


def test_hidden_not_multiple_of_32_for_plain_norm(device):
    # The BF16-only norms take any hidden; only the MXFP8 output needs multiples of 32.
    x, r, w = _inputs(3, 50, device)
    ok, _ = ulp_summary(seam.gemma_rms_norm(x, w, EPS).cpu(), ref.gemma_rms_norm_ref(x.cpu(), w.cpu(), EPS))
    assert ok


@pytest.mark.parametrize("name", ["gemma_rms_norm", "fused_add_rms_norm", "gemma_fused_add_rms_norm",
                                  "fused_add_rms_norm_mxfp8", "gemma_fused_add_rms_norm_mxfp8",
                                  "allreduce_gemma_rms_norm_mxfp8"])
def test_hidden_limit_documented_and_enforced(device, name):
    """One program holds a whole row: hidden 16384 + 32 is refused, and every docstring says so."""
    op = getattr(seam, name)
    assert "16384" in op.__doc__
    x = torch.zeros(1, 16384 + 32, dtype=torch.bfloat16, device=device)
    w = torch.zeros(16384 + 32, dtype=torch.bfloat16, device=device)
    args = (x, w) if name == "gemma_rms_norm" else (x, x.clone(), w)
    with pytest.raises(ValueError, match=r"hidden \(x.shape\[1\]\)=16416 is outside \[1, 16384\]"):
        op(*args, 1e-6)


def test_strided_rows(device):
    # x and residual may be row slices of wider buffers (row stride > hidden).
    big_x, big_r, _ = _inputs(4, 192, device)
    _, _, w = _inputs(4, 64, device)
    x, r = big_x[:, 64:128], big_r[:, :64]
    v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)
    rn, rro = ref.gemma_fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), EPS)
    assert bytes_equal(ro.cpu(), rro) and ulp_summary(n.cpu(), rn)[0]
    qv, qs = seam.mxfp8_quantize(n)
    assert bytes_equal(v, qv) and bytes_equal(s, qs)


@pytest.mark.parametrize("also_bf16", [False, True])
def test_out_buffers(device, also_bf16):
    x, r, w = _inputs(3, 64, device)
    m, h = x.shape
    values = torch.empty(m, h, dtype=torch.float8_e4m3fn, device=device)
    scales = torch.full((seam.mxfp8_scale_numel(m, h),), 0xAB, dtype=torch.uint8, device=device)
    normed = torch.empty(m, h, dtype=torch.bfloat16, device=device)
    res = torch.empty(m, h, dtype=torch.bfloat16, device=device)
    out = (values, scales, normed, res) if also_bf16 else (values, scales, res)
    got = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=also_bf16, out=out)
    assert all(a is b for a, b in zip(got, out))
    want = ref.gemma_fused_add_rms_norm_mxfp8_ref(x.cpu(), r.cpu(), w.cpu(), EPS, also_bf16=also_bf16)
    assert bytes_equal(got[-1].cpu(), want[-1])
    # the same call's normed rows quantize to the same bytes; padding bytes (0xAB before) are zero
    same_normed = normed if also_bf16 else seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)[2]
    qv, qs = seam.mxfp8_quantize(same_normed)
    assert bytes_equal(values, qv) and bytes_equal(scales, qs)
    assert int((scales.cpu() == 0xAB).sum()) == 0
    n_out = torch.empty(m, h, dtype=torch.bfloat16, device=device)
    assert seam.gemma_rms_norm(x, w, EPS, out=n_out) is n_out
    pair = (torch.empty_like(n_out), torch.empty_like(n_out))
    got = seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=pair)
    assert got[0] is pair[0] and got[1] is pair[1]


def _bad_cases(device):
    x, r, w = _inputs(4, 64, device)
    m, h = x.shape
    f8 = lambda *s: torch.empty(*s, dtype=torch.float8_e4m3fn, device=device)  # noqa: E731
    u8 = lambda *s: torch.empty(*s, dtype=torch.uint8, device=device)  # noqa: E731
    bf = lambda *s: torch.empty(*s, dtype=torch.bfloat16, device=device)  # noqa: E731
    n_sc = seam.mxfp8_scale_numel(m, h)
    x_odd, r_odd, w_odd = _inputs(4, 48, device)
    meta = torch.empty(m, h, dtype=torch.bfloat16, device="meta")
    r_big = torch.cat((r, r[:1]))
    return [
        (TypeError, "x must have dtype", dict(x=x.float())),
        (TypeError, "x must be a torch.Tensor", dict(x=x.tolist())),
        (TypeError, "residual must have dtype", dict(residual=r.half())),
        (TypeError, "weight must have dtype", dict(weight=w.float())),
        (ValueError, "x must be 2-D", dict(x=x[None])),
        (ValueError, "residual must have shape", dict(residual=r[:2])),
        (ValueError, "weight must have shape", dict(weight=w[:32])),
        (ValueError, "unit column stride", dict(x=x.t().contiguous().t())),
        (ValueError, "hidden .* multiple of 32", dict(x=x_odd, residual=r_odd, weight=w_odd)),
        (ValueError, "eps must be >= 0", dict(eps=-1e-6)),
        (ValueError, r"hidden \(x.shape\[1\]\)=32768 is outside", dict(x=bf(m, 32768), residual=bf(m, 32768))),
        (ValueError, "eps must be a finite", dict(eps=float("nan"))),
        (ValueError, "eps must be a finite float .in fp32", dict(eps=1e300)),  # finite in Python, inf in fp32
        (TypeError, "eps must be a float", dict(eps="1e-6")),
        (ValueError, "scale_layout must be", dict(scale_layout="columns")),
        (TypeError, "also_bf16 must be a bool", dict(also_bf16=1)),
        (ValueError, "residual is on meta", dict(residual=meta)),
        (TypeError, r"out must be a tuple or list of 3 buffers \(values, scales, residual_out\), got a tuple of 2",
         dict(out=(f8(m, h), u8(n_sc)))),
        (TypeError, r"out must be a tuple or list of 3 buffers \(values, scales, residual_out\), got a list of 4",
         dict(out=[f8(m, h), u8(n_sc), bf(m, h), bf(m, h)])),
        (ValueError, r"out\[1\] \(scales\) must hold \d+ bytes as a flat \[\d+\] tensor \(swizzled scales are 1-D",
         dict(out=(f8(m, h), u8(n_sc // 16, 16), bf(m, h)))),
        (TypeError, r"out\[0\] \(values\) must have dtype", dict(out=(bf(m, h), u8(n_sc), bf(m, h)))),
        (ValueError, r"out\[1\] \(scales\) must hold", dict(out=(f8(m, h), u8(n_sc - 4), bf(m, h)))),
        (ValueError, r"out\[2\] \(residual_out\) must have shape", dict(out=(f8(m, h), u8(n_sc), bf(m, h + 32)))),
        (ValueError, r"out\[2\] \(residual_out\) overlaps input residual in memory; pass a separate buffer or "
                     "residual itself",
         dict(residual=r_big[:m], out=(f8(m, h), u8(n_sc), r_big[1:]))),  # overlapping, not the same view
    ], (x, r, w)


def test_numpy_scalar_eps_accepted(device):
    """A NumPy float (e.g. a config value read through numpy) is a float argument like Python's."""
    x, r, w = _inputs(3, 64, device)
    got = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, np.float32(EPS))
    want = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, float(np.float32(EPS)))
    assert all(bytes_equal(a, b) for a, b in zip(got, want))


def test_bad_input_rejected_and_buffers_untouched(device):
    cases, (x, r, w) = _bad_cases(device)
    before = [t.clone() for t in (x, r, w)]
    for exc, match, kw in cases:
        args = dict(x=x, residual=r, weight=w, eps=EPS)
        args.update(kw)
        outs = [o.clone() for o in kw.get("out", ())]
        with pytest.raises(exc, match=match):
            seam.gemma_fused_add_rms_norm_mxfp8(
                args.pop("x"), args.pop("residual"), args.pop("weight"), args.pop("eps"), **args
            )
        assert all(bytes_equal(p, q) for p, q in zip(before, (x, r, w))), f"an input changed on {match}"
        for snap, buf in zip(outs, kw.get("out", ())):
            assert bytes_equal(snap, buf), f"out buffer written on {match}"


def test_missing_residual_rejected(device):
    """residual is required by every fused add+norm (a None used to leave residual_out unwritten)."""
    x, r, w = _inputs(2, 64, device)
    outs = (torch.full_like(x, 123.0), torch.full_like(x, 123.0))
    with pytest.raises(TypeError, match="residual must be a torch.Tensor"):
        seam.fused_add_rms_norm(x, None, w, EPS, out=outs)
    with pytest.raises(TypeError, match="residual must be a torch.Tensor"):
        seam.gemma_fused_add_rms_norm_mxfp8(x, None, w, EPS)
    with pytest.raises(TypeError, match="residual must be a torch.Tensor"):
        seam.allreduce_gemma_rms_norm_mxfp8(x, None, w, EPS)
    assert all(o.eq(123.0).all() for o in outs)


def test_bad_out_for_bf16_norms(device):
    x, r, w = _inputs(4, 64, device)
    with pytest.raises(ValueError, match="out must have shape"):
        seam.gemma_rms_norm(x, w, EPS, out=torch.empty(4, 32, dtype=torch.bfloat16, device=device))
    with pytest.raises(ValueError, match="overlaps input x"):
        seam.gemma_rms_norm(x, w, EPS, out=x)
    with pytest.raises(TypeError, match=r"out must be a tuple or list of 2 buffers \(normed, residual_out\), "
                                        "got torch.Tensor"):
        seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=x)
    with pytest.raises(TypeError, match=r"out must be a tuple or list of 2 buffers \(normed, residual_out\), "
                                        r"got a tuple of 3"):
        seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=(x, r, x))
    n = torch.empty_like(x)
    with pytest.raises(ValueError, match="overlap"):
        seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=(n, n))


def test_torch_compile(device):
    x, r, w = _inputs(3, 64, device)

    def layer(x, r, w):
        v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)
        n2, ro2 = seam.gemma_fused_add_rms_norm(x, r, w, EPS)
        return v, s, n, ro, seam.gemma_rms_norm(x, w, EPS), n2, ro2

    backend = "aot_eager" if device.type == "cpu" else "inductor"
    got = torch.compile(layer, backend=backend, fullgraph=True)(x, r, w)
    want = layer(x, r, w)
    assert all(bytes_equal(a, b) for a, b in zip(got, want))


@settings(max_examples=12, deadline=None)
@given(
    m=st.integers(1, 40),
    cols=st.integers(1, 9),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 300.0, 3e4]),
    seed=st.integers(0, 2**16),
)
def test_property_random_shapes(m, cols, scale, seed):
    device = seam.runtime.kernel_device()
    x, r, w = _inputs(m, cols * 32, device, seed=seed, x_scale=scale)
    _check_fused(x, r, w, "swizzled")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [1, 8, 12, 16, 64, 128, 192, 512, 2048, 8192])
def test_gpu_full_shapes(device, m, layout):
    x, r, w = _inputs(m, 6144, device, seed=m)
    summary = _check_fused(x, r, w, layout)
    print(f"GPU M={m} {layout}: normed {summary}")


@pytest.mark.gpu
def test_gpu_cuda_graph_replay(device):
    x, r, w = _inputs(64, 6144, device)
    out = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)
    want = [t.clone() for t in out]
    for t in out:
        t.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True, out=out)
    graph.replay()
    torch.cuda.synchronize()
    assert all(bytes_equal(a, b) for a, b in zip(out, want))


@pytest.mark.parametrize("gemma", [False, True])
def test_fused_add_rms_norm_both_weights(device, gemma):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, 256, generator=g) * 2).bfloat16().to(device)
    r = torch.randn(5, 256, generator=g).bfloat16().to(device)
    w = (torch.randn(256, generator=g) * 0.1 + (0 if gemma else 1)).bfloat16().to(device)
    normed, residual_out = seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=gemma)
    ref_n, ref_ro = ref.fused_add_rms_norm_ref(x.cpu(), r.cpu(), w.cpu(), 1e-6, gemma=gemma)
    assert bytes_equal(residual_out.cpu(), ref_ro)
    ok, detail = ulp_summary(normed.cpu(), ref_n)
    assert ok, detail
    with pytest.raises(TypeError, match="gemma must be a bool"):
        seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=1)


def test_stride_0_rows_read_like_mxfp8_linear(device):
    """x and residual may repeat one row (expand(), row stride 0), as mxfp8_linear's x may: the kernel reads
    rows at their stride. The same results as the contiguous copies."""
    x1, r1, w = _inputs(1, 64, device)
    x, r = x1.expand(5, 64), r1.expand(5, 64)
    xc, rc = x.contiguous(), r.contiguous()
    assert bytes_equal(seam.gemma_rms_norm(x, w, EPS), seam.gemma_rms_norm(xc, w, EPS))
    for got, want in (
        (seam.fused_add_rms_norm(x, r, w, EPS), seam.fused_add_rms_norm(xc, rc, w, EPS)),
        (seam.fused_add_rms_norm(xc, r, w, EPS, gemma=True), seam.fused_add_rms_norm(xc, rc, w, EPS, gemma=True)),
        (seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True),
         seam.fused_add_rms_norm_mxfp8(xc, rc, w, EPS, also_bf16=True)),
        (seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, scale_layout="row_major"),
         seam.gemma_fused_add_rms_norm_mxfp8(xc, rc, w, EPS, scale_layout="row_major")),
    ):
        assert all(bytes_equal(a, b) for a, b in zip(got, want))


def test_stride_0_residual_not_written_in_place(device):
    """In place (out=(x, residual), vLLM's call) a residual of one repeated row would take overlapping writes:
    refused, naming its strides and why, before any launch."""
    x1, r1, w = _inputs(1, 64, device)
    x, r = x1.expand(5, 64).contiguous(), r1.expand(5, 64)
    before = (x.clone(), r1.clone())
    msg = (r"out\[{}\] \(residual_out\) must be contiguous: strides \(64, 1\) for shape \[5, 64\], got \(0, 1\) "
           r"\(a stride of 0, as from expand\(\), repeats elements in memory: the op's writes to them would overlap\)")
    with pytest.raises(ValueError, match=msg.format(1)):
        seam.fused_add_rms_norm(x, r, w, EPS, out=(x, r))
    values, scales = seam.mxfp8_quantize(x)
    with pytest.raises(ValueError, match=msg.format(2)):
        seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, out=(values, scales, r))
    assert bytes_equal(x, before[0]) and bytes_equal(r1, before[1])
