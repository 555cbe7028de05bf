"""Benchmark: the Lamport fusions across GPUs, one process per GPU (run under torchrun).

::

    torchrun --nproc-per-node 2 -m seam.bench.dist --tp 2 [--json PATH]

Per M, CUDA-graph replay of ``--iters`` back-to-back calls on every rank (ranks released
together by a barrier before each timed replay), median over ``--reps`` replays, the
slowest rank's median reported, us per call:

* all-reduce + Gemma RMSNorm + MXFP8, hidden 6144 (the MiniMax-M3 boundary): seam's fused
  ``LamportAllReduce.all_reduce_gemma_rms_norm_mxfp8`` vs NCCL ``all_reduce`` + seam's fused
  add+norm+quant vs torch symmetric memory ``one_shot_all_reduce`` (input already in a
  symmetric buffer of M rows, output into a preallocated tensor) + the same add+norm+quant; the
  all-reduce alone for each; and seam's MoE-finalize form (finalize folded into the publish).
* all-reduce + mHC post-mix, collapse, RMSNorm, MXFP8, hidden 5120, hc 4 (DeepSeek-V4.1):
  ``AllReduceMHC`` vs NCCL / one-shot + ``seam.mhc_post_collapse_rms_norm``.

NVLink multicast stays off (``seam.runtime``); every peer access is a unicast load or store.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

import torch

import seam
from seam.comm.torchrun import init_rank, peer_group
from seam.ops.allreduce import LamportAllReduce
from seam.ops.allreduce_moe import FinalizeAllReduceGemmaRMSNormMxfp8, MoEOutput, UnfinalizedMoEOutput
from seam.ref import mhc as mhc_ref

HIDDEN = 6144
MHC_HIDDEN = 5120
HC = 4
TOP_K = 4
EPS = 1e-6
#: M 6 is the FlashInfer one-shot Lamport reference point (TP 2, hidden 6144).
MS = (1, 6, 8, 32, 64, 128, 256)


def dist_graph_time_us(fn: Callable[[], object], *, iters: int, reps: int) -> float:
    """The slowest rank's median us per call of ``fn``, ``iters`` calls captured in one CUDA graph."""
    import torch.distributed as dist

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    worst = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return float(worst)


class OneShot:
    """torch symmetric memory's ``one_shot_all_reduce`` on rendezvoused buffers, one [M, hidden] per M
    (the op reduces its whole input tensor, so each M gets a buffer of exactly M rows)."""

    def __init__(self, ms: tuple[int, ...], hidden: int, device: torch.device) -> None:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = dist.group.WORLD.group_name
        self.bufs, self.outs = {}, {}
        for m in ms:
            buf = symm_mem.empty((m, hidden), dtype=torch.bfloat16, device=device)
            buf.zero_()
            symm_mem.rendezvous(buf, self.group_name)
            self.bufs[m] = buf
            self.outs[m] = torch.empty(m, hidden, dtype=torch.bfloat16, device=device)

    def __call__(self, m: int) -> torch.Tensor:
        return torch.ops.symm_mem.one_shot_all_reduce_out(self.bufs[m], "sum", self.group_name, self.outs[m])


def _time_all(cases: dict[str, Callable[[], object]], iters: int, reps: int) -> dict[str, float]:
    # No per-rank error handling: a rank that skipped a case would leave the others in a
    # different collective. A failure stops the run (torchrun then stops every rank).
    return {name: dist_graph_time_us(fn, iters=iters, reps=reps) for name, fn in cases.items()}


def _moe(m: int, seed: int, device: torch.device) -> MoEOutput:
    g = torch.Generator().manual_seed(seed)
    rows = m * TOP_K
    idx = torch.randperm(rows, generator=g).to(torch.int32).view(m, TOP_K)  # every expert on this rank
    w = torch.rand(m, TOP_K, generator=g) * 0.5
    gemm2 = torch.randn(rows, HIDDEN, generator=g).bfloat16()
    shared = torch.randn(m, HIDDEN, generator=g).bfloat16()
    return MoEOutput(UnfinalizedMoEOutput(gemm2.to(device), w.to(device), idx.to(device)), shared.to(device))


def bench_norm(group, device, rank, ms, iters, reps, emit) -> None:
    import torch.distributed as dist

    cap = max(ms)
    comm = LamportAllReduce(hidden_size=HIDDEN, max_num_tokens=cap, group=group)
    fin = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=HIDDEN, max_num_tokens=cap, top_k=TOP_K, fp32_weights=True, group=group
    )
    one_shot = OneShot(ms, HIDDEN, device)
    nccl_buf = torch.zeros(cap, HIDDEN, dtype=torch.bfloat16, device=device)  # zeros: in-place sums stay finite
    weight = (torch.randn(HIDDEN, generator=torch.Generator().manual_seed(1)) * 0.1).bfloat16().to(device)
    for m in ms:
        g = torch.Generator().manual_seed(m)
        x = torch.randn(m, HIDDEN, generator=torch.Generator().manual_seed(m + rank)).bfloat16().to(device)
        residual = torch.randn(m, HIDDEN, generator=g).bfloat16().to(device)
        moe = _moe(m, 100 * m + rank, device)
        out = seam.gemma_fused_add_rms_norm_mxfp8(x, residual, weight, EPS)  # buffers for the chains

        def nccl_chain():
            dist.all_reduce(nccl_buf[:m])
            seam.gemma_fused_add_rms_norm_mxfp8(nccl_buf[:m], residual, weight, EPS, out=out)

        def one_shot_chain():
            seam.gemma_fused_add_rms_norm_mxfp8(one_shot(m), residual, weight, EPS, out=out)

        t = _time_all({
            "seam fused": lambda: comm.all_reduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS),
            "NCCL + norm": nccl_chain,
            "one-shot + norm": one_shot_chain,
            "seam all-reduce": lambda: comm.all_reduce(x),
            "NCCL all-reduce": lambda: dist.all_reduce(nccl_buf[:m]),
            "one-shot all-reduce": lambda: one_shot(m),
            "seam finalize fused": lambda: fin(moe, residual, weight, EPS),
        }, iters, reps)
        emit({"boundary": "all-reduce + Gemma RMSNorm + MXFP8", "hidden": HIDDEN, "M": m, **t})


def bench_mhc(group, device, rank, ms, iters, reps, emit) -> None:
    import torch.distributed as dist

    cap = max(ms)
    op = seam.AllReduceMHC(hidden_size=MHC_HIDDEN, hc_mult=HC, max_num_tokens=cap, top_k=TOP_K, group=group,
                           quantize_layer_input=True)
    one_shot = OneShot(ms, MHC_HIDDEN, device)
    nccl_buf = torch.zeros(cap, MHC_HIDDEN, dtype=torch.bfloat16, device=device)
    for m in ms:
        g = torch.Generator().manual_seed(m)
        res = torch.randn(m, HC, MHC_HIDDEN, generator=g).bfloat16()
        mixes = mhc_ref.mhc_pre(res, mhc_ref.mhc_params(HC, MHC_HIDDEN, seed=m))
        w = (torch.randn(MHC_HIDDEN, generator=g) * 0.2 + 1).bfloat16()
        res, post, comb, pre, w = (t.to(device) for t in (res, mixes.post, mixes.comb, mixes.pre, w))
        x = torch.randn(m, MHC_HIDDEN, generator=torch.Generator().manual_seed(m + rank)).bfloat16().to(device)
        mx = (torch.empty(m, MHC_HIDDEN, dtype=torch.float8_e4m3fn, device=device),
              torch.empty(seam.mxfp8_scale_numel(m, MHC_HIDDEN), dtype=torch.uint8, device=device))

        def nccl_chain():
            dist.all_reduce(nccl_buf[:m])
            seam.mhc_post_collapse_rms_norm(nccl_buf[:m], res, post, comb, pre, w, EPS, mxfp8_out=mx)

        def one_shot_chain():
            seam.mhc_post_collapse_rms_norm(one_shot(m), res, post, comb, pre, w, EPS, mxfp8_out=mx)

        t = _time_all({
            "seam fused": lambda: op(x, res, post, comb, pre, w, EPS, mx),
            "NCCL + norm": nccl_chain,
            "one-shot + norm": one_shot_chain,
        }, iters, reps)
        emit({"boundary": f"all-reduce + mHC (hc {HC}) + RMSNorm + MXFP8", "hidden": MHC_HIDDEN, "M": m, **t})


def _print_table(rows: list[dict], tp: int) -> None:
    from rich.console import Console
    from rich.table import Table

    for boundary in dict.fromkeys(r["boundary"] for r in rows):
        sel = [r for r in rows if r["boundary"] == boundary]
        cols = [c for c in sel[0] if c not in ("boundary", "hidden", "M")]
        table = Table(title=f"TP {tp}, {boundary}, hidden {sel[0]['hidden']} (us per call, CUDA-graph replay, "
                            "slowest rank's median)")
        for c in ["M", *cols, "fused / NCCL chain"]:
            table.add_column(c, justify="right")
        for r in sel:
            table.add_row(str(r["M"]), *(f"{r[c]:.2f}" for c in cols), f"{r['seam fused'] / r['NCCL + norm']:.2f}")
        Console(width=200).print(table)


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    parser = argparse.ArgumentParser(prog="python -m seam.bench.dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, required=True, help="TP size (= torchrun --nproc-per-node)")
    # not --m: torchrun's parser would take it for an abbreviation of one of its own options
    parser.add_argument("--tokens", type=int, nargs="+", default=list(MS), help="token counts M")
    parser.add_argument("--iters", type=int, default=100, help="calls per CUDA graph")
    parser.add_argument("--reps", type=int, default=10, help="timed replays per point")
    parser.add_argument("--json", help="write the rows here (rank 0)")
    args = parser.parse_args(argv)
    device, rank = init_rank(args.tp, "seam.bench.dist")
    group = peer_group(device, rank, "nothing to measure")
    if group is None:
        return 2
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)  # progress: a run cut short still reports

    ms = tuple(args.tokens)
    bench_norm(group, device, rank, ms, args.iters, args.reps, emit)
    bench_mhc(group, device, rank, ms, args.iters, args.reps, emit)
    if rank == 0:
        _print_table(rows, args.tp)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"tp": args.tp, "device": torch.cuda.get_device_name(device), "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
