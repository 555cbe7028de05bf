"""SwiGLU-OAI (+ MXFP8), docs/spec/norm_act.md: BF16 activation within relative L2 5e-3 of
float64; the fused MXFP8 (fp32 act) has the unfused chain's scales on random data and is at
least as close to float64; round_to_bf16 is bit-identical to mxfp8_quantize(swiglu_oai(x));
layouts, limit=None, edge values, out= buffers, bad input, torch.compile."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seam
from seam.compare import bf16_ulp_diff, bytes_equal, ulp_summary
from seam.formats.mxfp8 import mxfp8_dequantize, mxfp8_quantize_ref
from seam.ref import swiglu as ref
from seam.verify.case_swiglu import boundary_blocks

LAYOUTS = ["split", "interleaved"]
SCALE_LAYOUTS = ["swizzled", "row_major"]


def _gate_up(m, inter, device, seed=0, scale=8.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, 2 * inter, generator=g) * scale).bfloat16().to(device)


def _rel_l2(a, b64):
    return float((a.double().cpu() - b64).norm() / b64.norm().clamp_min(1e-300))


def _dequant(v, s, layout):
    return mxfp8_dequantize(v.cpu(), s.cpu(), scale_layout=layout, dtype=torch.float32).double()


def _boundary_blocks(act):
    return boundary_blocks(act.cpu())


def _within_one_ulp(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Assert BF16 ``got`` within one ulp of the reference ``want`` and more than 90% exact (they differ only where
    the sigmoids differ by their last bit); return the per-element ulps."""
    ulps = bf16_ulp_diff(got, want)
    assert int(ulps.max()) <= 1 and float((ulps == 0).float().mean()) > 0.9, ulp_summary(got, want)
    return ulps


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [1, 127, 128, 129])
def test_swiglu_bf16_accuracy(device, m, layout):
    x = _gate_up(m, 96, device, seed=m)
    out = seam.swiglu_oai(x, layout=layout)
    assert out.dtype == torch.bfloat16 and out.shape == (m, 96)
    err = _rel_l2(out, ref.swiglu_oai_f64_ref(x.cpu(), layout=layout))
    assert err < 5e-3, err
    # the fp32 reference rounded once (RNE) differs only where the sigmoids differ by an ulp: by one BF16 ulp at
    # most, and rarely (an absolute bound such as 0.25 is many ulps below 32 and let a truncating rounding pass)
    _within_one_ulp(out.cpu(), ref.swiglu_oai_ref(x.cpu(), layout=layout))


@pytest.mark.parametrize("scale_layout", SCALE_LAYOUTS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [1, 127, 128, 129])
def test_swiglu_mxfp8_vs_unfused(device, m, layout, scale_layout):
    x = _gate_up(m, 96, device, seed=m)  # I 96: 3 scale columns, 1 padding column
    v, s = seam.swiglu_oai_mxfp8(x, layout=layout, scale_layout=scale_layout)
    act_bf16 = seam.swiglu_oai(x, layout=layout)
    uv, us = seam.mxfp8_quantize(act_bf16, scale_layout=scale_layout)
    # round_to_bf16: bit-identical to the unfused chain
    bv, bs = seam.swiglu_oai_mxfp8(x, layout=layout, round_to_bf16=True, scale_layout=scale_layout)
    assert bytes_equal(bv, uv) and bytes_equal(bs, us)
    # default: same scales except at 448*2^k amax boundaries; at least as accurate
    fused_rows = s if scale_layout == "row_major" else seam.unswizzle_scales(s.cpu(), m, 96)
    unfused_rows = us if scale_layout == "row_major" else seam.unswizzle_scales(us.cpu(), m, 96)
    differ = fused_rows.cpu() != unfused_rows.cpu()
    assert not (differ & ~_boundary_blocks(act_bf16)).any()
    exact = ref.swiglu_oai_f64_ref(x.cpu(), layout=layout)
    err_fused = _rel_l2(_dequant(v, s, scale_layout), exact)
    err_unfused = _rel_l2(_dequant(uv, us, scale_layout), exact)
    assert err_fused <= err_unfused * 1.0001, (err_fused, err_unfused)
    diff = float((v.cpu().view(torch.uint8) != uv.cpu().view(torch.uint8)).float().mean())
    print(f"M={m} {layout}/{scale_layout}: E4M3 bytes differing from the unfused chain {diff:.2%}")


@pytest.mark.parametrize("scale_layout", SCALE_LAYOUTS)
def test_swiglu_mxfp8_matches_fp32_reference_bytes(device, scale_layout):
    # The kernel's fp32 act is the reference's up to the sigmoid; where the sigmoid agrees
    # (the interpreter's numpy sigmoid vs torch's on CPU), the bytes agree.
    x = _gate_up(33, 64, device, seed=3)
    v, s = seam.swiglu_oai_mxfp8(x, scale_layout=scale_layout)
    rv, rs = ref.swiglu_oai_mxfp8_ref(x.cpu(), scale_layout=scale_layout)
    assert bytes_equal(s.cpu(), rs)
    assert float((v.cpu().view(torch.uint8) != rv.view(torch.uint8)).float().mean()) < 0.01


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_launch_config_writes_the_same_bytes(device, monkeypatch, layout):
    """Each (BLOCK_M, BLOCK_I) swiglu_config can return, forced at 13 rows (a partial row block, swizzled
    padding rows): the bytes of the one-row-per-program launch, MXFP8 and BF16."""
    from seam.kernels import swiglu_quant
    x = _gate_up(13, 160, device, seed=5)  # I 160: 5 scale columns, 3 padding columns
    want = (*seam.swiglu_oai_mxfp8(x, layout=layout), seam.swiglu_oai(x, layout=layout))
    assert swiglu_quant.swiglu_config(13, 256)[0] == 1
    configs = {swiglu_quant.swiglu_config(m, cover) for m in (1, 64, 2048, 8192) for cover in (128, 256)}
    assert {c[0] for c in configs} == {1, 2, 4, 8} and {c[1] for c in configs} == {128, 256}
    for config in sorted(configs):
        monkeypatch.setattr(swiglu_quant, "swiglu_config", lambda m, cover, config=config: config)
        got = (*seam.swiglu_oai_mxfp8(x, layout=layout), seam.swiglu_oai(x, layout=layout))
        assert all(bytes_equal(a, b) for a, b in zip(got, want)), config


def test_seed_data_scales_identical(device):
    # The seed's measurement: randn * 8 at decode sizes, I = 768: 0 differing scale blocks.
    x = _gate_up(8, 768, device, seed=0, scale=8.0)
    _, s = seam.swiglu_oai_mxfp8(x)
    _, us = seam.mxfp8_quantize(seam.swiglu_oai(x))
    assert bytes_equal(s, us)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_limit(device, layout):
    x = _gate_up(5, 64, device, seed=5, scale=12.0)
    out = seam.swiglu_oai(x, limit=None, layout=layout)
    assert _rel_l2(out, ref.swiglu_oai_f64_ref(x.cpu(), limit=None, layout=layout)) < 5e-3
    assert out.float().abs().max() > 60  # unclamped values exceed 7 * 8
    bv, bs = seam.swiglu_oai_mxfp8(x, limit=None, layout=layout, round_to_bf16=True)
    uv, us = seam.mxfp8_quantize(out)
    assert bytes_equal(bv, uv) and bytes_equal(bs, us)


def test_custom_alpha_beta_limit(device):
    x = _gate_up(4, 32, device, seed=9)
    kw = dict(alpha=1.0, beta=0.5, limit=3.0)
    assert _rel_l2(seam.swiglu_oai(x, **kw), ref.swiglu_oai_f64_ref(x.cpu(), **kw)) < 5e-3


def test_plain_swiglu_is_silu_gate_times_up(device):
    """The docstrings' plain SwiGLU (Llama, Qwen, DeepSeek): alpha 1, beta 0, no limit is silu(gate) * up."""
    x = _gate_up(6, 64, device, seed=11)
    gate, up = x.cpu().double().chunk(2, dim=1)
    want = torch.nn.functional.silu(gate) * up
    assert _rel_l2(seam.swiglu_oai(x, alpha=1.0, beta=0.0, limit=None), want) < 5e-3


def test_edge_values(device):
    inter = 64
    gate = torch.randn(6, inter)
    up = torch.randn(6, inter)
    gate[0], up[0] = 0.0, 0.0  # all-zero row
    gate[1], up[1] = -0.0, -0.0  # -0.0
    gate[2] *= 1e-38  # tiny
    gate[3, 5], up[3, 6] = float("inf"), -float("inf")  # clamped by limit
    gate[4, 7], up[4, 9] = float("nan"), float("nan")
    gate[5, :32] = -200.0  # sigmoid underflow: act -> -0
    edge = ~(gate.isfinite() & up.isfinite())
    edge[:2] = edge[5, :32] = True  # the zero rows, the non-finite entries, the sigmoid underflow
    x = torch.cat([gate, up], dim=1).bfloat16().to(device)
    out = seam.swiglu_oai(x)
    want = ref.swiglu_oai_ref(x.cpu())
    assert torch.equal(torch.isnan(out.cpu()), torch.isnan(want))
    # ulps, not an absolute bound: 0.25 passed a BF16 output that flushed the tiny row's subnormal activations
    # (which the MXFP8 rows, scale byte 0 there, cannot show). The rows whose values no sigmoid rounding
    # touches (zeros, -0.0, tiny, underflow) take the reference's bytes; the clamped entries, whose partner is
    # random, the same 1-ulp rule as the rest.
    ulps = _within_one_ulp(out.cpu(), want)
    assert not ulps[:3].any() and not ulps[5, :32].any(), ulp_summary(out.cpu(), want)
    assert (out[0].cpu() == 0).all() and (out[1].cpu() == 0).all()
    for round_to_bf16 in (False, True):
        v, s = seam.swiglu_oai_mxfp8(x, round_to_bf16=round_to_bf16)
        rv, rs = mxfp8_quantize_ref(want if round_to_bf16 else ref.swiglu_oai_f32_ref(x.cpu()))
        assert bytes_equal(s.cpu(), rs)
        # values: the reference's bytes at every edge entry; elsewhere up to the sigmoid's last bit (as above)
        differ = v.cpu().view(torch.uint8) != rv.view(torch.uint8)
        assert not differ[edge].any() and float(differ.float().mean()) < 0.01
        if round_to_bf16:
            uv, us = seam.mxfp8_quantize(out)
            assert bytes_equal(v, uv) and bytes_equal(s, us)


def test_strided_rows(device):
    big = _gate_up(3, 128, device)
    x = big[:, 64:192]  # [3, 128] with row stride 256
    assert bytes_equal(seam.swiglu_oai(x), seam.swiglu_oai(x.contiguous()))
    a, b = seam.swiglu_oai_mxfp8(x), seam.swiglu_oai_mxfp8(x.contiguous())
    assert bytes_equal(a[0], b[0]) and bytes_equal(a[1], b[1])


def test_model_intermediate_768(device):
    x = _gate_up(3, 768, device, seed=1)
    for layout in LAYOUTS:
        out = seam.swiglu_oai(x, layout=layout)
        assert _rel_l2(out, ref.swiglu_oai_f64_ref(x.cpu(), layout=layout)) < 5e-3
        bv, bs = seam.swiglu_oai_mxfp8(x, layout=layout, round_to_bf16=True)
        uv, us = seam.mxfp8_quantize(out)
        assert bytes_equal(bv, uv) and bytes_equal(bs, us)


def test_out_buffers(device):
    x = _gate_up(3, 64, device)
    out = torch.empty(3, 64, dtype=torch.bfloat16, device=device)
    assert seam.swiglu_oai(x, out=out) is out
    values = torch.empty(3, 64, dtype=torch.float8_e4m3fn, device=device)
    scales = torch.full((seam.mxfp8_scale_numel(3, 64),), 0xAB, dtype=torch.uint8, device=device)
    got = seam.swiglu_oai_mxfp8(x, round_to_bf16=True, out=(values, scales))
    assert got[0] is values and got[1] is scales
    uv, us = seam.mxfp8_quantize(out)
    assert bytes_equal(values, uv) and bytes_equal(scales, us)  # padding 0xAB -> 0


def test_bad_input_rejected_and_buffers_untouched(device):
    x = _gate_up(4, 64, device)
    before = x.clone()
    f8 = torch.zeros(4, 64, dtype=torch.float8_e4m3fn, device=device)
    sc = torch.zeros(seam.mxfp8_scale_numel(4, 64), dtype=torch.uint8, device=device)
    bf = torch.zeros(4, 64, dtype=torch.bfloat16, device=device)
    cases = [
        (TypeError, "gate_up must have dtype", dict(gate_up=x.float())),
        (TypeError, "gate_up must be a torch.Tensor", dict(gate_up=x.tolist())),
        (ValueError, "gate_up must be 2-D", dict(gate_up=x[None])),
        (ValueError, "must be even", dict(gate_up=x[:, :127])),
        (ValueError, "unit column stride", dict(gate_up=x.t().contiguous().t())),
        (ValueError, "I .* multiple of 32", dict(gate_up=x[:, :96].contiguous())),
        (ValueError, "limit must be a finite positive", dict(limit=-1.0)),
        (ValueError, r"limit must be at least 2\^-126", dict(limit=1e-40)),  # fp32 subnormal
        (ValueError, r"limit must be at least 2\^-126", dict(limit=1e-50)),  # 0 in fp32
        (TypeError, "alpha must be a float", dict(alpha="1.7")),
        (ValueError, "beta must be a finite", dict(beta=float("inf"))),
        (ValueError, "layout must be 'split' or 'interleaved'", dict(layout="halves")),
        (ValueError, "scale_layout must be", dict(scale_layout="col")),
        (TypeError, "round_to_bf16 must be a bool", dict(round_to_bf16="yes")),
        (ValueError, "gate_up is on meta", dict(gate_up=torch.empty(4, 128, dtype=torch.bfloat16, device="meta"))),
        (TypeError, r"out must be a tuple or list of 2 buffers \(values, scales\), got torch.Tensor", dict(out=f8)),
        (TypeError, r"out\[0\] \(values\) must have dtype", dict(out=(bf, sc))),
        (ValueError, r"out\[1\] \(scales\) must hold", dict(out=(f8, sc[:-4]))),
    ]
    for exc, match, kw in cases:
        args = dict(gate_up=x)
        args.update(kw)
        outs = [o.clone() for o in kw["out"]] if isinstance(kw.get("out"), tuple) else []
        with pytest.raises(exc, match=match):
            seam.swiglu_oai_mxfp8(args.pop("gate_up"), **args)
        assert bytes_equal(x, before), f"gate_up changed on {match}"
        for snap, buf in zip(outs, kw.get("out", ())):
            assert bytes_equal(snap, buf), f"out buffer written on {match}"
    with pytest.raises(ValueError, match="out must have shape"):
        seam.swiglu_oai(x, out=torch.zeros(4, 32, dtype=torch.bfloat16, device=device))
    with pytest.raises(TypeError, match="out must have dtype"):
        seam.swiglu_oai(x, out=torch.zeros(4, 64, device=device))
    with pytest.raises(ValueError, match="overlaps input gate_up"):
        seam.swiglu_oai(x, out=x.view(-1)[: 4 * 64].view(4, 64))


def test_torch_compile(device):
    x = _gate_up(3, 64, device)

    def mlp(x):
        v, s = seam.swiglu_oai_mxfp8(x, round_to_bf16=True)
        return seam.swiglu_oai(x, layout="interleaved"), v, s

    backend = "aot_eager" if device.type == "cpu" else "inductor"
    got = torch.compile(mlp, backend=backend, fullgraph=True)(x)
    assert all(bytes_equal(a, b) for a, b in zip(got, mlp(x)))


@settings(max_examples=12, deadline=None)
@given(
    m=st.integers(1, 40),
    cols=st.integers(1, 9),
    scale=st.sampled_from([1e-3, 1.0, 8.0, 100.0]),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_property_round_to_bf16_bit_identical(m, cols, scale, layout, seed):
    device = seam.runtime.kernel_device()
    x = _gate_up(m, cols * 32, device, seed=seed, scale=scale)
    bv, bs = seam.swiglu_oai_mxfp8(x, layout=layout, round_to_bf16=True)
    uv, us = seam.mxfp8_quantize(seam.swiglu_oai(x, layout=layout))
    assert bytes_equal(bv, uv) and bytes_equal(bs, us)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [1, 8, 64, 192, 512, 2048, 8192])
def test_gpu_full_shapes(device, m, layout):
    x = _gate_up(m, 768, device, seed=m)
    out = seam.swiglu_oai(x, layout=layout)
    exact = ref.swiglu_oai_f64_ref(x.cpu(), layout=layout)
    assert _rel_l2(out, exact) < 5e-3
    v, s = seam.swiglu_oai_mxfp8(x, layout=layout)
    uv, us = seam.mxfp8_quantize(out)
    differ = seam.unswizzle_scales(s.cpu(), m, 768) != seam.unswizzle_scales(us.cpu(), m, 768)
    assert not (differ & ~_boundary_blocks(out)).any()
    assert _rel_l2(_dequant(v, s, "swizzled"), exact) <= _rel_l2(_dequant(uv, us, "swizzled"), exact) * 1.0001
    bv, bs = seam.swiglu_oai_mxfp8(x, layout=layout, round_to_bf16=True)
    assert bytes_equal(bv, uv) and bytes_equal(bs, us)


@pytest.mark.parametrize("op", ["swiglu_oai", "swiglu_oai_mxfp8"])
def test_int_scalars_accepted_bools_refused(device, op):
    """alpha, beta, limit: an int (Python or NumPy) stands for its float, as torch takes float scalars and
    the docstrings say; a bool is refused (a flag passed by mistake), naming the argument."""
    import numpy as np

    f = getattr(seam, op)
    x = _gate_up(4, 64, device)
    want = f(x, alpha=2.0, beta=1.0, limit=7.0)
    for ints in (dict(alpha=2, beta=1, limit=7), dict(alpha=np.int64(2), beta=np.int32(1), limit=np.int8(7))):
        got = f(x, **ints)
        assert all(bytes_equal(a, b) for a, b in zip(got if op.endswith("mxfp8") else (got,),
                                                      want if op.endswith("mxfp8") else (want,)))
    for name in ("alpha", "beta", "limit"):
        for flag in (True, np.bool_(False)):
            with pytest.raises(TypeError, match=rf"{name} must be a float or int \(not a bool\), got .*bool"):
                f(x, **{name: flag})
    assert "floats or ints, not bools" in f.__doc__ and "float or int (not a bool)" in f.__doc__


def test_stride_0_rows_read(device):
    """gate_up may repeat one row (expand(), row stride 0) as mxfp8_linear's x may: the kernel reads rows at
    their stride."""
    row = _gate_up(1, 64, device)
    x = row.expand(5, 128)
    assert bytes_equal(seam.swiglu_oai(x), seam.swiglu_oai(x.contiguous()))
    got, want = seam.swiglu_oai_mxfp8(x), seam.swiglu_oai_mxfp8(x.contiguous())
    assert all(bytes_equal(a, b) for a, b in zip(got, want))
