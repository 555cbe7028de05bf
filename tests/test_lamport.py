"""Lamport one-shot all-reduce and its consumers (``docs/spec/lamport.md``), simulated TP.

CPU: every rank in one process under the Triton interpreter (hidden 128-256, capacity 16),
bytes compared with ``seam.ref.lamport`` where the spec says bit-identical, normed within
1 BF16 ulp, MXFP8 against ``seam.mxfp8_quantize`` of the same call's normed. After every
call all mailboxes must be back to the sentinel and every rank's stage_state in step.
GPU (``gpu`` mark): hidden 6144, top_k 4, M up to 256, CUDA-graph replays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import seam
from seam import runtime
from seam.comm import SimulatedGroup
from seam.compare import bf16_ulp_diff, bytes_equal
from seam.ops.allreduce import LamportAllReduce
from seam.ops.allreduce_base import LamportBase, moe_finalize
from seam.ops.allreduce_moe import FinalizeAllReduceGemmaRMSNormMxfp8, MoEOutput, UnfinalizedMoEOutput
from seam.ref.lamport import (
    all_reduce_ref,
    gemma_rms_norm_mxfp8_ref,
    lamport_sum_ref,
    moe_finalize_ref,
    rms_norm_ref,
)

EPS = 1e-6
# CPU under the interpreter, the GPU on the device machine (SimulatedGroup's default too).
DEV = runtime.kernel_device()


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rand(*shape, seed, scale=1.0, device=DEV):
    return (torch.randn(*shape, generator=_gen(seed)) * scale).to(torch.bfloat16).to(device)


def _bf16(values):
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical BF16, except that any NaN equals any NaN (payloads differ between
    torch's CPU conversion and the GPU's ``cvt.rn.bf16.f32``)."""
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if a.shape != b.shape or not torch.equal(nan_a, nan_b):
        return False
    return torch.equal(a.view(torch.int16)[~nan_a], b.view(torch.int16)[~nan_b])


def assert_armed(comm: LamportBase) -> None:
    """Every mailbox lane is the sentinel and all ranks share one stage_state."""
    states = list(comm.mailbox.states.values())
    for s in states:
        assert bool((s.mailbox.view(torch.int16) == -32768).all()), f"rank {s.rank} mailbox not re-armed"
    first = states[0].stage_state.tolist()
    assert all(s.stage_state.tolist() == first for s in states)


def assert_normed_close(normed: torch.Tensor, normed_ref: torch.Tensor) -> None:
    """Within 1 BF16 ulp of the reference (the row sum's order and rsqrt may differ), and equal to it almost
    everywhere: the 1-ulp bound alone passes a normed rounded by truncation instead of RNE."""
    d = bf16_ulp_diff(normed, normed_ref)
    assert int(d.max()) <= 1 and float((d == 0).float().mean()) > 0.9, float((d == 0).float().mean())


def simulate_mxfp8(comm, xs, residual, weight, eps=EPS):
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    return [comm.collect_gemma_rms_norm_mxfp8(residual, weight, eps, also_bf16=True, rank=r) for r in range(len(xs))]


def check_mxfp8(outs, contributions, residual, weight, eps=EPS):
    acc = lamport_sum_ref(contributions)
    _, _, normed_ref, residual_ref = gemma_rms_norm_mxfp8_ref(acc, residual, weight, eps)
    qa0, _, normed0 = outs[0]
    values, scales = seam.mxfp8_quantize(normed0)
    assert bytes_equal(qa0.values, values)
    assert bytes_equal(qa0.scales, scales)
    for qa, residual_out, normed in outs:
        assert same_bits(residual_out, residual_ref)
        assert_normed_close(normed, normed_ref)
        # every rank reduces the same rows in the same order: identical outputs
        assert bytes_equal(normed, normed0)
        assert bytes_equal(qa.values, qa0.values) and bytes_equal(qa.scales, qa0.scales)
        assert qa.shape == tuple(residual.shape)


def edge_rows(tp: int, hidden: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per-rank contributions and a residual covering the spec's edge cases, one case per token."""
    m = 8
    xs = [_rand(m, hidden, seed=10 + r) for r in range(tp)]
    residual = _rand(m, hidden, seed=99)
    # token 0: everything zero (rsqrt(eps) path), with -0.0 on every other rank
    for r in range(tp):
        xs[r][0] = -0.0 if r % 2 else 0.0
    residual[0] = 0.0
    # token 1: +0/-0 pairs across ranks, all -0.0, negative subnormals (bf16 and their sums)
    for r in range(tp):
        xs[r][1, 0::4] = 0.0 if r == 0 else -0.0
        xs[r][1, 1::4] = -0.0
        xs[r][1, 2::4] = _bf16(-(2.0**-130))
        xs[r][1, 3::4] = _bf16(-(2.0**-133)) if r % 2 else _bf16(2.0**-133)
    residual[1, 0::4] = -0.0
    residual[1, 1::4] = -0.0
    # token 2: +inf on one rank, -inf + inf on a lane (NaN)
    xs[0][2, 5] = float("inf")
    xs[0][2, 9] = float("inf")
    xs[tp - 1][2, 9] = float("-inf")
    # token 3: NaN on one rank
    xs[tp - 1][3, 17] = float("nan")
    # token 4: one dominating element (overflows to inf in the sum of squares)
    xs[0][4, 3] = 3.0e38
    # token 5: one dominating but finite element
    xs[0][5, 7] = 1.0e18
    return xs, residual


# ---------------------------------------------------------------------------------------
# Consumers, simulated TP in {2, 4, 8}
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_gemma_rms_norm_mxfp8_edge_values(tp):
    hidden = 128
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=16, group=SimulatedGroup(tp))
    xs, residual = edge_rows(tp, hidden)
    weight = _rand(hidden, seed=5, scale=0.5)
    outs = simulate_mxfp8(comm, xs, residual, weight)
    check_mxfp8(outs, xs, residual, weight)
    # -0.0 never reaches the sum: +0/-0 (and all -0) lanes plus a -0 residual give +0.0
    assert bool((outs[0][1][1, 0::4].view(torch.int16) == 0).all())
    assert bool((outs[0][1][1, 1::4].view(torch.int16) == 0).all())
    assert torch.isnan(outs[0][1][3, 17]) and torch.isnan(outs[0][1][2, 9])
    assert_armed(comm)


@pytest.mark.parametrize("tp,hidden,m", [(2, 96, 3), (4, 160, 5), (2, 2880, 2)])
def test_hidden_multiple_of_32_not_128(tp, hidden, m, monkeypatch):
    # gpt-oss's 2880 = 90 MXFP8 blocks: the swizzled scales carry two zero padding columns per row
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=8, group=SimulatedGroup(tp))
    xs = [_rand(m, hidden, seed=r) for r in range(tp)]
    residual, weight = _rand(m, hidden, seed=40), _rand(hidden, seed=41)
    empty = torch.empty

    def poisoned_empty(*args, **kwargs):  # the op's scale buffer starts as 0x5A: the kernel writes every byte
        t = empty(*args, **kwargs)
        return t.fill_(0x5A) if t.dtype == torch.uint8 else t

    with monkeypatch.context() as mp:
        mp.setattr(torch, "empty", poisoned_empty)
        outs = simulate_mxfp8(comm, xs, residual, weight)
    check_mxfp8(outs, xs, residual, weight)
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    for r in range(tp):
        assert same_bits(comm.collect(rank=r), all_reduce_ref(xs))
    assert_armed(comm)


@pytest.mark.parametrize("tp", [2, 4])
def test_all_reduce_and_rms_norm(tp):
    hidden, m = 256, 5
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=8, group=SimulatedGroup(tp))
    xs = [_rand(m, hidden, seed=r) for r in range(tp)]
    xs[0][0, :8] = -0.0
    residual = _rand(m, hidden, seed=50)
    weight = _rand(hidden, seed=51)
    acc = lamport_sum_ref(xs)
    # (c) plain all-reduce, with a caller buffer
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    for r in range(tp):
        out = torch.full((m, hidden), 7.0, dtype=torch.bfloat16, device=DEV)
        assert comm.collect(rank=r, out=out) is out
        assert same_bits(out, all_reduce_ref(xs))
    assert_armed(comm)
    # (b) plain and Gemma weight
    for gemma in (False, True):
        for r, x in enumerate(xs):
            comm.publish(x, rank=r)
        normed_ref, residual_ref = rms_norm_ref(acc, residual, weight, EPS, gemma=gemma)
        for r in range(tp):
            normed, residual_out = comm.collect_rms_norm(residual, weight, EPS, gemma=gemma, rank=r)
            assert same_bits(residual_out, residual_ref)
            assert_normed_close(normed, normed_ref)
        assert_armed(comm)


def test_one_call_api_single_rank():
    hidden = 128
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=4, group=SimulatedGroup(1))
    x, residual, weight = _rand(3, hidden, seed=1), _rand(3, hidden, seed=2), _rand(hidden, seed=3)
    assert bytes_equal(seam.all_reduce(x, comm), all_reduce_ref([x]))
    normed, residual_out = seam.all_reduce_rms_norm(x, residual, weight, EPS, comm, gemma=True)
    normed_ref, residual_ref = rms_norm_ref(lamport_sum_ref([x]), residual, weight, EPS, gemma=True)
    assert bytes_equal(residual_out, residual_ref)
    assert_normed_close(normed, normed_ref)
    qa, residual_out, normed = seam.allreduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS, comm, also_bf16=True)
    check_mxfp8([(qa, residual_out, normed)], [x], residual, weight)
    assert_armed(comm)


# ---------------------------------------------------------------------------------------
# MoE finalize publish
# ---------------------------------------------------------------------------------------
def make_moe(m, hidden, top_k, rows, seed, fp32_weights=True, device=DEV):
    g = _gen(seed)
    gemm2 = _rand(rows, hidden, seed=seed, device=device)
    w = torch.rand(m, top_k, generator=g) * 2 - 0.5
    w = (w if fp32_weights else w.to(torch.bfloat16)).to(device)
    idx = torch.randint(-1, rows, (m, top_k), generator=g, dtype=torch.int32).to(device)
    shared = _rand(m, hidden, seed=seed + 1000, device=device)
    return MoEOutput(UnfinalizedMoEOutput(gemm2, w, idx), shared)


def moe_contribution(moe):
    r = moe.routed
    return moe_finalize_ref(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx, moe.shared_output)


def simulate_finalize(op, moes, residual, weight, eps=EPS):
    for r, moe in enumerate(moes):
        op.publish(moe, rank=r)
    return [op.collect(residual, weight, eps, also_bf16=True, rank=r) for r in range(len(moes))]


def test_finalize_one_call_single_rank():
    """The seed's one-call API (init + finalize) on a one-rank simulated group."""
    hidden, top_k = 128, 2
    op = seam.init_fused_moe_finalize(
        hidden_size=hidden, max_num_tokens=4, top_k=top_k, fp32_weights=False, group=SimulatedGroup(1)
    )
    for m in (3, 1, 4, 2):
        moe = make_moe(m, hidden, top_k, rows=5, seed=m, fp32_weights=False)
        residual, weight = _rand(m, hidden, seed=10 + m), _rand(hidden, seed=20)
        qa, residual_out = seam.finalize_allreduce_gemma_rms_norm_mxfp8(moe, residual, weight, EPS)
        values, scales, _, residual_ref = gemma_rms_norm_mxfp8_ref(
            lamport_sum_ref([moe_contribution(moe)]), residual, weight, EPS
        )
        assert same_bits(residual_out, residual_ref)
        # No normed comes back from the one-call API: compare with the reference MXFP8, which
        # a 1-ulp normed difference (allowed by the spec) could move by a code here and there
        assert float((qa.values.view(torch.uint8) == values.view(torch.uint8)).float().mean()) > 0.99
        # ... and a scale by one step at most (where the block's amax crosses 448 * 2^k)
        assert qa.scales.shape == scales.shape and int((qa.scales.int() - scales.int()).abs().max()) <= 1
        assert_armed(op)


def test_expert_weights_of_the_other_dtype_name_the_finalize_fp32_weights():
    op = seam.init_fused_moe_finalize(hidden_size=128, max_num_tokens=4, top_k=2, fp32_weights=False,
                                      group=SimulatedGroup(1))
    moe = make_moe(3, 128, 2, rows=5, seed=1, fp32_weights=True)
    residual, weight = _rand(3, 128, seed=2), _rand(128, seed=3)
    with pytest.raises(TypeError, match="expert_weights must have dtype torch.bfloat16, got torch.float32: this "
                                        "finalize was built with fp32_weights=False"):
        seam.finalize_allreduce_gemma_rms_norm_mxfp8(moe, residual, weight, EPS)
    assert_armed(op)


def test_a_refused_init_keeps_the_earlier_finalize():
    from seam.ops import allreduce_moe

    op = seam.init_fused_moe_finalize(hidden_size=128, max_num_tokens=4, top_k=2, fp32_weights=True,
                                      group=SimulatedGroup(1))
    with pytest.raises(ValueError, match="hidden_size must be a positive multiple of 32, got 100"):
        seam.init_fused_moe_finalize(hidden_size=100, max_num_tokens=4, top_k=2, fp32_weights=True,
                                     group=SimulatedGroup(1))
    assert allreduce_moe._fused_moe_finalize is op


def test_finalize_with_nothing_routed_to_a_rank():
    """A rank none of whose experts got a token (gemm2_permuted with 0 rows, every index -1) contributes its
    shared output: the split publish / collect and the one-call API (built with debug on) both take it."""
    hidden, m, top_k = 128, 3, 2
    empty = torch.zeros(0, hidden, dtype=torch.bfloat16, device=DEV)
    moes = [make_moe(m, hidden, top_k, rows=5, seed=400 + r) for r in range(2)]
    moes[1] = MoEOutput(UnfinalizedMoEOutput(empty, moes[1].routed.expert_weights,
                                             torch.full((m, top_k), -1, dtype=torch.int32, device=DEV)),
                        moes[1].shared_output)
    residual, weight = _rand(m, hidden, seed=11), _rand(hidden, seed=12)
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=4, top_k=top_k, fp32_weights=True, group=SimulatedGroup(2), debug=True
    )
    contributions = [moe_contribution(moe) for moe in moes]
    assert bytes_equal(contributions[1], moes[1].shared_output)
    check_mxfp8(simulate_finalize(op, moes, residual, weight), contributions, residual, weight)
    assert_armed(op)
    one = seam.init_fused_moe_finalize(hidden_size=hidden, max_num_tokens=4, top_k=top_k, fp32_weights=True,
                                       group=SimulatedGroup(1), debug=True, spin_limit=1 << 20)
    assert one.debug and one.spin_limit == 1 << 20
    _, residual_out = seam.finalize_allreduce_gemma_rms_norm_mxfp8(moes[1], residual, weight, EPS)
    *_, residual_ref = gemma_rms_norm_mxfp8_ref(lamport_sum_ref([contributions[1]]), residual, weight, EPS)
    assert same_bits(residual_out, residual_ref)


@pytest.mark.parametrize("tp,fp32_weights", [(2, True), (4, False), (8, True)])
def test_finalize_publish(tp, fp32_weights):
    hidden, m, top_k = 128, 6, 3
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=8, top_k=top_k, fp32_weights=fp32_weights, group=SimulatedGroup(tp)
    )
    moes = [make_moe(m, hidden, top_k, rows=9, seed=100 + r, fp32_weights=fp32_weights) for r in range(tp)]
    # A row no token routes to holds inf/NaN: skipped experts must not leak it.
    routed = moes[0].routed
    routed.expanded_idx_to_permuted_idx[routed.expanded_idx_to_permuted_idx == 8] = -1
    routed.gemm2_permuted[8] = float("inf")
    routed.gemm2_permuted[8, ::2] = float("nan")
    # A token with every expert off this rank, and one whose finalize sums to -0.0.
    routed.expanded_idx_to_permuted_idx[1] = -1
    moes[0].shared_output[1] = -0.0
    residual = _rand(m, hidden, seed=7)
    weight = _rand(hidden, seed=8)
    outs = simulate_finalize(op, moes, residual, weight)
    contributions = [moe_contribution(moe) for moe in moes]
    assert bool(torch.isfinite(contributions[0].float()).all())
    check_mxfp8(outs, contributions, residual, weight)
    assert_armed(op)


def test_finalize_skips_out_of_range_routing_indices_without_debug(monkeypatch):
    """Only SEAM_LAMPORT_DEBUG=1 range-checks routing indices (a host sync); without it an index past
    gemm2's rows (or below -1) is skipped like -1: the rows right after gemm2 hold inf, so a read
    out of bounds would show."""
    monkeypatch.delenv("SEAM_LAMPORT_DEBUG", raising=False)
    hidden, m, top_k, rows = 128, 4, 3, 6

    def run(bad):
        op = FinalizeAllReduceGemmaRMSNormMxfp8(
            hidden_size=hidden, max_num_tokens=m, top_k=top_k, fp32_weights=True, group=SimulatedGroup(2)
        )
        moes = [make_moe(m, hidden, top_k, rows=rows, seed=300 + r) for r in range(2)]
        r0 = moes[0].routed
        padded = torch.full((rows + 4, hidden), float("inf"), dtype=torch.bfloat16, device=DEV)
        padded[:rows] = r0.gemm2_permuted
        idx = r0.expanded_idx_to_permuted_idx.clone()
        idx[0, 0], idx[2, 1], idx[3, 2] = bad
        moes[0] = MoEOutput(UnfinalizedMoEOutput(padded[:rows], r0.expert_weights, idx), moes[0].shared_output)
        return simulate_finalize(op, moes, _rand(m, hidden, seed=9), _rand(hidden, seed=10))

    got, want = run((rows, rows + 3, -7)), run((-1, -1, -1))
    for g, w in zip(got, want):
        qa_g, res_g, normed_g = g
        qa_w, res_w, normed_w = w
        assert bytes_equal(qa_g.values, qa_w.values) and bytes_equal(qa_g.scales, qa_w.scales)
        assert bytes_equal(res_g, res_w) and bytes_equal(normed_g, normed_w)
        assert bool(torch.isfinite(res_g.float()).all())


def test_finalize_reference_skips_out_of_range_indices():
    """The reference (also the no-peer-access fallback's finalize) skips indices past gemm2's rows like -1,
    as the kernel does, and takes a gemm2 with no rows (nothing routed to this rank)."""
    hidden, m, top_k, rows = 128, 3, 2, 4
    moe = make_moe(m, hidden, top_k, rows=rows, seed=41)
    r = moe.routed
    bad = r.expanded_idx_to_permuted_idx.clone()
    bad[0, 0], bad[2, 1] = rows, 2**31 - 1
    skipped = r.expanded_idx_to_permuted_idx.clone()
    skipped[0, 0], skipped[2, 1] = -1, -1
    got = moe_finalize_ref(r.gemm2_permuted, r.expert_weights, bad, moe.shared_output)
    assert same_bits(got, moe_finalize_ref(r.gemm2_permuted, r.expert_weights, skipped, moe.shared_output))
    empty = moe_finalize_ref(r.gemm2_permuted[:0], r.expert_weights, bad, moe.shared_output)
    assert same_bits(empty, moe.shared_output)  # no routed rows: the shared output alone (bf16 -> f32 -> bf16)


@pytest.mark.parametrize("hidden, top_k, fp32_weights", [(128, 1, True), (96, 4, False), (1056, 3, True)])
def test_fallback_finalize_kernel_is_the_reference(hidden, top_k, fp32_weights):
    """The fallback's finalize kernel (no peer access, TP 1) gives the reference's bytes: -1 and out-of-range
    indices skipped (the rows they would name hold inf and NaN), a gemm2 with no rows, one token, a row of two
    column blocks (1056 > 1024), BF16 weights, a -0.0 sum."""
    m, rows = 5, 6
    moe = make_moe(m, hidden, top_k, rows=rows, seed=43, fp32_weights=fp32_weights)
    r = moe.routed
    gemm2 = torch.cat([r.gemm2_permuted, torch.full((2, hidden), float("nan"), dtype=torch.bfloat16, device=DEV)])
    gemm2[rows + 1] = float("inf")
    idx = r.expanded_idx_to_permuted_idx.clone()
    idx[0, 0], idx[1, -1], idx[4, 0] = -1, rows + 1, 2**31 - 1
    shared = moe.shared_output.clone()
    shared[2] = -0.0  # with every expert skipped: -0.0 + 0 summed in fp32 gives +0.0, as the reference
    idx[2] = -1
    view = gemm2[:rows]  # rows past it are never read: the kernel skips their indices
    for args in [(view, r.expert_weights, idx, shared), (view[:0], r.expert_weights, idx, shared),
                 (view, r.expert_weights[:1], idx[:1], shared[:1])]:
        got = moe_finalize(*args)
        assert same_bits(got, moe_finalize_ref(*args))
    assert bool(torch.isfinite(moe_finalize(view, r.expert_weights, idx, shared).float()).all())
    # an inf row taken by a weight of 0 and by -1: NaN where the reference has NaN (its bits may differ), and the
    # other columns' bytes
    inf_row = torch.cat([torch.full((1, hidden // 2), float("inf")), torch.ones(1, hidden - hidden // 2)], 1)
    gemm2 = inf_row.bfloat16().to(DEV)
    one = torch.zeros(1, hidden, dtype=torch.bfloat16, device=DEV)
    w = torch.tensor([[0.0]], device=DEV).to(r.expert_weights.dtype)
    got = moe_finalize(gemm2, w, torch.zeros(1, 1, dtype=torch.int32, device=DEV), one)
    want = moe_finalize_ref(gemm2, w, torch.zeros(1, 1, dtype=torch.int32, device=DEV), one)
    assert bool(got[:, : hidden // 2].isnan().all()) and bool(want[:, : hidden // 2].isnan().all())
    assert same_bits(got[:, hidden // 2:], want[:, hidden // 2:])


def test_fallback_finalize_products_not_fused():
    """The fallback's kernel rounds each product to fp32 before its add (k=0 adds -(1 + 2^-7), k=1 adds
    1 + 2^-7 + 2^-20 rounded: 2^-20; a fused multiply-add would keep 2^-20 (1 + 2^-7))."""
    hidden = 128
    gemm2 = torch.full((2, hidden), 1.0 + 2.0**-7, dtype=torch.bfloat16, device=DEV)
    w = torch.tensor([[-1.0, 1.0 + 2.0**-20]], dtype=torch.float32, device=DEV)
    idx = torch.tensor([[0, 1]], dtype=torch.int32, device=DEV)
    got = moe_finalize(gemm2, w, idx, torch.zeros(1, hidden, dtype=torch.bfloat16, device=DEV))
    assert bool((got.float() == 2.0**-20).all())


def test_finalize_products_not_fused():
    """Each product is rounded to fp32 before its add: an FMA would keep the 2^-27 term.

    k=0 adds -(1 + 2^-7); k=1 adds round_f32((1 + 2^-7)(1 + 2^-20)) = 1 + 2^-7 + 2^-20, so
    the finalize gives 2^-20; a fused multiply-add gives 2^-20 (1 + 2^-7), also a BF16 value.
    """
    hidden, top_k = 128, 2
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=2, top_k=top_k, fp32_weights=True, group=SimulatedGroup(2)
    )
    gemm2 = torch.full((2, hidden), 1.0 + 2.0**-7, dtype=torch.bfloat16, device=DEV)
    w = torch.tensor([[-1.0, 1.0 + 2.0**-20]], dtype=torch.float32, device=DEV)
    idx = torch.tensor([[0, 1]], dtype=torch.int32, device=DEV)
    shared = torch.zeros(1, hidden, dtype=torch.bfloat16, device=DEV)
    moes = [MoEOutput(UnfinalizedMoEOutput(gemm2, w, idx), shared)] * 2
    residual = torch.zeros(1, hidden, dtype=torch.bfloat16, device=DEV)
    weight = torch.zeros(hidden, dtype=torch.bfloat16, device=DEV)
    outs = simulate_finalize(op, moes, residual, weight)
    contributions = [moe_contribution(m) for m in moes]
    assert bool((contributions[0].float() == 2.0**-20).all())
    check_mxfp8(outs, contributions, residual, weight)


# ---------------------------------------------------------------------------------------
# Reliability
# ---------------------------------------------------------------------------------------
M_SEQUENCE = [1, 6, 12, 8, 16, 3, 5, 2, 4, 1, 16, 7, 16, 1, 9, 2, 16, 11, 3, 1, 4, 13, 6, 16, 2, 1, 8, 15, 5, 16, 1, 3]


def test_changing_m_rotates_generations():
    """>= 30 calls with M changing each time: every generation reused, larger rows re-armed.

    TP = 3 (not a power of two) keeps the interpreter time down and covers odd group sizes.
    """
    tp, hidden, cap, top_k = 3, 128, 16, 2
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=cap, top_k=top_k, fp32_weights=True, group=SimulatedGroup(tp)
    )
    weight = _rand(hidden, seed=3)
    generations = []
    for call, m in enumerate(M_SEQUENCE):
        moes = [make_moe(m, hidden, top_k, rows=5, seed=1000 * call + r) for r in range(tp)]
        residual = _rand(m, hidden, seed=call)
        outs = simulate_finalize(op, moes, residual, weight)
        check_mxfp8(outs, [moe_contribution(moe) for moe in moes], residual, weight)
        assert_armed(op)
        generations.append(op.mailbox.state(0).stage_state.tolist()[1])
    assert len(M_SEQUENCE) >= 30 and generations[:6] == [0, 1, 2, 0, 1, 2]


def test_debug_mode_missing_publish_raises():
    tp, hidden = 2, 128
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=4, group=SimulatedGroup(tp), debug=True, spin_limit=8)
    xs = [_rand(2, hidden, seed=r) for r in range(tp)]
    comm.publish(xs[0], rank=0)  # rank 1 skips its publish
    with pytest.raises(RuntimeError, match="did not arrive within the debug spin limit"):
        comm.collect(rank=0)
    comm.reset()
    assert_armed(comm)
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    for r in range(tp):
        assert bytes_equal(comm.collect(rank=r), all_reduce_ref(xs))
    assert_armed(comm)


def test_consume_launch_that_raises_leaves_the_publish_pending(monkeypatch):
    """A consumer launch that raises on the host (a compile error, say) marks nothing consumed: the
    same collect retried works, and the mailbox stays in step."""
    import seam.ops.allreduce_base as base

    tp, hidden = 2, 128
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=4, group=SimulatedGroup(tp))
    xs = [_rand(2, hidden, seed=50 + r) for r in range(tp)]
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    launch = base._consume_op

    def fail(*args, **kwargs):
        raise RuntimeError("injected launch failure")

    monkeypatch.setattr(base, "_consume_op", fail)
    with pytest.raises(RuntimeError, match="injected"):
        comm.collect(rank=0)
    monkeypatch.setattr(base, "_consume_op", launch)
    for r in range(tp):
        assert bytes_equal(comm.collect(rank=r), all_reduce_ref(xs))
    assert_armed(comm)


def test_debug_mode_from_env(monkeypatch):
    monkeypatch.setenv("SEAM_LAMPORT_DEBUG", "1")
    comm = LamportAllReduce(hidden_size=128, max_num_tokens=2, group=SimulatedGroup(2))
    assert comm.debug and comm.spin_limit > 0
    for off in ("0", "", "false", "No", " off "):  # the usual spellings of off turn it off
        monkeypatch.setenv("SEAM_LAMPORT_DEBUG", off)
        assert not LamportAllReduce(hidden_size=128, max_num_tokens=2, group=SimulatedGroup(2)).debug


def _bad_publish_cases(hidden, cap):
    good = _rand(2, hidden, seed=0)
    wide = _rand(2, hidden + 128, seed=0)
    return [
        (lambda c: c.publish(_rand(0, hidden, seed=0), rank=0), ValueError, r"M \(x.shape\[0\]\)=0 is outside \[1, 4\]"),
        (lambda c: c.publish(_rand(cap + 1, hidden, seed=0), rank=0), ValueError, r"=5 is outside \[1, 4\]"),
        (lambda c: c.publish(good.float(), rank=0), TypeError, "x must have dtype torch.bfloat16"),
        (lambda c: c.publish(wide, rank=0), ValueError, r"x must have shape \[\*, 128\]"),
        (lambda c: c.publish(wide[:, ::2], rank=0), ValueError, "x must be contiguous"),
        (lambda c: c.publish(torch.zeros(2 * hidden + 1, dtype=torch.bfloat16, device=DEV)[1:].view(2, hidden), rank=0),
         ValueError, "x must be 16-byte aligned"),
        (lambda c: c.publish(good, rank=2), ValueError, "rank=2 is not driven"),
        (lambda c: c.publish(good), ValueError, "name the rank"),
        (lambda c: c.publish("x", rank=0), TypeError, "x must be a torch.Tensor"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_bad_publish_leaves_state_untouched(case):
    hidden, cap = 128, 4
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=cap, group=SimulatedGroup(2))
    call, exc, match = _bad_publish_cases(hidden, cap)[case]
    with pytest.raises(exc, match=match):
        call(comm)
    assert_armed(comm)
    assert comm.mailbox.state(0).stage_state.tolist() == [0, 0]
    xs = [_rand(3, hidden, seed=r) for r in range(2)]
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    for r in range(2):
        assert bytes_equal(comm.collect(rank=r), all_reduce_ref(xs))
    assert_armed(comm)


def test_bad_collect_keeps_publish_pending():
    hidden, m = 128, 3
    comm = LamportAllReduce(hidden_size=hidden, max_num_tokens=4, group=SimulatedGroup(2))
    xs = [_rand(m, hidden, seed=r) for r in range(2)]
    residual, weight = _rand(m, hidden, seed=4), _rand(hidden, seed=5)
    with pytest.raises(ValueError, match="rank 0 has no pending publish"):
        comm.collect(rank=0)
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    with pytest.raises(ValueError, match="rank 0 already published 3 rows"):
        comm.publish(xs[0], rank=0)
    bad = [
        (lambda: comm.collect_gemma_rms_norm_mxfp8(residual[:2], weight, EPS, rank=0), ValueError,
         r"residual must have shape \[3, 128\]"),
        (lambda: comm.collect_gemma_rms_norm_mxfp8(residual, weight.float(), EPS, rank=0), TypeError,
         "weight must have dtype torch.bfloat16"),
        (lambda: comm.collect_gemma_rms_norm_mxfp8(residual, weight, float("nan"), rank=0), ValueError,
         "eps must be a finite float"),
        (lambda: comm.collect_gemma_rms_norm_mxfp8(residual, weight, -1.0, rank=0), ValueError, "eps must be >= 0"),
        (lambda: comm.collect_gemma_rms_norm_mxfp8(residual, weight, EPS, also_bf16=1, rank=0), TypeError,
         "also_bf16 must be a bool"),
        (lambda: comm.collect(rank=0, out=torch.empty(m, hidden + 1, dtype=torch.bfloat16, device=DEV)), ValueError,
         r"out must have shape \[3, 128\]"),
    ]
    before = [s.mailbox.clone() for s in comm.mailbox.states.values()]
    for call, exc, match in bad:
        with pytest.raises(exc, match=match):
            call()
    for b, s in zip(before, comm.mailbox.states.values()):
        assert bytes_equal(b, s.mailbox)
    outs = [comm.collect_gemma_rms_norm_mxfp8(residual, weight, EPS, also_bf16=True, rank=r) for r in range(2)]
    check_mxfp8(outs, xs, residual, weight)
    assert_armed(comm)


def test_moe_output_annotation_says_shared_output_is_required():
    """The spec adds shared_output to every token (and M comes from it): a tensor, never None."""
    import typing

    assert typing.get_type_hints(MoEOutput)["shared_output"] is torch.Tensor


def test_bad_moe_inputs_raise_before_launch():
    hidden, m, top_k = 128, 3, 2
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=4, top_k=top_k, fp32_weights=True, group=SimulatedGroup(2), debug=True
    )
    good = make_moe(m, hidden, top_k, rows=4, seed=1)
    r = good.routed
    cases = [
        (MoEOutput(UnfinalizedMoEOutput(r.gemm2_permuted, r.expert_weights.bfloat16(), r.expanded_idx_to_permuted_idx),
                   good.shared_output), TypeError,
         "expert_weights must have dtype torch.float32, got torch.bfloat16: this finalize was built with "
         "fp32_weights=True"),
        (MoEOutput(UnfinalizedMoEOutput(r.gemm2_permuted, r.expert_weights.half(), r.expanded_idx_to_permuted_idx),
                   good.shared_output), TypeError, "expert_weights must have dtype torch.float32, got torch.float16$"),
        (MoEOutput(UnfinalizedMoEOutput(r.gemm2_permuted, r.expert_weights[:, :1].contiguous(),
                                        r.expanded_idx_to_permuted_idx), good.shared_output),
         ValueError, r"expert_weights must have shape \[3, 2\]"),
        (MoEOutput(UnfinalizedMoEOutput(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx.long()),
                   good.shared_output), TypeError, "expanded_idx_to_permuted_idx must have dtype torch.int32"),
        (MoEOutput(UnfinalizedMoEOutput(r.gemm2_permuted, r.expert_weights, r.expanded_idx_to_permuted_idx + 4),
                   good.shared_output), ValueError, r"must lie in \[-1, 3\]"),
        (MoEOutput(r, good.shared_output, routed_scaling_factor=2.0), ValueError, "routed_scaling_factor must be 1.0"),
        (MoEOutput(r, good.shared_output, routed_scaling_factor=torch.ones(2)), TypeError,
         "routed_scaling_factor must be a float"),
        (MoEOutput(r, None), TypeError, r"shared_output must be a BF16 \[M, hidden\] tensor, got None"),
        (MoEOutput(r, good.shared_output.t().contiguous().t()), ValueError, "shared_output must be contiguous"),
        # M comes from shared_output's rows: a shared_output of other rows is named, not the routed tensors
        (MoEOutput(r, good.shared_output[:2]), ValueError, r"moe_output.routed.expert_weights has 3 rows but "
         r"moe_output.shared_output has 2: they must agree"),
        (r, TypeError, "moe_output must be a MoEOutput"),
    ]
    for moe, exc, match in cases:
        with pytest.raises(exc, match=match):
            op.publish(moe, rank=0)
    assert_armed(op)
    residual, weight = _rand(m, hidden, seed=2), _rand(hidden, seed=3)
    op.publish(good, rank=0)
    # the consumer's errors name its own arguments
    with pytest.raises(TypeError, match="norm_weight must have dtype torch.bfloat16"):
        op.collect(residual, weight.float(), 1e-6, rank=0)
    with pytest.raises(ValueError, match="norm_eps must be >= 0"):
        op.collect(residual, weight, -1.0, rank=0)
    op.publish(good, rank=1)
    for rank in range(2):
        op.collect(residual, weight, 1e-6, rank=rank)
    moes = [good, make_moe(m, hidden, top_k, rows=4, seed=2)]
    outs = simulate_finalize(op, moes, residual, weight)
    check_mxfp8(outs, [moe_contribution(x) for x in moes], residual, weight)


def test_constructor_validation():
    g = SimulatedGroup(2)
    with pytest.raises(ValueError, match="hidden_size must be a positive multiple of 32"):
        LamportAllReduce(hidden_size=80, max_num_tokens=4, group=g)
    with pytest.raises(ValueError, match=r"max_num_tokens=0 is outside"):
        LamportAllReduce(hidden_size=128, max_num_tokens=0, group=g)
    with pytest.raises(TypeError, match="group must be a seam.comm.Group"):
        LamportAllReduce(hidden_size=128, max_num_tokens=4, group=2)
    with pytest.raises(ValueError, match="device must name a device"):
        SimulatedGroup(2, device="nowhere")
    with pytest.raises(TypeError, match="device must be a torch.device"):
        SimulatedGroup(2, device=3.5)
    with pytest.raises(ValueError, match="device must name a device"):
        LamportAllReduce(hidden_size=128, max_num_tokens=4, group=g, device="nowhere")
    with pytest.raises(ValueError, match="device is on meta"):
        SimulatedGroup(2, device="meta")
    if not torch.cuda.is_available():  # a CUDA device on a machine without one: a ValueError, not an assert
        with pytest.raises(ValueError, match="device is on cuda"):
            SimulatedGroup(2, device="cuda")
    with pytest.raises(ValueError, match=r"top_k=0 is outside"):
        FinalizeAllReduceGemmaRMSNormMxfp8(hidden_size=128, max_num_tokens=4, top_k=0, fp32_weights=True, group=g)
    with pytest.raises(TypeError, match="fp32_weights must be a bool"):
        FinalizeAllReduceGemmaRMSNormMxfp8(hidden_size=128, max_num_tokens=4, top_k=2, fp32_weights=1, group=g)
    assert seam.supports_fused_moe_finalize(g) == (g.device.type == "cuda")
    assert not seam.supports_fused_moe_finalize(g, expert_parallel=True)
    assert not seam.supports_fused_moe_finalize(SimulatedGroup(1))
    assert not seam.supports_fused_moe_finalize(g, dtype=torch.float16)
    with pytest.raises(TypeError, match="expert_parallel must be a bool, got str"):
        seam.supports_fused_moe_finalize(g, expert_parallel="no")
    with pytest.raises(TypeError, match="dtype must be a torch.dtype, got str"):
        seam.supports_fused_moe_finalize(g, dtype="bfloat16")
    with pytest.raises(RuntimeError, match="init_fused_moe_finalize"):
        import seam.ops.allreduce_moe as moe

        moe._fused_moe_finalize = None
        seam.finalize_allreduce_gemma_rms_norm_mxfp8(None, None, None, 0.0)


def _numpy_lamport_all_reduce():
    comm = LamportAllReduce(hidden_size=np.int64(256), max_num_tokens=np.int32(4), spin_limit=np.int64(8),
                            group=SimulatedGroup(2))
    assert (comm.hidden_size, comm.capacity, comm.spin_limit) == (256, 4, 0)  # spin_limit: debug only
    assert type(comm.hidden_size) is type(comm.capacity) is int
    xs = [_rand(3, 256, seed=r) for r in range(2)]
    for r, x in enumerate(xs):
        comm.publish(x, rank=r)
    for r in range(2):
        assert bytes_equal(comm.collect(rank=r), all_reduce_ref(xs))


def _numpy_ranks():
    comm = LamportAllReduce(hidden_size=128, max_num_tokens=4, group=SimulatedGroup(2))
    xs = [_rand(3, 128, seed=r) for r in range(2)]
    for r, x in enumerate(xs):
        comm.publish(x, rank=np.int64(r))
    for r in range(2):
        assert bytes_equal(comm.collect(rank=np.int32(r)), all_reduce_ref(xs))


_NUMPY_SIZES = dict(hidden_size=np.int64(128), max_num_tokens=np.int64(4), top_k=np.int16(2), fp32_weights=True)


def _numpy_finalize():
    op = FinalizeAllReduceGemmaRMSNormMxfp8(**_NUMPY_SIZES, group=SimulatedGroup(2))
    assert (op.hidden_size, op.capacity, op.top_k) == (128, 4, 2)
    assert type(op.hidden_size) is type(op.capacity) is type(op.top_k) is int


def _numpy_init_fused_moe_finalize():
    assert seam.init_fused_moe_finalize(**_NUMPY_SIZES, group=SimulatedGroup(1)).top_k == 2


def _numpy_simulated_group():
    g = SimulatedGroup(np.int64(2))
    assert g.tp == 2 and type(g.tp) is int and g.ranks == (0, 1)


@pytest.mark.parametrize("case", [_numpy_lamport_all_reduce, _numpy_ranks, _numpy_finalize,
                                  _numpy_init_fused_moe_finalize, _numpy_simulated_group],
                         ids=lambda f: f.__name__)
def test_sizes_and_ranks_accept_numpy_ints(case, monkeypatch):
    """Issue 20: sizes, tp and rank follow seam.checks.integer like every other entry point
    (Python or NumPy ints, stored as Python ints)."""
    import seam.ops.allreduce_moe as moe

    monkeypatch.setattr(moe, "_fused_moe_finalize", None)  # init_fused_moe_finalize sets the global
    case()


def test_sizes_and_ranks_reject_other_types():
    g = SimulatedGroup(2)
    for kw, name in [(dict(hidden_size=True), "hidden_size"), (dict(max_num_tokens=4.0), "max_num_tokens"),
                     (dict(spin_limit=np.float64(8)), "spin_limit")]:
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            LamportAllReduce(**{**dict(hidden_size=128, max_num_tokens=4, group=g), **kw})
    with pytest.raises(TypeError, match="top_k must be an int"):
        FinalizeAllReduceGemmaRMSNormMxfp8(**{**_NUMPY_SIZES, "top_k": 2.0}, group=g)
    with pytest.raises(TypeError, match="tp must be an int, got str"):
        SimulatedGroup("2")
    with pytest.raises(ValueError, match=r"tp=0 is outside \[1, 72\]"):
        SimulatedGroup(np.int64(0))
    with pytest.raises(ValueError, match=r"tp=1000000000 is outside \[1, 72\]"):  # before any allocation
        SimulatedGroup(10**9)
    comm = LamportAllReduce(hidden_size=128, max_num_tokens=4, group=g)
    with pytest.raises(TypeError, match="rank must be an int, got str"):
        comm.publish(_rand(2, 128, seed=0), rank="0")
    assert_armed(comm)


# ---------------------------------------------------------------------------------------
# Real groups on CPU (gloo): fallback path and collective argument checks
# ---------------------------------------------------------------------------------------
def _gloo_worker(rank, world, path, capacities, results):
    import torch.distributed as dist

    import seam as s
    from seam.formats.a_deq import a_deq_from_mxfp8

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"file://{path}")
    try:
        refused = []  # DistGroup's own arguments, checked before its collective
        for kwargs, error in ((dict(process_group="tp", device="cpu"), TypeError), (dict(device=object()), TypeError),
                              (dict(device="cuda:7"), ValueError), (dict(device="nodevice"), ValueError)):
            try:
                s.DistGroup(**kwargs)
            except error as e:
                refused.append(str(e).split(",")[0])
        results[rank + 3 * world] = refused
        group = s.DistGroup(device="cpu")
        try:
            s.LamportAllReduce(hidden_size=128, max_num_tokens=capacities[rank], group=group)
            results[rank] = "built"
        except ValueError as e:
            results[rank] = str(e)
        comm = s.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=group)
        x = _rand(3, 128, seed=rank)
        y = s.all_reduce(x, comm)
        xs = [_rand(3, 128, seed=r) for r in range(world)]
        want = (xs[0].float() + xs[1].float()).bfloat16()  # gloo sums BF16 pairwise
        results[rank + world] = (comm.fused, bool(torch.equal(y, want)))
        # Fallback epilogues: the BF16 NCCL/gloo sum, then seam's fused norm kernels.
        residual, weight = _rand(3, 128, seed=50), _rand(128, seed=51)
        qa, residual_out, normed = s.allreduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS, comm, also_bf16=True)
        values, scales, normed_want, residual_want = s.gemma_fused_add_rms_norm_mxfp8(
            want, residual, weight, EPS, also_bf16=True
        )
        ok = all(bytes_equal(a, b) for a, b in (
            (qa.values, values), (qa.scales, scales), (normed, normed_want), (residual_out, residual_want)))
        # the fallback's fused norm kernel writes A_deq on request too
        qa_deq, _ = s.allreduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS, comm, a_deq=True)
        ok &= bytes_equal(qa_deq.values, values) and bytes_equal(qa_deq.a_deq, a_deq_from_mxfp8(values, scales))
        normed, residual_out = s.all_reduce_rms_norm(x, residual, weight, EPS, comm, gemma=False)
        normed_want, residual_want = s.fused_add_rms_norm(want, residual, weight, EPS, gemma=False)
        ok &= bytes_equal(normed, normed_want) and bytes_equal(residual_out, residual_want)
        op = s.FinalizeAllReduceGemmaRMSNormMxfp8(hidden_size=128, max_num_tokens=4, top_k=2, fp32_weights=True,
                                                  group=group)
        moes = [make_moe(3, 128, 2, rows=4, seed=r) for r in range(world)]
        qa, residual_out = op(moes[rank], residual, weight, EPS)
        summed = (moe_contribution(moes[0]).float() + moe_contribution(moes[1]).float()).bfloat16()
        values, scales, residual_want = s.gemma_fused_add_rms_norm_mxfp8(summed, residual, weight, EPS)
        ok &= bytes_equal(qa.values, values) and bytes_equal(qa.scales, scales)
        ok &= bytes_equal(residual_out, residual_want)
        results[rank + 2 * world] = bool(ok)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not runtime.INTERPRET, reason="gloo on CPU tensors needs the interpreter's CPU kernels")
def test_dist_group_fallback_and_capacity_mismatch(tmp_path):
    """A real CPU group has no peer access: one-call ops fall back to gloo + the fused norm
    kernels (the sum rounded to BF16 first); mismatched capacity raises on every rank."""
    import torch.multiprocessing as mp

    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_gloo_worker, args=(2, str(tmp_path / "store"), [4, 8], results), nprocs=2, join=True)
    assert results[0] == ("TP ranks disagree on (hidden_size, max_num_tokens, debug): "
                          "rank 0 has (128, 4, False), rank 1 has (128, 8, False)")
    assert results[2] == (False, True) and results[3] == (False, True)
    assert results[4] and results[5]
    assert len(results[6]) == 4 and results[6] == results[7]  # each bad argument refused, on every rank
    assert results[6][0].startswith("process_group must be a torch.distributed.ProcessGroup")
    assert results[6][1].startswith("device must be a torch.device") and results[6][2].startswith("device")


# ---------------------------------------------------------------------------------------
# GPU: model shapes, CUDA graphs
# ---------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_gpu_finalize_full_shapes(tp):
    hidden, top_k, cap = 6144, 4, 256
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=cap, top_k=top_k, fp32_weights=True, group=SimulatedGroup(tp, "cuda")
    )
    weight = _rand(hidden, seed=1, device="cuda")
    for call, m in enumerate([1, 7, 128, 256, 129, 3]):
        moes = [make_moe(m, hidden, top_k, rows=m * top_k, seed=10 * call + r, device="cuda") for r in range(tp)]
        residual = _rand(m, hidden, seed=call, device="cuda")
        outs = simulate_finalize(op, moes, residual, weight)
        check_mxfp8(outs, [moe_contribution(moe) for moe in moes], residual, weight)
        assert_armed(op)


@pytest.mark.gpu
def test_gpu_cuda_graph_replays():
    """Three back-to-back calls captured once, replayed 1000 times with inputs mutated in between."""
    tp, hidden, top_k, ms = 4, 6144, 4, (32, 5, 64)
    op = FinalizeAllReduceGemmaRMSNormMxfp8(
        hidden_size=hidden, max_num_tokens=64, top_k=top_k, fp32_weights=True, group=SimulatedGroup(tp, "cuda")
    )
    weight = _rand(hidden, seed=1, device="cuda")
    calls = [
        ([make_moe(m, hidden, top_k, rows=m * top_k, seed=10 * i + r, device="cuda") for r in range(tp)],
         _rand(m, hidden, seed=i, device="cuda"))
        for i, m in enumerate(ms)
    ]

    def step():
        return [simulate_finalize(op, moes, residual, weight) for moes, residual in calls]

    step()  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        results = step()
    torch.cuda.current_stream().wait_stream(stream)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for replay in range(1000):
        for moes, residual in calls:
            for moe in moes:
                moe.shared_output.normal_(generator=gen)
                moe.routed.gemm2_permuted.normal_(generator=gen)
                moe.routed.expert_weights.uniform_(generator=gen)
            residual.normal_(generator=gen)
        graph.replay()
        torch.cuda.synchronize()
        if replay % 10 == 0 or replay > 990:
            for (moes, residual), outs in zip(calls, results):
                check_mxfp8(outs, [moe_contribution(moe) for moe in moes], residual, weight)
    assert_armed(op)
