"""Issue 20: TP ranks of a real group that call with different M (two processes on the CPU).

Debug mode: every rank raises ValueError naming each rank's M before anything moves, on both
paths of a real group: the fallback (gloo, no peer access) and the Lamport path (peer access,
here through mailboxes in shared-memory files that every process maps, as torch symmetric
memory maps the peers' GPU buffers). There the M check goes through the mailbox, so a rank
that skips a call still makes the others time out in the bounded spin. Without debug mode the
fallback adds no collective.
"""

from __future__ import annotations

import datetime

import pytest
import torch

from seam import runtime
from seam.comm import DistGroup, SimulatedGroup
from seam.comm.mailbox import LamportMailbox, LamportRankState, m_row, ms_from_row, peer_offsets
from seam.compare import bytes_equal
from seam.kernels.lamport import GENERATIONS, SENTINEL_BITS
from seam.ref import mhc as mhc_ref

EPS = 1e-6
HIDDEN, HC, TOP_K = 128, 2, 2
#: Re-loads per fragment (about 1 ms each under the interpreter): room for a peer that lags a
#: whole call behind on a busy machine; only a broken call ever waits it out.
SPIN_LIMIT = 5_000
#: Where a rank skips a call on purpose, the others wait this out.
SHORT_SPIN_LIMIT = 500
DISAGREE = "TP ranks disagree on M (tokens in this call): rank 0 has 3, rank 1 has 5"


class _SharedMemoryGroup(DistGroup):
    """A CPU DistGroup with peer access: every rank's mailbox is a shared-memory file that every
    process maps, so the kernels (interpreted, on host addresses) store into peers as on GPUs."""

    def __init__(self, path: str) -> None:
        super().__init__(device="cpu")
        self.peer_access = True
        self._path = path

    def create_mailbox(self, hidden: int, capacity: int) -> LamportMailbox:
        shape = (GENERATIONS, self.tp, capacity, hidden)
        size = GENERATIONS * self.tp * capacity * hidden
        name = f"{self._path}.{len(self._handles)}"  # one set of files per mailbox
        boxes = [torch.from_file(f"{name}.{r}", shared=True, size=size, dtype=torch.bfloat16).view(shape)
                 for r in range(self.tp)]
        self._handles.append(boxes)
        state = LamportRankState(
            rank=self.rank,
            mailbox=boxes[self.rank],
            stage_state=torch.zeros(2, dtype=torch.int32),
            peer_offsets=peer_offsets(boxes[self.rank].data_ptr(), [b.data_ptr() for b in boxes], self.device),
            error=torch.zeros(1, dtype=torch.int32),
        )
        state.arm()
        self.barrier()
        return LamportMailbox(tp=self.tp, capacity=capacity, hidden=hidden, states={self.rank: state}, group=self)


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _moe(m, seed):
    """An unfinalized MoE output: (gemm2_permuted, fp32 expert_weights, routing indices, shared_output)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, 4, (m, TOP_K), generator=g, dtype=torch.int32)
    return _rand(4, HIDDEN, seed=seed), torch.rand(m, TOP_K, generator=g), idx, _rand(m, HIDDEN, seed=seed + 1)


def _boundary(m, seed):
    """mHC inputs: residual streams, post, comb, pre, norm weight."""
    res = _rand(m, HC, HIDDEN, seed=seed)
    mixes = mhc_ref.mhc_pre(res, mhc_ref.mhc_params(HC, HIDDEN, seed=seed))
    return res, mixes.post, mixes.comb, mixes.pre, _rand(HIDDEN, seed=seed + 1)


def _counting_all_reduces(call):
    """``call()`` and how many ``torch.distributed.all_reduce`` it ran."""
    import torch.distributed as dist

    count = []
    plain = dist.all_reduce
    dist.all_reduce = lambda *a, **k: (count.append(1), plain(*a, **k))[1]
    try:
        return call(), len(count)
    finally:
        dist.all_reduce = plain


def _worker(rank, world, path, lamport, results):
    import torch.distributed as dist

    import seam as s

    # bounded: a collective that a rank never joins fails after this instead of hanging
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"file://{path}",
                            timeout=datetime.timedelta(seconds=60))
    try:
        group = _SharedMemoryGroup(path + ".box") if lamport else DistGroup(device="cpu")
        sizes = dict(hidden_size=HIDDEN, max_num_tokens=8, group=group)
        mhc_sizes = dict(sizes, hc_mult=HC, top_k=TOP_K)
        refused = []
        for build in (lambda d: s.LamportAllReduce(**sizes, debug=d), lambda d: s.AllReduceMHC(**mhc_sizes, debug=d)):
            try:  # the M check is collective: every rank must make it
                build(rank == 0)
            except ValueError as e:
                refused.append(str(e))
        comm = s.LamportAllReduce(**sizes, debug=True, spin_limit=SPIN_LIMIT)
        op = s.FinalizeAllReduceGemmaRMSNormMxfp8(**sizes, top_k=TOP_K, fp32_weights=True, debug=True,
                                                  spin_limit=SPIN_LIMIT)
        mhc = s.AllReduceMHC(**mhc_sizes, debug=True, spin_limit=SPIN_LIMIT)
        assert comm.fused == op.fused == mhc.fused == lamport

        m = [3, 5][rank]
        x, residual, weight = _rand(m, HIDDEN, seed=rank), _rand(m, HIDDEN, seed=9), _rand(HIDDEN, seed=10)
        moe, boundary = _moe(m, seed=rank), _boundary(m, seed=11)
        moe_output = s.MoEOutput(s.UnfinalizedMoEOutput(*moe[:3]), moe[3])
        calls = [
            lambda: comm.all_reduce(x),
            lambda: comm.all_reduce_gemma_rms_norm_mxfp8(x, residual, weight, EPS),
            lambda: op(moe_output, residual, weight, EPS),
            lambda: mhc(x, *boundary, EPS),
            lambda: mhc.finalize(*moe, *boundary, EPS),
        ]
        if lamport:  # the split steps (the fallback has none for LamportAllReduce)
            calls += [lambda: comm.publish(x), lambda: op.publish(moe_output), lambda: mhc.publish(x),
                      lambda: mhc.publish_finalize(*moe)]
        errors = []
        for call in calls:
            try:
                call()
                errors.append("returned")
            except Exception as e:  # noqa: BLE001  (whatever a call raises, on either rank, is the result)
                errors.append(f"{type(e).__name__}: {e}")

        # Nothing moved: the next calls, with agreeing M, work without a reset.
        xs = [_rand(3, HIDDEN, seed=20 + r) for r in range(world)]
        want = (xs[0].float() + xs[1].float()).bfloat16()  # any order: two ranks
        boundary = _boundary(3, seed=12)
        ok = bytes_equal(comm.all_reduce(xs[rank]), want)
        (residual_out, _), debug_reduces = _counting_all_reduces(lambda: mhc(xs[rank], *boundary, EPS))
        ok &= bytes_equal(residual_out, mhc_ref.allreduce_mhc_ref(torch.stack(xs), *boundary, EPS)[0])
        quiet = s.AllReduceMHC(**mhc_sizes, debug=False)
        _, quiet_reduces = _counting_all_reduces(lambda: quiet(xs[rank], *boundary, EPS))

        skipped = None
        if lamport:  # rank 1 skips a call: rank 0 times out in its bounded spin (the M check's)
            short = s.LamportAllReduce(**sizes, debug=True, spin_limit=SHORT_SPIN_LIMIT)
            try:
                if rank == 0:
                    short.all_reduce(xs[rank])
            except RuntimeError as e:
                skipped = str(e)
            short.reset()
            ok &= bytes_equal(short.all_reduce(xs[rank]), want)
        results[rank] = (refused, errors, ok, (debug_reduces, quiet_reduces), skipped)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not runtime.INTERPRET, reason="CPU tensors in both processes need the interpreter")
@pytest.mark.parametrize("lamport", [False, True], ids=["fallback", "lamport"])
def test_ranks_disagree_on_m_in_debug_mode(tmp_path, lamport):
    """Rank 0 calls with M 3, rank 1 with M 5: every call raises ValueError on both ranks (gloo used
    to abort both processes; the Lamport path raised on the waiting rank only); the next calls work."""
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), lamport, results), nprocs=2, join=True)
    for rank in range(2):
        refused, errors, ok, reduces, skipped = results[rank]
        assert refused == [
            "TP ranks disagree on (hidden_size, max_num_tokens, debug): rank 0 has (128, 8, True), "
            "rank 1 has (128, 8, False)",
            "TP ranks disagree on (hidden_size, max_num_tokens, hc_mult, top_k, debug): "
            "rank 0 has (128, 8, 2, 2, True), rank 1 has (128, 8, 2, 2, False)",
        ]
        assert errors == [f"ValueError: {DISAGREE}"] * (9 if lamport else 5), errors
        assert ok
        # The fallback's M check is one all-reduce, in debug mode only (the data moves by all-gather);
        # the Lamport path's goes through the mailbox, never through a collective that could hang.
        assert reduces == ((0, 0) if lamport else (1, 0))
        if lamport and rank == 0:
            assert "did not arrive within the debug spin limit" in skipped
        else:
            assert skipped is None


@pytest.mark.parametrize("ms", [(3, 5), (1, 1 << 24), ((1 << 24) - 1, 256, 65535, 65536)])
def test_m_exchange_through_the_mailbox(ms):
    """The Lamport path's M row: three base-256 digits per rank, exact in BF16, so every rank reads
    every rank's M whatever they are, and the mailbox is back in step after it. A rank whose row
    never comes makes the others time out in the bounded spin instead of waiting for ever."""
    tp = len(ms)
    box = SimulatedGroup(tp).create_mailbox(HIDDEN, 4)
    rows = {r: m_row(m, r, tp, HIDDEN, runtime.kernel_device()) for r, m in enumerate(ms)}
    sums = box.all_reduce_rows(rows, spin_limit=8)
    assert all(ms_from_row(sums[r], tp) == list(ms) for r in range(tp))
    for r in range(tp):
        assert bool((box.state(r).mailbox.view(torch.int16) == SENTINEL_BITS).all())
        assert box.state(r).stage_state.tolist() == [1, 0]
    with pytest.raises(RuntimeError, match="did not arrive within the debug spin limit"):
        box.all_reduce_rows({0: rows[0]}, spin_limit=8)  # the other ranks skip the call
    with pytest.raises(ValueError, match=r"needs 129 columns for 43 ranks; rows have 128"):
        m_row(1, 0, 43, HIDDEN, "cpu")
