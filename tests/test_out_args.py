"""``out=`` buffers, every op that takes them: a non-contiguous one is refused with its strides against the
contiguous ones (its shape may match), and one that requires grad is refused while grad mode is on, as
torch refuses its own out= arguments; both before any launch, changing nothing."""

import pytest
import torch

import seam
from seam.compare import bytes_equal

M, K, N = 6, 64, 32


def _inputs(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).bfloat16().to(device)
    r = torch.randn(M, K, generator=g).bfloat16().to(device)
    w = (torch.randn(K, generator=g) * 0.1).bfloat16().to(device)
    wn = (torch.randn(N, K, generator=g) * 0.05).bfloat16().to(device)
    return x, r, w, wn


def _bf16(device, *shape, **kw):
    return torch.zeros(*shape, dtype=torch.bfloat16, device=device, **kw)


def _mxfp8(device, m, k):
    return (torch.zeros(m, k, dtype=torch.float8_e4m3fn, device=device),
            torch.zeros(seam.mxfp8_scale_numel(m, k), dtype=torch.uint8, device=device))


# name -> (call(out), a good out buffer, the name of the buffer the cases below spoil, its index in out or None)
def _cases(device):
    x, r, w, wn = _inputs(device)
    weight = seam.MXFP8Weight.from_bf16(wn)
    layer = seam.MXFP8Linear(weight)
    return {
        "mxfp8_linear": (lambda out: seam.mxfp8_linear(x, weight, out=out), lambda: _bf16(device, M, N), "out", None),
        "MXFP8Linear 3-D": (lambda out: layer(x.view(2, 3, K), out=out), lambda: _bf16(device, 2, 3, N), "out", None),
        "swiglu_oai": (lambda out: seam.swiglu_oai(x, out=out), lambda: _bf16(device, M, K // 2), "out", None),
        "swiglu_oai_mxfp8": (lambda out: seam.swiglu_oai_mxfp8(x, out=out), lambda: _mxfp8(device, M, K // 2),
                             r"out\[0\] \(values\)", 0),
        "mxfp8_quantize": (lambda out: seam.mxfp8_quantize(x, out=out), lambda: _mxfp8(device, M, K),
                           r"out\[0\] \(values\)", 0),
        "gemma_rms_norm": (lambda out: seam.gemma_rms_norm(x, w, 1e-6, out=out), lambda: _bf16(device, M, K),
                           "out", None),
        "fused_add_rms_norm": (lambda out: seam.fused_add_rms_norm(x, r, w, 1e-6, out=out),
                               lambda: (_bf16(device, M, K), _bf16(device, M, K)), r"out\[1\] \(residual_out\)", 1),
        "gemma_fused_add_rms_norm_mxfp8": (
            lambda out: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=out),
            lambda: (*_mxfp8(device, M, K), _bf16(device, M, K)), r"out\[2\] \(residual_out\)", 2),
    }


def _spoil(out, index, make):
    """``out`` with its buffer at ``index`` (or ``out`` itself) replaced by ``make(buffer)``."""
    if index is None:
        return make(out)
    out = list(out)
    out[index] = make(out[index])
    return tuple(out)


def _snapshot(out):
    return [t.detach().clone() for t in (out if isinstance(out, tuple) else (out,))]


def _unchanged(out, before):
    return all(bytes_equal(t.detach(), b) for t, b in zip(out if isinstance(out, tuple) else (out,), before))


CASES = ["mxfp8_linear", "MXFP8Linear 3-D", "swiglu_oai", "swiglu_oai_mxfp8", "mxfp8_quantize", "gemma_rms_norm",
         "fused_add_rms_norm", "gemma_fused_add_rms_norm_mxfp8"]  # _cases' keys


@pytest.mark.parametrize("op", CASES)
def test_non_contiguous_out_names_its_strides(device, op):
    call, make_out, name, index = _cases(device)[op]
    good = make_out()
    target = good if index is None else good[index]
    # the same shape, columns-major: only the strides are wrong
    flipped = target.transpose(-2, -1).contiguous().transpose(-2, -1)
    want = torch.empty(target.shape).stride()
    out = _spoil(good, index, lambda _: flipped)
    before = _snapshot(out)
    with pytest.raises(ValueError, match=rf"{name} must be contiguous: strides \({', '.join(map(str, want))}\) "
                                         rf"for shape \[{', '.join(map(str, target.shape))}\], "
                                         rf"got \({', '.join(map(str, flipped.stride()))}\)"):
        call(out)
    assert _unchanged(out, before)


@pytest.mark.parametrize("op", CASES)
def test_out_requiring_grad_refused_as_torch_does(device, op):
    call, make_out, name, index = _cases(device)[op]
    out = _spoil(make_out(), index, lambda t: t.requires_grad_())
    before = _snapshot(out)
    with pytest.raises(ValueError, match=rf"{name} requires grad.*automatic differentiation.*torch.no_grad"):
        call(out)
    assert _unchanged(out, before)
    with torch.no_grad():  # torch's out= arguments are accepted there, and so are seam's
        got = call(out)
    want = call(None)
    for g, wnt in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert bytes_equal(g.detach(), wnt)


def test_torch_refuses_out_requiring_grad_outside_no_grad_only():
    """The rule the test above holds seam to, on this torch."""
    a, b = torch.ones(3), torch.ones(3)
    t = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        torch.add(a, b, out=t)
    with torch.no_grad():
        torch.add(a, b, out=t)
    with torch.inference_mode():
        torch.add(a, b, out=t)


def test_in_place_norm_residual_requiring_grad(device):
    """out=(x, residual), vLLM's in-place call: a residual (leaf) requiring grad is written in place too."""
    x, r, w, _ = _inputs(device)
    r.requires_grad_()
    before = r.detach().clone()
    with pytest.raises(ValueError, match=r"out\[1\] \(residual_out\) requires grad"):
        seam.fused_add_rms_norm(x, r, w, 1e-6, out=(x, r))
    assert bytes_equal(r.detach(), before)


def test_qkv_q_out_requiring_grad(device):
    from test_qkv import make_problem

    p = make_problem(nkv=1, m=3, k=128, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    outs = p.outputs()
    outs["q_out"].requires_grad_()
    before = {k: v.detach().clone() for k, v in outs.items() if v is not None}
    with pytest.raises(ValueError, match="q_out requires grad"):
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **outs)
    for k, v in before.items():
        assert bytes_equal(outs[k].detach(), v), k


def test_all_reduce_collect_out_requiring_grad(device):
    from seam.comm import SimulatedGroup
    from seam.ops.allreduce import LamportAllReduce

    comm = LamportAllReduce(hidden_size=K, max_num_tokens=8, group=SimulatedGroup(2))
    x, r, _, _ = _inputs(device)
    comm.publish(x, rank=0)
    comm.publish(r, rank=1)
    out = _bf16(device, M, K, requires_grad=True)
    with pytest.raises(ValueError, match="out requires grad"):
        comm.collect(rank=0, out=out)
    assert not out.detach().any()
    with torch.no_grad():
        comm.collect(rank=0, out=out)  # the publish stayed pending
    assert bytes_equal(out.detach(), (x.float() + r.float()).bfloat16())
