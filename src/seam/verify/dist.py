"""Multi-GPU self-test of the Lamport fusions on a real TP group (``docs/spec/lamport.md``).

Run with one process per GPU::

    torchrun --nproc-per-node 2 -m seam.verify.dist --tp 2

Each rank builds a :class:`seam.comm.DistGroup` (NCCL + symmetric-memory mailboxes,
unicast) and checks, against the reference epilogues applied to every rank's contribution
gathered with NCCL (in rank order, as the Lamport consumer sums):

1. the topology: peer access between every pair of GPUs, and that the symmetric-memory
   rendezvous gave a Lamport mailbox (not the fallback);
2. a sequence of calls with M changing every call, +0/-0 in the inputs, through every fused
   all-reduce: MoE finalize + Gemma RMSNorm + MXFP8 (one-call and publish/collect forms),
   the plain all-reduce, all-reduce + RMSNorm, all-reduce + Gemma RMSNorm + MXFP8
   (``seam.allreduce_gemma_rms_norm_mxfp8`` on the group's ``LamportAllReduce``), and
   ``AllReduceMHC`` in every variant (plain and finalize publish; MXFP8 layer input, BF16
   layer input, residual only). Sum and
   residual outputs bit-identical, normed rows within 1 BF16 ulp, MXFP8 equal to
   ``mxfp8_quantize`` of the normed rows; the sum is also compared with NCCL's
   ``all_reduce`` (equal for TP 2; NCCL rounds partial sums to BF16 for TP > 2, so the
   largest ulp distance is reported);
3. one CUDA graph holding several of those calls, replayed ``--replays`` times with every
   input changed between replays, each replay checked the same way;
4. debug mode: one rank skipping a call makes the others raise a RuntimeError on the host
   (bounded spin) instead of hanging, and ``reset()`` recovers; ranks calling with different
   M all raise a ValueError naming every rank's M, and the next call needs no reset.

Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys

import torch

import seam
from seam import FinalizeAllReduceGemmaRMSNormMxfp8, LamportAllReduce, MoEOutput, UnfinalizedMoEOutput
from seam.comm.torchrun import init_rank, peer_group, peer_matrix
from seam.compare import bf16_ulp_diff, bytes_equal
from seam.ref import mhc as mhc_ref
from seam.ref.lamport import gemma_rms_norm_mxfp8_ref, lamport_sum_ref, moe_finalize_ref, rms_norm_ref

EPS = 1e-6


def _gather(t: torch.Tensor) -> list[torch.Tensor]:
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts


class Checker:
    """Collects failures; every rank checks its own outputs."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self.failures: list[str] = []
        self.nccl_ulp = 0
        self.checks = 0

    def expect(self, ok: bool, what: str) -> None:
        self.checks += 1
        if not ok:
            self.failures.append(what)

    def within_ulp(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        return int(bf16_ulp_diff(a, b).max()) <= 1

    def mxfp8(self, what, qa, residual_out, normed, acc, residual, weight) -> None:
        """residual_out bit-identical; with the kernel's normed rows (``also_bf16``): normed
        within 1 ulp and MXFP8 == mxfp8_quantize(normed) byte for byte. Without them (one-call
        form), the MXFP8 against the reference's normed, which may sit 1 ulp away: at least
        99% of the value bytes equal and every dequantized value within one E4M3 step."""
        _, _, normed_ref, residual_ref = gemma_rms_norm_mxfp8_ref(acc, residual, weight, EPS)
        self.expect(bytes_equal(residual_out, residual_ref), f"{what}: residual_out differs")
        if normed is not None:
            self.expect(self.within_ulp(normed, normed_ref), f"{what}: normed > 1 ulp")
            values, scales = seam.mxfp8_quantize(normed)
            self.expect(bytes_equal(qa.values, values) and bytes_equal(qa.scales, scales), f"{what}: MXFP8 differs")
            return
        values, _ = seam.mxfp8_quantize(normed_ref)
        same = (qa.values.view(torch.uint8) == values.view(torch.uint8)).float().mean().item()
        got = seam.mxfp8_dequantize(qa.values, qa.scales, dtype=torch.float32)
        ref = normed_ref.float()
        # E4M3 keeps 3 mantissa bits: one step is <= 2^-3 of the magnitude (plus the subnormal step)
        step = torch.maximum(got.abs(), ref.abs()) * 2.0**-3 + ref.abs().amax(dim=1, keepdim=True) * 2.0**-17
        self.expect(same >= 0.99 and bool(((got - ref).abs() <= step).all()), f"{what}: MXFP8 off the reference")

    def nccl(self, what, contribution: torch.Tensor, acc: torch.Tensor) -> None:
        import torch.distributed as dist

        summed = contribution.clone()
        dist.all_reduce(summed)
        ulp = int(bf16_ulp_diff(summed, acc.to(torch.bfloat16)).max())
        self.nccl_ulp = max(self.nccl_ulp, ulp)
        if self.tp == 2:
            self.expect(ulp == 0, f"{what}: differs from NCCL all_reduce")

    def mhc(self, what, outs, contributions, residual, post, comb, pre, w, mx) -> None:
        """``AllReduceMHC`` outputs vs ``allreduce_mhc_ref`` (computed on the CPU)."""
        cpu = [None if t is None else t.cpu() for t in (residual, post, comb, pre, w)]
        new_res, normed, _ = mhc_ref.allreduce_mhc_ref(torch.stack([c.cpu() for c in contributions]), *cpu, EPS)
        residual_out, layer_input = outs
        self.expect(bytes_equal(residual_out.cpu(), new_res), f"{what}: residual_output differs")
        if pre is None:
            self.expect(layer_input is None, f"{what}: residual-only call returned a layer input")
            return
        self.expect(self.within_ulp(layer_input.cpu(), normed), f"{what}: layer_input > 1 ulp")
        if mx is not None:
            values, scales = seam.mxfp8_quantize(layer_input)
            self.expect(bytes_equal(mx[0], values) and bytes_equal(mx[1], scales), f"{what}: MXFP8 differs")


def _moe(m, hidden, top_k, seed, device) -> MoEOutput:
    """One rank's unfinalized MoE output; experts off this rank (-1); -0.0 in the shared output."""
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


def _signed_zeros(x: torch.Tensor, rank: int) -> torch.Tensor:
    """-0 in columns 0..3 on every rank, -0 or +0 by rank in 4..7: sums of zeros are +0
    (the rank sum starts at +0), never the BF16 -0 sentinel."""
    x[:, :4] = -0.0
    x[:, 4:8] = -0.0 if rank % 2 else 0.0
    return x


def _boundary(m, hc, hidden, seed, device):
    """mHC residual streams, mixes from ``mhc_pre`` and a norm weight, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    res = torch.randn(m, hc, hidden, generator=g).bfloat16()
    mixes = mhc_ref.mhc_pre(res, mhc_ref.mhc_params(hc, hidden, seed=seed))
    w = (torch.randn(hidden, generator=g) * 0.2 + 1).bfloat16()
    return [t.to(device) for t in (res, mixes.post, mixes.comb, mixes.pre, w)]


def _mxfp8_out(m, hidden, device):
    return (torch.empty(m, hidden, dtype=torch.float8_e4m3fn, device=device),
            torch.full((seam.mxfp8_scale_numel(m, hidden),), 0x5A, dtype=torch.uint8, device=device))


def _m_sequence(capacity: int, calls: int) -> list[int]:
    base = [1, 6, 12, 8, 16, 3, 5, 2, 4, 1, capacity]
    g = torch.Generator().manual_seed(0)
    extra = torch.randint(1, capacity + 1, (max(0, calls - len(base)),), generator=g).tolist()
    return [min(m, capacity) for m in base + extra][:calls]


def _finalize_and_plain(args, group, check, device, rank) -> tuple:
    hidden, cap = args.hidden, args.capacity
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=cap, top_k=args.top_k, fp32_weights=True, group=group
    )
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=cap, group=group)
    weight = (torch.randn(hidden, generator=torch.Generator().manual_seed(1)) * 0.2).bfloat16().to(device)
    for call, m in enumerate(_m_sequence(cap, args.calls)):
        residual = torch.randn(m, hidden, generator=torch.Generator().manual_seed(call)).bfloat16().to(device)
        moe = _moe(m, hidden, args.top_k, seed=1000 * call + rank, device=device)
        contribution = _contribution(moe)
        acc = lamport_sum_ref(_gather(contribution))
        if call % 2 and op.fused:  # a real TP-1 group takes the fallback: one-call forms only
            op.publish(moe)
            qa, residual_out, normed = op.collect(residual, weight, EPS, also_bf16=True)
        else:
            (qa, residual_out), normed = op(moe, residual, weight, EPS), None
        check.mxfp8(f"finalize call {call} M={m}", qa, residual_out, normed, acc, residual, weight)
        check.nccl(f"finalize call {call} M={m}", contribution, acc)
        x = torch.randn(m, hidden, generator=torch.Generator().manual_seed(call * 31 + rank)).bfloat16().to(device)
        x = _signed_zeros(x, rank)
        acc_x = lamport_sum_ref(_gather(x))
        check.expect(bytes_equal(comm.all_reduce(x), acc_x.to(torch.bfloat16)), f"all_reduce call {call} differs")
        normed, residual_out = comm.all_reduce_rms_norm(x, residual, weight, EPS)
        normed_ref, residual_ref = rms_norm_ref(acc_x, residual, weight, EPS, gemma=False)
        check.expect(
            bytes_equal(residual_out, residual_ref) and check.within_ulp(normed, normed_ref),
            f"all_reduce_rms_norm call {call} differs",
        )
        qa, residual_out, normed = seam.allreduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS, comm, also_bf16=True)
        check.mxfp8(f"allreduce_gemma_rms_norm_mxfp8 call {call} M={m}", qa, residual_out, normed, acc_x, residual,
                    weight)
    return op, comm, weight


#: The AllReduceMHC variants, cycled through calls: (publish form, layer input, MXFP8 output).
MHC_VARIANTS = (("call", True, True), ("finalize", True, True), ("call", False, False), ("finalize", True, False))


def _mhc_call(op, variant, m, args, seed, device, rank):
    """One AllReduceMHC call of ``variant``: returns (outputs, this rank's contribution, inputs, mxfp8)."""
    form, layer_input, quantize = variant
    hidden = args.mhc_hidden
    res, post, comb, pre, w = _boundary(m, args.hc, hidden, seed, device)
    if not layer_input:
        pre, w = None, None
    mx = _mxfp8_out(m, hidden, device) if quantize else None
    if form == "finalize":
        moe = _moe(m, hidden, args.top_k, seed=seed * 7 + rank, device=device)
        r = moe.routed
        outs = op.finalize(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx, moe.shared_output,
                           res, post, comb, pre, w, EPS, mx)
        contribution = _contribution(moe)
    else:
        g = torch.Generator().manual_seed(seed * 13 + rank)
        contribution = (torch.randn(m, hidden, generator=g) * 2).bfloat16().to(device)
        contribution = _signed_zeros(contribution, rank)
        outs = op(contribution, res, post, comb, pre, w, EPS, mx)
    return outs, contribution, (res, post, comb, pre, w), mx


def _mhc(args, group, check, device, rank):
    op = seam.AllReduceMHC(
        hidden_size=args.mhc_hidden, hc_mult=args.hc, max_num_tokens=args.capacity, top_k=args.top_k,
        group=group, quantize_layer_input=True, residual_only=True,
    )
    check.expect(op.fused or group.tp == 1, "AllReduceMHC took the fallback")
    for call, m in enumerate(_m_sequence(args.capacity, args.calls)):
        variant = MHC_VARIANTS[call % len(MHC_VARIANTS)]
        outs, contribution, inputs, mx = _mhc_call(op, variant, m, args, 5000 + call, device, rank)
        check.mhc(f"AllReduceMHC {variant} call {call} M={m}", outs, _gather(contribution), *inputs, mx)
    return op


def _graph_replays(op, comm, mhc_op, weight, args, check, device, rank) -> None:
    """Capture finalize, plain and mHC calls in one CUDA graph; replay with new inputs, check each replay."""
    hidden, cap = args.hidden, args.capacity
    fin = [(_moe(m, hidden, args.top_k, seed=7 + 10 * i + rank, device=device),
            torch.zeros(m, hidden, dtype=torch.bfloat16, device=device)) for i, m in enumerate((min(5, cap), cap, 1))]
    x = torch.zeros(3, hidden, dtype=torch.bfloat16, device=device)
    mhc_m = min(7, cap)
    mhc_x = torch.zeros(mhc_m, args.mhc_hidden, dtype=torch.bfloat16, device=device)
    res, post, comb, pre, w = _boundary(mhc_m, args.hc, args.mhc_hidden, 99, device)
    mx = _mxfp8_out(mhc_m, args.mhc_hidden, device)

    def calls():
        return ([op(moe, residual, weight, EPS) for moe, residual in fin], comm.all_reduce(x),
                mhc_op(mhc_x, res, post, comb, pre, w, EPS, mx))

    calls()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fin_out, sum_out, mhc_out = calls()
    torch.cuda.current_stream().wait_stream(stream)
    gen = torch.Generator(device=device).manual_seed(rank)
    shared_gen = torch.Generator(device=device).manual_seed(12345)  # replicated inputs: same on every rank
    for replay in range(args.replays):
        for moe, residual in fin:
            moe.shared_output.normal_(generator=gen)
            moe.routed.gemm2_permuted.normal_(generator=gen)
            moe.routed.expert_weights.uniform_(generator=gen)
            residual.normal_(generator=gen)  # each rank checks against its own residual
        x.normal_(generator=gen)
        mhc_x.normal_(generator=gen)
        res.normal_(generator=shared_gen)
        graph.replay()
        torch.cuda.synchronize()
        for (moe, residual), (qa, residual_out) in zip(fin, fin_out):
            acc = lamport_sum_ref(_gather(_contribution(moe)))
            check.mxfp8(f"graph replay {replay}", qa, residual_out, None, acc, residual, weight)
        check.expect(bytes_equal(sum_out, lamport_sum_ref(_gather(x)).bfloat16()), f"graph replay {replay}: all_reduce")
        check.mhc(f"graph replay {replay}: AllReduceMHC", mhc_out, _gather(mhc_x), res, post, comb, pre, w, mx)


def _debug_timeouts(args, group, check, device, rank) -> None:
    """Debug mode: a skipped call raises on the waiting ranks and reset() recovers; a mismatched M
    raises on every rank, naming each rank's M, before anything is published."""
    hidden = args.hidden
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=8, group=group, debug=True,
                            spin_limit=args.spin_limit)
    x = torch.randn(8, hidden, generator=torch.Generator().manual_seed(rank)).bfloat16().to(device)
    want = lamport_sum_ref(_gather(x)).bfloat16()
    # Compile the debug kernels (SPIN_LIMIT is a constexpr) on every rank together, so no
    # rank's compile outlasts a peer's bounded spin.
    group.barrier()
    comm.all_reduce(x)
    raised = False
    try:
        if rank != 1:
            comm.all_reduce(x[:4])
    except RuntimeError as e:
        raised = "did not arrive" in str(e)
    # the ranks still waiting on rank 1 time out; rank 1 itself never waits
    check.expect(raised or rank == 1, f"debug mode, rank 1 skips the call: no RuntimeError on rank {rank}")
    comm.reset()
    check.expect(bytes_equal(comm.all_reduce(x), want), "debug mode, rank 1 skips the call: the next call differs")
    ms = [2 if r == 1 else 4 for r in range(group.tp)]
    each = ", ".join(f"rank {r} has {m}" for r, m in enumerate(ms))
    try:
        comm.all_reduce(x[: ms[rank]])
        error = "no error"
    except ValueError as e:
        error = str(e)
    check.expect(error == f"TP ranks disagree on M (tokens in this call): {each}",
                 f"debug mode, rank 1 calls with M 2, the others with M 4: rank {rank} got {error!r}")
    check.expect(bytes_equal(comm.all_reduce(x), want), "debug mode, M differs: the next call (no reset) differs")


def run(args) -> int:
    import torch.distributed as dist

    device, rank = init_rank(args.tp, "seam.verify.dist")
    tp = args.tp
    if rank == 0:
        matrix = peer_matrix()
        print(f"peer access among {len(matrix)} visible GPUs: "
              + ("every pair" if all(all(r) for r in matrix) else str(matrix)), flush=True)
    group = peer_group(device, rank, "the fused path is unavailable")
    if group is None:
        return 2
    check = Checker(tp)
    stages = [
        ("finalize and Gemma/RMSNorm/plain all-reduces", lambda: _finalize_and_plain(args, group, check, device, rank)),
        ("AllReduceMHC variants", lambda: _mhc(args, group, check, device, rank)),
    ]
    made = []
    for name, stage in stages:
        made.append(stage())
        if rank == 0:
            print(f"{name}: {len(check.failures)} failures so far ({check.checks} checks)", flush=True)
    (op, comm, weight), mhc_op = made
    if rank == 0:
        print(f"mailbox: symmetric-memory rendezvous, unicast peers (fused={op.fused and mhc_op.fused})")
    _graph_replays(op, comm, mhc_op, weight, args, check, device, rank)
    if rank == 0:
        print(f"{args.replays} CUDA-graph replays: {len(check.failures)} failures so far", flush=True)
    if tp > 1:
        _debug_timeouts(args, group, check, device, rank)
    failures = torch.tensor([len(check.failures)], device=device)
    dist.all_reduce(failures)
    for line in check.failures[:10]:
        print(f"rank {rank}: {line}", file=sys.stderr)
    if rank == 0:
        status = "OK" if int(failures) == 0 else f"{int(failures)} FAILURES"
        print(f"seam.verify.dist tp={tp} hidden={args.hidden} mhc hidden={args.mhc_hidden} hc={args.hc} "
              f"capacity={args.capacity} calls={args.calls} replays={args.replays}: {status} "
              f"({check.checks} checks on rank 0; NCCL BF16 sum vs fp32 rank-order sum: max {check.nccl_ulp} ulp)")
    dist.destroy_process_group()
    return 0 if int(failures) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seam.verify.dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, required=True, help="TP size (= torchrun --nproc-per-node)")
    parser.add_argument("--hidden", type=int, default=6144)
    parser.add_argument("--mhc-hidden", type=int, default=5120, help="hidden of the AllReduceMHC checks")
    parser.add_argument("--hc", type=int, default=4, help="hc_mult of the AllReduceMHC checks")
    parser.add_argument("--capacity", type=int, default=256, help="max tokens per call")
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--replays", type=int, default=1000, help="CUDA-graph replays checked")
    parser.add_argument("--spin-limit", type=int, default=1 << 22, help="debug-mode spin limit of the timeout checks")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
