"""Multi-GPU self-test of the Lamport all-reduce on a real TP group (``docs/spec/lamport.md``).

Run with one process per GPU::

    torchrun --nproc-per-node 4 -m seam.comm.selftest --tp 4

Each rank builds a :class:`seam.comm.DistGroup` (NCCL + symmetric-memory mailboxes,
unicast), then runs a sequence of calls with M changing every call through every fused
all-reduce: the MoE finalize + Gemma RMSNorm + MXFP8 (one-call and split forms), the
plain all-reduce and the all-reduce + RMSNorm. Each result is checked against the
reference epilogue applied to the contributions of every rank gathered with NCCL
(bit-identical sum and residual_out, normed within 1 ulp, MXFP8 equal to
``mxfp8_quantize(normed)``), and the sum is compared with NCCL's ``all_reduce``
(equal for TP = 2; NCCL rounds partial sums to BF16 for TP > 2, so the max ulp
distance is reported). A CUDA-graph of several calls is then replayed with inputs
changed between replays and checked the same way. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import seam
from seam.comm.group import DistGroup
from seam.ops.allreduce import FinalizeAllReduceGemmaRMSNormMxfp8, LamportAllReduce, MoEOutput, UnfinalizedMoEOutput
from seam.ref.lamport import gemma_rms_norm_mxfp8_ref, lamport_sum_ref, moe_finalize_ref, rms_norm_ref
from seam.verify.core import bf16_ulp_diff, bytes_equal

EPS = 1e-6


def _gather(t: torch.Tensor, tp: int) -> list[torch.Tensor]:
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(tp)]
    dist.all_gather(parts, t.contiguous())
    return parts


class Checker:
    """Counts failures; every rank checks its own outputs."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.failures: list[str] = []
        self.nccl_ulp = 0

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    def mxfp8(self, what, qa, residual_out, normed, acc, residual, weight) -> None:
        _, _, normed_ref, residual_ref = gemma_rms_norm_mxfp8_ref(acc, residual, weight, EPS)
        self.expect(bytes_equal(residual_out, residual_ref), f"{what}: residual_out differs")
        if normed is None:
            return
        self.expect(int(bf16_ulp_diff(normed, normed_ref).max()) <= 1, f"{what}: normed > 1 ulp")
        values, scales = seam.mxfp8_quantize(normed)
        self.expect(bytes_equal(qa.values, values) and bytes_equal(qa.scales, scales), f"{what}: MXFP8 differs")

    def nccl(self, what, contribution: torch.Tensor, acc: torch.Tensor, tp: int) -> None:
        import torch.distributed as dist

        summed = contribution.clone()
        dist.all_reduce(summed)
        ulp = int(bf16_ulp_diff(summed, acc.to(torch.bfloat16)).max())
        self.nccl_ulp = max(self.nccl_ulp, ulp)
        if tp == 2:
            self.expect(ulp == 0, f"{what}: differs from NCCL all_reduce")


def _moe(m, hidden, top_k, seed, device) -> MoEOutput:
    g = torch.Generator().manual_seed(seed)
    rows = max(1, m * top_k // 2)
    idx = torch.randint(-1, rows, (m, top_k), generator=g, dtype=torch.int32)
    w = torch.rand(m, top_k, generator=g)
    gemm2 = torch.randn(rows, hidden, generator=g).bfloat16()
    shared = torch.randn(m, hidden, generator=g).bfloat16()
    shared[0, :8] = -0.0
    return MoEOutput(UnfinalizedMoEOutput(gemm2.to(device), w.to(device), idx.to(device)), shared.to(device))


def _contribution(moe: MoEOutput) -> torch.Tensor:
    r = moe.routed
    return moe_finalize_ref(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx, moe.shared_output)


def _m_sequence(capacity: int, calls: int) -> list[int]:
    base = [1, 6, 12, 8, 16, 3, 5, 2, 4, 1, capacity]
    g = torch.Generator().manual_seed(0)
    extra = torch.randint(1, capacity + 1, (max(0, calls - len(base)),), generator=g).tolist()
    return [min(m, capacity) for m in base + extra][:calls]


def run(args) -> int:
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
        raise SystemExit(
            f"seam.comm.selftest needs one CUDA GPU per process (local rank {local_rank}, "
            f"{torch.cuda.device_count()} visible): run it on a multi-GPU machine"
        )
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    tp, rank = dist.get_world_size(), dist.get_rank()
    if tp != args.tp:
        raise SystemExit(f"--tp {args.tp} but the world has {tp} processes")
    group = DistGroup(device=device)
    if not group.peer_access:
        if rank == 0:
            print("no peer access between every pair of ranks: the fused path is unavailable", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    hidden, cap, top_k = args.hidden, args.capacity, args.top_k
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=cap, top_k=top_k, fp32_weights=True, group=group, debug=args.debug
    )
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=cap, group=group, debug=args.debug)
    weight = (torch.randn(hidden, generator=torch.Generator().manual_seed(1)) * 0.2).bfloat16().to(device)
    check = Checker(rank)
    # a real TP-1 group takes the fallback (no mailbox), which has only the one-call forms
    split_forms = op.comm.fused
    if rank == 0 and not split_forms:
        print(f"TP {tp}: fallback path (no Lamport mailbox); publish/collect forms skipped")
    for call, m in enumerate(_m_sequence(cap, args.calls)):
        residual = torch.randn(m, hidden, generator=torch.Generator().manual_seed(call)).bfloat16().to(device)
        moe = _moe(m, hidden, top_k, seed=1000 * call + rank, device=device)
        contribution = _contribution(moe)
        acc = lamport_sum_ref(_gather(contribution, tp))
        if call % 2 and split_forms:
            op.publish(moe)
            qa, residual_out, normed = op.collect(residual, weight, EPS, also_bf16=True)
        else:
            (qa, residual_out), normed = op(moe, residual, weight, EPS), None
        check.mxfp8(f"finalize call {call} M={m}", qa, residual_out, normed, acc, residual, weight)
        check.nccl(f"finalize call {call} M={m}", contribution, acc, tp)
        x = torch.randn(m, hidden, generator=torch.Generator().manual_seed(call * 31 + rank)).bfloat16().to(device)
        acc_x = lamport_sum_ref(_gather(x, tp))
        check.expect(bytes_equal(comm.all_reduce(x), acc_x.to(torch.bfloat16)), f"all_reduce call {call} differs")
        normed, residual_out = comm.all_reduce_rms_norm(x, residual, weight, EPS)
        normed_ref, residual_ref = rms_norm_ref(acc_x, residual, weight, EPS, gemma=False)
        check.expect(
            bytes_equal(residual_out, residual_ref) and int(bf16_ulp_diff(normed, normed_ref).max()) <= 1,
            f"all_reduce_rms_norm call {call} differs",
        )
    _graph_replays(op, check, args, weight, device, tp, rank)
    failures = torch.tensor([len(check.failures)], device=device)
    dist.all_reduce(failures)
    for line in check.failures[:10]:
        print(f"rank {rank}: {line}", file=sys.stderr)
    if rank == 0:
        status = "OK" if int(failures) == 0 else f"{int(failures)} FAILURES"
        print(f"seam.comm.selftest tp={tp} hidden={hidden} capacity={cap} calls={args.calls}: {status} "
              f"(NCCL BF16 sum vs fp32 rank-order sum: max {check.nccl_ulp} ulp)")
    dist.destroy_process_group()
    return 0 if int(failures) == 0 else 1


def _graph_replays(op, check, args, weight, device, tp, rank) -> None:
    """Capture three back-to-back calls once; replay with new inputs each time and check."""
    ms = (min(5, args.capacity), args.capacity, 1)
    calls = [(_moe(m, args.hidden, args.top_k, seed=7 + 10 * i + rank, device=device),
              torch.zeros(m, args.hidden, dtype=torch.bfloat16, device=device)) for i, m in enumerate(ms)]
    [op(moe, residual, weight, EPS) for moe, residual in calls]  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        results = [op(moe, residual, weight, EPS) for moe, residual in calls]
    torch.cuda.current_stream().wait_stream(stream)
    gen = torch.Generator(device=device).manual_seed(rank)
    for replay in range(args.replays):
        for moe, residual in calls:
            moe.shared_output.normal_(generator=gen)
            moe.routed.gemm2_permuted.normal_(generator=gen)
            moe.routed.expert_weights.uniform_(generator=gen)
            residual.normal_(generator=gen)  # each rank checks against its own residual
        graph.replay()
        torch.cuda.synchronize()
        for (moe, residual), (qa, residual_out) in zip(calls, results):
            acc = lamport_sum_ref(_gather(_contribution(moe), tp))
            check.mxfp8(f"graph replay {replay}", qa, residual_out, None, acc, residual, weight)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seam.comm.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, required=True, help="TP size (= torchrun --nproc-per-node)")
    parser.add_argument("--hidden", type=int, default=6144)
    parser.add_argument("--capacity", type=int, default=256, help="max tokens per call")
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--replays", type=int, default=200, help="CUDA-graph replays checked")
    parser.add_argument("--debug", action="store_true", help="bounded spins: a missing peer raises")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
