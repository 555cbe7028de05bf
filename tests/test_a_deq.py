"""A_deq: the MXFP8 rows dequantized to BF16 in the K order of the Hopper Gluon GEMM that reads them at their
M (seam.formats.a_deq), written by the norm, SwiGLU and Lamport + MXFP8 producers beside their MXFP8 rows and
read by mxfp8_linear's and the fused QKV op's Gluon kernels (decode up to 128 tokens, ring above)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import seam
from seam.formats.a_deq import a_deq_from_mxfp8, k_permutation
from seam.kernels.a_deq import store_a_deq
from seam.kernels.mxfp8_gemm_config import Tile, pick_tile
from seam.ops.norm import gemma_norm_mxfp8_activation

from mxfp8_rows import edge_and_random_rows


def _step_columns(j, c, h, i):
    return 32 * j + 4 * c + 2 * h + i, 16 * c + 8 * h + 2 * j + i


def test_k_permutation_moves_columns_within_each_step():
    perm = k_permutation(384)
    assert sorted(perm.tolist()) == list(range(384))  # a permutation
    assert bool(((perm // 128) == (torch.arange(384) // 128)).all())  # inside its own 128-column step
    for j, c, h, i in [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0),
                       (3, 7, 1, 1), (2, 5, 1, 0)]:
        src, dst = _step_columns(j, c, h, i)
        assert perm[src] == dst and perm[256 + src] == 256 + dst
    for bad in (0, 96, 200):
        with pytest.raises(ValueError, match="k must be a positive multiple of 128"):
            k_permutation(bad)
    with pytest.raises(TypeError, match="k must be an int, got float"):
        k_permutation(128.0)


def test_k_permutation_is_the_gluon_kernels_k_permute():
    """seam.kernels.mxfp8_wgmma.k_permute relabels a [R, 128] step as reshape [R, 4, 8, 2, 2], permute
    (0, 2, 3, 1, 4), reshape back: position p then holds column t[p], so column t[p] moves to p."""
    t = torch.arange(128).reshape(1, 4, 8, 2, 2).permute(0, 2, 3, 1, 4).reshape(128)
    dest = torch.empty(128, dtype=torch.int64)
    dest[t] = torch.arange(128)
    assert torch.equal(k_permutation(128), dest)


@triton.jit
def _store_a_deq_kernel(values_ptr, scales_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr,
                        PERMUTED: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    v = tl.load(values_ptr + rows[:, None] * COLS + cols[None, :])
    s = tl.load(scales_ptr + rows[:, None] * (COLS // 32) + tl.arange(0, COLS // 32)[None, :])
    store_a_deq(out_ptr, rows * COLS, cols, v, s, (rows[:, None] < ROWS) & (cols[None, :] < COLS), ROWS, COLS,
                PERMUTED)


@pytest.mark.parametrize("permuted", [True, False])
def test_store_a_deq_every_e4m3_byte_at_extreme_scales(permuted, device):
    """The producers' A_deq store (seam.kernels.a_deq.store_a_deq) on every E4M3 byte (zeros, subnormals,
    NaN, +-448) at scale bytes 0 (2^-127), 1, 127, 253 and 254 (2^127: past BF16's range, inf): the
    reference's bytes, one rounding (subnormal BF16 results included)."""
    scale_bytes = [0, 1, 127, 253, 254]
    values = torch.arange(256, dtype=torch.uint8).repeat(len(scale_bytes) + 3, 1)[:8]  # 8 rows x 256 columns
    scales = torch.tensor([scale_bytes[i % 5] for i in range(8)], dtype=torch.uint8)[:, None].repeat(1, 8)
    scales[5:, ::2] = 127  # mixed blocks in a row
    out = torch.empty(8, 256, dtype=torch.bfloat16, device=device)
    with np.errstate(all="ignore"):  # the interpreter's products past the fp32 range (inf, as on the GPU)
        _store_a_deq_kernel[(1,)](values.to(device), scales.contiguous().to(device), out, ROWS=8, COLS=256,
                                  PERMUTED=permuted)
    want = a_deq_from_mxfp8(values.view(torch.float8_e4m3fn), scales.contiguous(), scale_layout="row_major")
    if not permuted:  # the natural-order copy (the ring kernel's); the reference is A_deq's order
        want = seam.mxfp8_dequantize(values.view(torch.float8_e4m3fn), scales.contiguous(), scale_layout="row_major",
                                     dtype=torch.bfloat16)
    got = out.cpu()
    # NaN bytes (0x7F / 0xFF, which seam's quantizers never emit) give a NaN; its payload is not specified
    assert torch.equal(got.isnan(), want.isnan()) and int(want.isnan().sum()) == 16
    assert torch.equal(got.view(torch.int16)[~want.isnan()], want.view(torch.int16)[~want.isnan()])
    assert bool(want.isinf().any()) and bool((want.view(torch.int16) == 0).any())
    assert bool(((want.abs() > 0) & (want.abs() < 2.0**-126)).any())  # BF16 subnormals


def test_a_deq_from_mxfp8_is_the_dequantized_rows_permuted(device):
    x = edge_and_random_rows(9, 256, seed=3).to(device)
    xq, xs = seam.mxfp8_quantize(x)
    a = a_deq_from_mxfp8(xq, xs)
    deq = seam.mxfp8_dequantize(xq, xs, dtype=torch.bfloat16)
    assert a.dtype == torch.bfloat16 and a.is_contiguous()
    assert torch.equal(a[:, k_permutation(256).to(device)].view(torch.int16), deq.view(torch.int16))
    assert not torch.equal(a.view(torch.int16), deq.view(torch.int16))  # the order really moved
    xq96, xs96 = seam.mxfp8_quantize(x[:, :96].contiguous())
    with pytest.raises(ValueError, match="multiple of 128"):
        a_deq_from_mxfp8(xq96, xs96)


@pytest.mark.parametrize("m", [1, 9, 64, 100, 128])
def test_dequantization_launch_writes_a_deq_in_the_decode_order(m, device):
    """The GEMM's activation dequantization launch, asked for the decode kernel's K order (its A_deq where it
    dequantizes first, ``wgmma_dequantize_first``), writes a_deq_from_mxfp8's bytes, edge rows included: from
    MXFP8 rows, and from BF16 rows quantized in the same launch (the in-GEMM rule's bytes)."""
    from seam.kernels.mxfp8_dequant import dequantized_activations

    rows = edge_and_random_rows(max(m, 9), 640, seed=m)
    x = (rows[:m] if m > 1 else rows[-1:]).to(device)  # one token: a random row (the first edge row is zeros)
    xq, xs = seam.mxfp8_quantize(x)
    want = a_deq_from_mxfp8(xq, xs).view(torch.int16)
    natural = seam.mxfp8_dequantize(xq, xs, dtype=torch.bfloat16).view(torch.int16)
    with np.errstate(all="ignore"):  # the bare launcher: seam's ops silence the interpreter's inf/NaN warnings
        assert torch.equal(dequantized_activations(xq, xs, permuted=True).view(torch.int16), want)
        assert torch.equal(dequantized_activations(x, None, permuted=True).view(torch.int16), want)
        assert torch.equal(dequantized_activations(xq, xs).view(torch.int16), natural)
    assert not torch.equal(natural, want)  # the orders differ
    xq160, xs160 = seam.mxfp8_quantize(x[:, :160].contiguous())
    with pytest.raises(ValueError, match="K a multiple of 128"):  # the permutation moves whole 128-column steps
        dequantized_activations(xq160, xs160, permuted=True)


def test_a_deq_is_permuted_at_every_m(device):
    """A_deq has one K order at every M (the decode GEMM's, which its token tiles and the prefill path read too):
    at the bounds the order once changed at (128, 384) and past them; K must be whole 128-column steps."""
    for m in (128, 384, 385, 2049):
        xq, xs = seam.mxfp8_quantize(edge_and_random_rows(m, 256, seed=m).to(device))
        deq = seam.mxfp8_dequantize(xq, xs, dtype=torch.bfloat16)
        a = a_deq_from_mxfp8(xq, xs)
        want = deq[:, torch.argsort(k_permutation(256)).to(device)]
        assert torch.equal(a.view(torch.int16), want.view(torch.int16))
    xq, xs = seam.mxfp8_quantize(edge_and_random_rows(70, 96, seed=1).to(device))
    with pytest.raises(ValueError, match="multiple of 128"):
        a_deq_from_mxfp8(xq, xs)


def test_quantized_activation_checks_a_deq(device):
    x = torch.randn(4, 256).bfloat16().to(device)
    xq, xs = seam.mxfp8_quantize(x)
    a = a_deq_from_mxfp8(xq, xs)
    assert seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256), a_deq=a).a_deq is a
    assert seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256)).a_deq is None
    with pytest.raises(TypeError, match="a_deq must have dtype torch.bfloat16"):
        seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256), a_deq=a.float())
    with pytest.raises(TypeError, match="a_deq must be a torch.Tensor"):
        seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256), a_deq=a.tolist())
    with pytest.raises(ValueError, match="a_deq"):
        seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256), a_deq=a[:3])
    with pytest.raises(ValueError, match="a_deq"):
        seam.QuantizedActivation(xq, xs, torch.bfloat16, (4, 256), a_deq=a.t().contiguous().t())
    xq96, xs96 = seam.mxfp8_quantize(x[:, :96].contiguous())
    with pytest.raises(ValueError, match="a_deq needs K a multiple of 128, got K=96"):
        seam.QuantizedActivation(xq96, xs96, torch.bfloat16, (4, 96), a_deq=a[:, :96].contiguous())
    with pytest.raises(TypeError, match="a_deq must be a torch.Tensor"):  # its type before K's steps
        seam.QuantizedActivation(xq96, xs96, torch.bfloat16, (4, 96), a_deq="junk")
    xq_rm, xs_rm = seam.mxfp8_quantize(x, scale_layout="row_major")
    with pytest.raises(ValueError, match="a_deq goes with swizzled scales"):
        seam.QuantizedActivation(xq_rm, xs_rm, torch.bfloat16, (4, 256), layout="row_major",
                                 a_deq=a_deq_from_mxfp8(xq_rm, xs_rm, scale_layout="row_major"))


@pytest.mark.parametrize("m, hidden", [(1, 128), (7, 256), (64, 128), (65, 128), (130, 128), (2, 6144), (400, 128)])
def test_norm_writes_a_deq_beside_its_mxfp8_rows(m, hidden, device):
    """The norm + MXFP8 launch with a_deq: A_deq bytes equal the reference of its own MXFP8 rows (edge inputs
    in x: zeros, tiny, a dominating element, inf / NaN, huge, -0.0; the extreme scale bytes: the store test
    above), and every other output equals the launch without it."""
    g = torch.Generator().manual_seed(m + hidden)
    x = edge_and_random_rows(max(m, 7), hidden, seed=m)[:m].to(device)
    residual = (torch.randn(m, hidden, generator=g) * 0.1).bfloat16().to(device)
    weight = (torch.randn(hidden, generator=g) * 0.1).bfloat16().to(device)
    qa, res = gemma_norm_mxfp8_activation(x, residual, weight, 1e-6, a_deq=True)
    plain, res0 = gemma_norm_mxfp8_activation(x, residual, weight, 1e-6, a_deq=False)
    assert plain.a_deq is None
    assert torch.equal(qa.values.view(torch.uint8), plain.values.view(torch.uint8))
    assert torch.equal(qa.scales, plain.scales) and torch.equal(res.view(torch.int16), res0.view(torch.int16))
    assert qa.a_deq.shape == (m, hidden) and qa.a_deq.dtype == torch.bfloat16
    want = a_deq_from_mxfp8(qa.values, qa.scales)
    assert torch.equal(qa.a_deq.view(torch.int16), want.view(torch.int16))


def test_norm_a_deq_refused_before_launch(device):
    x = torch.randn(3, 96).bfloat16().to(device)
    r = torch.randn(3, 96).bfloat16().to(device)
    w = torch.zeros(96).bfloat16().to(device)
    with pytest.raises(ValueError, match=r"hidden \(x.shape\[1\]\) with a_deq must be a positive multiple of 128"):
        gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=True)
    with pytest.raises(TypeError, match="a_deq must be a bool"):
        gemma_norm_mxfp8_activation(x, r, w, 1e-6, a_deq=1)


def test_linear_takes_a_deq_and_checks_overlaps(device):
    """mxfp8_linear on a QuantizedActivation with A_deq gives the bytes it gives without (here the paths that
    ignore it; on Hopper the decode kernel reads it: the GPU test below), and refuses an out that overlaps it."""
    x = edge_and_random_rows(7, 256, seed=5).to(device)
    w = seam.MXFP8Weight.from_bf16((torch.randn(64, 256, generator=torch.Generator().manual_seed(1)) * 0.1)
                                   .bfloat16().to(device))
    xq, xs = seam.mxfp8_quantize(x)
    with_deq = seam.QuantizedActivation(xq, xs, torch.bfloat16, (7, 256), a_deq=a_deq_from_mxfp8(xq, xs))
    got = seam.mxfp8_linear(with_deq, w)
    want = seam.mxfp8_linear(seam.QuantizedActivation(xq, xs, torch.bfloat16, (7, 256)), w)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    shared = torch.empty(7 * 256, dtype=torch.bfloat16, device=device)
    a = shared.view(7, 256)
    a.copy_(a_deq_from_mxfp8(xq, xs))
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (7, 256), a_deq=a)
    with pytest.raises(ValueError, match="x.a_deq"):
        seam.mxfp8_linear(act, w, out=shared[: 7 * 64].view(7, 64))


def test_linear_hands_a_deq_to_the_gluon_decode_launch(device, monkeypatch):
    """mxfp8_linear's launcher gives the Gluon launch the activation's A_deq and whether the weight allows BF16
    multiplies (here a stand-in for the Gluon kernel records them, on the CPU)."""
    from seam.kernels import mxfp8_gemm

    xq, xs = seam.mxfp8_quantize(torch.randn(5, 256).bfloat16().to(device))
    w = seam.MXFP8Weight.from_bf16(torch.randn(128, 256).bfloat16().to(device))
    a, seen = a_deq_from_mxfp8(xq, xs), []

    def gluon(xq, xs, wq, ws, out, tile, use_pdl, *, partials=False, a_deq=None, weight_bf16_mul=False):
        seen.append((a_deq, weight_bf16_mul))
        return out

    monkeypatch.setattr(mxfp8_gemm, "launch_gluon", gluon)
    out = torch.empty(5, 128, dtype=torch.bfloat16, device=device)
    tile = Tile(8, 128, 128, 8, 2, split_k=2, wgmma=True)
    mxfp8_gemm.launch_mxfp8_linear(xq, xs, w.values, w.scales, out, tile, a)
    mxfp8_gemm.launch_mxfp8_linear(xq, xs, w.values, w.scales, out, tile, a, True)
    assert len(seen) == 2 and seen[0][0] is a and seen[1][0] is a and [s[1] for s in seen] == [False, True]


def test_launch_gluon_hands_a_deq_only_to_the_kernel_of_its_k_order(device, monkeypatch):
    """seam.kernels.gluon_launch.launch_gluon with the Gluon launchers replaced by recorders (on the CPU): A_deq goes to
    the decode kernel (in place of the MXFP8 rows, the A_DEQ variant; over token tiles from 129, past 384 too); the ring
    kernel, which reads natural K order, gets none (its dequantization launch runs as before). The 128-token tile
    streams it always: given, written by the dequantization launch where none comes or TMA cannot read the one given; at
    this split it runs warp-specialized (mxfp8_wgmma_ws, which reads A_deq only), as picked at this split."""
    from seam.kernels import gluon_launch, mxfp8_wgmma, mxfp8_wgmma_ring, mxfp8_wgmma_ws

    seen, streams = [], []
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda xq, xs, *args, a_deq, a_stream, **kw: seen.append(("decode", xq, xs, a_deq))
                        or streams.append(a_stream))
    # the warp-specialized launcher takes A_deq alone (no scales, no flag): only its rows are checked there
    monkeypatch.setattr(mxfp8_wgmma_ws, "launch_mxfp8_linear_wgmma_ws",
                        lambda a_deq, *args, **kw: seen.append(("decode", a_deq, None, True)) or streams.append("ws"))
    monkeypatch.setattr(mxfp8_wgmma_ring, "launch_mxfp8_linear_wgmma_ring",
                        lambda xq, xs, *args, **kw: seen.append(("ring", xq, xs, None)))
    k, n = 256, 128
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k).bfloat16().to(device))
    decode, ring = Tile(8, 128, 128, 8, 2, split_k=2, wgmma=True), Tile(256, 128, 128, 8, 2, split_k=2, wgmma=True)
    streamed = Tile(128, 128, 128, 8, 1, split_k=2, wgmma=True, warp_specialized=True)
    for m, tile, kernel, reads in [(8, decode, "decode", True), (64, Tile(64, 128, 128, 8, 2, split_k=2, wgmma=True),
                                   "decode", True), (65, streamed, "decode", True), (128, streamed, "decode", True),
                                   (129, ring, "ring", False), (256, ring, "ring", False), (64, ring, "ring", False),
                                   (128, ring, "ring", False), (200, streamed, "decode", True),
                                   (400, streamed, "decode", True)]:
        xq, xs = seam.mxfp8_quantize(torch.randn(m, k).bfloat16().to(device))
        a = a_deq_from_mxfp8(xq, xs)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        seen.clear()
        assert gluon_launch.launch_gluon(xq, xs, w.values, w.scales, out, tile, False, a_deq=a) is out
        (got_kernel, got_xq, got_xs, got_a_deq), = seen
        assert got_kernel == kernel, (m, tile)
        if kernel == "decode":  # the rows it stages are A_deq itself
            assert (got_xq is a and got_xs is None and got_a_deq is True) == reads
        else:  # the ring launcher takes no A_deq: the MXFP8 rows, which its dequantization launch reads
            assert got_xq is xq and got_xs is xs
    assert streams[2:4] == ["ws", "ws"]  # the 128-token tile given A_deq
    for m in (65, 128):  # without one, or with one TMA cannot read (base 2 bytes past alignment)
        xq, xs = seam.mxfp8_quantize(torch.randn(m, k).bfloat16().to(device))
        shifted = torch.empty(m * k + 1, dtype=torch.bfloat16, device=device)[1:].view(m, k)
        shifted.copy_(a_deq_from_mxfp8(xq, xs))
        for given in (None, shifted):
            seen.clear(), streams.clear()
            out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
            assert gluon_launch.launch_gluon(xq, xs, w.values, w.scales, out, streamed, False, a_deq=given) is out
            (kernel, got_xq, got_xs, got_a_deq), = seen
            assert kernel == "decode" and got_a_deq is True and got_xs is None and streams == ["ws"]
            assert torch.equal(got_xq.view(torch.int16), a_deq_from_mxfp8(xq, xs).view(torch.int16))


_GLUON_CASES = [(m, n, k) for n, k in ((2560, 6144), (6144, 768)) for m in (1, 2, 9, 17, 33, 64)] + [
    (m, n, k) for n, k in ((2560, 6144), (6144, 2048)) for m in (65, 100, 128)] + [
    (m, 2560, 6144) for m in (129, 256, 384, 512)] + [(1024, 6144, 2048)] + [  # the token tiles
    (2048, 2560, 6144), (1024, 1536, 6144)]  # the prefill path


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", _GLUON_CASES)
def test_hopper_gemms_read_a_deq_gpu(m, n, k):
    """The Hopper GEMMs on the norm's A_deq (K-permuted at every M: the decode kernel at every decode tile, over token
    tiles to 2048 tokens, and the prefill path at K >= 2048, which dequantizes the weight in its order): the bytes each
    gives on the MXFP8 rows alone at the tile picked given A_deq (its own staging, or its dequantization launch: at 33-64
    tokens the pick given A_deq may split K otherwise than the one without); and it does read A_deq (a zeroed copy gives
    zeros). Where the 16-row kernel is picked (here 1-2 tokens at K 768) it reads the MXFP8 rows only (a zeroed
    A_deq changes nothing), and the decode kernel's tile, given, reads A_deq."""
    g = torch.Generator().manual_seed(m + n)
    x = edge_and_random_rows(max(m, 7), k, seed=m)[:m].cuda()
    residual = (torch.randn(m, k, generator=g) * 0.1).bfloat16().cuda()
    qa, _ = gemma_norm_mxfp8_activation(x, residual, torch.zeros(k, dtype=torch.bfloat16, device="cuda"), 1e-6,
                                        a_deq=True)
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * 0.05).bfloat16().cuda())
    tile = pick_tile(m, n, k, x.device)
    assert tile.bf16_mm if (m, n) in ((2048, 2560), (1024, 1536)) else tile.wgmma and not tile.ring
    plain = seam.QuantizedActivation(qa.values, qa.scales, torch.bfloat16, (m, k))
    zeroed = seam.QuantizedActivation(qa.values, qa.scales, torch.bfloat16, (m, k), a_deq=torch.zeros_like(qa.a_deq))
    want = seam.mxfp8_linear(plain, w, tile=pick_tile(m, n, k, x.device, a_deq=True)).view(torch.int16)
    _assert_reads_a_deq(tile, qa, zeroed, w, want, pick_tile(m, n, k, x.device, mma_rows=False))


def _assert_reads_a_deq(tile, qa, zeroed, w, want, decode_tile):
    """The picked GEMM on rows with A_deq gives ``want`` (their bytes without it) and reads A_deq; where ``tile`` is the
    16-row kernel's, it ignores A_deq, and ``decode_tile`` (the decode kernel's) is the one that reads it."""
    given = {}
    if tile.mma_rows:
        assert torch.equal(seam.mxfp8_linear(zeroed, w).view(torch.int16), want)
        given = {"tile": decode_tile}
    assert torch.equal(seam.mxfp8_linear(qa, w, **given).view(torch.int16), want)
    assert bool((seam.mxfp8_linear(zeroed, w, **given) == 0).all())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(64, 2560), (200, 9856)])
def test_a_deq_of_another_k_order_is_ignored_gpu(m, n):
    """The ring kernel (a ring tile at 64 tokens, and at 200 tokens of N 9856, where pick_tile takes it: the token
    tiles take more than a wave) leaves the K-permuted A_deq unread: the bytes of the same tile without it."""
    k = 6144
    g = torch.Generator().manual_seed(5)
    qa, _ = gemma_norm_mxfp8_activation(torch.randn(m, k, generator=g).bfloat16().cuda(),
                                        torch.randn(m, k, generator=g).bfloat16().cuda(),
                                        torch.zeros(k, dtype=torch.bfloat16, device="cuda"), 1e-6, a_deq=True)
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * 0.05).bfloat16().cuda())
    ring = Tile(256, 128, 128, 8, 2, 3, wgmma=True)
    plain = seam.QuantizedActivation(qa.values, qa.scales, torch.bfloat16, (m, k))
    got, want = seam.mxfp8_linear(qa, w, tile=ring), seam.mxfp8_linear(plain, w, tile=ring)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


# The fused QKV op (seam.qkv_index_fused_epilogue): the norm -> QKV boundary's consumer of A_deq.


def _qkv_problem(m, device, k=256, seed=0, nkv=1):
    from test_qkv import make_problem

    return make_problem(nkv=nkv, m=m, k=k, block_size=4, seed=seed, device=device, integer=True,
                        num_blocks=-(-3 * m // 4) + 2)


def _assert_same_outputs(got, want):
    for name, t in got.items():
        if t is not None:
            assert torch.equal(t.view(torch.uint8), want[name].view(torch.uint8)), name


def test_qkv_takes_a_deq_and_checks_it(device):
    """The fused QKV op with A_deq gives the bytes it gives without (a path that ignores it here), and
    refuses an A_deq of the wrong dtype or shape, or one that an output overlaps, before any launch."""
    p = _qkv_problem(5, device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    a = a_deq_from_mxfp8(xq, xsf)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got, a_deq=a)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **want)
    _assert_same_outputs(got, want)
    untouched = p.outputs(fill=3)
    bad = [(a.float(), TypeError, "a_deq must have dtype torch.bfloat16"), (a[:4], ValueError, "a_deq"),
           (untouched["q_out"].view(-1)[: 5 * 256].view(5, 256), ValueError, "q_out"),
           (a.tolist(), TypeError, "a_deq must be a torch.Tensor")]
    for wrong, err, match in bad:
        with pytest.raises(err, match=match):
            seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(),
                                          **untouched, a_deq=wrong)
    _assert_same_outputs(untouched, p.outputs(fill=3))


def test_qkv_decode_path_hands_a_deq_to_the_gluon_gemm(device, monkeypatch):
    """On the Hopper decode path the fused op's launcher hands A_deq to the Gluon GEMM (here replaced by the
    reference's partials, on the CPU) and still writes the reference's bytes."""
    import numpy as np

    from seam.kernels import qkv_epilogue as qkv_epilogue_mod
    from seam.ref.qkv import qkv_epilogue_ref, qkv_gemm_ref

    p = _qkv_problem(5, device, seed=4)
    xq, xsf = seam.mxfp8_quantize(p.x)
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    a, seen = a_deq_from_mxfp8(xq, xsf), []

    def gluon_partials(xq, xs, wq, ws, out, tile, use_pdl, *, partials=False, a_deq=None):
        seen.append(a_deq)
        parts = torch.zeros(p.n // 128, tile.split_k, tile.block_m, 128, device=xq.device)
        parts[:, 0, :5] = acc.view(5, -1, 128).permute(1, 0, 2)
        return parts

    monkeypatch.setattr(qkv_epilogue_mod, "launch_gluon", gluon_partials)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    with np.errstate(all="ignore"):
        qkv_epilogue_mod.launch_qkv_epilogue(
            xq=xq, xsf=xsf, wq=p.weight.values, wsf=p.weight.scales, acc=None, positions=p.positions,
            cos_sin_cache=p.cos_sin_cache, norm_weights=tuple(p.norm_weights), eps=1e-6, slot_mapping=p.slots,
            index_slot_mapping=p.index_slots, **got, inv_scales=(1.0, 1.0, 1.0), nkv=1,
            tile=Tile(8, 128, 128, 8, 2, split_k=2, wgmma=True), a_deq=a)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_same_outputs(got, want)
    assert len(seen) == 1 and seen[0] is a


@pytest.mark.gpu
@pytest.mark.parametrize("m,nkv", [(1, 1), (2, 1), (16, 1), (33, 1), (64, 1), (65, 1), (128, 1), (33, 2), (64, 2)])
def test_qkv_gluon_gemm_reads_a_deq_gpu(m, nkv, monkeypatch):
    """The fused QKV op on Hopper with A_deq, through the decode kernel (1-64 tokens; at nkv 2 from 33 tokens with
    A_deq streamed, ``wgmma_a_stream``; at 65 and 128 tokens always): the bytes it gives without, the GEMM staging
    the MXFP8 rows itself (``wgmma_dequantize_first`` off) up to 64 tokens, its dequantization launch writing the
    same A_deq above, where the 128-token tile runs warp-specialized (pick_qkv_tile at split 6); a zeroed A_deq
    changes them (the GEMM reads it)."""
    from seam.kernels import gluon_launch, mxfp8_wgmma, mxfp8_wgmma_ws

    streamed, launch, launch_ws = [], mxfp8_wgmma.launch_mxfp8_linear_wgmma, mxfp8_wgmma_ws.launch_mxfp8_linear_wgmma_ws
    monkeypatch.setattr(mxfp8_wgmma, "launch_mxfp8_linear_wgmma",
                        lambda *args, **kw: streamed.append(kw["a_stream"]) or launch(*args, **kw))
    monkeypatch.setattr(mxfp8_wgmma_ws, "launch_mxfp8_linear_wgmma_ws",
                        lambda *args, **kw: streamed.append("ws" if kw["partials"] else "?") or launch_ws(*args, **kw))
    p = _qkv_problem(m, "cuda", k=6144, seed=m, nkv=nkv)
    xq, xsf = seam.mxfp8_quantize(p.x)
    a = a_deq_from_mxfp8(xq, xsf)
    got, want, zeroed = p.outputs(fill=3), p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got, a_deq=a)
    with monkeypatch.context() as patch:
        if m <= 64:  # the streamed 128-token tile has no staging of its own
            patch.setattr(gluon_launch, "wgmma_dequantize_first", lambda *args, **kw: False)
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **want)
    _assert_same_outputs(got, want)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **zeroed,
                                  a_deq=torch.zeros_like(a))
    assert not torch.equal(zeroed["index_q_out"].view(torch.uint8), want["index_q_out"].view(torch.uint8))
    if m <= 64:  # the decode kernel: streamed given A_deq exactly where the rule takes it (nkv 2 at 33-64 tokens)
        assert streamed == [nkv == 2 and m > 32, False, nkv == 2 and m > 32], streamed
    else:  # the streamed tile, warp-specialized (its partials), on the dequantization launch's A_deq too
        assert streamed == ["ws", "ws", "ws"], streamed



def test_qkv_prefill_path_reads_a_deq_with_the_same_bytes(device):
    """The fused QKV op on the prefill path (its fp32 accumulator) at K 2048 with A_deq, on inexact sums: the bytes
    it gives without A_deq; E4M3 NaN rows in place of the MXFP8 ones change nothing (the GEMM reads A_deq)."""
    from test_qkv import make_problem

    from seam.kernels.mxfp8_gemm_config import BF16_MM_TILE

    p = make_problem(nkv=1, m=3, k=2048, block_size=4, seed=2, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    a = a_deq_from_mxfp8(xq, xsf)
    nan_rows = torch.full_like(xq.view(torch.uint8), 0x7F).view(xq.dtype)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(nan_rows, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got, a_deq=a,
                                  tile=BF16_MM_TILE)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **want,
                                  tile=BF16_MM_TILE)
    _assert_same_outputs(got, want)
    assert want["q_out"].float().abs().sum() > 0 and not want["q_out"].float().isnan().any()

@pytest.mark.gpu
@pytest.mark.parametrize("m", [512, 1100])
def test_qkv_reads_a_deq_past_the_decode_tiles_gpu(m):
    """The fused QKV op with A_deq past 384 tokens: over the token tiles (512) and on the prefill path (1100, past
    QKV_TOKEN_TILES_MAX_M), the bytes it gives without A_deq; a zeroed A_deq changes them (the GEMM reads it)."""
    from seam.kernels.mxfp8_gemm_config import QKV_TOKEN_TILES_MAX_M, pick_qkv_tile

    p = _qkv_problem(m, "cuda", k=6144, seed=m)
    tile = pick_qkv_tile(m, p.n, 6144, torch.device("cuda"))
    assert tile.bf16_mm == (m > QKV_TOKEN_TILES_MAX_M) and (tile.bf16_mm or tile.warp_specialized)
    xq, xsf = seam.mxfp8_quantize(p.x)
    a = a_deq_from_mxfp8(xq, xsf)
    got, want, zeroed = p.outputs(fill=3), p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got, a_deq=a)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **want)
    _assert_same_outputs(got, want)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **zeroed,
                                  a_deq=torch.zeros_like(a))
    assert not torch.equal(zeroed["index_q_out"].view(torch.uint8), want["index_q_out"].view(torch.uint8))


# The all-reduce + norm + MXFP8 boundary (seam.allreduce_gemma_rms_norm_mxfp8): every path writes A_deq.


@pytest.mark.parametrize("tp, hidden, m", [(1, 256, 7), (2, 256, 7), (4, 256, 7), (2, 6144, 7), (2, 256, 70),
                                           (2, 256, 130)])
def test_lamport_consumer_writes_a_deq(tp, hidden, m, device):
    """Consumer A of the Lamport all-reduce (simulated TP) with a_deq: each rank's A_deq is the reference of
    its own MXFP8 rows (edge inputs included; K-permuted at every M: 7, 70 and 130 rows), and its other
    outputs are those without a_deq."""
    rows = [(edge_and_random_rows(m, hidden, seed=r) * 0.25).to(device) for r in range(tp)]
    residual = (edge_and_random_rows(m, hidden, seed=99) * 0.5).to(device)
    weight = (torch.randn(hidden, generator=torch.Generator().manual_seed(1)) * 0.2).bfloat16().to(device)
    outs = {}
    for a_deq in (False, True):
        comm = seam.LamportAllReduce(hidden_size=hidden, max_num_tokens=max(8, m), group=seam.SimulatedGroup(tp))
        for r, x in enumerate(rows):
            comm.publish(x, rank=r)
        outs[a_deq] = [comm.collect_gemma_rms_norm_mxfp8(residual, weight, 1e-6, rank=r, a_deq=a_deq)
                       for r in range(tp)]
    for (plain, res0), (qa, res) in zip(outs[False], outs[True]):
        assert plain.a_deq is None
        assert torch.equal(qa.values.view(torch.uint8), plain.values.view(torch.uint8))
        assert torch.equal(qa.scales, plain.scales) and torch.equal(res.view(torch.int16), res0.view(torch.int16))
        assert torch.equal(qa.a_deq.view(torch.int16), a_deq_from_mxfp8(qa.values, qa.scales).view(torch.int16))


def test_dispatch_passes_a_deq_on_every_path(device):
    """allreduce_gemma_rms_norm_mxfp8 with a_deq: TP 1 (the fused norm kernel) and a simulated Lamport group
    both return an activation whose A_deq matches its MXFP8 rows; bad a_deq values are refused first."""
    from seam.ops.allreduce_norm import allreduce_gemma_rms_norm_mxfp8

    g = torch.Generator().manual_seed(2)
    x, r = (torch.randn(3, 128, generator=g).bfloat16().to(device) for _ in range(2))
    w = (torch.randn(128, generator=g) * 0.1).bfloat16().to(device)
    comm = seam.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=seam.SimulatedGroup(1, device))
    for group in (None, comm):
        qa, _ = allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, group, a_deq=True)
        assert torch.equal(qa.a_deq.view(torch.int16), a_deq_from_mxfp8(qa.values, qa.scales).view(torch.int16))
        with pytest.raises(ValueError, match="a_deq must be True, False or 'auto', got 'yes'"):
            allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, group, a_deq="yes")
        with pytest.raises(TypeError, match="a_deq must be a bool or 'auto', got NoneType"):
            allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, group, a_deq=None)
    narrow = seam.LamportAllReduce(hidden_size=96, max_num_tokens=4, group=seam.SimulatedGroup(1, device))
    x96, r96, w96 = x[:, :96].contiguous(), r[:, :96].contiguous(), w[:96].contiguous()
    with pytest.raises(ValueError, match="hidden_size with a_deq must be a positive multiple of 128, got 96"):
        allreduce_gemma_rms_norm_mxfp8(x96, r96, w96, 1e-6, narrow, a_deq=True)
    qa, _ = allreduce_gemma_rms_norm_mxfp8(x96, r96, w96, 1e-6, narrow, a_deq=False)  # nothing left pending
    assert qa.a_deq is None


@pytest.mark.parametrize("m, inter, layout", [(1, 128, "split"), (5, 768, "interleaved"), (130, 256, "split")])
def test_swiglu_writes_a_deq_beside_its_mxfp8_rows(m, inter, layout, device):
    """SwiGLU-OAI + MXFP8 with a_deq: its MXFP8 rows are those without it, and A_deq their reference (edge
    inputs: zeros, tiny, a dominating element, inf / NaN, huge, -0.0)."""
    gate_up = edge_and_random_rows(max(m, 7), 2 * inter, seed=m)[:m].to(device)
    values, scales, a = seam.swiglu_oai_mxfp8(gate_up, layout=layout, a_deq=True)
    plain_values, plain_scales = seam.swiglu_oai_mxfp8(gate_up, layout=layout, a_deq=False)
    assert torch.equal(values.view(torch.uint8), plain_values.view(torch.uint8)) and torch.equal(scales, plain_scales)
    assert torch.equal(a.view(torch.int16), a_deq_from_mxfp8(values, scales).view(torch.int16))


def test_swiglu_a_deq_refused_before_launch(device):
    gate_up = torch.randn(3, 192).bfloat16().to(device)
    with pytest.raises(ValueError, match=r"I \(gate_up.shape\[1\] // 2\) with a_deq must be a positive multiple of 128, got 96"):
        seam.swiglu_oai_mxfp8(gate_up, a_deq=True)
    with pytest.raises(TypeError, match="a_deq must be a bool"):
        seam.swiglu_oai_mxfp8(gate_up, a_deq=None)
    with pytest.raises(ValueError, match="a_deq goes with swizzled scales"):
        seam.swiglu_oai_mxfp8(torch.randn(3, 256).bfloat16().to(device), a_deq=True, scale_layout="row_major")
    assert len(seam.swiglu_oai_mxfp8(gate_up)) == 2  # without A_deq, I a multiple of 32 is enough


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 16, 33, 64])
def test_down_gemm_reads_the_swiglu_a_deq_gpu(m):
    """SwiGLU + MXFP8 -> the down projection (N 6144 x K 768) on Hopper with A_deq: the bytes without it at the tile
    picked given it (at 33-64 tokens the warp-specialized tile, unsplit); and
    the GEMM does read it (a zeroed copy gives zeros), the decode kernel's tile where the 16-row kernel (1-8 tokens,
    which ignores it) is picked."""
    g = torch.Generator().manual_seed(m)
    gate_up = (torch.randn(m, 1536, generator=g) * 2).bfloat16().cuda()
    w = seam.MXFP8Weight.from_bf16((torch.randn(6144, 768, generator=g) * 0.05).bfloat16().cuda())
    values, scales, a = seam.swiglu_oai_mxfp8(gate_up, a_deq=True)
    qa = seam.QuantizedActivation(values, scales, torch.bfloat16, (m, 768), a_deq=a)
    tile = pick_tile(m, 6144, 768, gate_up.device)
    assert tile.wgmma and tile.mma_rows == (m <= 8)
    plain = seam.QuantizedActivation(values, scales, torch.bfloat16, (m, 768))
    zeroed = seam.QuantizedActivation(values, scales, torch.bfloat16, (m, 768), a_deq=torch.zeros_like(a))
    want = seam.mxfp8_linear(plain, w, tile=pick_tile(m, 6144, 768, gate_up.device, a_deq=True)).view(torch.int16)
    _assert_reads_a_deq(tile, qa, zeroed, w, want, pick_tile(m, 6144, 768, gate_up.device, mma_rows=False))


@pytest.mark.parametrize("tp", [1, 2])
def test_moe_finalize_writes_a_deq(tp, device, monkeypatch):
    """The MoE finalize + all-reduce + norm + MXFP8 op (the MoE -> next layer's QKV boundary) with a_deq:
    the split steps (simulated TP) and the one-call form give A_deq of their own MXFP8 rows, the rest
    unchanged."""
    from seam.ops import allreduce_moe
    from test_lamport import make_moe

    monkeypatch.setattr(allreduce_moe, "_fused_moe_finalize", None)  # the shared instance, restored after
    hidden, m, top_k = 256, 5, 2
    residual = (torch.randn(m, hidden, generator=torch.Generator().manual_seed(3)) * 0.5).bfloat16().to(device)
    weight = (torch.randn(hidden, generator=torch.Generator().manual_seed(4)) * 0.2).bfloat16().to(device)
    moes = [make_moe(m, hidden, top_k, rows=7, seed=40 + r, device=device) for r in range(tp)]
    outs = {}
    for a_deq in (False, True):
        op = seam.FinalizeAllReduceGemmaRMSNormMxfp8(hidden_size=hidden, max_num_tokens=8, top_k=top_k,
                                                     fp32_weights=True, group=seam.SimulatedGroup(tp))
        for r, moe in enumerate(moes):
            op.publish(moe, rank=r)
        outs[a_deq] = [op.collect(residual, weight, 1e-6, rank=r, a_deq=a_deq) for r in range(tp)]
        if tp == 1:
            outs[a_deq].append(op(moes[0], residual, weight, 1e-6, a_deq=a_deq))
            seam.init_fused_moe_finalize(hidden_size=hidden, max_num_tokens=8, top_k=top_k, fp32_weights=True,
                                         group=seam.SimulatedGroup(1))
            outs[a_deq].append(seam.finalize_allreduce_gemma_rms_norm_mxfp8(moes[0], residual, weight, 1e-6,
                                                                            a_deq=a_deq))
    for (plain, res0), (qa, res) in zip(outs[False], outs[True]):
        assert plain.a_deq is None and torch.equal(res.view(torch.int16), res0.view(torch.int16))
        assert torch.equal(qa.values.view(torch.uint8), plain.values.view(torch.uint8))
        assert torch.equal(qa.a_deq.view(torch.int16), a_deq_from_mxfp8(qa.values, qa.scales).view(torch.int16))
    with pytest.raises(TypeError, match="a_deq must be a bool"):
        op(moes[0], residual, weight, 1e-6, a_deq=0)


def test_a_deq_pays_on_hopper_where_the_gluon_gemms_read_it(monkeypatch):
    """The "auto" rule (seam.kernels.wgmma_config.a_deq_pays): A_deq only where a Hopper GEMM reads it:
    the decode kernel from 2 tokens to 64 (from one at K <= 2048: those inputs feed wide layers, whose
    one token takes the Gluon tile; at K 6144 a narrow one's GEMV would not read it) but not at 1-8 tokens where the
    16-row kernel takes its short K (512 or 768; it reads MXFP8 rows; at its long K the QKV projection, two waves
    wide for it, reads the A_deq), at 65-384 tokens where
    K >= 2048 on its streamed tile and token tiles, and at 65-128 tokens from K 256 (two 64-token tiles, the streamed
    tile at short K; the prefill path, which takes narrower layers there, ignores it below K 2048; past 384 the GEMMs
    read a given one,
    but the producer's store costs what they save); never off whole 128-column steps,
    nowhere on a device without those kernels; resolve_a_deq checks the argument itself first."""
    from seam.kernels import mxfp8_gemm_config, wgmma_config
    from seam.ops.a_deq import resolve_a_deq

    cpu = torch.device("cpu")
    assert not any(wgmma_config.a_deq_pays(m, 6144, cpu) for m in range(1, 500))
    monkeypatch.setattr(wgmma_config, "wgmma_supported", lambda device: True)
    for k in (3072, 6144, 7168):  # the 16-row kernel's long K too (and 7168, outside it)
        assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, k, cpu)] == list(range(2, 385)), k
    for k in (512, 768):  # the 16-row kernel's K
        assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, k, cpu)] == list(range(9, 129)), k
    for k in (256, 640, 1024, 1920):
        assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, k, cpu)] == list(range(1, 129)), k
    assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, 128, cpu)] == list(range(1, 65))
    assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, 2048, cpu)] == list(range(1, 385))
    assert [m for m in range(1, 500) if wgmma_config.a_deq_pays(m, 2176, cpu)] == list(range(2, 385))
    assert all(mxfp8_gemm_config.pick_wgmma_tile(m, 2560, 6144, 132, partials=True).block_m > 64
               for m in range(65, 129))  # streamed
    # at 65-128 tokens below K 2048 two 64-token tiles or a streamed tile read it, where they take the shape; the
    # prefill path, else, does not (a_deq_pays knows K, not N)
    assert mxfp8_gemm_config.pick_wgmma_tile(100, 3072, 768, 132).reads_a_deq(768)
    assert mxfp8_gemm_config.pick_wgmma_tile(100, 896, 768, 132) is None
    assert not any(wgmma_config.a_deq_pays(m, 6100, cpu) for m in range(1, 500))
    assert resolve_a_deq("auto", 2, 6144, cpu) and not resolve_a_deq("auto", 1, 6144, cpu)
    assert not resolve_a_deq("auto", 16, 6100, cpu)  # "auto" never raises: no A_deq off whole 128-column steps
    assert resolve_a_deq(True, 1, 128, cpu) and not resolve_a_deq(False, 16, 6144, cpu)
    with pytest.raises(ValueError, match=r"I with a_deq must be a positive multiple of 128, got 96"):
        resolve_a_deq(True, 16, 96, cpu, k_name="I")
    assert resolve_a_deq("AUTO", 16, 6144, cpu) and not resolve_a_deq("Auto", 1, 6144, cpu)  # any case
    for bad, exc in (("autos", ValueError), ("", ValueError), (None, TypeError), (1, TypeError)):
        with pytest.raises(exc, match="a_deq must be"):
            resolve_a_deq(bad, 16, 6144, cpu)


def test_producers_write_a_deq_by_default_where_the_rule_says(monkeypatch, device):
    """a_deq="auto", the norm + MXFP8 producers' default: with the rule saying "from 5 tokens" (patched,
    as on a Hopper GPU it says from 2, or 1 where K <= 2048, 9 at K 512 and 768) the norm, the dispatch, Lamport consumer A and the MoE finalize op
    write A_deq at 5 rows and not at 3; SwiGLU takes "auto" when asked and returns None in its place."""
    from seam.ops.allreduce_norm import allreduce_gemma_rms_norm_mxfp8
    from test_lamport import make_moe

    monkeypatch.setattr("seam.ops.a_deq.a_deq_pays", lambda m, k, device: m >= 5)
    hidden = 128
    g = torch.Generator().manual_seed(6)
    w = (torch.randn(hidden, generator=g) * 0.1).bfloat16().to(device)

    def check(qa, writes):
        if writes:
            assert torch.equal(qa.a_deq.view(torch.int16), a_deq_from_mxfp8(qa.values, qa.scales).view(torch.int16))
        else:
            assert qa.a_deq is None

    for m in (3, 5):
        x, r = (torch.randn(m, hidden, generator=g).bfloat16().to(device) for _ in range(2))
        check(gemma_norm_mxfp8_activation(x, r, w, 1e-6)[0], m >= 5)
        comm = seam.LamportAllReduce(hidden_size=hidden, max_num_tokens=8, group=seam.SimulatedGroup(1, device))
        check(allreduce_gemma_rms_norm_mxfp8(x, r, w, 1e-6, comm)[0], m >= 5)
        comm.publish(x, rank=0)
        check(comm.collect_gemma_rms_norm_mxfp8(r, w, 1e-6, rank=0)[0], m >= 5)
        op = seam.FinalizeAllReduceGemmaRMSNormMxfp8(hidden_size=hidden, max_num_tokens=8, top_k=2,
                                                     fp32_weights=True, group=seam.SimulatedGroup(1, device))
        check(op(make_moe(m, hidden, 2, rows=7, seed=m, device=device), r, w, 1e-6)[0], m >= 5)
        values, scales, a = seam.swiglu_oai_mxfp8(torch.randn(m, 2 * hidden, generator=g).bfloat16().to(device),
                                                  a_deq="auto")
        assert (a is not None) == (m >= 5)
        assert len(seam.swiglu_oai_mxfp8(torch.randn(m, 2 * hidden).bfloat16().to(device))) == 2  # default False


def test_seam_debug_refuses_an_a_deq_of_other_rows(monkeypatch, device):
    """With SEAM_DEBUG the consumers compare A_deq with its reference before any launch: rows dequantized in
    natural K order (not A_deq's) and a stale copy are refused, naming the argument, with nothing written; the right
    A_deq passes. Without SEAM_DEBUG nothing is read on the host."""
    monkeypatch.setenv("SEAM_DEBUG", "1")
    k, n = 256, 128
    x = edge_and_random_rows(390, k, seed=8).to(device)
    xq, xs = seam.mxfp8_quantize(x)
    cut_q, cut_s = seam.mxfp8_quantize(x[:50])  # the first 50 rows (quantized per row: the same E4M3 bytes)
    assert torch.equal(cut_q.view(torch.uint8), xq[:50].view(torch.uint8))
    w = seam.MXFP8Weight.from_bf16(torch.randn(n, k, generator=torch.Generator().manual_seed(1)).bfloat16().to(device))
    out = torch.full((50, n), 7.0, dtype=torch.bfloat16, device=device)
    natural = seam.mxfp8_dequantize(cut_q, cut_s, dtype=torch.bfloat16)
    for name, wrong in (("natural order", natural), ("stale", a_deq_from_mxfp8(cut_q, cut_s) + 1)):
        act = seam.QuantizedActivation(cut_q, cut_s, torch.bfloat16, (50, k), a_deq=wrong)
        with pytest.raises(ValueError, match="x.a_deq does not hold the A_deq of these MXFP8 rows at M=50"):
            seam.mxfp8_linear(act, w, out=out)
        assert bool((out == 7.0).all()), name
    right = seam.QuantizedActivation(cut_q, cut_s, torch.bfloat16, (50, k), a_deq=a_deq_from_mxfp8(cut_q, cut_s))
    seam.mxfp8_linear(right, w, out=out)
    p = _qkv_problem(5, device)
    pq, ps = seam.mxfp8_quantize(p.x)
    with pytest.raises(ValueError, match="a_deq does not hold the A_deq"):
        seam.qkv_index_fused_epilogue(pq, ps, p.weight.values, p.weight.scales, *p.args(), **p.kw(),
                                      **p.outputs(fill=3), a_deq=torch.zeros(5, p.x.shape[1], dtype=torch.bfloat16,
                                                                              device=device))
    monkeypatch.delenv("SEAM_DEBUG")
    stale = seam.QuantizedActivation(cut_q, cut_s, torch.bfloat16, (50, k), a_deq=natural)
    seam.mxfp8_linear(stale, w, out=out)  # not checked: the tl path here ignores A_deq
