"""The Gluon ring GEMM behind ``seam.mxfp8_linear`` at 129 <= M <= 256 on wide Hopper layers
(``seam.kernels.mxfp8_wgmma_ring``; 65-128 tokens run the decode kernel's streamed tile, ``test_mxfp8_wgmma.py``).

On CPU: the picker, tile validation and that every kernel the picker chooses compiles for sm_90 within
the shared memory budget. On the GPU: bytes against the exact result on operands whose sums are exact in
any order (picked tiles, several M tiles with a tail, uneven splits), and determinism inside a poisoned buffer.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import seam
from seam.kernels import mxfp8_wgmma_ring, wgmma_config
from seam.kernels.gemm_workspace import split_k_scratch
from seam.kernels.mxfp8_gemm_config import (
    BF16_MM_TILE,
    RING_256_MIN_STEPS,
    Tile,
    pick_qkv_tile,
    pick_ring_tile,
    pick_tile,
    pick_wgmma_tile,
)
from seam.kernels.wgmma_config import wgmma_combiners
from mxfp8_rows import exact_block_inputs, linear_both_paths  # tests/mxfp8_rows.py
from sm90_tool import needs_tool, with_tool  # tests/sm90_tool.py
SM90_SHARED_BYTES = 227 * 1024
SHAPES = ((1536, 6144), (6144, 2048), (2560, 6144), (3072, 6144), (4992, 6144), (9856, 6144))


def test_picker_takes_129_to_256_tokens_only():
    assert pick_ring_tile(128, 4992, 6144, 132) is None  # the decode kernel's streamed tile
    assert pick_ring_tile(200, 4992, 1920, 132) is None  # K below the measured range
    assert pick_ring_tile(200, 4992, 6112, 132) is None  # K not a multiple of 128


def test_picker_takes_129_to_256_tokens_where_programs_keep_16_steps():
    """Run 61: 256-token programs beat the prefill path where each runs >= 16 K steps (N 4992 and 9856 at
    K 6144), and lost with 4-8 (N 1536, 2560 at K 6144; N 6144 at K 2048): those keep the prefill path."""
    for m in (129, 200, 256):
        assert pick_ring_tile(m, 4992, 6144, 132) == Tile(256, 128, 128, 8, 2, 3, wgmma=True)
        assert pick_ring_tile(m, 9856, 6144, 132) == Tile(256, 128, 128, 8, 2, 1, wgmma=True)
        for n, k in ((1536, 6144), (2560, 6144), (3072, 6144), (6144, 2048)):
            assert pick_ring_tile(m, n, k, 132) is None, (n, k)
    assert pick_ring_tile(257, 4992, 6144, 132) is None
    for n, k in SHAPES:
        for m in (129, 256):
            t = pick_ring_tile(m, n, k, 132)
            if t is not None:
                tiles, steps = -(-n // 128), k // 128
                assert t.ring and t.num_stages == mxfp8_wgmma_ring.max_stages(256) == 2
                assert tiles * t.split_k <= max(132, tiles) and -(-steps // t.split_k) >= RING_256_MIN_STEPS

def test_default_pick_on_hopper(monkeypatch):
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    monkeypatch.setattr("seam.kernels.mxfp8_gemm_config.bf16_mm_supported", lambda device: True)
    # ahead of the prefill path where the warp-specialized token tiles take more than a wave (pick_token_tiles)
    assert pick_tile(200, 9856, 6144, cuda) == pick_ring_tile(200, 9856, 6144, 132)
    assert pick_tile(200, 2560, 6144, cuda).warp_specialized
    for m in (65, 128):  # the decode kernel's streamed tile, ahead of the ring kernel
        assert pick_tile(m, 2560, 6144, cuda) == pick_wgmma_tile(m, 2560, 6144, 132) and pick_ring_tile(
            m, 2560, 6144, 132) is None
        assert not pick_tile(m, 2560, 6144, cuda, tl_only=True).wgmma
        assert pick_tile(m, 896, 768, cuda) == BF16_MM_TILE  # small K, N below 1024: the prefill path
    for m in (129, 256):  # the fused QKV op runs it into partials, then its epilogue kernel, where pick_tile does
        # (nkv 4: 77 N tiles x 2 token tiles are more than a wave); at nkv 2 the token tiles (log run 207)
        assert pick_qkv_tile(m, 9856, 6144, cuda) == pick_ring_tile(m, 9856, 6144, 132) == pick_tile(m, 9856, 6144, cuda)
        assert not pick_qkv_tile(m, 4992, 6144, cuda).ring and pick_ring_tile(m, 4992, 6144, 132) is not None


def test_ring_tiles_checked(monkeypatch):
    from seam.ops.linear import _check_wgmma_tile

    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    cuda = torch.device("cuda")
    _check_wgmma_tile(Tile(256, 128, 128, 8, 2, 3, wgmma=True), 300, 6144, cuda)  # any M: M tiles
    _check_wgmma_tile(Tile(128, 128, 128, 8, 4, 6, wgmma=True), 128, 6144, cuda)  # the decode kernel's, streamed
    with pytest.raises(ValueError, match="num_stages in \\[2, 2\\]"):  # two 256-token stages fill shared memory
        _check_wgmma_tile(Tile(256, 128, 128, 8, 3, 3, wgmma=True), 300, 6144, cuda)
    with pytest.raises(ValueError, match="num_stages in \\[1, 4\\]"):  # four streamed 128-token stages fit
        _check_wgmma_tile(Tile(128, 128, 128, 8, 5, 6, wgmma=True), 128, 6144, cuda)
    for bm, most in ((72, 6), (80, 5), (96, 5)):  # the 64 + tail tiles' streamed stages
        _check_wgmma_tile(Tile(bm, 128, 128, 8, most, 1, wgmma=True), bm, 6144, cuda)
        with pytest.raises(ValueError, match=f"num_stages in \\[1, {most}\\]"):
            _check_wgmma_tile(Tile(bm, 128, 128, 8, most + 1, 1, wgmma=True), bm, 6144, cuda)
    for tile, m in ((Tile(72, 128, 128, 8, 3, 1, wgmma=True), 80), (Tile(128, 128, 128, 8, 2, 6, wgmma=True), 129)):
        with pytest.raises(ValueError, match=f"128\\) and >= M={m} \\(the decode kernel; any M warp-specialized\\), or "
                                             f"256 \\(the ring kernel\\), or one of \\(136, 144, 160, 192, 256\\) warp-specialized, "
                                             f"got {tile.block_m}"):
            _check_wgmma_tile(tile, m, 6144, cuda)
    with pytest.raises(ValueError, match="num_stages in \\[2, 2\\]"):  # one stage would wait for a refill
        _check_wgmma_tile(Tile(256, 128, 128, 8, 1, 3, wgmma=True), 300, 6144, cuda)  # issued only after it (a hang)


@needs_tool
def test_every_picked_kernel_compiles_for_sm90():
    """Every distinct picked kernel (tokens per program, split and K change the code), BF16 output (weights
    dequantized by BF16 multiplies and through fp32) and the QKV op's partials (fp32): no spills (a split tile's partials are combined a row slice per program, ``wgmma_combiners``:
    the single combiner's [128, 256] fp32 sum kept 152 bytes on the stack at 256 tokens), shared memory within
    the limit."""
    picks = [(pick_ring_tile(m, n, k, 132), k) for n, k in SHAPES for m in (129, 256)]
    runs = sorted({(t.block_m, t.num_stages, t.split_k, k, False, bf16_mul) for t, k in picks if t is not None
                   for bf16_mul in (True, False)})  # BF16 multiplies where the weight allows them, else fp32
    qkv = [pick_ring_tile(m, (19 * nkv + 1) * 128, 6144, 132) for nkv in (1, 2, 4) for m in (129, 256)]
    runs += sorted({(t.block_m, t.num_stages, t.split_k, 6144, True, False) for t in qkv if t is not None})
    assert {r[0] for r in runs} == {256} and len(runs) >= 4
    results = with_tool(
        f"for bm, st, sk, k, partials, bf16_mul in {runs!r}:\n"
        "    r = tool.resources('wgmma', bm, split_k=sk, num_stages=st, k=k, partials=partials, bf16_mul=bf16_mul)\n"
        "    print(json.dumps([bm, sk, k, partials, r]))\n",
        timeout=900,
    )
    assert len(results) == len(runs)
    for bm, sk, k, partials, r in results:
        assert r["stack_bytes"] == 0, (bm, sk, k, partials, r)
        assert r["shared_bytes"] <= SM90_SHARED_BYTES, (bm, sk, k, r)


# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("n", [4992, 9856])
@pytest.mark.parametrize("m", [129, 200, 256])
def test_bit_exact_picked_256_token_tiles_gpu(m, n):
    x, w, want = exact_block_inputs(m, n, 6144, seed=m + n)
    tile = pick_ring_tile(m, n, 6144, 132)  # picked for the fused QKV op (mxfp8_linear: at N 9856)
    assert tile.ring and tile.block_m == 256
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
@pytest.mark.parametrize("m,tile", [
    (300, Tile(256, 128, 128, 8, 2, 1, wgmma=True)),  # two M tiles, the last 44 rows: TMA zero-fills the rest
    (300, Tile(256, 128, 128, 8, 2, 5, wgmma=True)),  # uneven split
    (77, Tile(256, 128, 128, 8, 2, 2, wgmma=True)),  # one M tile, mostly padding
], ids=str)
def test_bit_exact_m_tiles_rings_and_splits_gpu(m, tile):
    x, w, want = exact_block_inputs(m, 640, 6144, seed=m + tile.split_k)
    for got in linear_both_paths(x, w, tile):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile


@pytest.mark.gpu
def test_deterministic_and_in_bounds_gpu():
    """Random sums: two calls give the same bytes, and nothing outside the output is written."""
    m, n, k = 300, 200, 2048
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16).cuda()
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=torch.Generator().manual_seed(6)).cuda())
    tile = Tile(256, 128, 128, 8, 2, 3, wgmma=True)
    pad = 4096
    buf = torch.full((m * n + 2 * pad,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = buf[pad:pad + m * n].view(m, n)
    seam.mxfp8_linear(x, w, out=out, tile=tile)
    again = seam.mxfp8_linear(x, w, tile=dataclasses.replace(tile))
    assert torch.equal(out.view(torch.int16), again.view(torch.int16))
    assert not out.isnan().any() and buf[:pad].isnan().all() and buf[pad + m * n:].isnan().all()
    assert not split_k_scratch(x.device, 4, tile)[1].any()  # the two combiners' counters are back at zero
    tl_out = seam.mxfp8_linear(x, w, tile=pick_tile(m, n, k, x.device, tl_only=True))
    assert ((out.float() - tl_out.float()).abs() <= 2.0**-7 * tl_out.float().abs() + 1e-3).all()


@pytest.mark.gpu
def test_spread_combine_writes_the_one_combiner_bytes_gpu(monkeypatch):
    """Random sums, two M tiles (m0 > 0), N below two tiles: the two combiners of a split-3 tile write the
    bytes one combiner writes (same partials, same order); the counters end at zero."""
    m, n, k = 300, 200, 2048
    g = torch.Generator().manual_seed(7)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).cuda()
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=g).cuda())
    tile = Tile(256, 128, 128, 8, 2, 3, wgmma=True)
    assert wgmma_combiners(tile.block_m, tile.split_k) == 2
    spread = seam.mxfp8_linear(x, w, tile=tile)
    monkeypatch.setattr(wgmma_config, "wgmma_combiners", lambda *args, **kwargs: 1)  # read by wgmma_launch
    one = seam.mxfp8_linear(x, w, tile=tile)
    assert torch.equal(spread.view(torch.int16), one.view(torch.int16))
    assert not split_k_scratch(x.device, 4, tile)[1].any()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(200, 4992, 6144), (256, 9856, 6144), (300, 200, 2048)])
def test_bf16_mul_writes_the_fp32_paths_bytes_gpu(monkeypatch, m, n, k):
    """At the picked tile, BF16-multiply dequantization (what a quantized weight gets) and the fp32 path (forced)
    give the same bytes on random sums, for weights whose scale bytes span 0..134."""
    from seam.kernels import mxfp8_wgmma

    g = torch.Generator().manual_seed(m + n)
    w = torch.randn(n, k // 32, 32, generator=g) * torch.exp2(torch.randint(-140, 13, (n, k // 32, 1), generator=g).float())
    w[0, 0, 0] = 448.0 * 2**7
    weight = seam.MXFP8Weight.from_bf16(w.reshape(n, k).cuda())
    assert int(weight.scales.max()) == 134 and mxfp8_wgmma.bf16_mul_exact(weight.byte_facts())
    x = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16).cuda()
    tile = pick_ring_tile(m, n, k, 132) if m <= 256 else Tile(256, 128, 128, 8, 2, 4, wgmma=True)
    assert tile.ring and (m != 256 or tile == pick_tile(m, n, k, x.device))  # N 9856: picked (token tiles > a wave)
    launched, launch = [], mxfp8_wgmma_ring.launch_mxfp8_linear_wgmma_ring
    monkeypatch.setattr(mxfp8_wgmma_ring, "launch_mxfp8_linear_wgmma_ring",
                        lambda *args, **kw: launched.append(kw["bf16_mul"]) or launch(*args, **kw))
    on = seam.mxfp8_linear(x, weight, tile=tile)
    monkeypatch.setattr(mxfp8_wgmma, "bf16_mul_exact", lambda facts: False)  # read by mxfp8_linear
    off = seam.mxfp8_linear(x, weight, tile=tile)
    assert launched == [True, False]
    assert torch.equal(on.view(torch.int16), off.view(torch.int16))
