"""The skeleton the Lamport objects share (``seam.ops.allreduce_base.LamportBase``): one set of
construction rules for all three, and every argument of a public entry checked exactly once on
the way to the launch (simulated TP 1 on the device: the Lamport path, kernels interpreted on CPU)."""

from collections import Counter

import pytest
import torch

import seam
from seam import checks
from seam.ops import allreduce, allreduce_mhc, allreduce_moe
from seam.ops.allreduce_base import LamportBase

H, M, TOP_K, HC = 128, 2, 2, 2

_BUILDERS = {
    "LamportAllReduce": lambda **kw: seam.LamportAllReduce(hidden_size=H, max_num_tokens=4, **kw),
    "Finalize": lambda **kw: seam.FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=H, max_num_tokens=4, top_k=TOP_K, fp32_weights=True, **kw),
    "AllReduceMHC": lambda **kw: seam.AllReduceMHC(
        hidden_size=H, hc_mult=HC, max_num_tokens=4, top_k=TOP_K, quantize_layer_input=True, **kw),
}


def test_public_names_and_modules():
    assert seam.LamportAllReduce is allreduce.LamportAllReduce
    assert seam.AllReduceMHC is allreduce_mhc.AllReduceMHC
    for name in ("FinalizeAllReduceGemmaRMSNormMxfp8", "MoEOutput", "UnfinalizedMoEOutput",
                 "finalize_allreduce_gemma_rms_norm_mxfp8", "init_fused_moe_finalize", "supports_fused_moe_finalize"):
        assert getattr(seam, name) is getattr(allreduce_moe, name)
    for cls in (seam.LamportAllReduce, seam.FinalizeAllReduceGemmaRMSNormMxfp8, seam.AllReduceMHC):
        assert issubclass(cls, LamportBase)


@pytest.mark.parametrize("build", list(_BUILDERS.values()), ids=list(_BUILDERS))
def test_shared_construction_rules(build, device, monkeypatch):
    group = seam.SimulatedGroup(2, device)
    # group None (or left out) is a DistGroup over the default process group for all three alike: none here yet
    no_default = [] if torch.distributed.is_initialized() else [
        (dict(), RuntimeError, r"DistGroup needs torch.distributed.init_process_group\(\) first"),
        (dict(group=None), RuntimeError, r"DistGroup needs torch.distributed.init_process_group\(\) first"),
    ]
    for kw, exc, match in no_default + [
        (dict(group="tp2"), TypeError, "group must be a seam.comm.Group"),
        (dict(group=group, spin_limit=0), ValueError, r"spin_limit=0 is outside \[1, 2147483647\]"),
        (dict(group=group, debug="yes"), TypeError, "debug must be a bool"),
        (dict(group=group, device="meta"), ValueError, "device"),
    ]:
        with pytest.raises(exc, match=match):
            build(**kw)
    monkeypatch.setenv("SEAM_LAMPORT_DEBUG", "1")
    op = build(group=group, spin_limit=8)
    assert op.debug and op.spin_limit == 8 and op.fused and op.capacity == 4 and op.tp == 2
    monkeypatch.delenv("SEAM_LAMPORT_DEBUG")
    assert build(group=group, spin_limit=8).spin_limit == 0  # bounded spins in debug mode only


def _rand(*shape, device, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16().to(device)


def _calls(device):
    """Every one-call public entry, with the names it checks (each must be checked once)."""
    x, residual, weight = _rand(M, H, device=device, seed=0), _rand(M, H, device=device, seed=1), _rand(H, device=device, seed=2)
    out = torch.empty(M, H, dtype=torch.bfloat16, device=device)
    gemm2 = _rand(M * TOP_K, H, device=device, seed=3)
    w = torch.rand(M, TOP_K).to(device)
    idx = torch.arange(M * TOP_K, dtype=torch.int32).view(M, TOP_K).to(device)
    moe = seam.MoEOutput(seam.UnfinalizedMoEOutput(gemm2, w, idx), x)
    res = _rand(M, HC, H, device=device, seed=4)
    post, comb, pre = torch.rand(M, HC).to(device), torch.rand(M, HC, HC).to(device), torch.rand(M, HC).to(device)
    mx = (torch.empty(M, H, dtype=torch.float8_e4m3fn, device=device),
          torch.empty(seam.mxfp8_scale_numel(M, H), dtype=torch.uint8, device=device))
    group = seam.SimulatedGroup(1, device)
    ar = _BUILDERS["LamportAllReduce"](group=group)
    fin = _BUILDERS["Finalize"](group=group)
    mhc = _BUILDERS["AllReduceMHC"](group=group)
    return {
        "all_reduce": lambda: seam.all_reduce(x, ar, out=out),
        "all_reduce_rms_norm": lambda: seam.all_reduce_rms_norm(x, residual, weight, 1e-6, ar, gemma=True),
        "allreduce_gemma_rms_norm_mxfp8": lambda: seam.allreduce_gemma_rms_norm_mxfp8(
            x, residual, weight, 1e-6, ar, also_bf16=True),
        "finalize": lambda: fin(moe, residual, weight, 1e-6),
        "mhc": lambda: mhc(x, res, post, comb, pre, weight, 1e-6, mx),
        "mhc.finalize": lambda: mhc.finalize(gemm2, w, idx, x, res, post, comb, pre, weight, 1e-6, mx),
    }


@pytest.mark.parametrize("name", ["all_reduce", "all_reduce_rms_norm", "allreduce_gemma_rms_norm_mxfp8", "finalize",
                                  "mhc", "mhc.finalize"])
def test_one_call_checks_each_tensor_once(name, device, monkeypatch):
    call = _calls(device)[name]
    seen = []
    tensor = checks.tensor

    def counting(arg, t, **kw):
        seen.append(arg)
        return tensor(arg, t, **kw)

    monkeypatch.setattr(checks, "tensor", counting)
    call()
    assert seen and all(n == 1 for n in Counter(seen).values()), Counter(seen)


@pytest.mark.parametrize("method", ["all_reduce", "all_reduce_rms_norm", "all_reduce_gemma_rms_norm_mxfp8"])
def test_one_call_methods_say_what_they_raise(method, device):
    """Each one-call method has a Raises section, and what it says of a simulated tp > 1 holds."""
    doc = getattr(seam.LamportAllReduce, method).__doc__
    raises = doc[doc.index("Raises:"):]
    assert all(e in raises for e in ("TypeError", "ValueError", "RuntimeError", "tp > 1"))
    ar = seam.LamportAllReduce(hidden_size=64, max_num_tokens=2, group=seam.SimulatedGroup(2, device))
    x = torch.zeros(1, 64, dtype=torch.bfloat16, device=device)
    args = (x,) if method == "all_reduce" else (x, x.clone(), torch.zeros(64, dtype=torch.bfloat16, device=device), 1e-6)
    with pytest.raises(ValueError, match="name the rank"):
        getattr(ar, method)(*args)
