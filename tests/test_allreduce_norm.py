"""allreduce_gemma_rms_norm_mxfp8: each dispatch path and the deferral (docs/spec/integration.md)."""

import pytest
import torch

import seam
from seam.compare import bytes_equal
from seam.ops.allreduce_norm import allreduce_gemma_rms_norm_mxfp8
from seam.ref.lamport import lamport_sum_ref

H = 256


def _inputs(device, m=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, H, generator=g) * 2).bfloat16().to(device)
    r = torch.randn(m, H, generator=g).bfloat16().to(device)
    w = (torch.randn(H, generator=g) * 0.1).bfloat16().to(device)
    return x, r, w


def test_tp1_is_the_fused_kernel(device):
    x, r, w = _inputs(device)
    qa, res, normed = allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True)
    v, s, n, ro = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True)
    assert bytes_equal(qa.values, v) and bytes_equal(qa.scales, s)
    assert bytes_equal(res, ro) and bytes_equal(normed, n)
    assert qa.layout is seam.ScaleLayout.SWIZZLED and qa.shape == (5, H)


def test_defer_returns_none_and_launches_nothing(device, monkeypatch):
    from seam.ops import norm as norm_ops

    launched, norm = [], norm_ops._norm
    monkeypatch.setattr(norm_ops, "_norm", lambda *a, **kw: launched.append("norm") or norm(*a, **kw))
    comm = seam.LamportAllReduce(hidden_size=H, max_num_tokens=8, group=seam.SimulatedGroup(1, device))
    publish = comm._publish
    monkeypatch.setattr(comm, "_publish", lambda *a, **kw: launched.append("publish") or publish(*a, **kw))
    x, r, w = _inputs(device)
    assert allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, defer=True) is None
    assert allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, comm, defer=True) is None
    assert launched == []
    allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6)  # the spies see the launches a call without defer makes
    allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, comm)
    assert launched == ["norm", "publish"]


def test_lamport_path_single_simulated_rank(device):
    """A simulated TP 1 group keeps the Lamport kernels: consumer A semantics."""
    x, r, w = _inputs(device, seed=1)
    comm = seam.LamportAllReduce(hidden_size=H, max_num_tokens=8, group=seam.SimulatedGroup(1, device))
    qa, res = allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, comm)
    want = (lamport_sum_ref([x.cpu()]) + r.cpu().float()).bfloat16()
    assert bytes_equal(res.cpu(), want)
    normed = comm.all_reduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True)[2]
    v, s = seam.mxfp8_quantize(normed)
    assert bytes_equal(qa.values, v) and bytes_equal(qa.scales, s)


def test_defer_still_checks_the_group(device):
    # A wrongly wired group surfaces while the caller defers, not only once it stops deferring.
    x, r, w = _inputs(device)
    with pytest.raises(TypeError, match="comm must be None or a seam.LamportAllReduce, got int"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, 123, defer=True)
    with pytest.raises(TypeError, match="defer"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, defer="yes")
    # so do the option flags (a new-user trial passed also_bf16=1 and a_deq="zz" while deferring)
    with pytest.raises(TypeError, match="also_bf16 must be a bool, got int"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=1, defer=True)
    with pytest.raises(ValueError, match="a_deq must be True, False or 'auto', got 'zz'"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, a_deq="zz", defer=True)
    with pytest.raises(TypeError, match="a_deq must be a bool or 'auto', got int"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, a_deq=2, defer=True)
    assert allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True, a_deq="AUTO", defer=True) is None


def test_rejects_other_group_types(device):
    x, r, w = _inputs(device)
    with pytest.raises(TypeError, match=r"LamportAllReduce, got SimulatedGroup \(wrap it once"):
        allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, seam.SimulatedGroup(1, device))


def test_one_public_entry_for_every_path():
    """The dispatch is seam's only all-reduce + Gemma norm + MXFP8 function (issue 20): the
    Lamport-object function one underscore away is gone from the package root (the dispatch takes
    that object: the test above, and test_lamport's one-call and gloo fallback tests), and every
    exported name resolves."""
    assert "all_reduce_gemma_rms_norm_mxfp8" not in seam.__all__
    assert not hasattr(seam, "all_reduce_gemma_rms_norm_mxfp8")
    assert [name for name in seam.__all__ if not hasattr(seam, name)] == []
    assert seam.allreduce_gemma_rms_norm_mxfp8 is allreduce_gemma_rms_norm_mxfp8
