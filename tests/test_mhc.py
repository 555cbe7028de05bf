"""mHC post-mix + collapse + RMSNorm (+MXFP8) on a reduced input, docs/spec/lamport.md Consumer B:
residual_output bit-identical to the reference, layer_input within 1 BF16 ulp, MXFP8 bytes equal
to mxfp8_quantize(layer_input) with padding scales zero, residual_only == full variant's streams,
edge rows, the rank-partial (fallback) input, the column split of decode M (forced at interpreter
sizes), realistic mHC mixes, bad input rejected untouched."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seam
from seam import runtime
from seam.compare import bf16_ulp_diff, bytes_equal, ulp_summary
from seam.formats.mxfp8 import mxfp8_quantize_ref
from seam.kernels import mhc as mhc_kernels
from seam.kernels import mhc_config
from seam.kernels import workspace
from seam.ops.mhc import launch_checked
from seam.ref import mhc as ref

EPS = 1e-6


def bits_equal_nan(a, b):
    """Bytes equal except that NaN positions only need to match (the NaN payload of a BF16
    rounding differs between targets: torch keeps it, the GPU writes 0x7FFF)."""
    a, b = a.cpu(), b.cpu()
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    return bytes_equal(torch.where(nan, 0, a), torch.where(nan, 0, b))


def special_columns(t):
    """The issue's input pattern: first 16 columns 0, -0.0 at odd columns 9..15."""
    t = t.clone()
    t[..., :16] = 0.0
    t[..., 9:16:2] = -0.0
    return t


def make_inputs(m, hc, hidden, device, seed=0, special=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, hidden, generator=g) * 2
    res = torch.randn(m, hc, hidden, generator=g)
    if special:
        x, res = special_columns(x), special_columns(res)
    x, res = x.bfloat16(), res.bfloat16()
    mixes = ref.mhc_pre(res, ref.mhc_params(hc, hidden, seed=seed))
    w = (torch.randn(hidden, generator=g) * 0.2 + 1).bfloat16()
    to = lambda t: t.to(device)  # noqa: E731
    return to(x), to(res), to(mixes.post), to(mixes.comb), to(mixes.pre), to(w)


def run_and_check(x, res, post, comb, pre, w, quantize=True):
    m, hc, hidden = res.shape
    mx = None
    if quantize:
        values = torch.empty(m, hidden, dtype=torch.float8_e4m3fn, device=x.device)
        scales = torch.full((seam.mxfp8_scale_numel(m, hidden),), 0x5A, dtype=torch.uint8, device=x.device)
        mx = (values, scales)
    ro, li = seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS, mxfp8_out=mx)
    rro, rli = ref.mhc_post_collapse_rms_norm_ref(x.cpu(), res.cpu(), post.cpu(), comb.cpu(), pre.cpu(), w.cpu(), EPS)
    assert bits_equal_nan(ro, rro), "residual_output is not bit-identical to the reference"
    ok, summary = ulp_summary(li.cpu(), rli)
    assert ok, f"layer_input beyond 1 BF16 ulp: {summary}"
    # and the reference's RNE bytes almost everywhere (the 1-ulp bound alone passes a truncating rounding)
    assert float((bf16_ulp_diff(li.cpu(), rli) == 0).float().mean()) > 0.9, f"layer_input not RNE: {summary}"
    if quantize:
        qv, qs = mxfp8_quantize_ref(li.cpu())
        assert bytes_equal(mx[0].cpu(), qv), "MXFP8 values != mxfp8_quantize(layer_input)"
        assert bytes_equal(mx[1].cpu(), qs), "MXFP8 scales (or their zero padding) != mxfp8_quantize(layer_input)"
    ro2, li2 = seam.mhc_post_collapse_rms_norm(x, res, post, comb, None, None, EPS)
    assert li2 is None and bytes_equal(ro2, ro), "residual_only streams differ from the full variant's"
    return summary


@pytest.mark.parametrize("hc", [1, 2, 4, 8])
@pytest.mark.parametrize("m,hidden", [(1, 128), (3, 384), (2, 640), (2, 96), (3, 160)])
def test_matches_reference(device, hc, m, hidden):
    run_and_check(*make_inputs(m, hc, hidden, device, seed=hc * 10 + m))


def test_chunked_rows_and_padding_rows(device):
    # hidden 5120: hc 4 walks the row in 2 chunks of 4096, hc 8 in 3 of 2048 (masked tails);
    # M = 130 spans two 128-row scale tiles.
    run_and_check(*make_inputs(2, 4, 5120, device, seed=3))
    run_and_check(*make_inputs(1, 8, 5120, device, seed=5))
    run_and_check(*make_inputs(130, 1, 128, device, seed=4))


@pytest.mark.parametrize("hc,hidden", [(1, 640), (2, 384), (8, 256)])
def test_small_chunks(device, monkeypatch, hc, hidden):
    """Force the multi-chunk path (parked collapse, second pass) at interpreter sizes."""
    monkeypatch.setattr(mhc_config, "MAX_TILE", 256)
    assert mhc_config.block_h(hidden, hc) < hidden
    run_and_check(*make_inputs(3, hc, hidden, device, seed=hc))


def force_split(monkeypatch, min_cols):
    """A 1000-SM device (decode M splits) and chunks down to ``min_cols`` columns."""
    monkeypatch.setattr(runtime, "num_sms", lambda device: 1000)
    monkeypatch.setattr(mhc_config, "SPLIT_MIN_COLS", min_cols)


def split_counters(device):
    return workspace._BUFFERS[("mhc", seam.runtime.normalize_device(device))][1]


@pytest.mark.parametrize("hc", [1, 2, 4, 8])
@pytest.mark.parametrize(
    "m,hidden,min_cols,split",
    [(1, 384, 128, 3), (3, 640, 256, 3), (2, 640, 128, 5)],  # (3, 640, 256): 256 + 256 + 128 columns
)
def test_column_split(device, monkeypatch, hc, m, hidden, min_cols, split):
    """The (token, chunk) grid: a chunk's mix per program, the row's last program normalizes;
    bytes as the reference (run_and_check also runs residual only), counters re-armed."""
    force_split(monkeypatch, min_cols)
    assert mhc_config.launch_shape(m, hidden, hc, device).split == split
    inputs = make_inputs(m, hc, hidden, device, seed=hc * 10 + m)
    run_and_check(*inputs, quantize=hc % 2 == 0)
    assert not split_counters(device)[:m].any(), "arrival counters not re-armed"
    run_and_check(*inputs, quantize=hc % 2 == 1)  # the other layer-input variant, same counters


def test_column_split_padding_rows_and_rank_partials(device, monkeypatch):
    """M = 130: two scale tiles and a split padding grid (4 rows of 2 programs for 126 padding
    rows); then the fallback's rank-partial input through the split."""
    force_split(monkeypatch, 128)
    assert mhc_config.launch_shape(130, 256, 1, device).split == 2
    run_and_check(*make_inputs(130, 1, 256, device, seed=4))
    tp, m, hc, hidden = 3, 3, 2, 384
    x, res, post, comb, pre, w = make_inputs(m, hc, hidden, device)
    parts = special_columns(torch.randn(tp, m, hidden, generator=torch.Generator().manual_seed(5)) * 1e3).bfloat16()
    ro, li = launch_checked(parts.to(device), res, post, comb, pre, w, EPS, None)
    rro, rli, _ = ref.allreduce_mhc_ref(parts, res.cpu(), post.cpu(), comb.cpu(), pre.cpu(), w.cpu(), EPS)
    assert bytes_equal(ro.cpu(), rro)
    assert ulp_summary(li.cpu(), rli)[0]
    assert not split_counters(device).any()


def test_launch_shape_rule(monkeypatch):
    """Split while 2 M <= SMs, chunks >= SPLIT_MIN_COLS filling one wave; one program per row beyond."""
    monkeypatch.setattr(runtime, "num_sms", lambda device: 132)

    def shape(m, hidden=5120, hc=4):
        s = mhc_config.launch_shape(m, hidden, hc, "cuda")
        return s.split, s.block

    assert [shape(m) for m in (1, 8, 26, 27, 52, 53, 66)] == [(5, 1024)] * 3 + [(3, 2048)] * 2 + [(2, 4096)] * 2
    assert shape(66, hc=8) == (3, 2048)  # capped at block_h
    assert shape(67) == (1, 4096) and shape(200) == (1, 4096)
    assert shape(1, hidden=1024) == (1, 1024)  # one chunk: nothing to split
    assert mhc_config.launch_shape(8, 5120, 4, "cuda").num_warps == 4
    assert mhc_config.grid_rows(1, True, 5) == 1 + 2 and mhc_config.grid_rows(3, False, 5) == 3


def test_split_scratch_grows_and_keeps_outgrown(device):
    ws, counters = mhc_kernels.split_scratch(device, 1, 2)
    assert mhc_kernels.split_scratch(device, 1, 2)[0] is ws
    big = mhc_kernels.split_scratch(device, counters.numel() + 1, 2)
    assert big[1].numel() > counters.numel() and not big[1].any()
    assert any(t is counters for t in workspace._RETIRED)


def test_post_with_trailing_unit_dim(device):
    x, res, post, comb, pre, w = make_inputs(2, 4, 256, device)
    a = seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS)
    b = seam.mhc_post_collapse_rms_norm(x, res, post[:, :, None].contiguous(), comb, pre[:, :, None].contiguous(), w, EPS)
    assert bytes_equal(a[0], b[0]) and bytes_equal(a[1], b[1])


def _edge_case(name, hidden):
    """x [1, hidden], residual [1, 2, hidden] for one edge case of the spec."""
    g = torch.Generator().manual_seed(7)
    rnd = torch.randn(hidden, generator=g)
    col = torch.arange(hidden)
    zero = torch.zeros(hidden)
    dom = torch.full((hidden,), 1e-3)
    dom[5] = 3.0e4
    cases = {
        "all_zero": (zero, zero, zero),
        "neg_zero": (torch.full_like(zero, -0.0), torch.full_like(zero, -0.0), torch.full_like(zero, -0.0)),
        "tiny": (torch.full_like(zero, 1e-38), torch.full_like(zero, 1e-40), rnd * 1e-39),
        "dominating": (dom, zero, rnd),
        "inf": (torch.where(col == 3, float("inf"), rnd), rnd, rnd),
        "neg_inf": (rnd, torch.where(col == 40, -float("inf"), rnd), rnd),
        "nan": (rnd, rnd, torch.where(col == 7, float("nan"), rnd)),
        "huge": (rnd * 3e38, rnd * 3e38, rnd),
    }
    x, r0, r1 = cases[name]
    return x[None].bfloat16(), torch.stack([r0, r1])[None].bfloat16()


@pytest.mark.parametrize("case", ["all_zero", "neg_zero", "tiny", "dominating", "inf", "neg_inf", "nan", "huge"])
def test_edge_rows(device, case):
    hidden = 128
    x, res = _edge_case(case, hidden)
    mixes = ref.mhc_pre(torch.randn(1, 2, hidden).bfloat16(), ref.mhc_params(2, hidden))
    w = torch.ones(hidden).bfloat16()
    run_and_check(x.to(device), res.to(device), mixes.post.to(device), mixes.comb.to(device), mixes.pre.to(device), w.to(device))


def test_negative_zero_mixes(device):
    # -0.0 reduced lanes meeting -0.0 residual products: the sign of zero must follow the spec order.
    x, res, post, comb, pre, w = make_inputs(2, 2, 128, device)
    comb = comb.clone()
    comb[:, 0, 1] = -0.0
    run_and_check(x, res, post, comb, pre, w)


def test_rank_partials_sum_in_rank_order(device):
    """The fallback input [TP, M, hidden]: the kernel sums partials like the Lamport consumer."""
    tp, m, hc, hidden = 4, 3, 2, 256
    x, res, post, comb, pre, w = make_inputs(m, hc, hidden, device)
    g = torch.Generator().manual_seed(5)
    parts = special_columns(torch.randn(tp, m, hidden, generator=g) * 1e3).bfloat16()
    parts[1, :, 20:40] = -parts[0, :, 20:40]  # cancellation to exact zeros
    ro, li = launch_checked(parts.to(device), res, post, comb, pre, w, EPS, None)
    rro, rli, _ = ref.allreduce_mhc_ref(parts, res.cpu(), post.cpu(), comb.cpu(), pre.cpu(), w.cpu(), EPS)
    assert bytes_equal(ro.cpu(), rro)
    assert ulp_summary(li.cpu(), rli)[0]


@settings(max_examples=6, deadline=None)
@given(
    m=st.integers(1, 4),
    hc=st.sampled_from([1, 2, 4, 8]),
    chunks=st.integers(1, 3),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e4]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(m, hc, chunks, scale, seed):
    device = seam.runtime.kernel_device()
    x, res, post, comb, pre, w = make_inputs(m, hc, 128 * chunks, device, seed=seed)
    run_and_check((x.float() * scale).bfloat16(), res, post, comb, pre, w)


def test_mhc_pre_mixes_are_realistic():
    res = torch.randn(5, 4, 256).bfloat16()
    mixes = ref.mhc_pre(res, ref.mhc_params(4, 256))
    assert mixes.post.shape == (5, 4) and mixes.comb.shape == (5, 4, 4) and mixes.pre.shape == (5, 4)
    assert bool(((mixes.post > 0) & (mixes.post < 2)).all())
    assert bool(((mixes.pre > 0) & (mixes.pre <= 1 + 1e-6)).all())
    # Sinkhorn: comb close to doubly stochastic.
    assert torch.allclose(mixes.comb.sum(-2), torch.ones(5, 4), atol=1e-4)
    assert torch.allclose(mixes.comb.sum(-1), torch.ones(5, 4), atol=1e-3)
    want = (mixes.pre[:, :, None] * res.float()).sum(1).bfloat16()
    assert bytes_equal(mixes.layer_input, want)


def test_m_zero(device):
    x, res, post, comb, pre, w = make_inputs(0, 2, 128, device)
    ro, li = seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS)
    assert ro.shape == (0, 2, 128) and li.shape == (0, 128)


# --- bad input: rejected before any launch, caller buffers untouched ---------------------------


def _mx(m, hidden, device):
    return (
        torch.zeros(m, hidden, dtype=torch.float8_e4m3fn, device=device),
        torch.full((seam.mxfp8_scale_numel(m, hidden),), 0x5A, dtype=torch.uint8, device=device),
    )


@pytest.mark.parametrize(
    "mutate,exc,match",
    [
        (lambda a: a.update(pre=None), ValueError, "norm_weight was given without pre"),
        (lambda a: a.update(norm_weight=None), ValueError, "pre was given without norm_weight"),
        (lambda a: a.update(pre=None, norm_weight=None), ValueError, "residual-only"),
        (lambda a: a.update(residual=a["residual"][:, :2].contiguous()), ValueError, "post must have shape"),
        (lambda a: a.update(residual=a["residual"][:1]), ValueError, "residual must have shape"),
        (lambda a: a.update(post=a["post"][:, :3].contiguous()), ValueError, "post must have shape"),
        (lambda a: a.update(comb=a["comb"][:, :, :2].contiguous()), ValueError, "comb must have shape"),
        (lambda a: a.update(pre=a["pre"][:1]), ValueError, "pre must have shape"),
        (lambda a: a.update(norm_weight=a["norm_weight"][:64]), ValueError, "norm_weight must have shape"),
        (lambda a: a.update(post=a["post"].double()), TypeError, "post must have dtype"),
        (lambda a: a.update(x=a["x"].float()), TypeError, "x must have dtype"),
        (lambda a: a.update(residual=a["residual"].transpose(0, 1).contiguous().transpose(0, 1)), ValueError, "residual must be contiguous"),
        (lambda a: a.update(comb=a["comb"].transpose(1, 2)), ValueError, "comb must be contiguous"),
        (lambda a: a.update(residual=a["residual"][:, 0]), ValueError, "residual must be 3-D"),  # its rank first
        (lambda a: a.update(norm_eps=float("nan")), ValueError, "norm_eps"),
        (lambda a: a.update(mxfp8_out=(a["mxfp8_out"][0][:1], a["mxfp8_out"][1])), ValueError, "mxfp8_out"),
        (lambda a: a.update(mxfp8_out=(a["mxfp8_out"][0], a["mxfp8_out"][1][:-16])), ValueError, "mxfp8_out"),
        # the right byte count in another shape: swizzled scales are flat
        (lambda a: a.update(mxfp8_out=(a["mxfp8_out"][0], a["mxfp8_out"][1].view(128, 4))), ValueError,
         r"mxfp8_out\[1\] \(scales\) must hold 512 bytes as a flat \[512\] tensor \(swizzled scales are 1-D"),
        (lambda a: a.update(mxfp8_out=a["mxfp8_out"][:1]), TypeError,
         r"mxfp8_out must be a tuple or list of 2 buffers \(values, scales\), got a tuple of 1"),
    ],
)
def test_bad_input_rejected_untouched(device, mutate, exc, match):
    m, hc, hidden = 2, 4, 128
    x, res, post, comb, pre, w = make_inputs(m, hc, hidden, device)
    args = dict(x=x, residual=res, post=post, comb=comb, pre=pre, norm_weight=w, norm_eps=EPS, mxfp8_out=_mx(m, hidden, device))
    keep = args["mxfp8_out"]
    before = (keep[0].view(torch.uint8).clone(), keep[1].clone())
    mutate(args)
    with pytest.raises(exc, match=match):
        seam.mhc_post_collapse_rms_norm(**args)
    assert torch.equal(keep[0].view(torch.uint8), before[0]) and torch.equal(keep[1], before[1])


@pytest.mark.parametrize("hc,hidden,match", [(3, 128, r"residual.shape\[1\] \(hc_mult\) must be one of"),
                                            (4, 80, r"x.shape\[1\] \(hidden\) must be a positive multiple of 32")])
def test_unsupported_shapes(device, hc, hidden, match):
    x = torch.zeros(1, hidden, dtype=torch.bfloat16, device=device)
    res = torch.zeros(1, hc, hidden, dtype=torch.bfloat16, device=device)
    post = torch.zeros(1, hc, device=device)
    comb = torch.zeros(1, hc, hc, device=device)
    with pytest.raises(ValueError, match=match):
        seam.mhc_post_collapse_rms_norm(x, res, post, comb, None, None, EPS)


# --- GPU: model shapes ------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 32, 60, 128, 200])  # H200: 5, 5, 3, 2 programs per row, then 1
def test_gpu_deepseek_shapes(device, m):
    summary = run_and_check(*make_inputs(m, 4, 5120, device, seed=m))
    print(f"M={m}: layer_input {summary}")


@pytest.mark.gpu
def test_gpu_torch_compile(device):
    x, res, post, comb, pre, w = make_inputs(8, 4, 5120, device)
    fn = torch.compile(lambda *a: seam.mhc_post_collapse_rms_norm(*a), fullgraph=True)
    a = fn(x, res, post, comb, pre, w, EPS)
    b = seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS)
    assert bytes_equal(a[0], b[0]) and bytes_equal(a[1], b[1])


@pytest.mark.gpu
def test_gpu_split_scratch_not_allocated_during_capture(device, monkeypatch):
    """A first call inside a CUDA-graph capture raises (its zero-filled counters would only exist
    at replay); after one eager call, captured calls replay to the eager result."""
    monkeypatch.setattr(workspace, "_BUFFERS", {})
    args = (*make_inputs(1, 4, 5120, device), EPS)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before CUDA-graph capture"):
        with torch.cuda.graph(graph):
            seam.mhc_post_collapse_rms_norm(*args)
    eager = seam.mhc_post_collapse_rms_norm(*args)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = seam.mhc_post_collapse_rms_norm(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert bytes_equal(captured[0], eager[0]) and bytes_equal(captured[1], eager[1])


# --- the kernels compile for sm_90 (H200) without a GPU ------------------------------------------

COMPILE_SCRIPT = textwrap.dedent(
    """
    import re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from seam import runtime
    from seam.kernels import lamport_mhc as L
    from seam.kernels import mhc as K
    from seam.kernels import mhc_config

    target = GPUTarget("cuda", 90, 32)
    CONST = ["H", "HC", "BLOCK_H", "SPLIT", "NORM_BLOCK", "WRITE_LAYER_INPUT", "QUANTIZE", "SCALE_BLOCK", "USE_PDL"]
    runtime.num_sms = lambda device: 132  # an H200: M = 1 takes the column split, M = 200 one program per row

    def outputs(sig, consts, full, quantize, split):
        optional = [("pre_ptr", "*fp32", full), ("weight_ptr", "*bf16", full), ("layer_input_ptr", "*bf16", full),
                    ("values_ptr", "*u8", quantize), ("scales_ptr", "*u8", quantize),
                    ("ws_ptr", "*fp32", full and split > 1), ("counter_ptr", "*i32", full and split > 1)]
        for name, ty, used in optional:
            sig[name] = ty if used else "constexpr"
            if not used:
                consts[name] = None

    def build(fn, sig, consts, num_warps):
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target,
                           options={"num_warps": num_warps, "enable_fp_fusion": False})
        ptx = k.asm["ptx"]
        assert "cubin" in k.asm and "griddepcontrol.wait" in ptx
        # Rounding points between products and adds: no FMA, and every mul/add explicitly .rn
        # so that ptxas does not contract them either.
        assert not re.search(r"fma[.a-z]*\\.f32", ptx), "products must not be fused into FMA"
        assert not re.search(r"\\b(mul|add)\\.f32", ptx), "fp32 mul/add without .rn may be contracted by ptxas"
        if consts["WRITE_LAYER_INPUT"] and consts["SPLIT"] > 1:
            # the last-arriver combine: acq_rel arrival count, partials and collapse read at L2
            assert "atom.global.gpu.acq_rel.add" in ptx and "ld.global.cg" in ptx
        return ptx

    for hidden, hc in ((5120, 4), (5120, 8), (7168, 1), (384, 2)):
        for m in (200, 1):
            shape = mhc_config.launch_shape(m, hidden, hc, "cuda")
            if m == 1 and shape.split == 1:
                continue  # one chunk per row: the same kernels as M = 200
            geometry = {"H": hidden, "HC": hc, "BLOCK_H": shape.block, "SPLIT": shape.split,
                        "NORM_BLOCK": shape.norm_block, "SCALE_BLOCK": triton.next_power_of_2(hidden // 32),
                        "USE_PDL": True}
            for full, quantize, ranks in ((True, True, 0), (True, False, 4), (False, False, 0)):
                for small in (False, True):  # Triton specializes int arguments equal to 1 as constexpr
                    sig = {"x_ptr": "*bf16", "residual_ptr": "*bf16", "post_ptr": "*fp32", "comb_ptr": "*fp32",
                           "residual_out_ptr": "*bf16", "M": "constexpr" if small else "i32", "eps": "fp32",
                           "RANKS": "constexpr", **{c: "constexpr" for c in CONST}}
                    consts = {**geometry, "RANKS": ranks, "WRITE_LAYER_INPUT": full, "QUANTIZE": quantize}
                    if small:
                        consts["M"] = 1
                    outputs(sig, consts, full, quantize, shape.split)
                    build(K.mhc_post_collapse_rms_norm_kernel, sig, consts, shape.num_warps)
            for full, quantize, spin in ((True, True, 0), (False, False, 1000)):
                sig = {"mailbox_ptr": "*bf16", "stage_state_ptr": "*i32", "error_ptr": "*i32",
                       "residual_ptr": "*bf16", "post_ptr": "*fp32", "comb_ptr": "*fp32", "residual_out_ptr": "*bf16",
                       "M": "i32", "capacity": "i32", "eps": "fp32", "TP": "constexpr", "SPIN_LIMIT": "constexpr",
                       **{c: "constexpr" for c in CONST}}
                consts = {**geometry, "TP": 4, "WRITE_LAYER_INPUT": full, "QUANTIZE": quantize, "SPIN_LIMIT": spin}
                outputs(sig, consts, full, quantize, shape.split)
                assert "ld.volatile" in build(L.lamport_mhc_consumer_kernel, sig, consts, shape.num_warps)
    print("compiled")
    """
)


def _cuda_backend() -> bool:
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _cuda_backend(), reason="Triton's CUDA backend is not installed")
def test_kernels_compile_for_sm90():
    """Every variant (hc, chunked or not, column split or not, residual-only, MXFP8, rank partials,
    M == 1) compiles to a cubin for GPUTarget("cuda", 90, 32) in a subprocess with TRITON_INTERPRET=0;
    the PTX has PDL and no FMA contraction."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-4000:]
