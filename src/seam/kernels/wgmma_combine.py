"""The Gluon MXFP8 GEMMs' split-K store and fixed-order combine (the decode kernel, ``seam.kernels.mxfp8_wgmma``, and
the ring kernel, ``seam.kernels.mxfp8_wgmma_ring``): each program stores its fp32 sums as BF16 (no split) or as its
partial; the tile's last program to arrive, or its last 2^j programs a row slice each, sum the partials in split order,
so every run gives the same bytes; the fused QKV op's partials-only launch leaves the sum to its epilogue kernel."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from seam.kernels.numerics import to_bf16_rne

#: The split-K combine (:func:`store_tile`) stores partials for the tile's tokens (columns < M) only, and up to
#: this many tokens per program also loads those columns only. H200 (2026-12-04, docs/benchmarks-log.md run 172,
#: ``mxfp8_linear`` on MXFP8 rows, weights past L2, us, every column / stores only / stores and loads): 20
#: tokens (32-row tile) N 6144 x K 2048 9.09 / 8.68 / 8.62, N 2560 x 6144 10.14 / 10.12 / 9.85, N 1536 x 6144
#: 9.03 / 8.96 / 8.60; 40 tokens (64) 10.47 / 10.71 / 10.49, 12.31 / 12.25 / 12.11, 9.55 / 9.37 / 9.21; 65 tokens
#: (a 128-token tile, the ring kernel's at the time) 17.19 / 16.58 / 16.47, 19.22 / 18.72 / 19.18, 13.80 / 13.51 /
#: 14.66 (split 11), where the masked loads lost at 96 tokens too (N 1536: 13.76 / 13.74 / 14.94).
TOKENS_ONLY_MAX_MP = gl.constexpr(64)


@gluon.jit
def store_tile(acc, acc_t, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, m0, M, N, stride_om, BN: gl.constexpr,
               MP: gl.constexpr, TAIL: gl.constexpr, SPLIT_K: gl.constexpr, COMBINE: gl.constexpr,
               PARTIALS: gl.constexpr, COMBINERS: gl.constexpr, num_warps: gl.constexpr):
    """Store a program's fp32 sums, out^T rows n0.. and columns m0.. (``acc`` [BN, MP - TAIL]; with ``TAIL`` > 0
    ``acc_t`` [BN, TAIL] holds the columns after it, else it is unused): as BF16 (no split), as its split-K partial
    ([MP, BN] per program; ``PARTIALS``, every column), or as a partial of the columns < M that the tile's last
    program to arrive combines (``COMBINERS`` 1) or that the last ``COMBINERS`` programs of the tile combine, a
    slice of rows each (:data:`TOKENS_ONLY_MAX_MP`)."""
    # Stores along N (contiguous in out and in the workspace): the MMA layout spreads a column over 8 lanes.
    WR: gl.constexpr = BN // 64  # warps along N: 64 rows each
    EPI: gl.constexpr = gl.BlockedLayout([2, 1], [32, 1], [WR, num_warps // WR], [0, 1])
    MA: gl.constexpr = MP - TAIL
    acc = gl.convert_layout(acc, EPI)
    r_idx = gl.arange(0, BN, layout=gl.SliceLayout(1, EPI))
    m_idx = gl.arange(0, MA, layout=gl.SliceLayout(0, EPI))
    tokens = m0 + m_idx[None, :] < M  # the split-K partials' columns the output keeps (the rest are padding)
    out_mask = (n0 + r_idx[:, None] < N) & tokens
    out_ptrs = out_ptr + (m0 + m_idx[None, :]).to(gl.int64) * stride_om + n0 + r_idx[:, None]
    base = ws_ptr + tile.to(gl.int64) * (SPLIT_K * BN * MP) + m_idx[None, :] * BN + r_idx[:, None]
    if TAIL > 0:  # the same for the tail's columns MA..MP
        acc_t = gl.convert_layout(acc_t, EPI)
        t_idx = MA + gl.arange(0, TAIL, layout=gl.SliceLayout(0, EPI))
        t_tokens = m0 + t_idx[None, :] < M
        t_mask = (n0 + r_idx[:, None] < N) & t_tokens
        t_ptrs = out_ptr + (m0 + t_idx[None, :]).to(gl.int64) * stride_om + n0 + r_idx[:, None]
        t_base = ws_ptr + tile.to(gl.int64) * (SPLIT_K * BN * MP) + t_idx[None, :] * BN + r_idx[:, None]
    if PARTIALS:
        gl.store(base + kid * (BN * MP), acc)
        if TAIL > 0:
            gl.store(t_base + kid * (BN * MP), acc_t)
    elif SPLIT_K == 1:
        gl.store(out_ptrs, to_bf16_rne(acc), mask=out_mask)
        if TAIL > 0:
            gl.store(t_ptrs, to_bf16_rne(acc_t), mask=t_mask)
    elif COMBINERS == 1:
        gl.store(base + kid * (BN * MP), acc, mask=tokens)
        if TAIL > 0:
            gl.store(t_base + kid * (BN * MP), acc_t, mask=t_tokens)
        gl.thread_barrier()  # every thread's partial is issued before the release of the arrival count
        count = gl.atomic_add(counter_ptr + tile, 1, sem="acq_rel")
        if count == SPLIT_K - 1:
            gl.store(counter_ptr + tile, 0)
            total = _sum_partials(base, BN * MP, gl.zeros([BN, MA], gl.float32, EPI), tokens, SPLIT_K, COMBINE,
                                  MP <= TOKENS_ONLY_MAX_MP)
            gl.store(out_ptrs, to_bf16_rne(total), mask=out_mask)
            if TAIL > 0:
                total_t = _sum_partials(t_base, BN * MP, gl.zeros([BN, TAIL], gl.float32, EPI), t_tokens, SPLIT_K,
                                        COMBINE, MP <= TOKENS_ONLY_MAX_MP)
                gl.store(t_ptrs, to_bf16_rne(total_t), mask=t_mask)
    else:
        gl.store(base + kid * (BN * MP), acc, mask=tokens)
        if TAIL > 0:
            gl.store(t_base + kid * (BN * MP), acc_t, mask=t_tokens)
        gl.thread_barrier()  # every thread's partial is issued before the release of the arrival count
        gl.atomic_add(counter_ptr + tile, 1, sem="release")
        # the tile's last programs: the others started before them (launch order) and never wait
        if kid >= SPLIT_K - COMBINERS:
            _combine_rows(out_ptr, ws_ptr, counter_ptr, tile, kid - (SPLIT_K - COMBINERS), n0, m0, M, N, stride_om,
                          BN, MP, TAIL, SPLIT_K, COMBINE, COMBINERS, num_warps)


@gluon.jit
def _combine_rows(out_ptr, ws_ptr, counter_ptr, tile, part, n0, m0, M, N, stride_om, BN: gl.constexpr,
                  MP: gl.constexpr, TAIL: gl.constexpr, SPLIT_K: gl.constexpr, COMBINE: gl.constexpr,
                  COMBINERS: gl.constexpr, num_warps: gl.constexpr):
    """Rows [part * R, part * R + R) of the tile (R = BN / COMBINERS), once every split's partial has arrived:
    their sum in split order, stored as BF16 (the tail's columns, ``TAIL`` > 0, after the first MP - TAIL). The
    counter counts SPLIT_K arrivals, then COMBINERS departures; the last to leave zeroes it for the next launch
    (every combiner has seen the arrivals by then)."""
    R: gl.constexpr = BN // COMBINERS
    TR: gl.constexpr = 32 if R >= 32 else R
    SL: gl.constexpr = gl.BlockedLayout([1, 1], [TR, 32 // TR], [1, num_warps], [0, 1])
    r_idx = part * R + gl.arange(0, R, layout=gl.SliceLayout(1, SL))
    MA: gl.constexpr = MP - TAIL
    m_idx = gl.arange(0, MA, layout=gl.SliceLayout(0, SL))
    base = ws_ptr + tile.to(gl.int64) * (SPLIT_K * BN * MP) + m_idx[None, :] * BN + r_idx[:, None]
    seen = gl.atomic_add(counter_ptr + tile, 0, sem="acquire")
    while seen < SPLIT_K:
        seen = gl.atomic_add(counter_ptr + tile, 0, sem="acquire")
    tokens = m0 + m_idx[None, :] < M
    total = _sum_partials(base, BN * MP, gl.zeros([R, MA], gl.float32, SL), tokens, SPLIT_K, COMBINE,
                          MP <= TOKENS_ONLY_MAX_MP)
    out_ptrs = out_ptr + (m0 + m_idx[None, :]).to(gl.int64) * stride_om + n0 + r_idx[:, None]
    gl.store(out_ptrs, to_bf16_rne(total), mask=(n0 + r_idx[:, None] < N) & tokens)
    if TAIL > 0:  # after the first columns' store (both sums at once spill a 128 + 128-token tile)
        t_idx = MA + gl.arange(0, TAIL, layout=gl.SliceLayout(0, SL))
        t_tokens = m0 + t_idx[None, :] < M
        total_t = _sum_partials(ws_ptr + tile.to(gl.int64) * (SPLIT_K * BN * MP) + t_idx[None, :] * BN + r_idx[:, None],
                                BN * MP, gl.zeros([R, TAIL], gl.float32, SL), t_tokens, SPLIT_K, COMBINE,
                                MP <= TOKENS_ONLY_MAX_MP)
        t_ptrs = out_ptr + (m0 + t_idx[None, :]).to(gl.int64) * stride_om + n0 + r_idx[:, None]
        gl.store(t_ptrs, to_bf16_rne(total_t), mask=(n0 + r_idx[:, None] < N) & t_tokens)
    left = gl.atomic_add(counter_ptr + tile, 1, sem="relaxed")  # after every load of the tile's partials
    if left == SPLIT_K + COMBINERS - 1:
        gl.store(counter_ptr + tile, 0)


@gluon.jit
def _sum_partials(base, stride, total, tokens, SPLIT_K: gl.constexpr, COMBINE: gl.constexpr,
                  TOKENS_ONLY: gl.constexpr):
    """``total`` (+0.0) plus the SPLIT_K partials at ``base + s * stride``, in split order, COMBINE loads in
    flight at a time (combine_group); with ``TOKENS_ONLY`` in the columns ``tokens`` keeps only, else in every
    column (those past M hold stale bytes, summed and never stored). The masked tail adds +0.0, which leaves
    every sum as it is (none is -0.0: it starts at +0.0)."""
    for s0 in range(0, SPLIT_K, COMBINE):
        for j in gl.static_range(COMBINE):
            if TOKENS_ONLY:
                mask = (s0 + j < SPLIT_K) & tokens
            else:
                mask = s0 + j < SPLIT_K
            total += gl.load(base + (s0 + j) * stride, mask=mask, other=0.0,
                             cache_modifier=".cg")  # at L2, where the partials landed
    return total


def check_combiners(combiners: int, split_k: int) -> None:
    """Raise ValueError unless ``combiners`` is a power of two <= min(split_k, 16): with more combiners than
    splits the counter never returns to zero, and a later launch would read partials before they arrive."""
    if combiners < 1 or combiners & (combiners - 1) or combiners > min(split_k, 16):
        raise ValueError(f"combiners must be a power of two <= min(split_k, 16) = {min(split_k, 16)}, got {combiners}")
