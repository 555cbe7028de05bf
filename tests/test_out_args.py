"""``out=`` buffers, every op that takes them: a non-contiguous one is refused with its strides against the
contiguous ones (its shape may match), one that requires grad is refused while grad mode is on, and an
inference tensor outside inference mode, as torch refuses its own out= arguments and in-place updates; all
before any launch, changing nothing."""

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


@pytest.mark.parametrize("op", CASES)
def test_inference_tensor_out_refused_outside_inference_mode(device, op):
    call, make_out, name, index = _cases(device)[op]
    with torch.inference_mode():
        good = make_out()
    out = good if index is None else _spoil(make_out(), index, lambda _: good[index])
    before = _snapshot(out)
    with pytest.raises(ValueError, match=rf"{name} is an inference tensor.*call under torch.inference_mode\(\)"):
        call(out)
    assert _unchanged(out, before)
    with torch.inference_mode():  # accepted there, as torch accepts the in-place update
        got = call(out)
    want = call(None)
    for g, wnt in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert bytes_equal(g, wnt)


def test_torch_refuses_in_place_updates_of_inference_tensors_outside_inference_mode():
    """The rule the test above holds seam to, on this torch."""
    with torch.inference_mode():
        t = torch.zeros(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        torch.add(torch.ones(3), torch.ones(3), out=t)
    with torch.inference_mode():
        torch.add(torch.ones(3), torch.ones(3), out=t)


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


# MXFP8 ops with an out= (values, scales[, ...]) tuple: name -> call(out, **kw), the out buffers for (M, K) = (128,
# 128) (scales flat, swizzled), the scales' name. At M = 128 and K / 32 = 4, row-major [M, K/32] scales have the
# swizzled byte count: the trap of a check by byte count alone.
def _mxfp8_out_cases(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 128, generator=g).bfloat16().to(device)
    r = torch.randn(128, 128, generator=g).bfloat16().to(device)
    w = (torch.randn(128, generator=g) * 0.1).bfloat16().to(device)
    gate_up = torch.randn(128, 256, generator=g).bfloat16().to(device)
    add = lambda: (*_mxfp8(device, 128, 128), _bf16(device, 128, 128))  # noqa: E731
    return {
        "mxfp8_quantize": (lambda out, **kw: seam.mxfp8_quantize(x, out=out, **kw),
                           lambda: _mxfp8(device, 128, 128), "out"),
        "swiglu_oai_mxfp8": (lambda out, **kw: seam.swiglu_oai_mxfp8(gate_up, out=out, **kw),
                             lambda: _mxfp8(device, 128, 128), "out"),
        "fused_add_rms_norm_mxfp8": (lambda out, **kw: seam.fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=out, **kw),
                                     add, "out"),
        "gemma_fused_add_rms_norm_mxfp8": (
            lambda out, **kw: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=out, **kw), add, "out"),
    }


MXFP8_OUT_CASES = ["mxfp8_quantize", "swiglu_oai_mxfp8", "fused_add_rms_norm_mxfp8", "gemma_fused_add_rms_norm_mxfp8"]


@pytest.mark.parametrize("op", MXFP8_OUT_CASES)
def test_swizzled_scales_out_must_be_flat(device, op):
    """Swizzled scales are flat [mxfp8_scale_numel(M, K)]: a buffer of that byte count in any other shape is
    refused (a row-major-shaped [M, K/32] one, passed without scale_layout="row_major", would silently receive
    swizzled bytes), the message naming the row-major layout where the shape is [M, K/32]; nothing is written."""
    call, make_out, _ = _mxfp8_out_cases(device)[op]
    numel = seam.mxfp8_scale_numel(128, 128)
    assert numel == 128 * 4
    for shape, hint in (((128, 4), True), ((2, 64, 4), False), ((1, numel), False)):
        out = list(make_out())
        out[1] = out[1].view(shape)
        out = tuple(out)
        before = _snapshot(out)
        got_shape = ", ".join(map(str, shape))
        with pytest.raises(ValueError, match=rf"out\[1\] \(scales\) must hold {numel} bytes as a flat \[{numel}\] "
                                             rf"tensor \(swizzled scales are 1-D.*got shape \[{got_shape}\]") as err:
            call(out)
        assert ("row-major layout: pass scale_layout='row_major'" in str(err.value)) is hint, str(err.value)
        assert _unchanged(out, before)
    # the same [M, K/32] buffer is what scale_layout="row_major" takes; a flat one is written and returned as is
    out = list(make_out())
    out[1] = out[1].view(128, 4)
    got_rm = call(tuple(out), scale_layout="row_major")
    assert got_rm[1] is out[1]
    flat = make_out()
    got = call(flat)
    assert got[1] is flat[1]
    assert bytes_equal(seam.unswizzle_scales(got[1], 128, 128), got_rm[1])


# every op whose out= is a tuple of buffers: name -> (call(out), its buffers' names, good buffers)
def _tuple_out_cases(device):
    x, r, w, _ = _inputs(device)
    mx = lambda: _mxfp8(device, M, K)  # noqa: E731
    bf = lambda: _bf16(device, M, K)  # noqa: E731
    return {
        "mxfp8_quantize": (lambda out: seam.mxfp8_quantize(x, out=out), ("values", "scales"), lambda: mx()),
        "swiglu_oai_mxfp8": (lambda out: seam.swiglu_oai_mxfp8(x, out=out), ("values", "scales"),
                             lambda: _mxfp8(device, M, K // 2)),
        "fused_add_rms_norm": (lambda out: seam.fused_add_rms_norm(x, r, w, 1e-6, out=out),
                               ("normed", "residual_out"), lambda: (bf(), bf())),
        "gemma_fused_add_rms_norm": (lambda out: seam.gemma_fused_add_rms_norm(x, r, w, 1e-6, out=out),
                                     ("normed", "residual_out"), lambda: (bf(), bf())),
        "fused_add_rms_norm_mxfp8": (lambda out: seam.fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=out),
                                     ("values", "scales", "residual_out"), lambda: (*mx(), bf())),
        "gemma_fused_add_rms_norm_mxfp8 also_bf16": (
            lambda out: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True, out=out),
            ("values", "scales", "normed", "residual_out"), lambda: (*mx(), bf(), bf())),
    }


@pytest.mark.parametrize("op", ["mxfp8_quantize", "swiglu_oai_mxfp8", "fused_add_rms_norm", "gemma_fused_add_rms_norm",
                                "fused_add_rms_norm_mxfp8", "gemma_fused_add_rms_norm_mxfp8 also_bf16"])
def test_out_arity_message_says_expected_and_given(device, op):
    """A wrong out= says how many buffers (and which) were expected and what was given: a tuple or a list of
    another length, or not a sequence at all; a list of the right length is accepted like a tuple."""
    call, names, make_out = _tuple_out_cases(device)[op]
    want = rf"out must be a tuple or list of {len(names)} buffers \({', '.join(names)}\), got "
    good = make_out()
    for bad, given in ((good[:-1], f"a tuple of {len(names) - 1}"),
                       (list(good) + [good[0]], f"a list of {len(names) + 1}"),
                       (good[0], "torch.Tensor")):
        before = _snapshot(good)
        with pytest.raises(TypeError, match=want + given + "$"):
            call(bad)
        assert _unchanged(good, before)
    got = call(list(good))
    assert all(a is b for a, b in zip(got, good))


def test_numpy_bool_flags_accepted(device):
    """Flags take NumPy bools (as sizes take NumPy ints), converted to Python bools; ints and strings stay refused."""
    import numpy as np

    from seam import checks

    assert checks.flag("f", np.bool_(True)) is True and checks.flag("f", np.bool_(False)) is False
    for bad in (1, 0, np.int64(1), "yes", None):
        with pytest.raises(TypeError, match="f must be a bool, got"):
            checks.flag("f", bad)
    x, r, w, _ = _inputs(device)
    want = seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=True)
    got = seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=np.bool_(True))
    assert all(bytes_equal(a, b) for a, b in zip(got, want))
    want = seam.fused_add_rms_norm_mxfp8(x, r, w, 1e-6, gemma=True, also_bf16=True)
    got = seam.fused_add_rms_norm_mxfp8(x, r, w, 1e-6, gemma=np.bool_(True), also_bf16=np.bool_(True))
    assert len(got) == 4 and all(bytes_equal(a, b) for a, b in zip(got, want))
    got = seam.swiglu_oai_mxfp8(x, round_to_bf16=np.bool_(True), a_deq=np.bool_(False))
    assert len(got) == 2 and all(bytes_equal(a, b) for a, b in zip(got, seam.swiglu_oai_mxfp8(x, round_to_bf16=True)))
    with pytest.raises(TypeError, match="gemma must be a bool, got int"):
        seam.fused_add_rms_norm(x, r, w, 1e-6, gemma=1)
    with pytest.raises(TypeError, match="also_bf16 must be a bool, got numpy.int64"):
        seam.fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=np.int64(1))


@pytest.mark.parametrize("op", ["swiglu_oai_mxfp8", "mxfp8_quantize", "gemma_fused_add_rms_norm_mxfp8"])
def test_uint8_values_out_says_how_to_pass_it(device, op):
    """E4M3 values go out through a float8_e4m3fn buffer; a uint8 one is refused, unchanged, with the view that
    passes it (which then works)."""
    call, make_out, _, _ = _cases(device)[op]
    good = make_out()
    as_bytes = (good[0].view(torch.uint8), *good[1:])
    before = _snapshot(as_bytes)
    with pytest.raises(TypeError, match=r"got torch.uint8 \(bytes in a uint8 buffer: pass out\[0\]\."
                                        r"view\(torch.float8_e4m3fn\)\)$"):
        call(as_bytes)
    assert _unchanged(as_bytes, before)
    got = call((as_bytes[0].view(torch.float8_e4m3fn), *as_bytes[1:]))
    assert got[0].data_ptr() == as_bytes[0].data_ptr()
