"""seam.mxfp8_linear and seam.MXFP8Weight (``docs/spec/mxfp8.md``).

The GEMM's fp32 accumulator must be within fp32 reordering error of
``f32(A_deq) @ f32(W_deq)^T``; the output is that accumulator rounded to BF16, so it
is compared against the BF16 rounding of the reference with a bound of one BF16
rounding plus the reordering error (``K * 2^-24 * sum |a*w|``).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

import seam
from seam.compare import bytes_equal
from seam.formats.mxfp8_weight import ByteFacts
from seam.formats.mxfp8 import mxfp8_quantize_ref, swizzle_scales
from seam.kernels.mxfp8_gemm_config import (
    BF16_MM_TILE,
    GEMV_TILE,
    LARGE_TILE,
    TWO_PER_SM_REGISTERS,
    Tile,
    pick_qkv_tile,
    pick_split_k,
    pick_tile,
    small_tile,
)
from seam.kernels.mxfp8_dequant import launch_mxfp8_dequant
from seam.kernels.mxfp8_gemm import launch_mxfp8_linear
from seam.ops.linear import check_tile
from mxfp8_rows import edge_and_random_rows, exact_block_inputs  # tests/mxfp8_rows.py


def _check_close(out: torch.Tensor, xq, xs, weight: seam.MXFP8Weight) -> None:
    a = seam.mxfp8_dequantize(xq, xs, dtype=torch.float32)
    w = weight.dequantize()
    ref = a @ w.t()
    reorder = a.shape[1] * 2.0**-24 * (a.abs() @ w.abs().t())
    err = (out.float() - ref).abs()
    # one BF16 rounding (half an ulp, 2^-9 relative) + fp32 reordering error (+ its own rounding)
    bound = ref.abs() * 2.0**-8 + 2 * reorder + 1e-30
    assert bool((err <= bound).all()), float((err - bound).max())


def _inputs(m, n, k, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16).to(device)
    return x, seam.MXFP8Weight.from_bf16(w)


def test_weight_from_bf16_matches_reference_quantizer():
    w = torch.randn(160, 96).to(torch.bfloat16)
    wt = seam.MXFP8Weight.from_bf16(w)
    v, s = mxfp8_quantize_ref(w)
    assert torch.equal(wt.values.view(torch.uint8), v.view(torch.uint8)) and torch.equal(wt.scales, s)
    assert wt.shape == (160, 96)
    assert torch.equal(wt.dequantize(), seam.mxfp8_dequantize(v, s, dtype=torch.float32))


def test_weight_record_rejects_bad_parts():
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 64))
    with pytest.raises(TypeError, match="values must have dtype torch.float8_e4m3fn or torch.uint8"):
        seam.MXFP8Weight(w.values.view(torch.int8), w.scales)
    raw = seam.MXFP8Weight(w.values.view(torch.uint8), w.scales)  # a checkpoint's raw bytes: the same record
    assert raw.values.dtype == torch.float8_e4m3fn and torch.equal(raw.dequantize(), w.dequantize())
    with pytest.raises(ValueError, match="scales"):
        seam.MXFP8Weight(w.values, w.scales[:-1])
    with pytest.raises(TypeError, match="scales must have dtype torch.uint8"):
        seam.MXFP8Weight(w.values, w.scales.view(torch.int8))
    with pytest.raises(TypeError, match="scales must be a torch.Tensor"):
        seam.MXFP8Weight(w.values, None)
    with pytest.raises(ValueError, match=r"values must be float8_e4m3fn \[N, K\]"):
        seam.MXFP8Weight(w.values[None], w.scales)
    with pytest.raises(ValueError, match="contiguous"):
        seam.MXFP8Weight(w.values.t(), w.scales)
    with pytest.raises(ValueError, match="2-D"):
        seam.MXFP8Weight.from_bf16(torch.randn(4))
    for bad in (torch.zeros(4, 64, dtype=torch.int32), torch.zeros(4, 64, dtype=torch.float64)):
        with pytest.raises(TypeError, match="w must have dtype"):
            seam.MXFP8Weight.from_bf16(bad)
    with pytest.raises(TypeError, match="w must be a torch.Tensor"):
        seam.MXFP8Weight.from_bf16([[1.0] * 32])
    if hasattr(torch, "float8_e8m0fnu"):  # torch's UE8M0 dtype: the same bytes, kept as uint8
        e8 = seam.MXFP8Weight(w.values, w.scales.view(torch.float8_e8m0fnu))
        assert e8.scales.dtype == torch.uint8 and torch.equal(e8.scales, w.scales)


def test_weight_record_measures_its_byte_facts(monkeypatch):
    """byte_facts: the largest scale byte and whether a NaN code is present, measured at construction; None once
    values or scales are written in place, and for a record of fake tensors or built while torch.compile traces."""
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 64) * 2.0**20)
    facts = w.byte_facts()
    assert facts == ByteFacts(max_scale=int(w.scales.max()), nan_codes=False) and facts.max_scale > 134
    values = w.values.view(torch.uint8).clone()
    values[5, 7] = 0xFF  # -NaN
    assert seam.MXFP8Weight(values, w.scales).byte_facts().nan_codes
    values[5, 7] = 0x7E  # 448: finite
    assert not seam.MXFP8Weight(values, w.scales).byte_facts().nan_codes
    w.values.view(torch.uint8)[0, 0] = 0x7F  # in place, through a view: the facts no longer hold
    assert w.byte_facts() is None
    assert seam.MXFP8Weight(w.values, w.scales).byte_facts().nan_codes  # a new record measures again
    w2 = seam.MXFP8Weight.from_bf16(torch.randn(128, 64))
    w2.scales.add_(0)  # any in-place write counts
    assert w2.byte_facts() is None
    w3 = seam.MXFP8Weight.from_bf16(torch.randn(128, 64))
    w3.values.data = values.view(torch.float8_e4m3fn)  # other storage, same version counter
    assert w3.byte_facts() is None
    with torch._subclasses.fake_tensor.FakeTensorMode():  # no bytes to read (and no host sync to make)
        fake = seam.MXFP8Weight(torch.empty(128, 64, dtype=torch.uint8), torch.empty(w.scales.shape, dtype=torch.uint8))
        assert fake.byte_facts() is None
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert seam.MXFP8Weight.from_bf16(torch.randn(128, 64)).byte_facts() is None


def test_seam_debug_refuses_a_weight_written_behind_its_version_counters(device, monkeypatch):
    """A write through .data moves no version counter, so the record keeps facts of the old bytes; with SEAM_DEBUG
    mxfp8_linear measures them again and raises before any launch; a new record of the same tensors is fine."""
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 64).to(device))
    x = torch.randn(3, 64).bfloat16().to(device)
    w.values.data.view(torch.uint8)[2, 3] = 0x7F  # a NaN code, unseen by the version counters
    assert w.byte_facts() == ByteFacts(int(w.scales.max()), nan_codes=False)  # stale
    seam.mxfp8_linear(x, w)  # not checked by default
    monkeypatch.setenv("SEAM_DEBUG", "1")
    out = torch.full((3, 128), 7.0, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="weight's bytes changed since its MXFP8Weight was built"):
        seam.mxfp8_linear(x, w, out=out)
    assert (out == 7.0).all()
    got = seam.mxfp8_linear(x, seam.MXFP8Weight(w.values, w.scales))
    assert got[:, 2].isnan().all()


@pytest.mark.parametrize("m,n,k", [(1, 256, 256), (5, 200, 128), (17, 128, 96), (33, 384, 256)])
def test_linear_bf16_input_within_reordering_error(m, n, k, device):
    x, w = _inputs(m, n, k, seed=m, device=device)
    out = seam.mxfp8_linear(x, w)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    xq, xs = seam.mxfp8_quantize(x)
    _check_close(out, xq, xs, w)


def test_linear_quantized_activation_and_out_buffer(device):
    x, w = _inputs(9, 256, 256, seed=4, device=device)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (9, 256))
    out = torch.full((9, 256), 7.0, dtype=torch.bfloat16, device=device)
    got = seam.mxfp8_linear(act, w, out=out)
    assert got is out
    assert torch.equal(out, seam.mxfp8_linear(x, w))
    _check_close(out, xq, xs, w)


def test_linear_large_tile_matches_small_tile(device):
    x, w = _inputs(3, 128, 128, seed=5, device=device)
    small = seam.mxfp8_linear(x, w, tile=small_tile(3))
    large = seam.mxfp8_linear(x, w, tile=LARGE_TILE)
    xq, xs = seam.mxfp8_quantize(x)
    _check_close(small, xq, xs, w)
    _check_close(large, xq, xs, w)


def _integer_inputs(m, n, k, seed, device):
    """Small-integer x and w: every partial sum is an exact fp32 integer, so any tile must give identical bytes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (m, k), generator=g).to(torch.bfloat16).to(device)
    w = torch.randint(-4, 5, (n, k), generator=g).to(torch.bfloat16).to(device)
    return x, seam.MXFP8Weight.from_bf16(w), (x.double() @ w.double().t()).to(torch.bfloat16)


@pytest.mark.parametrize("tile", [
    small_tile(1), Tile(32, 128, 64, 8, 4), Tile(64, 128, 64, 8, 4), LARGE_TILE,
    Tile(16, 128, 64, 4, 1),  # unpipelined K loop
    Tile(16, 128, 64, 8, 4, split_k=2), Tile(32, 128, 32, 8, 4, split_k=4),
    GEMV_TILE, dataclasses.replace(GEMV_TILE, split_k=2), Tile(1, 32, 64, 4, 1),
    Tile(32, 128, 64, 8, 3, split_k=2, max_registers=64),  # a register cap that makes ptxas spill
    Tile(32, 128, 64, 8, 3, split_k=2, f16_operands=True),
], ids=str)
@pytest.mark.parametrize("quantize", ["separate", "in_gemm"])
def test_linear_bit_exact_on_exact_accumulator(tile, quantize, device):
    x, w, want = _integer_inputs(5 if tile.block_m == 1 else 37, 256, 256, seed=62, device=device)
    got = seam.mxfp8_linear(x, w, tile=tile, quantize=quantize)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 20, 64, 192, 200, 2048])
def test_linear_bit_exact_every_picked_tile_gpu(m):
    x, w, want = _integer_inputs(m, 2560, 6144, seed=m, device="cuda")
    tiles = {pick_tile(m, 2560, 6144, x.device), dataclasses.replace(small_tile(m), split_k=1), LARGE_TILE}
    for tile in sorted(tiles, key=str):  # a fixed order (max_registers may be None or an int)
        for quantize in ("separate", "in_gemm"):
            got = seam.mxfp8_linear(x, w, tile=tile, quantize=quantize)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (tile, quantize)


def _f16_same_bytes(act, weight, tile: Tile) -> torch.Tensor:
    """``tile`` with F16 operands gives the bytes of ``tile`` with BF16 operands; returns that output."""
    got = seam.mxfp8_linear(act, weight, tile=dataclasses.replace(tile, f16_operands=True))
    want = seam.mxfp8_linear(act, weight, tile=dataclasses.replace(tile, f16_operands=False))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), tile
    return got


@pytest.mark.parametrize("tile", [
    Tile(16, 128, 64, 8, 3, f16_operands=True), Tile(32, 128, 32, 8, 4, split_k=2, f16_operands=True),
    Tile(64, 128, 64, 8, 3, f16_operands=True, max_registers=128),
], ids=str)
def test_f16_operands_same_bytes_as_bf16_operands(tile, device):
    # tiles whose scales fit F16's window take the F16 loop, the others (the edge rows of the
    # first tile, a weight row with blocks far apart) the BF16 loop: the bytes equal BF16 operands'
    x = edge_and_random_rows(70, 256, seed=71).to(device)
    g = torch.Generator().manual_seed(72)
    w = torch.randn(200, 256, generator=g) * 0.05
    w[150, :32] *= 2.0**40  # this weight row's tile falls back too
    weight = seam.MXFP8Weight.from_bf16(w.to(torch.bfloat16).to(device))
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, tuple(x.shape))
    got = _f16_same_bytes(act, weight, tile)
    _check_close(got[7:], *seam.mxfp8_quantize(x[7:]), weight)  # the edge rows overflow the reference's bound


def test_f16_operands_k_past_the_last_block(device):
    # K 288 on 256-wide steps: the second step is mostly past K; the F16 loop must still give the same bytes
    x, w = _inputs(20, 130, 288, seed=76, device=device)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (20, 288))
    _check_close(_f16_same_bytes(act, w, Tile(16, 128, 256, 4, 1)), xq, xs, w)


def _e4m3(v: float) -> int:
    return int(torch.tensor(v).to(torch.float8_e4m3fn).view(torch.uint8))


@pytest.mark.parametrize("a_codes,a_scale,w_codes,w_scale", [
    ((2.0,), 254, (1.0,), 100),  # the BF16 loop's dequantization overflows: inf
    ((448.0,), 247, (1.0,), 60),
    ((2.0**-9,), 0, (1.0,), 247),  # ... or rounds below BF16's 2^-133
    ((3 * 2.0**-9,), 2, (1.0,), 240),
    ((1.0, 1.0), 246, (-1.0, 0.75), 136),  # a product overflows fp32 (2^119 * -2^9), the exact sum does not
], ids=["scale 254", "scale 247", "scale 0", "scale 2", "product overflow"])
def test_f16_operands_same_bytes_at_extreme_scales(a_codes, a_scale, w_codes, w_scale, device):
    # scale bytes where the BF16 loop is not exact, or its sums not normal: F16 operands could be
    # "better" there, so those programs must take the BF16 loop to give the same bytes
    def operand(rows, codes, scale):
        v = torch.zeros(rows, 32, dtype=torch.uint8)
        v[:, : len(codes)] = torch.tensor([_e4m3(c) for c in codes], dtype=torch.uint8)
        return v.view(torch.float8_e4m3fn).to(device), swizzle_scales(torch.full((rows, 1), scale, dtype=torch.uint8)).to(device)

    act = seam.QuantizedActivation(*operand(16, a_codes, a_scale), torch.bfloat16, (16, 32))
    weight = seam.MXFP8Weight(*operand(128, w_codes, w_scale))
    _f16_same_bytes(act, weight, Tile(16, 128, 32, 4, 1))


def test_f16_operands_rows_of_inf(device):
    # an inf in every block quantizes to +448 at scale 254: NaN/inf out, as with BF16 operands
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(77))
    x[0, ::32] = float("inf")
    x[1, ::32] = float("-inf")
    x[1, 64::32] = float("inf")
    w = seam.MXFP8Weight.from_bf16((torch.randn(128, 128) * 1e-3).to(torch.bfloat16).to(device))
    xq, xs = seam.mxfp8_quantize(x.to(torch.bfloat16).to(device))
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (16, 128))
    got = _f16_same_bytes(act, w, Tile(16, 128, 64, 4, 1))
    assert not got[:2].isfinite().any()


@pytest.mark.parametrize("below", [15, 16])  # the last binade F16 holds, and one past it
@pytest.mark.parametrize("side", ["activation", "weight"])
def test_f16_operands_exact_at_the_window_edge(below, side, device):
    # One row: 448 at column 0 (scale S), the smallest E4M3 code 2^-9 at column 32 (scale
    # S - 7 - below). The F16 loop writes the row as e4m3 * 2^(s - (S - 7)), so the small code
    # becomes 2^(-9 - below): exact in F16 down to 2^-24; past that the kernel must take the
    # BF16 loop, or it would round to 0. The other operand picks each column out with 1.0.
    big_s = 140
    row = torch.zeros(1, 64, dtype=torch.uint8)
    row[0, 0], row[0, 32] = 0x7E, 0x01
    row_scales = torch.tensor([[big_s, big_s - 7 - below]], dtype=torch.uint8)
    probe = torch.zeros(2, 64, dtype=torch.uint8)
    probe[0, 32], probe[1, 0] = 0x38, 0x38
    probe_scales = torch.full((2, 2), 127, dtype=torch.uint8)
    (xc, xsc), (wc, wsc) = ((row, row_scales), (probe, probe_scales))[:: 1 if side == "activation" else -1]
    act = seam.QuantizedActivation(xc.view(torch.float8_e4m3fn).to(device), swizzle_scales(xsc).to(device),
                                   torch.bfloat16, tuple(xc.shape))
    weight = seam.MXFP8Weight(wc.view(torch.float8_e4m3fn).to(device), swizzle_scales(wsc).to(device))
    got = seam.mxfp8_linear(act, weight, tile=Tile(16, 128, 64, 8, 3, f16_operands=True)).float().cpu()
    tiny, big = 2.0 ** (-9 + big_s - 7 - below - 127), 448.0 * 2.0 ** (big_s - 127)
    want = torch.tensor([[tiny, big]]) if side == "activation" else torch.tensor([[tiny], [big]])
    assert torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [8, 64, 513, 2048])
def test_f16_operands_same_bytes_gpu(m):
    x, w = _inputs(m, 2560, 6144, seed=m, device="cuda")
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, 6144))
    tl_pick = pick_tile(m, 2560, 6144, x.device, tl_only=True)
    for tile in (small_tile(m), dataclasses.replace(tl_pick, max_registers=128)):
        _f16_same_bytes(act, w, tile)


def test_linear_edge_values(device):
    k = 128
    x = torch.zeros(4, k, dtype=torch.bfloat16)
    x[1] = 1e-38  # tiny block: scale byte 0 -> zeros
    x[2, 0] = 1000.0  # one dominating element, the rest below E4M3 range
    x[2, 1:] = 1e-6
    x[3] = -0.0
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, k).to(device))
    out = seam.mxfp8_linear(x.to(device), w)
    xq, xs = seam.mxfp8_quantize(x.to(device))
    _check_close(out, xq, xs, w)
    assert out[0].eq(0).all() and out[3].eq(0).all()


@pytest.mark.parametrize("tile", [small_tile(16), Tile(32, 128, 64, 8, 4, split_k=2), GEMV_TILE], ids=str)
def test_bf16_subnormal_rows_stay_exact_on_bf16_operand_tiles(tile, device):
    """The docs' exactness rule for tiles that multiply BF16 operands: quantized BF16 rows give only multiples of
    2^-133 (BF16's smallest step), so BF16 subnormal rows (scale bytes down to 0) come out of the dequantization
    unrounded; a sum of exact products in any order, so bytes equal the reference."""
    g = torch.Generator().manual_seed(64)
    k = 256
    # rows of k * 2^-133 with k < 2^7 (BF16 subnormals), one row mixed with normals, weights j * 2^110
    x = torch.randint(-127, 128, (5, k), generator=g).double() * 2.0**-133
    x[4, ::7] = torch.randint(-4, 5, (x[4, ::7].numel(),), generator=g).double() * 2.0**-120
    w_bf16 = torch.randint(-8, 9, (128, k), generator=g).double() * 2.0**110
    xq, xs = seam.mxfp8_quantize(x.to(torch.bfloat16).to(device))
    a = seam.mxfp8_dequantize(xq, xs, dtype=torch.float32)
    steps = a.double() * 2.0**133
    assert torch.equal(a, a.to(torch.bfloat16).float()) and bool(steps.eq(steps.round()).all())
    w = seam.MXFP8Weight.from_bf16(w_bf16.to(torch.bfloat16).to(device))
    b = seam.mxfp8_dequantize(w.values, w.scales, dtype=torch.float32)
    want = (a.double() @ b.double().t()).to(torch.bfloat16)  # every product and sum exact in fp32 here
    got = seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (5, k)), w, tile=tile)
    assert bool(a.ne(0).any()) and torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_tile_choice_by_waves():
    cpu = torch.device("cpu")
    assert pick_tile(1, 2560, 6144, cpu) == GEMV_TILE  # one token: the CUDA-core GEMV mainloop
    assert pick_tile(2, 2560, 6144, cpu).block_m == 16
    assert pick_tile(2048, 2560, 6144, cpu).block_m == 128
    # split K fills one wave: 20 head tiles x 6 splits <= 132 SMs (8 would need a second wave)
    assert pick_split_k(20, 96, 132) == 6
    assert pick_split_k(39, 96, 132) == 3
    assert pick_split_k(320, 96, 132) == 1
    assert pick_split_k(1, 4, 132) == 2  # at least two BLOCK_K steps per split
    assert pick_split_k(20, 96, 132, waves=2) == 12
    sm90 = torch.device("cuda")  # the tl kernel's rules (the Gluon decode kernel's: tests/test_mxfp8_wgmma.py)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("seam.runtime.num_sms", lambda device: 132)
        assert pick_tile(12, 2560, 6144, sm90, tl_only=True).split_k == 12  # 16-row decode tile: two waves
        # GEMV: two waves
        assert pick_tile(1, 2560, 6144, sm90, tl_only=True) == dataclasses.replace(GEMV_TILE, split_k=12)
        # M 33..64: two 32-row tiles per head, split over two waves (2 x 20 tiles x 6 <= 264)
        assert pick_tile(64, 2560, 6144, sm90, tl_only=True) == dataclasses.replace(small_tile(64), split_k=6)
        assert small_tile(64).block_m == 32
        big = pick_tile(256, 2560, 6144, sm90, tl_only=True)  # 64-row tiles, one wave: 4 x 20 tiles, no split
        assert (big.block_m, big.split_k) == (64, 1)
        assert big.max_registers == TWO_PER_SM_REGISTERS  # 64-row tiles split <= 2 ways take the register budget
        two = pick_tile(192, 2560, 6144, sm90, tl_only=True)  # 3 x 20 tiles: split 2
        assert (two.block_m, two.split_k, two.max_registers) == (64, 2, TWO_PER_SM_REGISTERS)
        assert pick_tile(128, 2560, 6144, sm90, tl_only=True).max_registers is None  # split 3: ptxas's own choice
        assert all(pick_tile(m, 2560, 6144, sm90, tl_only=True).max_registers is None for m in (1, 8, 64, 4096))
        assert pick_tile(256, 4992, 6144, sm90, tl_only=True) == LARGE_TILE  # 4 x 39 small tiles would need two waves
    assert pick_tile(1, 2560, 6144, torch.device("cpu")).split_k == 1  # the interpreter has 1 "SM"


# The prefill path (BF16_MM_TILE): both operands dequantized to BF16, one fp32-output GEMM (torch.mm).


@pytest.mark.parametrize("m,n,k", [(5, 200, 96), (130, 136, 256), (7, 136, 2048)])  # 2048: A_deq's K order
@pytest.mark.parametrize("quantize", ["separate", "in_gemm", "activation"])
def test_prefill_path_bit_exact_on_exact_accumulator(m, n, k, quantize, device):
    x, w, want = exact_block_inputs(m, n, k, seed=m, device=device)
    if quantize == "activation":
        xq, xs = seam.mxfp8_quantize(x)
        got = seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k)), w, tile=BF16_MM_TILE)
    else:
        got = seam.mxfp8_linear(x, w, tile=BF16_MM_TILE, quantize=quantize)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("m,n,k", [(5, 136, 2048), (130, 8, 2176), (5, 136, 1920)])
def test_prefill_path_reads_a_given_a_deq_from_k_2048(m, n, k, device):
    """Given the activations' A_deq (seam.formats.a_deq), the prefill path at K >= 2048 (PERMUTED_MIN_K)
    multiplies it as is, with the weight dequantized in A_deq's K order, and writes the bytes it writes without it on
    inexact sums: its operands are in that order either way; it does not read the MXFP8 rows then (E4M3 NaN bytes in
    their place change nothing). Below 2048 it ignores A_deq (a zeroed one changes nothing)."""
    from seam.formats.a_deq import a_deq_from_mxfp8
    from seam.kernels.mxfp8_dequant import PERMUTED_MIN_K

    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g).bfloat16().to(device)
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * 0.05).bfloat16().to(device))
    xq, xs = seam.mxfp8_quantize(x)
    plain = seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k)), w, tile=BF16_MM_TILE)
    assert not plain.isnan().any()
    if k >= PERMUTED_MIN_K:
        nan_rows = torch.full_like(xq.view(torch.uint8), 0x7F).view(xq.dtype)
        given = seam.QuantizedActivation(nan_rows, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
    else:
        given = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=torch.zeros(m, k).bfloat16().to(device))
    got = seam.mxfp8_linear(given, w, tile=BF16_MM_TILE)
    assert torch.equal(got.view(torch.int16), plain.view(torch.int16))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning", "ignore:overflow encountered:RuntimeWarning")
def test_prefill_path_edge_rows_match_the_tl_kernel(device):
    m, n, k = 12, 256, 256
    x = edge_and_random_rows(m, k, seed=8).to(device)
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=torch.Generator().manual_seed(9)) * 0.05).to(device))
    got = seam.mxfp8_linear(x, w, tile=BF16_MM_TILE)
    tl_out = seam.mxfp8_linear(x, w, tile=small_tile(m))
    nan = got.isnan()
    assert torch.equal(nan, tl_out.isnan()) and torch.equal(got.isinf(), tl_out.isinf())
    assert nan.any() and torch.equal(got.view(torch.int16)[nan], tl_out.view(torch.int16)[nan])  # the same NaN bits
    assert got[0].eq(0).all() and got[6].eq(0).all()
    _check_close(got[7:], *seam.mxfp8_quantize(x[7:]), w)  # the edge rows overflow the reference's bound


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning", "ignore:overflow encountered:RuntimeWarning")
def test_dequantize_kernel_every_code_and_scale(device):
    # every E4M3 byte in every 32-block position, under scale bytes from the subnormal 0 to NaN (255)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(2)  # [512]
    scales = torch.tensor([0, 1, 2, 3, 60, 127, 133, 200, 246, 247, 254, 255], dtype=torch.uint8)
    values = codes.repeat(scales.numel(), 1)  # [12, 512]: one scale per row
    row_scales = scales[:, None].expand(-1, 512 // 32).contiguous()
    out = torch.empty(values.shape, dtype=torch.bfloat16, device=device)
    launch_mxfp8_dequant(values.to(device), swizzle_scales(row_scales).to(device), out)
    scale = torch.where(scales == 255, float("nan"), torch.pow(2.0, scales.double() - 127))  # spec: 255 is NaN
    want = (values.view(torch.float8_e4m3fn).double() * scale[:, None]).float().to(torch.bfloat16)
    got = out.cpu()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
    assert got.isnan().any() and got.isinf().any()  # codes 0x7F / 0xFF, scale 255; 448 * 2^127 overflows


def _e4m3_operand(rows: int, k: int, gen: torch.Generator, row_stride: int | None = None):
    """Random E4M3 bytes [rows, k] (row stride ``row_stride``) and swizzled scale bytes near 2^0."""
    values = torch.randint(0, 256, (rows, row_stride or k), generator=gen, dtype=torch.uint8)[:, :k]
    return values, swizzle_scales(torch.randint(100, 150, (rows, k // 32), generator=gen, dtype=torch.uint8))


@pytest.mark.parametrize("r, r_w, k, stride_a, stride_w", [
    (70, 131, 96, None, None), (0, 131, 96, None, None), (70, 0, 96, None, None), (1, 5, 32, None, None),
    (3, 300, 544, None, None), (257, 1, 32, None, None), (5, 9, 544, 576, 1088), (17, 33, 1056, None, 1088)])
def test_dequantize_kernel_two_operands_in_one_launch(r, r_w, k, stride_a, stride_w, device):
    """The prefill path's one launch for the activations (R rows) and the weight (R_W rows): each output as
    its own launch writes it, either operand empty, row counts not multiples of a program's rows, K a
    multiple of 32 but not of a program's 512 columns, padded row strides; no byte past either output's
    rows touched."""
    gen = torch.Generator().manual_seed(r * 1000 + r_w + k)
    a_v, a_s = (t.to(device) for t in _e4m3_operand(r, k, gen, stride_a))
    w_v, w_s = (t.to(device) for t in _e4m3_operand(r_w, k, gen, stride_w))
    a_one, w_one = (torch.empty(rows, k, dtype=torch.bfloat16, device=device) for rows in (r, r_w))
    launch_mxfp8_dequant(a_v, a_s, a_one)
    launch_mxfp8_dequant(w_v, w_s, w_one)
    a_buf, w_buf = (torch.full((rows + 1, k), 7.0, dtype=torch.bfloat16, device=device) for rows in (r, r_w))
    launch_mxfp8_dequant(a_v, a_s, a_buf[:r], (w_v, w_s, w_buf[:r_w]))
    for got, want in ((a_buf[:r], a_one), (w_buf[:r_w], w_one)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert a_buf[r].eq(7).all() and w_buf[r_w].eq(7).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning", "ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("r, r_w, k, stride", [(70, 0, 96, None), (5, 9, 544, 576), (130, 33, 64, None)])
def test_dequantize_kernel_quantizes_bf16_activations_in_the_same_launch(r, r_w, k, stride, device):
    """BF16 activations (scales None) give the bytes of seam.mxfp8_quantize then the dequantization launch,
    with a weight beside them or not: edge elements (NaN, +-inf, -0.0, subnormals, one dominating element,
    values past E4M3's range after scaling) included, padded row strides."""
    gen = torch.Generator().manual_seed(r + k)
    x = (torch.randn(r, stride or k, generator=gen) * torch.exp2(torch.randint(-30, 30, (r, 1), generator=gen)))
    x = x.to(torch.bfloat16)[:, :k]
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    x[1, 0], x[1, 1:32] = 3e38, 1e-40
    x[2, 32:64] = 0.0
    x = x.to(device)
    xq, xs = seam.mxfp8_quantize(x)
    want = torch.empty(r, k, dtype=torch.bfloat16, device=device)
    launch_mxfp8_dequant(xq, xs, want)
    w_v, w_s = (t.to(device) for t in _e4m3_operand(r_w, k, gen))
    w_one = torch.empty(r_w, k, dtype=torch.bfloat16, device=device)
    launch_mxfp8_dequant(w_v, w_s, w_one)
    got = torch.full((r + 1, k), 7.0, dtype=torch.bfloat16, device=device)
    w_got = torch.empty(r_w, k, dtype=torch.bfloat16, device=device)
    launch_mxfp8_dequant(x, None, got[:r], (w_v, w_s, w_got) if r_w else ())
    assert torch.equal(got[:r].view(torch.int16), want.view(torch.int16))
    assert got[r].eq(7).all() and (not r_w or torch.equal(w_got.view(torch.int16), w_one.view(torch.int16)))


@pytest.mark.parametrize("hopper", [False, True], ids=["cuda", "hopper"])
def test_prefill_path_picked_from_65_tokens_on_cuda(monkeypatch, hopper):
    """From 65 tokens on a CUDA GPU, where no Gluon kernel takes the shape (on Hopper the decode kernel takes
    65-128 tokens at K >= 2048, and below it from K 256 over two 64-token tiles from N 1024 where they fit a wave (at K
    512-768 on wider N its streamed tile: ws_short_k), its token tiles 129-384 where they fit a wave and 385-2048 where
    pick_prefill_token_tiles takes them, and the ring kernel some shapes up to 256): the prefill path (runs 156-157:
    faster than the tl kernel at all 30 points of ten shapes at 65-128 tokens). Below 65 tokens and under the
    interpreter it is never picked."""
    assert not pick_tile(4096, 2560, 6144, torch.device("cpu")).bf16_mm  # the interpreter keeps the tl kernel
    monkeypatch.setattr("seam.kernels.mxfp8_gemm_config.bf16_mm_supported", lambda device: device.type == "cuda")
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: hopper)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    prefill = [(65, 9856, 1024), (128, 896, 768), (96, 256, 256), (100, 6144, 800), (385, 1536, 6144),
               (384, 6144, 2048), (2048, 6144, 768), (2048, 2560, 6144), (8192, 1536, 6144)]
    for m, n, k in prefill + ([] if hopper else [(65, 2560, 6144), (128, 1536, 6144), (129, 2560, 6144)]):
        assert pick_tile(m, n, k, cuda) == BF16_MM_TILE, (m, n, k)
        assert not pick_tile(m, n, k, cuda, tl_only=True).bf16_mm
        assert pick_qkv_tile(m, n, k, cuda) == BF16_MM_TILE  # the QKV op: this GEMM, then its epilogue kernel
        assert not pick_qkv_tile(m, n, k, cuda, tl_only=True).bf16_mm
    for m, n, k in [(64, 6144, 768), (64, 256, 800)] + ([(65, 2560, 6144), (128, 1536, 6144), (65, 6144, 768),
                                                        (65, 3072, 768), (128, 6144, 1024)] if hopper else []):
        assert not pick_tile(m, n, k, cuda).bf16_mm, (m, n, k)
    if hopper:  # the token tiles, ahead of this path (the fused QKV op's the same)
        assert pick_tile(129, 2560, 6144, cuda).warp_specialized
        assert pick_qkv_tile(129, 2560, 6144, cuda) == pick_tile(129, 2560, 6144, cuda)


def test_no_weight_rows_pick_no_gluon_tile(monkeypatch):
    """N = 0: on Hopper every Gluon picker divides the SMs by the N tiles (ZeroDivisionError at 2-2048 tokens);
    pick_tile takes no Gluon tile there and mxfp8_linear returns its empty [M, 0] output, as it does elsewhere."""
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    for m in (1, 8, 64, 100, 129, 300, 500, 2048, 4096):
        assert not pick_tile(m, 0, 2048, cuda).wgmma, m
        assert not pick_tile(m, 0, 2048, cuda, a_deq=True).wgmma, m
    w = seam.MXFP8Weight.from_bf16(torch.zeros(0, 2048, dtype=torch.bfloat16))
    for m in (8, 129, 500):  # the decode kernel's, the token tiles', the prefill token tiles' M
        x = torch.randn(m, 2048, dtype=torch.bfloat16)
        y = seam.mxfp8_linear(x, w)
        assert y.shape == (m, 0) and y.dtype == torch.bfloat16


def test_a_tile_traced_at_fewer_tokens_is_picked_again(device, monkeypatch):
    """A tile picked while tracing is recorded for the traced M; an engine that skips Dynamo's guards (vLLM)
    replays it at other M. The plain decode kernel's tile runs block_m tokens only, so the launch picks again
    where the tile does not cover M (mxfp8_gemm_config.covers); every other tile runs any M as it is. The decode
    launcher itself refuses M above block_m (its rows past it would be left unwritten)."""
    from seam.kernels import mxfp8_gemm, mxfp8_wgmma
    from seam.kernels.mxfp8_gemm_config import covers

    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    ran = []
    monkeypatch.setattr(mxfp8_gemm, "launch_gluon", lambda xq, xs, wq, ws, out, tile, *a, **kw: ran.append(tile) or out)
    n, k = 256, 256
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k).bfloat16().to(device))
    decode8 = Tile(8, 128, 128, 8, 2, 1, wgmma=True)
    ring, ws = Tile(256, 128, 128, 8, 2, 1, wgmma=True), Tile(128, 128, 128, 8, 4, 1, wgmma=True, warp_specialized=True)
    for m, tile, runs in ((8, decode8, decode8), (40, ring, ring), (300, ws, ws), (40, decode8, None)):
        xq, xs = seam.mxfp8_quantize(torch.randn(m, k).bfloat16().to(device))
        ran.clear()
        launch_mxfp8_linear(xq, xs, w.values, w.scales, torch.empty(m, n, dtype=torch.bfloat16, device=device), tile)
        assert ran == [runs or pick_tile(m, n, k, xq.device)] and covers(ran[0], m), (m, tile)
    assert not covers(decode8, 9) and covers(decode8, 8)
    # into the fused QKV op's partials the ring kernel covers its one 256-row M tile only
    assert covers(ring, 300) and not covers(ring, 257, partials=True) and covers(ring, 256, partials=True)
    assert covers(ws, 300, partials=True) and not covers(decode8, 9, partials=True)
    x, t = torch.zeros(9, 256, dtype=torch.bfloat16), torch.zeros(128, 256, dtype=torch.uint8)  # refused first
    with pytest.raises(ValueError, match="M=9 exceeds block_m 8: this kernel runs one token tile"):
        mxfp8_wgmma.launch_mxfp8_linear_wgmma(x, None, t, t, x, 8, 1, 2, x, x, False, 1, early_steps=0, smem_steps=0,
                                              combiners=1, a_deq=True)

def test_prefill_tile_checked(device):
    x, w = _inputs(4, 128, 64, device=device)
    out = torch.zeros(4, 128, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="must be seam.kernels.mxfp8_gemm_config.BF16_MM_TILE"):
        seam.mxfp8_linear(x, w, tile=dataclasses.replace(BF16_MM_TILE, split_k=2), out=out)
    assert out.eq(0).all()
    with pytest.raises(ValueError, match="applies to a GEMM launch only"):
        check_tile(BF16_MM_TILE, 64)  # the epilogue-only entry's check (no m: no GEMM)
    with pytest.raises(TypeError, match="tile.bf16_mm must be a bool"):
        check_tile(dataclasses.replace(BF16_MM_TILE, bf16_mm=1), 64, 4, x.device)
    # a NumPy bool is a flag (passed on as the Python bool), as NumPy ints are sizes
    got = check_tile(dataclasses.replace(BF16_MM_TILE, bf16_mm=np.bool_(True), wgmma=np.bool_(False)), 64, 4, x.device)
    assert got == BF16_MM_TILE and got.bf16_mm is True and got.wgmma is False


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(129, 6144, 768), (333, 6144, 768), (2048, 6144, 768), (385, 1536, 6144),
                                   (2048, 2560, 6144), (384, 6144, 2048)])  # past the token tiles (384: past a wave;
# 385 and 2048 at these N: where pick_prefill_token_tiles keeps the prefill path)
def test_prefill_path_picked_and_exact_gpu(m, n, k):
    x, w, want = exact_block_inputs(m, n, k, seed=m, device="cuda")
    assert pick_tile(m, n, k, x.device) == BF16_MM_TILE
    xq, xs = seam.mxfp8_quantize(x)
    for got in (seam.mxfp8_linear(x, w), seam.mxfp8_linear(x, w, quantize="in_gemm"),
                seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k)), w)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(129, 256, 6144), (2048, 6144, 768), (300, 2560, 6144)])
def test_prefill_path_rounds_once_gpu(m, n, k):
    """The BF16-output cuBLAS GEMM with its split-K reductions kept in fp32: within one BF16 ulp of the fp32
    sums of the same dequantized operands in the same K order (A_deq's from K 2048, PERMUTED_MIN_K; the order moves
    sums that cancel by more than that), rounded once (a BF16 reduction of partials would stray further),
    and restoring PyTorch's reduced-precision switch."""
    from seam.formats.a_deq import a_deq_from_mxfp8
    from seam.kernels.mxfp8_dequant import PERMUTED_MIN_K

    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g).bfloat16().cuda()
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * k**-0.5).bfloat16().cuda())
    before = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    got = seam.mxfp8_linear(x, w, tile=BF16_MM_TILE)
    assert torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction == before
    xq, xs = seam.mxfp8_quantize(x)
    deq = a_deq_from_mxfp8 if k >= PERMUTED_MIN_K else functools.partial(seam.mxfp8_dequantize, dtype=torch.bfloat16)
    want = torch.mm(deq(xq, xs), deq(w.values, w.scales).t(), out_dtype=torch.float32)
    ulp = (want.abs().clamp_min(2.0**-126).log2().floor() - 7).exp2()
    assert ((got.float() - want).abs() <= ulp).all()


@pytest.mark.parametrize("split_k", [2, 4])
def test_linear_split_k_matches_single_program(split_k, device):
    x, w = _inputs(5, 256, 512, seed=6, device=device)
    one = seam.mxfp8_linear(x, w, tile=small_tile(5))
    split = seam.mxfp8_linear(x, w, tile=dataclasses.replace(small_tile(5), split_k=split_k))
    xq, xs = seam.mxfp8_quantize(x)
    _check_close(split, xq, xs, w)
    # a second launch reuses the rearmed counters and gives the same bytes (deterministic)
    again = seam.mxfp8_linear(x, w, tile=dataclasses.replace(small_tile(5), split_k=split_k))
    assert torch.equal(split, again)
    assert (split.float() - one.float()).abs().max() <= one.float().abs().max() * 2.0**-7


def test_leading_dimensions_as_functional_linear(device):
    """As torch.nn.functional.linear: x [..., K] (1-D too, non-contiguous leading dimensions, a strided last
    dimension, 2-D included) gives [..., N], the bytes of the flattened 2-D call; out= of that shape, checked at its own shape and
    against x itself; M 0 in a leading dimension."""
    x, w = _inputs(6, 64, 128, device=device)
    want = seam.mxfp8_linear(x, w)
    got = seam.mxfp8_linear(x.view(2, 3, 128), w)
    assert got.shape == (2, 3, 64) and bytes_equal(got.reshape(6, 64), want)
    assert bytes_equal(seam.mxfp8_linear(x.view(3, 2, 128).transpose(0, 1), w).transpose(0, 1).reshape(6, 64), want)
    one = seam.mxfp8_linear(x[2], w)
    assert one.shape == (64,) and bytes_equal(one, seam.mxfp8_linear(x[2:3], w)[0])
    out = torch.empty(2, 3, 64, dtype=torch.bfloat16, device=device)
    assert seam.mxfp8_linear(x.view(2, 3, 128), w, out=out) is out and bytes_equal(out.reshape(6, 64), want)
    with pytest.raises(ValueError, match=r"out must have shape \[2, 3, 64\], got \[6, 64\]"):
        seam.mxfp8_linear(x.view(2, 3, 128), w, out=torch.empty(6, 64, dtype=torch.bfloat16, device=device))
    assert seam.mxfp8_linear(x.view(2, 3, 128)[:, :0], w).shape == (2, 0, 64)
    # a strided last dimension (1-D, 2-D or [..., K]): copied, as torch.nn.functional.linear takes it
    wide = torch.zeros(128, 6, dtype=torch.bfloat16, device=device)
    wide.copy_(x.t())
    assert bytes_equal(seam.mxfp8_linear(wide[:, 2], w), want[2])
    assert wide.t().unsqueeze(0).stride(-1) == 6 and bytes_equal(seam.mxfp8_linear(wide.t().unsqueeze(0), w)[0], want)
    out2 = torch.zeros(6, 64, dtype=torch.bfloat16, device=device)
    assert seam.mxfp8_linear(wide.t(), w, out=out2, quantize="in_gemm") is out2 and bytes_equal(out2, want)
    with pytest.raises(ValueError, match="out overlaps input x"):  # against x itself, 2-D too
        seam.mxfp8_linear(wide.t(), w, out=wide.view(-1)[: 6 * 64].view(6, 64))
    with pytest.raises(ValueError, match="x has K=64 but weight has K=128"):  # as a unit-stride x says it
        seam.mxfp8_linear(wide.t()[:, :64], w)
    assert bytes_equal(wide, x.t())
    # out is checked against x itself, not the copy the flattened rows may be
    store = torch.zeros(2 * 6 * 128, dtype=torch.bfloat16, device=device)
    xt = store[:768].view(128, 6)
    xt.copy_(x.t())
    with pytest.raises(ValueError, match="out overlaps input x"):
        seam.mxfp8_linear(xt.t().unsqueeze(0), w, out=store[: 6 * 64].view(1, 6, 64))


def test_linear_rejects_bad_arguments(device):
    x, w = _inputs(2, 128, 128, device=device)
    with pytest.raises(TypeError, match="weight must be a seam.MXFP8Weight, got Tensor$"):
        seam.mxfp8_linear(x, w.values)
    with pytest.raises(TypeError, match=r"got Tensor \(the arguments look swapped: mxfp8_linear\(x, weight\)\)"):
        seam.mxfp8_linear(w, x)
    with pytest.raises(TypeError, match="x must have dtype"):
        seam.mxfp8_linear(x.float(), w)
    with pytest.raises(TypeError, match="x must be a BF16 torch.Tensor or a seam.QuantizedActivation, got list"):
        seam.mxfp8_linear(x.tolist(), w)
    # E4M3 rows on their own, or the quantizer's (values, scales) pair: the message says what to wrap them in
    with pytest.raises(TypeError, match=r"got tuple; wrap E4M3 rows and their scales in seam\.QuantizedActivation"):
        seam.mxfp8_linear(seam.mxfp8_quantize(x), w)
    with pytest.raises(TypeError, match=r"got a tensor of dtype torch\.float8_e4m3fn; wrap E4M3 rows"):
        seam.mxfp8_linear(seam.mxfp8_quantize(x)[0], w)
    with pytest.raises(ValueError, match="K=64"):
        seam.mxfp8_linear(x[:, :64], w)
    for bad in (x[0, 0], x[:, None, :64], x[0, :64]):  # 0-d, or [..., K] of another K
        with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 128\] \(the weight's K\)"):
            seam.mxfp8_linear(bad, w)
    xq, xs = seam.mxfp8_quantize(x, scale_layout="row_major")
    with pytest.raises(ValueError, match="swizzled"):
        seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (2, 128), "row_major"), w)
    out = torch.zeros(2, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="out must have shape"):
        seam.mxfp8_linear(x, w, out=out)
    with pytest.raises(TypeError, match="out must have dtype"):
        seam.mxfp8_linear(x, w, out=torch.zeros(2, 128, device=device))
    with pytest.raises(ValueError, match="tile.block_m"):
        seam.mxfp8_linear(x, w, tile=Tile(24, 128, 128, 4, 1))
    with pytest.raises(ValueError, match="tile.block_m"):
        seam.mxfp8_linear(x, w, tile=Tile(8, 128, 128, 4, 1))
    with pytest.raises(TypeError, match="tile"):
        seam.mxfp8_linear(x, w, tile=(16, 128))
    with pytest.raises(ValueError, match="split_k"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 4, 1, split_k=3))
    with pytest.raises(ValueError, match="tile.split_k must be >= 1, got 0"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 4, 1, split_k=0))
    with pytest.raises(ValueError, match=r"tile.block_k must be a power of two in \[32, 256\], got 16"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 16, 4, 1))
    for big in (Tile(16, 2**20, 32, 4, 1), Tile(2**20, 128, 32, 4, 1), Tile(16, 128, 512, 4, 1)):  # past Triton's
        with pytest.raises(ValueError, match=r"power of two in \[\d+, 256\]"):  # largest tensor
            seam.mxfp8_linear(x, w, tile=big)
    with pytest.raises(ValueError, match=r"tile.num_stages must be in \[1, 8\], got 9"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 4, 9))
    with pytest.raises(ValueError, match="num_warps"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 3, 1))
    with pytest.raises(ValueError, match="num_stages"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 4, 0))
    with pytest.raises(TypeError, match="f16_operands"):
        seam.mxfp8_linear(x, w, tile=Tile(16, 128, 128, 4, 1, f16_operands=1))
    with pytest.raises(ValueError, match="f16_operands"):
        seam.mxfp8_linear(x, w, tile=dataclasses.replace(GEMV_TILE, f16_operands=True))
    assert out.eq(0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 7, 64, 513, 2048])
@pytest.mark.parametrize("n", [2560, 4992])
def test_linear_full_shapes_gpu(m, n):
    x, w = _inputs(m, n, 6144, seed=m, device="cuda")
    out = seam.mxfp8_linear(x, w)
    xq, xs = seam.mxfp8_quantize(x)
    _check_close(out, xq, xs, w)


# In-GEMM quantization (quantize="in_gemm"): the GEMM quantizes BF16 A tiles in registers with
# the quantizer's rule, so with the same tile its output is byte-identical to the separate path.


def _assert_in_gemm_bytes_equal(x: torch.Tensor, w: seam.MXFP8Weight, tile: Tile | None = None) -> torch.Tensor:
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, tuple(x.shape))
    separate = seam.mxfp8_linear(act, w, tile=tile)
    fused = seam.mxfp8_linear(x, w, tile=tile, quantize="in_gemm")
    assert torch.equal(fused.view(torch.int16), separate.view(torch.int16))
    return fused


@pytest.mark.parametrize(
    "m,n,k,tile",
    [
        (1, 128, 128, None),
        (5, 256, 96, None),  # K = 1.5 BLOCK_K: the last step is half masked
        (17, 128, 256, None),
        (33, 200, 64, None),  # N not a multiple of BLOCK_N
        (3, 128, 128, LARGE_TILE),  # BLOCK_K 32
        (5, 128, 512, dataclasses.replace(small_tile(5), split_k=4)),
    ],
)
def test_in_gemm_bytes_equal_separate(m, n, k, tile, device):
    x, w = _inputs(m, n, k, seed=10 + m, device=device)
    _assert_in_gemm_bytes_equal(x, w, tile)


def test_in_gemm_m_past_one_row_tile(device):
    # M = 130 > 128: several BLOCK_M tiles, the last with 2 rows (M not a multiple of 128)
    x, w = _inputs(130, 128, 64, seed=3, device=device)
    _assert_in_gemm_bytes_equal(x, w, Tile(64, 128, 64, 8, 4))


# the NaN row makes the interpreter's numpy reductions warn; NaN propagation is what is tested
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_in_gemm_edge_rows(device):
    k = 128
    bits = torch.zeros(10, k, dtype=torch.int16)
    x = bits.view(torch.bfloat16).clone()
    x[1] = 1e-38  # tiny block: scale byte 0
    x[2] = torch.tensor(1, dtype=torch.int16).view(torch.bfloat16)  # smallest BF16 subnormal, 2^-133
    x[3, ::2] = torch.tensor(0x007F, dtype=torch.int16).view(torch.bfloat16)  # largest BF16 subnormal
    x[4, 0] = 1000.0  # one dominating element, the rest below E4M3 range
    x[4, 1:] = 1e-6
    x[5, 3] = float("inf")
    x[5, 40] = float("-inf")
    x[5, 70] = 2.5
    x[6, ::3] = float("nan")
    x[6, 1::3] = -3.0
    x[7] = -0.0
    x[8] = torch.randn(k).to(torch.bfloat16) * 3e4  # large blocks of both signs: scale bytes well above 127
    x[8, 64:] = -x[8, 64:]
    x[9] = torch.randn(k).to(torch.bfloat16)
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, k, generator=torch.Generator().manual_seed(1)).to(device))
    out = _assert_in_gemm_bytes_equal(x.to(device), w)
    assert out[0].eq(0).all() and out[7].eq(0).all()
    for row in range(10):  # one token at a time: the GEMV mainloop
        _assert_in_gemm_bytes_equal(x[row:row + 1].to(device), w, GEMV_TILE)


def test_in_gemm_strided_rows(device):
    # row stride > K (a column slice of a wider buffer): the kernel reads rows at stride_xm
    x, w = _inputs(6, 128, 128, seed=8, device=device)
    wide = torch.full((6, 256), float("nan"), dtype=torch.bfloat16, device=device)
    wide[:, 64:192] = x
    got = seam.mxfp8_linear(wide[:, 64:192], w, quantize=seam.LinearQuantize.IN_GEMM)
    assert torch.equal(got.view(torch.int16), seam.mxfp8_linear(x, w).view(torch.int16))


def test_quantize_keyword_ignored_for_quantized_activation(device):
    x, w = _inputs(4, 128, 128, seed=9, device=device)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 128))
    assert torch.equal(seam.mxfp8_linear(act, w, quantize="in_gemm"), seam.mxfp8_linear(act, w))


def test_quantize_keyword_rejects_bad_values(device):
    x, w = _inputs(2, 128, 128, device=device)
    out = torch.zeros(2, 128, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="quantize must be 'auto', 'separate' or 'in_gemm', got 'fused'"):
        seam.mxfp8_linear(x, w, out=out, quantize="fused")
    with pytest.raises(TypeError, match="quantize must be a str"):
        seam.mxfp8_linear(x, w, out=out, quantize=1)
    # the other checks still apply on the in-GEMM path
    with pytest.raises(TypeError, match="x must have dtype"):
        seam.mxfp8_linear(x.float(), w, out=out, quantize="in_gemm")
    with pytest.raises(ValueError, match="K=64"):
        seam.mxfp8_linear(x[:, :64], w, out=out, quantize="in_gemm")
    assert out.eq(0).all()
    assert seam.LinearQuantize.parse("in_gemm") is seam.LinearQuantize.IN_GEMM


@pytest.mark.parametrize("m,quantizer_calls", [(16, 0), (17, 1)])
def test_auto_quantizes_in_gemm_up_to_the_carve_out(m, quantizer_calls, device, monkeypatch):
    """On a tl tile (which has no dequantization launch): in the GEMM up to 16 tokens, a separate launch above."""
    import seam.ops.linear as linear

    assert linear.IN_GEMM_MAX_M == 16
    calls = []
    real = linear.launch_mxfp8_quant
    monkeypatch.setattr(linear, "launch_mxfp8_quant", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    x, w = _inputs(m, 128, 128, seed=m, device=device)
    tile = pick_tile(m, 128, 128, x.device, tl_only=True)
    got = seam.mxfp8_linear(x, w, tile=tile)  # quantize="auto"
    assert len(calls) == quantizer_calls
    assert torch.equal(got, seam.mxfp8_linear(x, w, tile=tile, quantize="separate"))


@pytest.mark.parametrize("m,block_m,first", [(12, 16, False), (16, 16, False), (17, 32, True), (40, 64, True)])
@pytest.mark.parametrize("row_stride", [0, 4], ids=["contiguous", "rows TMA cannot read"])
def test_auto_hands_bf16_rows_to_the_decode_kernels_dequantization_launch(m, block_m, first, row_stride, device,
                                                                          monkeypatch):
    """On the Gluon decode kernel's tile (Hopper faked, the kernel launcher replaced by a recorder, on the CPU),
    quantize="auto" on BF16 rows: on 32- and 64-row tiles no separate quantizer; the dequantization launch
    quantizes them into an A_deq (its bytes: a_deq_from_mxfp8 of the quantizer's rows), which the kernel reads
    even where TMA could not read the rows themselves (a row stride not 16-byte aligned: that launch reads any
    stride); on the 16-row tile the kernel quantizes the rows itself, or, where TMA cannot read them, the tl
    kernel runs."""
    import seam.ops.linear as linear
    from seam.formats.a_deq import a_deq_from_mxfp8
    from seam.kernels import mxfp8_wgmma, wgmma_config

    monkeypatch.setattr(wgmma_config, "wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    seen, quantized = [], []
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda xq, xs, *args, a_deq, **kw: seen.append((xq.clone(), xs, a_deq)))
    real = linear.launch_mxfp8_quant
    monkeypatch.setattr(linear, "launch_mxfp8_quant", lambda *a, **kw: quantized.append(1) or real(*a, **kw))
    k, n = 256, 128
    x, w = _inputs(m, n, k, seed=m, device=device)
    if row_stride:
        x = torch.cat([x, x[:, :row_stride]], dim=1)[:, :k]  # rows of 260 BF16: 520 bytes apart
    tile = pick_tile(m, n, k, x.device)
    assert tile.wgmma and tile.block_m == block_m, tile
    seam.mxfp8_linear(x, w)
    assert not quantized
    if first or not row_stride:
        (xq, xs, a_deq), = seen
        assert a_deq is first and xs is None
        want = a_deq_from_mxfp8(*seam.mxfp8_quantize(x.contiguous())) if first else x
        assert torch.equal(xq.view(torch.int16), want.view(torch.int16))
    else:
        assert not seen  # the tl kernel ran (in-GEMM quantization)


@pytest.mark.parametrize("tile,m,k", [(BF16_MM_TILE, 40, 2048), pytest.param("ring", 40, 2048, marks=pytest.mark.gpu),
                                      pytest.param("decode", 100, 2048, marks=pytest.mark.gpu),
                                      pytest.param("decode", 40, 2048, marks=pytest.mark.gpu),
                                      pytest.param("decode", 24, 6144, marks=pytest.mark.gpu)],
                         ids=["prefill", "ring-gpu", "decode128-gpu", "decode64-gpu", "decode32-gpu"])
def test_auto_quantizes_in_the_dequantization_launch_where_a_path_has_one(tile, m, k, device, monkeypatch):
    """Past the carve-out, the prefill path, the ring kernel and the decode kernel where its rule dequantizes
    BF16 rows first (every 32- and 64-row tile; at K 2048 the 64-row tile does so for MXFP8 rows too): all
    dequantize A in a launch before their GEMM and quantize a BF16 x there under quantize="auto": no separate
    quantizer, the same bytes."""
    import seam.ops.linear as linear
    from seam.kernels.gluon_launch import dequantizes_first

    n = 256
    if tile == "ring":
        tile = Tile(256, 128, 128, 8, 2, 2, wgmma=True)
        assert tile.ring
    elif tile == "decode":
        tile = pick_tile(m, n, k, torch.device(device))
        assert tile.wgmma and not tile.ring and tile.block_m == (128 if m > 64 else 64 if m > 32 else 32), tile
        assert dequantizes_first(tile, m, n, k, torch.device(device), bf16_rows=True)
        # MXFP8 rows: the 64-row tile at K 2048 and the 128-row tile dequantize first too, the 32-row tile stages
        # them itself
        assert dequantizes_first(tile, m, n, k, torch.device(device), bf16_rows=False) == (m > 32)
    calls = []
    real = linear.launch_mxfp8_quant
    monkeypatch.setattr(linear, "launch_mxfp8_quant", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    x, w = _inputs(m, n, k, seed=m, device=device)
    got = seam.mxfp8_linear(x, w, tile=tile)  # quantize="auto"
    assert not calls
    want = seam.mxfp8_linear(x, w, tile=tile, quantize="separate")
    assert calls and torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 64, 128])
@pytest.mark.parametrize("n,k", [(1536, 6144), (6144, 768), (6144, 2048), (2560, 6144)])
def test_in_gemm_full_shapes_gpu(m, n, k):
    # the MiniMax-M3.1 TP4 layer shapes of ``seam bench linear``, default (split-K) tiles: the decode kernel's where
    # the 16-row kernel takes MXFP8 rows (it reads E4M3 only; in_gemm rows take the decode kernel there)
    x, w = _inputs(m, n, k, seed=m, device="cuda")
    _assert_in_gemm_bytes_equal(x, w, pick_tile(m, n, k, x.device, mma_rows=False))


def test_fp32_output_only_from_the_paths_that_leave_sums_unrounded(device):
    # the fused QKV op's accumulator: the prefill path writes it; a tl tile (which rounds) refuses
    x, w = _inputs(3, 128, 64, device=device)
    xq, xs = seam.mxfp8_quantize(x)
    acc = torch.full((3, 128), 7.0, device=device)
    with pytest.raises(ValueError, match="fp32 out"):
        launch_mxfp8_linear(xq, xs.view(torch.uint8), w.values, w.scales.view(torch.uint8), acc, small_tile(3))
    assert acc.eq(7.0).all()
    launch_mxfp8_linear(xq, xs.view(torch.uint8), w.values, w.scales.view(torch.uint8), acc, BF16_MM_TILE)
    bf16 = seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (3, 64)), w, tile=BF16_MM_TILE)
    assert torch.equal(acc.to(torch.bfloat16).view(torch.int16), bf16.view(torch.int16))


@pytest.mark.parametrize("field, value, exc, match", [
    ("block_m", 64.0, TypeError, "tile.block_m must be an int, got float"),
    ("block_k", "64", TypeError, "tile.block_k must be an int, got str"),
    ("num_stages", 1.5, TypeError, "tile.num_stages must be an int, got float"),
    ("num_warps", "8", TypeError, "tile.num_warps must be an int, got str"),
    ("split_k", True, TypeError, "tile.split_k must be an int, got bool"),
    ("max_registers", 128.0, TypeError, "tile.max_registers must be an int, got float"),
])
def test_tile_fields_of_the_wrong_type_are_named(field, value, exc, match, device):
    x, w = _inputs(3, 128, 256, device=device)
    out = torch.zeros(3, 128, dtype=torch.bfloat16, device=device)
    with pytest.raises(exc, match=match):
        seam.mxfp8_linear(x, w, out=out, tile=dataclasses.replace(Tile(16, 128, 64, 8, 1), **{field: value}))
    assert out.eq(0).all()


def test_tile_sizes_may_be_numpy_ints(device):
    import numpy as np

    x, w = _inputs(3, 128, 256, device=device)
    tile = Tile(np.int64(16), np.int64(128), np.int32(64), np.int64(8), np.int64(1), split_k=np.int64(2))
    want = seam.mxfp8_linear(x, w, tile=Tile(16, 128, 64, 8, 1, split_k=2))
    assert torch.equal(seam.mxfp8_linear(x, w, tile=tile).view(torch.int16), want.view(torch.int16))
