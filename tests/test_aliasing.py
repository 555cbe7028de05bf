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
