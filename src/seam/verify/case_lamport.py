"""verify: Lamport all-reduce + consumers on simulated TP ranks vs ``seam.ref.lamport``.

Every rank of a :class:`seam.comm.SimulatedGroup` publishes, then every rank collects.
Exactness (``docs/spec/lamport.md``): residual_out and the sum bit-identical, normed
within 1 BF16 ulp, MXFP8 bit-identical to ``seam.mxfp8_quantize`` of the same normed.
Timed per call for all ranks: fused = TP publishes + TP consumers; unfused = TP torch
finalizes + the fp32 rank sum + TP fused norm+quant launches.
"""

from __future__ import annotations

import torch

import seam
from seam.comm import SimulatedGroup
from seam.compare import bf16_ulp_diff, bytes_equal, ulp_summary
from seam.ops.allreduce import LamportAllReduce
from seam.ops.allreduce_moe import FinalizeAllReduceGemmaRMSNormMxfp8, MoEOutput, UnfinalizedMoEOutput
from seam.ref.lamport import all_reduce_ref, gemma_rms_norm_mxfp8_ref, lamport_sum_ref, moe_finalize_ref, rms_norm_ref
from seam.verify.core import Check, Context, Outcome

EPS = 1e-6
TOP_K = 4


def _moe(ctx: Context, m: int, hidden: int, seed: int) -> MoEOutput:
    rows = m * TOP_K
    g = ctx.generator(seed)
    idx = torch.randint(-1, rows, (m, TOP_K), generator=g, dtype=torch.int32).to(ctx.device)
    w = (torch.rand(m, TOP_K, generator=g) * 0.5).to(ctx.device)
    gemm2 = ctx.randn(rows, hidden, seed=seed + 1)
    return MoEOutput(UnfinalizedMoEOutput(gemm2, w, idx), ctx.randn(m, hidden, seed=seed + 2))


def _contribution(moe: MoEOutput) -> torch.Tensor:
    r = moe.routed
    return moe_finalize_ref(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx, moe.shared_output)


def _finalize(ctx: Context, op: FinalizeAllReduceGemmaRMSNormMxfp8, tp: int, m: int) -> Outcome:
    hidden = op.hidden_size
    moes = [_moe(ctx, m, hidden, seed=100 * r + m) for r in range(tp)]
    residual = ctx.randn(m, hidden, seed=m)
    weight = ctx.randn(hidden, seed=7, scale=0.2)

    def fused():
        for r, moe in enumerate(moes):
            op.publish(moe, rank=r)
        return [op.collect(residual, weight, EPS, also_bf16=True, rank=r) for r in range(tp)]

    def unfused():
        contributions = [_contribution(moe) for moe in moes]
        x = lamport_sum_ref(contributions).to(torch.bfloat16)
        return [seam.gemma_fused_add_rms_norm_mxfp8(x, residual, weight, EPS) for _ in range(tp)]

    outs = fused()
    contributions = [_contribution(moe) for moe in moes]
    _, _, normed_ref, residual_ref = gemma_rms_norm_mxfp8_ref(lamport_sum_ref(contributions), residual, weight, EPS)
    ok = True
    worst = ""
    for qa, residual_out, normed in outs:
        values, scales = seam.mxfp8_quantize(normed)
        ok &= bytes_equal(residual_out, residual_ref) and bytes_equal(qa.values, values)
        ok &= bytes_equal(qa.scales, scales)
        within, worst = ulp_summary(normed, normed_ref)
        ok &= within
    armed = all(bool((s.mailbox.view(torch.int16) == -32768).all()) for s in op.mailbox.states.values())
    moved = tp * (2 * m * hidden * (TOP_K + 1) + 4 * m * hidden * tp + 2 * m * hidden * (tp + 2) + m * hidden)
    return Outcome(
        exact=bool(ok and armed),
        detail=f"residual_out/MXFP8 {'bytes equal' if ok else 'DIFFER'}, normed {worst}"
        + ("" if armed else ", mailbox not re-armed"),
        fused=fused,
        unfused=unfused,
        baseline="PyTorch MoE finalize and rank sum, then seam's add + Gemma RMSNorm + MXFP8 per rank",
        bytes_moved=moved,
    )


def _plain(ctx: Context, comm: LamportAllReduce, tp: int, m: int) -> Outcome:
    hidden = comm.hidden_size
    xs = [ctx.randn(m, hidden, seed=r) for r in range(tp)]
    residual, weight = ctx.randn(m, hidden, seed=50), ctx.randn(hidden, seed=51)
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    sums = [comm.collect(rank=r) for r in range(tp)]
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    normed = [comm.collect_rms_norm(residual, weight, EPS, rank=r) for r in range(tp)]
    acc = lamport_sum_ref(xs)
    want_n, want_r = rms_norm_ref(acc, residual, weight, EPS, gemma=False)
    ok = all(bytes_equal(s, all_reduce_ref(xs)) for s in sums)
    ok &= all(bytes_equal(r_out, want_r) and int(bf16_ulp_diff(n, want_n).max()) <= 1 for n, r_out in normed)

    def fused():
        for r, x in enumerate(xs):
            comm.publish(x, rank=r)
        return [comm.collect(rank=r) for r in range(tp)]

    return Outcome(
        exact=bool(ok),
        detail="sum/residual_out bytes equal, normed <= 1 ulp" if ok else "outputs differ",
        fused=fused,
        unfused=lambda: all_reduce_ref(xs),
        baseline="the PyTorch rank sum alone (no norm)",
        bytes_moved=tp * (2 * m * hidden * (1 + 3 * tp) + 2 * m * hidden),
    )


NORMED = "tolerance (reduction order and rsqrt differ): normed within 1 BF16 ulp"
FINALIZE_RULE = (
    f"residual_out bit-identical, MXFP8 bit-identical to quantize(normed), mailboxes re-armed; {NORMED}"
)
PLAIN_RULE = f"sum and residual_out bit-identical; {NORMED}"


def checks(ctx: Context) -> list[Check]:
    hidden = ctx.pick(6144, 128)
    tps = ctx.pick([2, 4, 8], [2, 4])
    ms = ctx.pick([1, 8, 32, 128, 256], [1, 5])
    out = []
    for tp in tps:
        group = SimulatedGroup(tp, ctx.device)
        op = FinalizeAllReduceGemmaRMSNormMxfp8(
            hidden_size=hidden, max_num_tokens=max(ms), top_k=TOP_K, fp32_weights=True, group=group
        )
        comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=max(ms), group=group)
        for m in ms:
            out.append(Check(f"lamport_finalize_gemma_mxfp8[tp={tp}]", m, f"hidden={hidden}",
                             lambda op=op, tp=tp, m=m: _finalize(ctx, op, tp, m), rule=FINALIZE_RULE))
        out.append(Check(f"lamport_all_reduce+rms_norm[tp={tp}]", ms[-1], f"hidden={hidden}",
                         lambda comm=comm, tp=tp, m=ms[-1]: _plain(ctx, comm, tp, m), rule=PLAIN_RULE))
    return out
