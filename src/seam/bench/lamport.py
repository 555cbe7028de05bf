"""Benchmark: Lamport finalize + all-reduce + Gemma RMSNorm + MXFP8, simulated TP on one GPU.

On one GPU only kernel time means anything (no NVLink traffic, no waiting on peers):
one simulated call = TP publishes (MoE finalize, stores into TP mailboxes) + TP consumers
(collect, re-arm, norm, quantize), CUDA-graph replayed (``timing.graph_time_us``). It is
compared with the unfused chain for the same TP ranks on one device: TP torch finalizes
(``seam.ref.lamport.moe_finalize_ref``), the fp32 rank sum, and TP launches of
``seam.gemma_fused_add_rms_norm_mxfp8``. Both are reported per call (all ranks) and per
rank (/TP). hidden 6144, top_k 4, M in {1, 8, 32, 128, 256}, TP in {2, 4, 8}. ``floor``: the bytes one
simulated call must move through HBM (:func:`bytes_moved`) at 4.23 TB/s + one launch
(``timing.floor_us``); ``floor/fused`` the share of the fused time it is.
Cross-GPU latency: ``seam.bench.dist``; cross-GPU correctness: ``seam.verify.dist`` (both under torchrun).
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.timing import floor_us, graph_time_us
from seam.comm import SimulatedGroup
from seam.ops.allreduce_moe import FinalizeAllReduceGemmaRMSNormMxfp8, MoEOutput, UnfinalizedMoEOutput
from seam.ref.lamport import lamport_sum_ref, moe_finalize_ref

HIDDEN = 6144
TOP_K = 4
EPS = 1e-6
MS = (1, 8, 32, 128, 256)
TPS = (2, 4, 8)


def bytes_moved(m: int, tp: int, hidden: int = HIDDEN, top_k: int = TOP_K) -> int:
    """HBM bytes of one simulated call (all ``tp`` ranks), the least the op can move: per rank its MoE output
    read (top_k BF16 expert rows per token with fp32 weights and int32 indices, the BF16 shared-expert row),
    its BF16 contribution written into the tp mailboxes and the tp contributions read back (the exchange,
    through HBM on one GPU), the residual and norm weight read, residual_out and the MXFP8 values and
    128x4-swizzled scales written. The re-arm of the mailbox (sentinel stores) is not counted."""
    row = m * hidden * 2
    moe = m * top_k * (hidden * 2 + 4 + 4) + row
    exchange = 2 * tp * row
    norm = row + hidden * 2 + row + m * hidden + seam.mxfp8_scale_numel(m, hidden)
    return tp * (moe + exchange + norm)


def _moe(m: int, seed: int, dev: torch.device) -> MoEOutput:
    g = torch.Generator(device="cpu").manual_seed(seed)
    rows = m * TOP_K
    # Every expert on this rank: the finalize reads all top_k rows (worst case).
    idx = torch.randperm(rows, generator=g).to(torch.int32).view(m, TOP_K).to(dev)
    w = (torch.rand(m, TOP_K, generator=g) * 0.5).to(dev)
    gemm2 = torch.randn(rows, HIDDEN, generator=g).bfloat16().to(dev)
    shared = torch.randn(m, HIDDEN, generator=g).bfloat16().to(dev)
    return MoEOutput(UnfinalizedMoEOutput(gemm2, w, idx), shared)


def _eager_us(fn, iters: int = 200) -> float:
    """Median of 5 runs of ``iters`` back-to-back eager calls (for chains a graph cannot capture)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    return sorted(times)[2]


def _time(fn) -> float:
    try:
        return graph_time_us(fn)
    except RuntimeError:
        return _eager_us(fn)


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    weight = (torch.randn(HIDDEN, generator=torch.Generator().manual_seed(1)) * 0.1).bfloat16().to(dev)
    rows = []
    for tp in TPS:
        op = FinalizeAllReduceGemmaRMSNormMxfp8(
            hidden_size=HIDDEN, max_num_tokens=max(ms), top_k=TOP_K, fp32_weights=True,
            group=SimulatedGroup(tp, dev),
        )
        for m in ms:
            moes = [_moe(m, 100 * r + m, dev) for r in range(tp)]
            residual = torch.randn(m, HIDDEN, generator=torch.Generator().manual_seed(m)).bfloat16().to(dev)

            def publish_all():
                for r, moe in enumerate(moes):
                    op.publish(moe, rank=r)

            def fused():
                publish_all()
                for r in range(tp):
                    op.collect(residual, weight, EPS, rank=r)

            def unfused():
                contributions = [
                    moe_finalize_ref(x.routed.gemm2_permuted, x.routed.expert_weights,
                                     x.routed.expanded_idx_to_permuted_idx, x.shared_output)
                    for x in moes
                ]
                total = lamport_sum_ref(contributions).to(torch.bfloat16)
                for _ in range(tp):
                    seam.gemma_fused_add_rms_norm_mxfp8(total, residual, weight, EPS)

            fused_us = _time(fused)
            unfused_us = _time(unfused)
            floor = floor_us(bytes_moved(m, tp))
            rows.append({
                "op": "lamport_finalize_gemma_rms_norm_mxfp8", "TP": tp, "M": m, "hidden": HIDDEN,
                "fused us": fused_us, "fused us/rank": fused_us / tp,
                "unfused us": unfused_us, "unfused us/rank": unfused_us / tp,
                "speedup": unfused_us / fused_us,
                "floor us": floor, "floor/fused": floor / fused_us,
            })
    table = Table(title=f"Lamport finalize + all-reduce + Gemma RMSNorm + MXFP8, simulated TP on one GPU, "
                        f"hidden {HIDDEN}, top_k {TOP_K} (us per call)")
    cols = ["TP", "M", "fused us", "fused us/rank", "unfused us", "unfused us/rank", "speedup", "floor us",
            "floor/fused"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c in ("TP", "M") else f"{row[c]:.2f}" for c in cols))
    console.print(table)
    return rows
