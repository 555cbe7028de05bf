"""Output buffers that overlap an input are rejected before any launch, by every op that takes them."""

import pytest
import torch

import seam
from seam.ref.mhc import mhc_params, mhc_pre


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_mxfp8_quantize_scales_inside_x(device):
    x = torch.randn(200, 256, dtype=torch.bfloat16, device=device)
    scales = x.view(torch.uint8).view(-1)[-seam.mxfp8_scale_numel(200, 256):]
    before = x.clone()
    values = torch.empty(200, 256, dtype=torch.float8_e4m3fn, device=device)
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\) overlaps input x"):
        seam.mxfp8_quantize(x, out=(values, scales))
    assert torch.equal(x, before)


def test_mxfp8_linear_out_over_activation(device):
    w = seam.MXFP8Weight.from_bf16(torch.randn(64, 128, device=device).bfloat16())
    out = torch.empty(4, 64, dtype=torch.bfloat16, device=device)
    x = out.view(torch.uint8).view(-1)[: 4 * 128].view(4, 128).view(torch.float8_e4m3fn)  # values inside out
    _, s = seam.mxfp8_quantize(torch.randn(4, 128, device=device).bfloat16())
    qa = seam.QuantizedActivation(x, s, torch.bfloat16, (4, 128))
    before = out.clone()
    with pytest.raises(ValueError, match="out overlaps input x.values"):
        seam.mxfp8_linear(qa, w, out=out)
    assert torch.equal(out.view(torch.int16), before.view(torch.int16))


def test_mhc_mxfp8_out_over_residual(device):
    m, hc, h = 2, 4, 128
    residual = torch.randn(m, hc, h, device=device).bfloat16()
    mix = mhc_pre(residual, mhc_params(hc, h, device=device))
    x = torch.randn(m, h, device=device).bfloat16()
    w = torch.ones(h, device=device).bfloat16()
    values = residual[1].reshape(-1).view(torch.uint8)[: m * h].view(m, h).view(torch.float8_e4m3fn)
    scales = torch.empty(seam.mxfp8_scale_numel(m, h), dtype=torch.uint8, device=device)
    before = residual.clone()
    with pytest.raises(ValueError, match="overlaps input residual"):
        seam.mhc_post_collapse_rms_norm(x, residual, mix.post, mix.comb, mix.pre, w, 1e-6, mxfp8_out=(values, scales))
    assert torch.equal(residual, before)


def test_qkv_index_q_out_over_xq(device):
    from test_qkv import make_problem

    p = make_problem(nkv=1, m=3, k=128, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)  # [3, 128] E4M3: the shape of index_q_out at nkv 1
    outs = p.outputs()
    outs["index_q_out"] = xq
    before = {k: v.clone() for k, v in outs.items() if v is not None}
    with pytest.raises(ValueError, match="index_q_out overlaps input xq"):
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **outs)
    for k, v in before.items():
        assert torch.equal(outs[k].view(torch.uint8), v.view(torch.uint8)), k


# In place, as vLLM calls its fused add + RMSNorm: the row-local norm kernels take residual_out = residual
# (and normed = x), the very same tensors.

def _norm_inputs(m, h, device):
    g = torch.Generator().manual_seed(m * 131 + h)
    x = (torch.randn(m, h, generator=g) * 3).bfloat16().to(device)
    r = torch.randn(m, h, generator=g).bfloat16().to(device)
    r[0, :5] = torch.tensor([-0.0, 0.0, 1e-40, 3e38, -3e38])  # signed zero, subnormal, x + r overflow
    w = (torch.randn(h, generator=g) * 0.1).bfloat16().to(device)
    return x, r, w


def _bytes(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view(torch.int16)


@pytest.mark.parametrize("gemma", [False, True])
def test_fused_add_rms_norm_in_place_like_vllm(gemma, device):
    x, r, w = _norm_inputs(5, 96, device)
    normed, residual_out = seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=gemma)
    xi, ri = x.clone(), r.clone()
    got = seam.fused_add_rms_norm(xi, ri, w, 1e-6, gemma=gemma, out=(xi, ri))
    assert got[0] is xi and got[1] is ri
    assert torch.equal(_bytes(xi), _bytes(normed)) and torch.equal(_bytes(ri), _bytes(residual_out))


@pytest.mark.parametrize("also_bf16", [False, True])
def test_fused_add_rms_norm_mxfp8_residual_in_place(also_bf16, device):
    m, h = 130, 64  # more rows than one swizzle block: padding rows written by their own programs
    x, r, w = _norm_inputs(m, h, device)
    want = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=also_bf16)
    xi, ri = x.clone(), r.clone()
    values = torch.empty(m, h, dtype=torch.float8_e4m3fn, device=device)
    scales = torch.empty(seam.mxfp8_scale_numel(m, h), dtype=torch.uint8, device=device)
    out = (values, scales, xi, ri) if also_bf16 else (values, scales, ri)
    got = seam.gemma_fused_add_rms_norm_mxfp8(xi, ri, w, 1e-6, also_bf16=also_bf16, out=out)
    assert got[-1] is ri
    for a, b in zip(got, want):
        assert torch.equal(_bytes(a), _bytes(b))


def test_in_place_needs_the_very_same_view(device):
    x, r, w = _norm_inputs(4, 64, device)
    big = torch.cat((r, r[:1]))
    before = big.clone()
    with pytest.raises(ValueError, match=r"overlaps input residual in memory; pass a separate buffer or residual"):
        seam.fused_add_rms_norm(x, big[:4], w, 1e-6, out=(torch.empty_like(x), big[1:]))
    with pytest.raises(ValueError, match=r"overlaps input x in memory; pass a separate buffer$"):  # normed only
        seam.fused_add_rms_norm(x, r, w, 1e-6, out=(torch.empty_like(x), x))
    assert torch.equal(big, before)


def test_in_place_under_torch_compile(device):
    x, r, w = _norm_inputs(3, 64, device)
    want = seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=True)

    def layer(x, r, w):
        seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=True, out=(x, r))
        return x, r

    backend = "aot_eager" if device.type == "cpu" else "inductor"
    got = torch.compile(layer, backend=backend, fullgraph=True)(x.clone(), r.clone(), w)
    assert all(torch.equal(_bytes(a), _bytes(b)) for a, b in zip(got, want))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 7, 300])
def test_norm_in_place_at_model_width_gpu(m):
    x, r, w = _norm_inputs(m, 6144, "cuda")
    for also_bf16 in (False, True):
        want = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=also_bf16)
        xi, ri = x.clone(), r.clone()
        values = torch.empty(m, 6144, dtype=torch.float8_e4m3fn, device="cuda")
        scales = torch.empty(seam.mxfp8_scale_numel(m, 6144), dtype=torch.uint8, device="cuda")
        got = seam.gemma_fused_add_rms_norm_mxfp8(xi, ri, w, 1e-6, also_bf16=also_bf16,
                                                  out=(values, scales, xi, ri) if also_bf16 else (values, scales, ri))
        assert all(torch.equal(_bytes(a), _bytes(b)) for a, b in zip(got, want))
    normed, residual_out = seam.gemma_fused_add_rms_norm(x, r, w, 1e-6)
    xi, ri = x.clone(), r.clone()
    seam.gemma_fused_add_rms_norm(xi, ri, w, 1e-6, out=(xi, ri))
    assert torch.equal(_bytes(xi), _bytes(normed)) and torch.equal(_bytes(ri), _bytes(residual_out))


def test_all_reduce_out_over_x(device):
    """One-call all-reduce: the consumer may write out while the publish still reads x (on a GPU)."""
    comm = seam.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=seam.SimulatedGroup(1, device=device))
    rows = torch.randn(4, 128, device=device).bfloat16()
    before = rows.clone()
    with pytest.raises(ValueError, match="out overlaps input x"):
        seam.all_reduce(rows[:3], comm, out=rows[1:])
    assert torch.equal(rows.view(torch.int16), before.view(torch.int16))
    assert torch.equal(seam.all_reduce(rows[:3], comm, out=torch.empty_like(rows[:3])), rows[:3])


def test_allreduce_mhc_mxfp8_out_over_published_inputs(device):
    """AllReduceMHC's one-call forms: mxfp8_out must not overlap what the same call publishes."""
    m, hc, h, top_k = 3, 4, 256, 2
    op = seam.AllReduceMHC(hidden_size=h, hc_mult=hc, max_num_tokens=8, top_k=top_k,
                           group=seam.SimulatedGroup(1, device=device), quantize_layer_input=True)
    residual = torch.randn(m, hc, h, device=device).bfloat16()
    post, comb, pre = torch.rand(m, hc, device=device), torch.rand(m, hc, hc, device=device), torch.rand(m, hc, device=device)
    w = torch.randn(h, device=device).bfloat16()
    scales = torch.empty(seam.mxfp8_scale_numel(m, h), dtype=torch.uint8, device=device)
    x = torch.randn(m, h, device=device).bfloat16()
    inside_x = x.view(torch.uint8).view(-1)[: m * h].view(m, h).view(torch.float8_e4m3fn)
    before = x.clone()
    with pytest.raises(ValueError, match="overlaps input x"):
        op(x, residual, post, comb, pre, w, 1e-6, (inside_x, scales))
    assert torch.equal(x.view(torch.int16), before.view(torch.int16))
    g2 = torch.randn(8, h, device=device).bfloat16()
    ew = torch.rand(m, top_k, device=device)
    idx = torch.randint(0, 8, (m, top_k), dtype=torch.int32, device=device)
    shared = torch.randn(m, h, device=device).bfloat16()
    values = torch.empty(m, h, dtype=torch.float8_e4m3fn, device=device)
    for name, out in (("gemm2_permuted", (g2.view(torch.uint8).view(-1)[: m * h].view(m, h).view(torch.float8_e4m3fn),
                                          scales)),
                      ("shared_output", (values, shared.view(torch.uint8).view(-1)[: scales.numel()]))):
        with pytest.raises(ValueError, match=f"overlaps input {name}"):
            op.finalize(g2, ew, idx, shared, residual, post, comb, pre, w, 1e-6, out)
