"""AllReduceMHC (docs/spec/lamport.md, Consumer B) on simulated TP groups: residual_output
bit-identical to the reference, layer_input within 1 BF16 ulp, MXFP8 == mxfp8_quantize(layer_input),
residual_only == the full variant's streams, long sequences with changing M (generation rotation,
re-arming), the column split of decode M (forced at interpreter sizes, alternating with one program
per token), the MoE finalize publish, every rejected argument combination of the issue, the split-step
protocol, the debug timeout, and the fallback of a real (gloo) group."""

import warnings

import numpy as np
import pytest
import torch

import seam
from seam import runtime
from seam.comm import SimulatedGroup
from seam.compare import bf16_ulp_diff, bytes_equal, ulp_summary
from seam.formats.mxfp8 import mxfp8_quantize_ref
from seam.kernels import mhc_config
from seam.kernels.lamport import SENTINEL_BITS
from seam.ref import mhc as ref
from seam.ref.lamport import moe_finalize_ref

EPS = 1e-6


def special_columns(t):
    """The issue's input pattern: first 16 columns 0, -0.0 at odd columns 9..15."""
    t = t.clone()
    t[..., :16] = 0.0
    t[..., 9:16:2] = -0.0
    return t


def make_boundary(m, hc, hidden, seed, device):
    """residual streams (special columns), realistic mixes from mhc_pre, a norm weight."""
    g = torch.Generator().manual_seed(seed)
    res = special_columns(torch.randn(m, hc, hidden, generator=g)).bfloat16()
    mixes = ref.mhc_pre(res, ref.mhc_params(hc, hidden, seed=seed))
    w = (torch.randn(hidden, generator=g) * 0.2 + 1).bfloat16()
    return [t.to(device) for t in (res, mixes.post, mixes.comb, mixes.pre, w)]


def make_contributions(tp, m, hidden, seed, device):
    g = torch.Generator().manual_seed(seed + 1000)
    return special_columns(torch.randn(tp, m, hidden, generator=g) * 2).bfloat16().to(device)


def make_moe(m, hidden, top_k, seed, device):
    """One rank's unfinalized MoE output: some experts off this rank (-1)."""
    g = torch.Generator().manual_seed(seed + 2000)
    rows = m * top_k
    gemm2 = special_columns(torch.randn(rows, hidden, generator=g)).bfloat16()
    weights = torch.rand(m, top_k, generator=g) * 2.0
    idx = torch.randperm(rows, generator=g)[: m * top_k].view(m, top_k).to(torch.int32)
    idx[torch.rand(m, top_k, generator=g) < 0.4] = -1
    shared = special_columns(torch.randn(m, hidden, generator=g)).bfloat16()
    return [t.to(device) for t in (gemm2, weights, idx, shared)]


def mxfp8_buffers(m, hidden, device):
    return (
        torch.empty(m, hidden, dtype=torch.float8_e4m3fn, device=device),
        torch.full((seam.mxfp8_scale_numel(m, hidden),), 0x5A, dtype=torch.uint8, device=device),
    )


def run_simulated(op, contributions=None, moes=None, *, res, post, comb, pre, w, quantize=False):
    """Publish every rank, then consume every rank; returns [(residual_out, layer_input, mxfp8)]."""
    for r in range(op.tp):
        if moes is None:
            op.publish(contributions[r], rank=r)
        else:
            op.publish_finalize(*moes[r], rank=r)
    outs = []
    for r in range(op.tp):
        mx = mxfp8_buffers(res.shape[0], res.shape[2], res.device) if quantize else None
        ro, li = op.consume(res, post, comb, pre, w, EPS, mx, rank=r)
        outs.append((ro, li, mx))
    return outs


def check_outputs(outs, contributions, res, post, comb, pre, w):
    c = contributions.cpu()
    cpu = lambda t: None if t is None else t.cpu()  # noqa: E731
    rro, rli, _ = ref.allreduce_mhc_ref(c, res.cpu(), post.cpu(), comb.cpu(), cpu(pre), cpu(w), EPS)
    for r, (ro, li, mx) in enumerate(outs):
        assert bytes_equal(ro.cpu(), rro), f"rank {r}: residual_output is not bit-identical"
        if rli is None:
            assert li is None
            continue
        ok, summary = ulp_summary(li.cpu(), rli)
        assert ok, f"rank {r}: layer_input beyond 1 BF16 ulp: {summary}"
        # and the reference's RNE bytes almost everywhere (the 1-ulp bound alone passes a truncating rounding)
        assert float((bf16_ulp_diff(li.cpu(), rli) == 0).float().mean()) > 0.9, f"rank {r}: not RNE: {summary}"
        if mx is not None:
            qv, qs = mxfp8_quantize_ref(li.cpu())
            assert bytes_equal(mx[0].cpu(), qv) and bytes_equal(mx[1].cpu(), qs), f"rank {r}: MXFP8 != quantize(layer_input)"
    return rro


def assert_armed(op):
    """Every slot is back to the sentinel after the consumers ran (lamport.md consumer step 5)."""
    for r in range(op.tp):
        bits = op.mailbox.state(r).mailbox.view(torch.int16)
        assert bool((bits == SENTINEL_BITS).all()), f"rank {r}: mailbox not re-armed"


def run_call_sequence(op, ms, finalize_phase, device):
    """One call per M in ``ms`` on every rank: a finalize publish every third call (from
    ``finalize_phase``), MXFP8 every other call; outputs checked and the mailbox re-armed after each."""
    for call, m in enumerate(ms):
        res, post, comb, pre, w = make_boundary(m, op.hc_mult, op.hidden_size, seed=call, device=device)
        quantize = call % 2 == 0
        if call % 3 == finalize_phase:
            moes = [make_moe(m, op.hidden_size, op.top_k, seed=10 * call + r, device=device) for r in range(op.tp)]
            contributions = torch.stack([moe_finalize_ref(*moe) for moe in moes])
            outs = run_simulated(op, moes=moes, res=res, post=post, comb=comb, pre=pre, w=w, quantize=quantize)
        else:
            contributions = make_contributions(op.tp, m, op.hidden_size, seed=call, device=device)
            outs = run_simulated(op, contributions, res=res, post=post, comb=comb, pre=pre, w=w, quantize=quantize)
        check_outputs(outs, contributions, res, post, comb, pre, w)
        assert_armed(op)


@pytest.mark.parametrize("tp", [2, 4])
def test_long_sequence_changing_m(device, tp):
    """30+ calls, M changing every call, plain and finalize publishes, quantized every other call."""
    hc, hidden, cap, top_k = 4, 128, 12, 2
    op = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=top_k, group=SimulatedGroup(tp, device),
        quantize_layer_input=True,
    )
    run_call_sequence(op, [1, 5, 12, 3, 1, 7, 2, 12, 9, 4] * 3 + [6], finalize_phase=2, device=device)


@pytest.mark.parametrize("hc", [1, 2, 4, 8])
@pytest.mark.parametrize("tp", [2, 4])
def test_hc_mults_and_residual_only(device, tp, hc):
    hidden, cap = 128 if hc == 8 else 256, 8
    group = SimulatedGroup(tp, device)
    full = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=1, group=group, quantize_layer_input=True
    )
    only = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=1, group=group, residual_only=True)
    m = 5
    res, post, comb, pre, w = make_boundary(m, hc, hidden, seed=hc, device=device)
    contributions = make_contributions(tp, m, hidden, seed=tp, device=device)
    outs = run_simulated(full, contributions, res=res, post=post, comb=comb, pre=pre, w=w, quantize=True)
    rro = check_outputs(outs, contributions, res, post, comb, pre, w)
    # post as [M, hc, 1] and no pre/norm weight: the streams alone, byte for byte the full variant's.
    post3 = post[:, :, None].contiguous()
    for ro, li, _ in run_simulated(only, contributions, res=res, post=post3, comb=comb, pre=None, w=None):
        assert li is None and bytes_equal(ro.cpu(), rro)
    assert_armed(full)
    assert_armed(only)


def check_full_and_residual_only(full, only, m, seed, quantize, device):
    """One call of ``full`` (layer input, MXFP8 when ``quantize``) checked against the reference,
    and of the residual-only ``only``, whose residual_output must equal full's byte for byte."""
    res, post, comb, pre, w = make_boundary(m, full.hc_mult, full.hidden_size, seed=seed, device=device)
    contributions = make_contributions(full.tp, m, full.hidden_size, seed=seed, device=device)
    outs = run_simulated(full, contributions, res=res, post=post, comb=comb, pre=pre, w=w, quantize=quantize)
    rro = check_outputs(outs, contributions, res, post, comb, pre, w)
    for ro, li, _ in run_simulated(only, contributions, res=res, post=post, comb=comb, pre=None, w=None):
        assert li is None and bytes_equal(ro.cpu(), rro)


@pytest.mark.parametrize("tp,hc,hidden", [(2, 4, 96), (4, 2, 160)])
def test_hidden_multiple_of_32_not_128(device, tp, hc, hidden):
    # the MXFP8 layer input's swizzled scales carry zero padding columns (hidden / 32 rounded up to 4)
    group = SimulatedGroup(tp, device)
    full = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=8, top_k=1, group=group,
                             quantize_layer_input=True)
    only = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=8, top_k=1, group=group, residual_only=True)
    check_full_and_residual_only(full, only, 5, seed=hidden, quantize=True, device=device)


@pytest.mark.parametrize("hc,hidden", [(2, 640), (8, 256)])
def test_chunked_consumer(device, monkeypatch, hc, hidden):
    """Force the consumer's multi-chunk path (a collect per chunk, parked collapse) at small sizes."""
    monkeypatch.setattr(mhc_config, "MAX_TILE", 256)
    group = SimulatedGroup(2, device)
    full = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=1, group=group, quantize_layer_input=True)
    only = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=1, group=group, residual_only=True)
    for call, m in enumerate([3, 1]):
        check_full_and_residual_only(full, only, m, seed=call, quantize=True, device=device)
    assert_armed(full)
    assert_armed(only)


def force_split(monkeypatch, sms, min_cols):
    """A device of ``sms`` SMs (M <= sms / 2 splits) and chunks down to ``min_cols`` columns."""
    monkeypatch.setattr(runtime, "num_sms", lambda device: sms)
    monkeypatch.setattr(mhc_config, "SPLIT_MIN_COLS", min_cols)


# 3 chunks per token; at hidden 640 the last one is ragged (128 of 256 columns)
@pytest.mark.parametrize("hc,hidden,min_cols", [(1, 640, 256), (2, 384, 128), (4, 640, 256), (8, 384, 128)])
def test_split_consumer(device, monkeypatch, hc, hidden, min_cols):
    """The consumer's (token, chunk) grid: each program collects and re-arms its own chunk's
    fragments, the token's last program normalizes; MXFP8, BF16-only and residual-only variants."""
    force_split(monkeypatch, 1000, min_cols)
    group = SimulatedGroup(2, device)
    sizes = dict(hidden_size=hidden, hc_mult=hc, max_num_tokens=3, top_k=1, group=group)
    full = seam.AllReduceMHC(**sizes, quantize_layer_input=True)
    only = seam.AllReduceMHC(**sizes, residual_only=True)
    for call, (m, quantize) in enumerate([(3, True), (1, False)]):
        assert mhc_config.launch_shape(m, hidden, hc, device).split == 3
        check_full_and_residual_only(full, only, m, seed=call + hc, quantize=quantize, device=device)
        assert_armed(full)
        assert_armed(only)
        assert not full._split_scratch[1].any(), "arrival counters not re-armed"


def test_split_and_per_token_alternate(device, monkeypatch):
    """An 8-SM device: M <= 4 splits (3 or 2 chunks, ragged), larger M takes one program per token;
    the modes alternate over one mailbox's generations, with finalize publishes."""
    force_split(monkeypatch, 8, 128)
    tp, hc, hidden, cap, top_k = 2, 4, 384, 12, 2
    op = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=top_k, group=SimulatedGroup(tp, device),
        quantize_layer_input=True,
    )
    ms = [1, 5, 3, 12, 2, 4, 9, 1]
    assert [mhc_config.launch_shape(m, hidden, hc, device).split for m in ms] == [3, 1, 2, 1, 3, 2, 1, 3]
    run_call_sequence(op, ms, finalize_phase=1, device=device)
    assert not op._split_scratch[1].any()


def test_single_rank_simulated_group_call(device):
    """A simulated TP 1 group keeps the Lamport path; its rank may be left implicit in __call__."""
    hc, hidden = 2, 128
    op = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=2, group=SimulatedGroup(1, device))
    res, post, comb, pre, w = make_boundary(3, hc, hidden, seed=1, device=device)
    x = make_contributions(1, 3, hidden, seed=1, device=device)
    ro, li = op(x[0], res, post, comb, pre, w, EPS)
    check_outputs([(ro, li, None)], x, res, post, comb, pre, w)
    moe = make_moe(3, hidden, 2, seed=3, device=device)
    ro, li = op.finalize(*moe, res, post, comb, pre, w, EPS)
    check_outputs([(ro, li, None)], moe_finalize_ref(*moe)[None], res, post, comb, pre, w)
    assert_armed(op)


# --- rejected arguments: ValueError before any launch, state untouched --------------------------


def _setup(device, **kw):
    tp, hc, hidden, cap, top_k = 2, 4, 128, 4, 2
    op = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=top_k, group=SimulatedGroup(tp, device), **kw
    )
    res, post, comb, pre, w = make_boundary(3, hc, hidden, seed=0, device=device)
    args = dict(residual=res, post=post, comb=comb, pre=pre, norm_weight=w, norm_eps=EPS, mxfp8_out=None)
    return op, args


CONSUMER_CASES = [
    (dict(), lambda a: a.update(pre=None), "norm_weight was given without pre"),
    (dict(), lambda a: a.update(norm_weight=None), "pre was given without norm_weight"),
    (dict(), lambda a: a.update(pre=None, norm_weight=None), "built without residual_only"),
    (dict(), lambda a: a.update(mxfp8_out=mxfp8_buffers(3, 128, a["residual"].device)), "built without quantize_layer_input"),
    (
        dict(residual_only=True, quantize_layer_input=True),
        lambda a: a.update(pre=None, norm_weight=None, mxfp8_out=mxfp8_buffers(3, 128, a["residual"].device)),
        "residual-only",
    ),
    (dict(), lambda a: a.update(residual=a["residual"][:, :2].contiguous()), "residual must have shape"),
    (dict(), lambda a: a.update(residual=a["residual"][:2]), r"residual must have shape \[3, 4, 128\]"),
    (dict(), lambda a: a.update(post=a["post"][:2]), "post must have shape"),
    (dict(), lambda a: a.update(post=a["post"][:, :, None, None].contiguous()), "post must have shape"),
    (dict(), lambda a: a.update(comb=a["comb"][:, :2].contiguous()), "comb must have shape"),
    (dict(), lambda a: a.update(pre=a["pre"][:, :3].contiguous()), "pre must have shape"),
    (
        dict(quantize_layer_input=True),
        lambda a: a.update(mxfp8_out=mxfp8_buffers(2, 128, a["residual"].device)),
        r"mxfp8_out\[0\] \(values\) must have shape",
    ),
    (
        dict(quantize_layer_input=True),
        lambda a: a.update(mxfp8_out=(mxfp8_buffers(3, 128, a["residual"].device)[0], torch.zeros(64, dtype=torch.uint8, device=a["residual"].device))),
        r"mxfp8_out\[1\] \(scales\) must hold",
    ),
    (  # the right byte count, not flat: swizzled scales are 1-D
        dict(quantize_layer_input=True),
        lambda a: a.update(mxfp8_out=(lambda v, s: (v, s.view(128, 4)))(*mxfp8_buffers(3, 128, a["residual"].device))),
        r"mxfp8_out\[1\] \(scales\) must hold 512 bytes as a flat \[512\] tensor \(swizzled scales are 1-D",
    ),
]


@pytest.mark.parametrize("build,mutate,match", CONSUMER_CASES)
def test_consume_rejects_and_keeps_publish_pending(device, build, mutate, match):
    op, args = _setup(device, **build)
    contributions = make_contributions(2, 3, 128, seed=0, device=device)
    for r in range(2):
        op.publish(contributions[r], rank=r)
    bad = dict(args)
    mutate(bad)
    keep = bad["mxfp8_out"]
    before = None if keep is None else (keep[0].view(torch.uint8).clone(), keep[1].clone())
    with pytest.raises(ValueError, match=match):
        op.consume(**bad, rank=0)
    if keep is not None:
        assert torch.equal(keep[0].view(torch.uint8), before[0]) and torch.equal(keep[1], before[1])
    # The publish is still pending and the state intact: the good call now succeeds.
    outs = [(*op.consume(**args, rank=r), None) for r in range(2)]
    check_outputs(outs, contributions, args["residual"], args["post"], args["comb"], args["pre"], args["norm_weight"])
    assert_armed(op)


def test_m_outside_capacity(device):
    op, args = _setup(device)
    for m in (0, 5):
        x = torch.zeros(m, 128, dtype=torch.bfloat16, device=device)
        with pytest.raises(ValueError, match=rf"M \(x.shape\[0\]\)={m} is outside \[1, 4\]"):
            op.publish(x, rank=0)
    with pytest.raises(ValueError, match="x must have shape"):
        op.publish(torch.zeros(2, 256, dtype=torch.bfloat16, device=device), rank=0)
    assert not op._ledger._pending


@pytest.mark.parametrize(
    "mutate,error,match",
    [
        (lambda moe: moe.__setitem__(1, moe[1].bfloat16()), TypeError, "expert_weights must have dtype torch.float32"),
        (lambda moe: moe.__setitem__(1, moe[1][:, :1].contiguous()), ValueError, r"expert_weights must have shape \[3, 2\]"),
        (lambda moe: moe.__setitem__(2, moe[2].long()), TypeError,
         "expanded_idx_to_permuted_idx must have dtype torch.int32"),
        (lambda moe: moe.__setitem__(2, moe[2][:2].contiguous()), ValueError,
         r"expanded_idx_to_permuted_idx has 2 rows but shared_output has 3: they must agree"),
        # M comes from shared_output's rows: one of other rows is named, not the routing tensors
        (lambda moe: moe.__setitem__(3, moe[3][:2].contiguous()), ValueError,
         r"expert_weights has 3 rows but shared_output has 2: they must agree"),
        (lambda moe: moe.__setitem__(0, moe[0][:, :64].contiguous()), ValueError,
         r"gemm2_permuted must have shape \[rows, 128\]"),
        (lambda moe: moe.__setitem__(3, moe[3][:, :64].contiguous()), ValueError,
         r"shared_output must have shape \[\*, 128\]"),
    ],
)
def test_finalize_rejects_routing_inputs(device, mutate, error, match):
    op, args = _setup(device)
    moe = make_moe(3, 128, 2, seed=0, device=device)
    mutate(moe)
    with pytest.raises(error, match=match):
        op.publish_finalize(*moe, rank=0)
    assert not op._ledger._pending
    assert int(op.mailbox.state(0).stage_state[1]) == 0


def test_split_step_protocol(device):
    op, args = _setup(device)
    x = make_contributions(2, 3, 128, seed=0, device=device)
    with pytest.raises(ValueError, match="rank 0 has no pending publish"):
        op.consume(**args, rank=0)
    op.publish(x[0], rank=0)
    with pytest.raises(ValueError, match="rank 0 already published 3 rows"):
        op.publish(x[0], rank=0)
    with pytest.raises(ValueError, match="simulated group drives ranks .* name the rank"):
        op(x[0], **args)
    with pytest.raises(ValueError, match=r"rank=2 is not driven"):
        op.publish(x[1], rank=2)


def test_constructor_validation(device):
    g = SimulatedGroup(2, device)
    base = dict(hidden_size=128, hc_mult=4, max_num_tokens=4, top_k=2, group=g)
    for kw, exc, match in [
        (dict(hidden_size=80), ValueError, "hidden_size must be a positive multiple of 32"),
        (dict(hc_mult=3), ValueError, "hc_mult must be one of"),
        (dict(max_num_tokens=0), ValueError, r"max_num_tokens=0 is outside \[1, 16777216\]"),
        (dict(max_num_tokens=1 << 25), ValueError, r"max_num_tokens=33554432 is outside \[1, 16777216\]"),
        (dict(top_k=65), ValueError, r"top_k=65 is outside \[1, 64\]"),
        (dict(top_k=1.5), TypeError, "top_k must be an int"),
        (dict(group="tp4"), TypeError, "group must be a seam.comm.Group"),
    ]:
        with pytest.raises(exc, match=match):
            seam.AllReduceMHC(**{**base, **kw})


def test_sizes_and_ranks_accept_numpy_ints(device):
    """Issue 20: sizes and rank are Python or NumPy ints (seam.checks.integer), stored as Python ints."""
    op = seam.AllReduceMHC(hidden_size=np.int64(128), hc_mult=np.int32(4), max_num_tokens=np.int64(4),
                           top_k=np.int16(2), spin_limit=np.int64(4), group=SimulatedGroup(2, device))
    sizes = (op.hidden_size, op.hc_mult, op.capacity, op.top_k)
    assert sizes == (128, 4, 4, 2) and all(type(v) is int for v in sizes)
    res, post, comb, pre, w = make_boundary(3, 4, 128, seed=0, device=device)
    x = make_contributions(2, 3, 128, seed=0, device=device)
    for r in range(2):
        op.publish(x[r], rank=np.int64(r))
    outs = [(*op.consume(res, post, comb, pre, w, EPS, rank=np.int32(r)), None) for r in range(2)]
    check_outputs(outs, x, res, post, comb, pre, w)
    for kw, name in [(dict(hc_mult=4.0), "hc_mult"), (dict(spin_limit=np.float32(4)), "spin_limit")]:
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            seam.AllReduceMHC(**{**dict(hidden_size=128, hc_mult=4, max_num_tokens=4, top_k=2,
                                        group=SimulatedGroup(2, device)), **kw})


def test_debug_timeout_raises_and_reset_recovers(device):
    op, args = _setup(device, debug=True, spin_limit=4)
    x = make_contributions(2, 3, 128, seed=0, device=device)
    op.publish(x[0], rank=0)  # rank 1 never publishes
    with pytest.raises(RuntimeError, match="did not arrive"):
        op.consume(**args, rank=0)
    op.reset()
    outs = run_simulated(op, x, res=args["residual"], post=args["post"], comb=args["comb"], pre=args["pre"], w=args["norm_weight"])
    check_outputs(outs, x, args["residual"], args["post"], args["comb"], args["pre"], args["norm_weight"])


# --- a real group without peer access (gloo on CPU): the all-gather fallback ---------------------


def _gloo_worker(rank, world, path, results):
    import torch.distributed as dist

    import seam as s

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"file://{path}")
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            results[rank] = _gloo_calls(s, rank, world)
        # the fallback's collective is torch's current one (torch 2.13 deprecates all_gather_into_tensor)
        results[rank] += [[str(w.message) for w in warned if issubclass(w.category, (FutureWarning, DeprecationWarning))]]
    finally:
        dist.destroy_process_group()


def _gloo_calls(s, rank, world):
    hc, hidden = 4, 128
    op = s.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=2, group=s.DistGroup(), quantize_layer_input=True
    )
    ok = [op.fused]
    for call, m in enumerate([3, 1, 4]):
        res, post, comb, pre, w = make_boundary(m, hc, hidden, seed=call, device="cpu")
        xs = make_contributions(world, m, hidden, seed=call, device="cpu")
        mx = mxfp8_buffers(m, hidden, "cpu")
        if call == 1:
            moes = [make_moe(m, hidden, 2, seed=10 * call + r, device="cpu") for r in range(world)]
            xs = torch.stack([moe_finalize_ref(*moe) for moe in moes])
            ro, li = op.finalize(*moes[rank], res, post, comb, pre, w, EPS, mx)
        else:
            ro, li = op(xs[rank], res, post, comb, pre, w, EPS, mx)
        try:
            check_outputs([(ro, li, mx)], xs, res, post, comb, pre, w)
            ok.append(True)
        except AssertionError as e:
            ok.append(str(e))
    return ok


@pytest.mark.skipif(not runtime.INTERPRET, reason="gloo on CPU tensors needs the interpreter's CPU kernels")
def test_dist_group_fallback_is_bit_identical(tmp_path):
    """No peer access: all-gather + the fused mHC kernel sum in rank order, same bytes as Lamport."""
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(_gloo_worker, args=(2, str(tmp_path / "store"), results), nprocs=2, join=True)
    assert results[0] == [False, True, True, True, []] and results[1] == [False, True, True, True, []]


# --- GPU: DeepSeek-V4.1 shapes, CUDA graphs ------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("quantize", [False, True])
def test_gpu_deepseek_shapes(quantize):
    tp, hc, hidden, cap, top_k = 4, 4, 5120, 256, 6
    op = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=cap, top_k=top_k, group=SimulatedGroup(tp, "cuda"),
        quantize_layer_input=True,
    )
    for call, m in enumerate([1, 8, 32, 128, 256, 129, 3]):
        res, post, comb, pre, w = make_boundary(m, hc, hidden, seed=call, device="cuda")
        if call % 2:
            moes = [make_moe(m, hidden, top_k, seed=10 * call + r, device="cuda") for r in range(tp)]
            contributions = torch.stack([moe_finalize_ref(*moe) for moe in moes])
            outs = run_simulated(op, moes=moes, res=res, post=post, comb=comb, pre=pre, w=w, quantize=quantize)
        else:
            contributions = make_contributions(tp, m, hidden, seed=call, device="cuda")
            outs = run_simulated(op, contributions, res=res, post=post, comb=comb, pre=pre, w=w, quantize=quantize)
        check_outputs(outs, contributions, res, post, comb, pre, w)
        assert_armed(op)


@pytest.mark.gpu
def test_gpu_cuda_graph_replays_with_mutated_inputs():
    """Three back-to-back boundaries captured once, replayed 500 times with inputs mutated in between."""
    tp, hc, hidden, ms = 4, 4, 5120, (32, 5, 64)
    op = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=hc, max_num_tokens=64, top_k=2, group=SimulatedGroup(tp, "cuda"),
        quantize_layer_input=True,
    )
    calls = [
        (make_contributions(tp, m, hidden, seed=i, device="cuda"), *make_boundary(m, hc, hidden, seed=i, device="cuda"))
        for i, m in enumerate(ms)
    ]

    def step():
        return [run_simulated(op, xs, res=res, post=post, comb=comb, pre=pre, w=w, quantize=True)
                for xs, res, post, comb, pre, w in calls]

    step()  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        results = step()
    torch.cuda.current_stream().wait_stream(stream)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for replay in range(500):
        for xs, res, post, comb, pre, w in calls:
            xs.normal_(generator=gen)
            res.normal_(generator=gen)
            post.uniform_(0.0, 2.0, generator=gen)
            comb.uniform_(generator=gen)
            pre.uniform_(generator=gen)
        graph.replay()
        torch.cuda.synchronize()
        if replay % 100 == 0 or replay > 497:  # the CPU reference dominates: 7 checks of 500 replays
            for (xs, res, post, comb, pre, w), outs in zip(calls, results):
                check_outputs(outs, xs, res, post, comb, pre, w)
    assert_armed(op)


def test_mxfp8_out_writes_bump_versions(device):
    """The fused path's launch bumps the versions of the buffers it writes, as every seam op does:
    an MXFP8Linear hand-off registered on a reused ``mxfp8_out`` sees the next boundary overwrite it."""
    m, hc, hidden = 2, 2, 128
    res, post, comb, pre, w = make_boundary(m, hc, hidden, seed=8, device=device)
    op = seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=1,
                           group=seam.SimulatedGroup(1, device), quantize_layer_input=True)
    values, scales = mxfp8_buffers(m, hidden, device)
    x = make_contributions(1, m, hidden, seed=8, device=device)[0]
    before = (values._version, scales._version)
    _, layer_input = op(x, res, post, comb, pre, w, 1e-6, mxfp8_out=(values, scales))
    assert values._version > before[0] and scales._version > before[1]
    lin = seam.MXFP8Linear.from_bf16(torch.randn(128, hidden, device=device).bfloat16())
    lin.set_prequant(layer_input, seam.QuantizedActivation(values, scales, torch.bfloat16, (m, hidden)))
    op(x * 2, res, post, comb, pre, w, 1e-6, mxfp8_out=(values, scales))  # the next boundary reuses the buffers
    assert torch.equal(lin(layer_input), lin(layer_input.clone()))  # the stale hand-off is not used


def test_consume_launch_that_raises_leaves_the_publish_pending(device, monkeypatch):
    """As for LamportAllReduce: a consumer launch that raises on the host leaves the publish pending,
    and the retried consume gives the reference's bytes."""
    import seam.ops.allreduce_mhc as mhc_ops

    op, args = _setup(device)
    xs = make_contributions(op.tp, 3, 128, seed=60, device=device)
    for r in range(op.tp):
        op.publish(xs[r], rank=r)
    launch = mhc_ops._mhc_consume

    def fail(*a):
        raise RuntimeError("injected launch failure")

    monkeypatch.setattr(mhc_ops, "_mhc_consume", fail)
    with pytest.raises(RuntimeError, match="injected"):
        op.consume(**args, rank=0)
    monkeypatch.setattr(mhc_ops, "_mhc_consume", launch)
    outs = [(*op.consume(**args, rank=r), None) for r in range(op.tp)]
    check_outputs(outs, xs, args["residual"], args["post"], args["comb"], args["pre"], args["norm_weight"])
    assert_armed(op)

