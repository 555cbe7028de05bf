"""verify: the DeepSeek-V4.1 mHC boundary vs ``seam.ref.mhc`` (``docs/spec/lamport.md``, Consumer B).

* ``mhc_post_collapse_rms_norm[+mxfp8]``: the fused kernel on a reduced input (non-TP boundary).
* ``allreduce_mhc[TP4]``: every rank of a simulated group publishes, then every rank consumes
  (with MXFP8 output); ``allreduce_mhc_finalize[TP4]`` publishes MoE finalize contributions;
  ``allreduce_mhc_residual_only[TP4]`` checks the streams equal the full variant's.

Exactness: residual_output bit-identical, layer_input within 1 BF16 ulp, MXFP8 bit-identical to
``mxfp8_quantize(layer_input)``, mailboxes re-armed. Timed: fused (TP publishes + TP consumers,
or one launch) vs the unfused chain of separate launches (``seam.bench.mhc.unfused_chain``).
"""

from __future__ import annotations

import torch

import seam
from seam.bench.mhc import bytes_moved, standalone_bytes, unfused_chain
from seam.comm import SimulatedGroup
from seam.compare import bytes_equal, ulp_summary
from seam.ref import mhc as ref
from seam.ref.lamport import moe_finalize_ref
from seam.verify.core import Check, Context, Outcome

EPS = 1e-6
TP = 4
HC = 4
TOP_K = 4


def _boundary(ctx: Context, m: int, hidden: int, seed: int):
    res = ctx.randn(m, HC, hidden, seed=seed)
    mixes = ref.mhc_pre(res.cpu(), ref.mhc_params(HC, hidden, seed=seed))
    w = (ctx.randn(hidden, seed=seed + 1, dtype=torch.float32) * 0.2 + 1).bfloat16()
    return res, mixes.post.to(ctx.device), mixes.comb.to(ctx.device), mixes.pre.to(ctx.device), w


def _mxfp8(ctx: Context, m: int, hidden: int):
    return (
        torch.empty(m, hidden, dtype=torch.float8_e4m3fn, device=ctx.device),
        torch.empty(seam.mxfp8_scale_numel(m, hidden), dtype=torch.uint8, device=ctx.device),
    )


def _judge(outs, reduced_ref_input, res, post, comb, pre, w) -> tuple[bool, str]:
    """Compare every rank's (residual_output, layer_input, mxfp8) with the reference."""
    cpu = [t.cpu() for t in (res, post, comb, pre, w)]
    rro, rli = ref.mhc_post_collapse_rms_norm_ref(reduced_ref_input.cpu(), *cpu, EPS)
    ok, worst = True, ""
    for ro, li, mx in outs:
        ok &= bytes_equal(ro.cpu(), rro)
        within, worst = ulp_summary(li.cpu(), rli)
        ok &= within
        if mx is not None:
            values, scales = seam.mxfp8_quantize(li)
            ok &= bytes_equal(mx[0], values) and bytes_equal(mx[1], scales)
    return bool(ok), f"residual/MXFP8 {'bytes equal' if ok else 'DIFFER'}, layer_input {worst}"


def _standalone(ctx: Context, m: int, hidden: int) -> Outcome:
    x = ctx.randn(m, hidden, seed=m + 7, scale=2.0)
    res, post, comb, pre, w = _boundary(ctx, m, hidden, seed=m)
    mx = _mxfp8(ctx, m, hidden)
    ro, li = seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS, mxfp8_out=mx)
    ok, detail = _judge([(ro, li, mx)], x, res, post, comb, pre, w)
    return Outcome(
        exact=ok,
        detail=detail,
        fused=lambda: seam.mhc_post_collapse_rms_norm(x, res, post, comb, pre, w, EPS, mxfp8_out=mx),
        unfused=lambda: unfused_chain(x, res, post, comb, pre, w, EPS),
        baseline="PyTorch post-mix, collapse and RMSNorm, then seam.mxfp8_quantize",
        bytes_moved=standalone_bytes(m, hidden, HC),
    )


def _armed(op) -> bool:
    return all(bool((s.mailbox.view(torch.int16) == -32768).all()) for s in op.mailbox.states.values())


def _allreduce(ctx: Context, op, m: int, finalize: bool) -> Outcome:
    hidden = op.hidden_size
    res, post, comb, pre, w = _boundary(ctx, m, hidden, seed=m + 100)
    if finalize:
        moes = []
        for r in range(TP):
            g = ctx.generator(100 * r + m)
            idx = torch.randint(-1, m * TOP_K, (m, TOP_K), generator=g, dtype=torch.int32).to(ctx.device)
            wts = (torch.rand(m, TOP_K, generator=g) * 0.5).to(ctx.device)
            moes.append((ctx.randn(m * TOP_K, hidden, seed=100 * r + m + 1), wts, idx,
                         ctx.randn(m, hidden, seed=100 * r + m + 2)))
        contributions = torch.stack([moe_finalize_ref(*moe) for moe in moes])
    else:
        contributions = torch.stack([ctx.randn(m, hidden, seed=100 * r + m, scale=2.0) for r in range(TP)])
    mxs = [_mxfp8(ctx, m, hidden) for _ in range(TP)]

    def fused():
        for r in range(TP):
            if finalize:
                op.publish_finalize(*moes[r], rank=r)
            else:
                op.publish(contributions[r], rank=r)
        return [(*op.consume(res, post, comb, pre, w, EPS, mxs[r], rank=r), mxs[r]) for r in range(TP)]

    def unfused():
        reduced = contributions.float().sum(0).bfloat16()
        return [unfused_chain(reduced, res, post, comb, pre, w, EPS) for _ in range(TP)]

    outs = fused()
    ok, detail = _judge(outs, ref.lamport_reduce_ref(contributions.cpu()), res, post, comb, pre, w)
    armed = _armed(op)
    return Outcome(
        exact=ok and armed,
        detail=detail + ("" if armed else ", mailbox not re-armed"),
        fused=fused,
        unfused=unfused,
        baseline="PyTorch rank sum, then per rank PyTorch post-mix, collapse and RMSNorm + seam.mxfp8_quantize",
        bytes_moved=TP * bytes_moved(m, hidden, HC, TP),
    )


def _residual_only(ctx: Context, full, only, m: int) -> Outcome:
    hidden = full.hidden_size
    res, post, comb, pre, w = _boundary(ctx, m, hidden, seed=m + 200)
    xs = torch.stack([ctx.randn(m, hidden, seed=300 * r + m) for r in range(TP)])
    streams = []
    for op, p, nw in ((full, pre, w), (only, None, None)):
        for r in range(TP):
            op.publish(xs[r], rank=r)
        streams.append([op.consume(res, post, comb, p, nw, EPS, rank=r) for r in range(TP)])
    rro = ref.mhc_post_ref(ref.lamport_reduce_ref(xs.cpu()), res.cpu(), post.cpu(), comb.cpu())
    ok = all(bytes_equal(a[0], b[0]) and bytes_equal(a[0].cpu(), rro) and b[1] is None for a, b in zip(*streams))
    ok = ok and _armed(full) and _armed(only)
    return Outcome(exact=ok, detail="streams == full variant's" if ok else "streams DIFFER")


RULE = (
    "residual_output bit-identical, MXFP8 bit-identical to quantize(layer_input), mailboxes re-armed; "
    "tolerance (reduction order and rsqrt differ): layer_input within 1 BF16 ulp"
)
RESIDUAL_ONLY_RULE = "residual_output bit-identical to the full variant's and the reference, mailboxes re-armed"


def checks(ctx: Context) -> list[Check]:
    hidden = ctx.pick(5120, 256)
    ms = ctx.pick([1, 8, 32, 128, 256], [1, 5])
    shape = f"hidden={hidden}, hc={HC}"
    out = [Check("mhc_post_collapse_rms_norm+mxfp8", m, shape, lambda m=m: _standalone(ctx, m, hidden), rule=RULE)
           for m in ms]
    group = SimulatedGroup(TP, ctx.device)
    cap = max(ms)
    full = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=HC, max_num_tokens=cap, top_k=TOP_K, group=group, quantize_layer_input=True
    )
    only = seam.AllReduceMHC(
        hidden_size=hidden, hc_mult=HC, max_num_tokens=cap, top_k=TOP_K, group=group, residual_only=True
    )
    for m in ms:
        out.append(Check(f"allreduce_mhc+mxfp8[TP{TP}]", m, shape, lambda m=m: _allreduce(ctx, full, m, False),
                         rule=RULE))
        out.append(Check(f"allreduce_mhc_finalize+mxfp8[TP{TP}]", m, shape, lambda m=m: _allreduce(ctx, full, m, True),
                         rule=RULE))
    m = ms[-1]
    out.append(Check(f"allreduce_mhc_residual_only[TP{TP}]", m, shape, lambda: _residual_only(ctx, full, only, m),
                     rule=RESIDUAL_ONLY_RULE))
    return out
