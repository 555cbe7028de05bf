"""The decode GEMM's split-K partials summed by a launch of their own (``seam.kernels.split_k_sum``) where
``wgmma_config.wgmma_combines_apart`` says: bytes against the split-order sum on edge partials (the interpreter on
CPU, the GPU too), the rule, and on the GPU ``mxfp8_linear``'s bytes at those tiles against the exact sums and the
decode kernel's own combine."""

from __future__ import annotations

import pytest
import torch

import seam
from seam import runtime
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.kernels import gluon_launch, split_k_sum, wgmma_config
from seam.kernels.gemm_workspace import split_k_scratch
from seam.kernels.mxfp8_gemm_config import pick_tile, pick_wgmma_tile
from seam.kernels.wgmma_config import (COMBINE_APART_MIN_SPLIT, ONE_TOKEN_COMBINE_APART_MIN_SPLIT, wgmma_combiners,
                                       wgmma_combines_apart, wgmma_launch)
from mxfp8_rows import exact_block_inputs, linear_both_paths  # tests/mxfp8_rows.py
from sm90_tool import needs_tool, with_tool  # tests/sm90_tool.py


def _edge_partials(tiles: int, split_k: int, mp: int, device: torch.device) -> torch.Tensor:
    """fp32 partials [tiles, split_k, mp, 128]: random magnitudes across the exponent range, with -0.0, subnormals,
    +-inf, NaN and cancelling pairs placed in some columns."""
    g = torch.Generator().manual_seed(tiles * 100 + split_k)
    p = torch.randn(tiles, split_k, mp, 128, generator=g) * torch.exp2(torch.randint(-30, 30, (tiles, split_k, mp, 128),
                                                                                      generator=g).float())
    p[:, :, :, 0] = -0.0  # every partial -0.0: the sum from +0.0 stays +0.0
    p[:, :, :, 1] = 1e-40  # subnormal sums
    p[:, 0, :, 2] = float("inf")
    p[:, 1, :, 2] = float("-inf")  # inf - inf: NaN
    p[:, 1, :, 3] = float("nan")
    p[:, 0, :, 4], p[:, 1, :, 4] = 3.0e38, 3.0e38  # overflows to +inf in fp32
    p[:, 0, :, 5], p[:, 1, :, 5] = 1.0, -1.0  # cancels to +0.0 (then the rest)
    p[:, :, :, 6] = 1.0 + 2.0**-8  # rounding to BF16 of a sum with more than 8 significant bits
    return p.to(device)


def _split_order_sum(p: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """The spec's combine: per output, +0.0 plus the partials in split order in fp32, rounded once to BF16."""
    total = torch.zeros(p.shape[0], p.shape[2], 128, dtype=torch.float32, device=p.device)
    for s in range(p.shape[1]):
        total = total + p[:, s]
    return total[:, :m].permute(1, 0, 2).reshape(m, -1)[:, :n].to(torch.bfloat16)


def _same_bytes(got: torch.Tensor, want: torch.Tensor) -> bool:
    nan = torch.isnan(want)
    return bool(torch.equal(torch.isnan(got), nan)
                and torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan]))


@pytest.mark.parametrize("m,n,split_k,mp", [(1, 128, 2, 8), (1, 300, 12, 8), (5, 200, 3, 8), (16, 256, 22, 16),
                                            (9, 384, 16, 32)])
def test_sums_in_split_order_bit_for_bit(device, m, n, split_k, mp):
    """Every output (N not a multiple of 128: the last tile's rows past N; M below the tile's rows) against the
    split-order sum, on partials with -0.0, subnormals, infinities, NaN, overflow and cancellation."""
    p = _edge_partials(-(-n // 128), split_k, mp, device)
    buf = torch.full((m + 1, n + 3), float("nan"), dtype=torch.bfloat16, device=device)
    out = buf[:m, :n]  # strided rows
    split_k_sum.launch_split_k_sum(p, out, use_pdl=False)
    want = _split_order_sum(p, m, n)
    assert _same_bytes(out, want)
    # the columns past N (and the row past M) of the buffer are untouched: the store is masked at N
    assert buf[:m, n:].isnan().all() and buf[m].isnan().all()
    assert torch.equal(out[:, 0].view(torch.int16), torch.zeros(m, dtype=torch.int16, device=device))  # +0.0


def test_refuses_partials_that_do_not_cover_out(device):
    p = torch.zeros(2, 4, 8, 128, device=device)
    for bad_out in (torch.empty(9, 256, dtype=torch.bfloat16, device=device),  # M above the tile's rows
                    torch.empty(4, 300, dtype=torch.bfloat16, device=device),  # three N tiles
                    torch.empty(256, 4, dtype=torch.bfloat16, device=device).t()):  # column stride
        with pytest.raises(ValueError, match="do not cover"):
            split_k_sum.launch_split_k_sum(p, bad_out, use_pdl=False)
    strided = torch.zeros(2, 4, 128, 8, device=device).transpose(2, 3)  # the right shape, not contiguous
    with pytest.raises(ValueError, match="do not cover"):
        split_k_sum.launch_split_k_sum(strided, torch.empty(4, 256, dtype=torch.bfloat16, device=device),
                                       use_pdl=False)


def test_combines_apart_rule():
    """The rule (runs 297, 299, 300): 8-row tiles from split 16, 16-64-row tiles from split 10, never for the QKV op's
    partials nor other tiles; the kernel then compiles as the partials-only launch (one combiner)."""
    assert COMBINE_APART_MIN_SPLIT == {8: 16, 16: 10, 32: 10, 64: 10}
    assert wgmma_combines_apart(8, 16) and wgmma_combines_apart(16, 10) and wgmma_combines_apart(64, 24)
    assert not wgmma_combines_apart(8, 12) and not wgmma_combines_apart(32, 9) and not wgmma_combines_apart(128, 24)
    assert not wgmma_combines_apart(16, 22, partials=True)
    assert ONE_TOKEN_COMBINE_APART_MIN_SPLIT == 10  # one token on an 8-row tile
    assert wgmma_combines_apart(8, 10, one_token=True) and not wgmma_combines_apart(8, 9, one_token=True)
    assert not wgmma_combines_apart(8, 12, one_token=True, partials=True)
    assert not wgmma_combines_apart(16, 9, one_token=True)  # the flag moves the 8-row tile's threshold only
    assert wgmma_launch(8, 6144, 12, 2, one_token=True).combine_apart and not wgmma_launch(8, 6144, 12, 2).combine_apart
    rules = wgmma_launch(32, 6144, 22, 2)
    assert rules.combine_apart and rules.combiners == 1  # its own combine would spread over 16 programs
    assert wgmma_launch(32, 6144, 9, 2).combiners == 8 and not wgmma_launch(32, 6144, 9, 2).combine_apart
    assert not wgmma_launch(256, 6144, 24, 2).combine_apart  # the ring kernel's own combine


def test_which_picked_layers_combine_apart():
    """At 132 SMs: gate_up (N 1536 x K 6144, split 22) and N 512-2048 at K 4096-6144 from 2 to 32 tokens on the decode
    kernel, N 2560 x K 6144 through mxfp8_linear (split 12) at one token and from 9 tokens; its 8-row tiles at 2-8
    tokens, o_proj and down (splits 2-12) keep the kernel's own combine, and so do splits below 10; a 64-row tile
    split 16 sums apart, a warp-specialized one never."""
    def apart(m, n, k):  # as launch_gluon asks
        t = pick_wgmma_tile(m, n, k, 132, a_deq=True)
        return t is not None and wgmma_launch(t.block_m, k, t.split_k, t.num_stages, one_token=m == 1).combine_apart
    # one token: N 2560 and 3072 (splits 12 and 10) sum apart; N 4096-6144 (splits 8 to 2) do not
    assert apart(1, 2560, 6144) and apart(1, 3072, 6144) and apart(1, 2560, 4096)
    assert not any(apart(1, n, k) for n, k in ((4096, 6144), (4992, 6144), (6144, 2048), (6144, 768)))
    for m in (2, 8, 16, 32):
        assert apart(m, 1536, 6144) and apart(m, 2048, 4096) and apart(m, 512, 6144)
        assert not any(apart(m, n, k) for n, k in ((4992, 6144), (6144, 2048), (6144, 768)))
        assert apart(m, 2560, 6144) == (m > 8)
    assert apart(64, 1024, 4096)  # a 64-row tile split 16
    ws = wgmma_launch(64, 6144, 12, 2, warp_specialized=True)  # a caller's tile: the picker keeps these to split 6
    assert not ws.combine_apart and ws.combiners == wgmma_combiners(64, 12) > 1  # its own spread combine


@needs_tool
def test_one_token_apart_kernels_compile_for_sm90_without_spills():
    """The decode kernel as launched for one token where it sums apart (the picks at N 2560 / 3072 x K 6144 and N 2560
    x K 4096) compiles for sm_90 without spills in at most 128 registers (two programs per SM), and stores partials
    only: no arrival counter (``atom``) in its PTX, which the same tile launched for two tokens has."""
    picks = sorted({(t.split_k, t.num_stages, k) for n, k in ((2560, 6144), (3072, 6144), (2560, 4096))
                    for t in [pick_wgmma_tile(1, n, k, 132)]})
    assert all(wgmma_launch(8, k, sk, st, one_token=True).combine_apart for sk, st, k in picks)
    results = with_tool(
        f"for sk, st, k in {picks!r}:\n"
        "    for one in (True, False):\n"
        "        r = tool.resources('wgmma', 8, split_k=sk, num_stages=st, k=k, one_token=one, ptx=True)\n"
        "        print(json.dumps([one, r['registers'], r['stack_bytes'], r['ptx'].count('atom.')]))\n")
    assert len(results) == 2 * len(picks)
    for one, registers, stack, atoms in results:
        assert stack == 0 and registers <= 128, (one, registers, stack)
        assert (atoms == 0) == one, (one, atoms)


# GPU: mxfp8_linear's bytes where it combines apart.


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(2, 1536, 6144), (16, 1536, 6144), (32, 1536, 6144), (5, 512, 6144),
                                   (9, 2048, 4096), (24, 200, 4096), (12, 2560, 6144), (40, 1024, 4096),
                                   (1, 2560, 6144), (1, 3000, 4096)])
def test_bit_exact_combined_apart_gpu(monkeypatch, m, n, k):
    """The decode kernel's tile at these shapes (not the 16-row kernel's) combines apart: mxfp8_linear on MXFP8 and
    BF16 rows gives the exact sums' bytes (N 200 and 3000: rows past N; one token: its 8-row tile), two launches;
    the same bytes as the kernel's own combine on random operands, given A_deq too."""
    x, w, want = exact_block_inputs(m, n, k, seed=m + n)
    tile = pick_tile(m, n, k, x.device, mma_rows=False)
    assert tile.wgmma and not tile.ring
    assert wgmma_launch(tile.block_m, k, tile.split_k, tile.num_stages, one_token=m == 1).combine_apart
    sums = []
    monkeypatch.setattr(gluon_launch, "launch_split_k_sum",
                        lambda *a, **kw: (sums.append(1), split_k_sum.launch_split_k_sum(*a, **kw)))
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile
    split_k_scratch(x.device, -(-n // 128), tile)[0].fill_(float("nan"))  # stale partials must never reach out
    got = seam.mxfp8_linear(x, w, tile=tile)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile
    assert len(sums) == 3
    g = torch.Generator().manual_seed(m * n)
    xr = torch.randn(m, k, generator=g).to(torch.bfloat16).to(x.device)
    wr = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16).to(x.device))
    act = seam.QuantizedActivation(*seam.mxfp8_quantize(xr), torch.bfloat16, (m, k))
    act_deq = seam.QuantizedActivation(act.values, act.scales, torch.bfloat16, (m, k),
                                       a_deq=a_deq_from_mxfp8(act.values, act.scales))
    apart = [seam.mxfp8_linear(a, wr, tile=tile).clone() for a in (act, act_deq)]
    monkeypatch.setattr(wgmma_config, "COMBINE_APART_MIN_SPLIT", {})
    monkeypatch.setattr(wgmma_config, "ONE_TOKEN_COMBINE_APART_MIN_SPLIT", 10**9)
    own = [seam.mxfp8_linear(a, wr, tile=tile) for a in (act, act_deq)]
    assert len(sums) == 5
    for got, ref in zip(apart, own):
        assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), tile


@pytest.mark.gpu
def test_combined_apart_back_to_back_and_captured_gpu():
    """Back-to-back calls reuse the split-K workspace (the sum reads it past its PDL wait, the next GEMM writes it
    past its own): each output equals its eager call's, under a CUDA graph too."""
    if not runtime.supports_pdl(torch.device("cuda")):
        pytest.skip("PDL needs sm_90")
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(4)
    m, n, k = 16, 1536, 6144
    ws = [seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16).to(dev))
          for _ in range(3)]
    acts = [seam.QuantizedActivation(*seam.mxfp8_quantize(torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)),
                                     torch.bfloat16, (m, k)) for _ in range(3)]
    tile = pick_tile(m, n, k, dev, mma_rows=False)
    assert wgmma_launch(tile.block_m, k, tile.split_k, tile.num_stages).combine_apart
    want = [seam.mxfp8_linear(a, w, tile=tile).clone() for a, w in zip(acts, ws)]
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in range(3)]
    for a, w, o in zip(acts, ws, outs):
        seam.mxfp8_linear(a, w, out=o, tile=tile)
    torch.cuda.synchronize()
    assert all(torch.equal(o, r) for o, r in zip(outs, want))
    graph = torch.cuda.CUDAGraph()
    for o in outs:
        o.zero_()
    with torch.cuda.graph(graph):
        for a, w, o in zip(acts, ws, outs):
            seam.mxfp8_linear(a, w, out=o, tile=tile)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(o, r) for o, r in zip(outs, want))
