"""NVFP4 format (``docs/spec/qkv_epilogue.md``): E2M1 rounding, rz product, quantizer, cache layout.

The Triton helpers of ``seam.kernels.nvfp4`` are checked byte for byte against the
pure-PyTorch reference of ``seam.formats.nvfp4``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from seam.formats import nvfp4
from seam.kernels.nvfp4 import e2m1_code, mul_rz, nvfp4_quantize_group, v_scale_offset


@triton.jit
def _quantize_kernel(x_ptr, data_ptr, sf_ptr, inv_g, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)
    for j in tl.static_range(COLS // 16):
        x = tl.load(x_ptr + r[:, None] * COLS + j * 16 + tl.arange(0, 16)[None, :])
        data, sf = nvfp4_quantize_group(x, inv_g, ROWS)
        tl.store(data_ptr + r[:, None] * (COLS // 2) + j * 8 + tl.arange(0, 8)[None, :], data)
        tl.store(sf_ptr + r * (COLS // 16) + j, sf)


@triton.jit
def _elementwise_kernel(a_ptr, b_ptr, p_ptr, c_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i)
    b = tl.load(b_ptr + i)
    tl.store(p_ptr + i, mul_rz(a, b))
    tl.store(c_ptr + i, e2m1_code(a))


@triton.jit
def _v_offset_kernel(o_ptr, T: tl.constexpr):
    t = tl.arange(0, T)[:, None]
    j = tl.arange(0, 8)[None, :]
    tl.store(o_ptr + t * 8 + j, v_scale_offset(t, j))


def _nearest_even_e2m1(x: float) -> int:
    """Brute force: nearest E2M1 magnitude, ties to the even code, saturating; sign as the spec."""
    a = abs(x)
    if a != a:
        return 0
    best = 7 if a == float("inf") else min(range(8), key=lambda c: (abs(nvfp4.E2M1_VALUES[c] - a), c % 2))
    sign = 8 if (x < 0 or (x == 0 and str(x).startswith("-"))) and best else 0
    return best | sign


def test_e2m1_encode_matches_brute_force_on_midpoints_and_neighbours():
    vals = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 7.0, -100.0, 1e-30]
    for m in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, *nvfp4.E2M1_VALUES):
        f = torch.tensor(m, dtype=torch.float32)
        up = torch.nextafter(f, torch.tensor(10.0)).item()
        down = torch.nextafter(f, torch.tensor(-10.0)).item()
        vals += [m, up, down, -m, -up, -down]
    x = torch.tensor(vals, dtype=torch.float32)
    got = nvfp4.e2m1_encode(x).tolist()
    want = [_nearest_even_e2m1(v) for v in x.tolist()]
    assert got == want


def test_e2m1_decode_inverts_encode_on_every_code():
    codes = torch.arange(16, dtype=torch.uint8)
    vals = nvfp4.e2m1_decode(codes)
    back = nvfp4.e2m1_encode(vals)
    # -0 (code 8) encodes as +0: the sign of a zero magnitude is cleared
    assert back.tolist() == [0] + list(range(1, 8)) + [0] + list(range(9, 16))


def test_pack_unpack_even_element_in_low_nibble():
    codes = torch.tensor([1, 2, 15, 0], dtype=torch.uint8)
    packed = nvfp4.pack_e2m1(codes)
    assert packed.tolist() == [0x21, 0x0F]
    assert torch.equal(nvfp4.unpack_e2m1(packed), codes)


def test_mul_rz_ref_is_truncated_exact_product():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-60, 60, (4096,), generator=g).float())
    b = torch.randn(4096, generator=g)
    p = nvfp4.mul_rz(a, b)
    exact = a.double() * b.double()
    assert bool((p.double().abs() <= exact.abs()).all())
    nxt = torch.nextafter(p, p.sign() * float("inf"))
    assert bool((nxt.double().abs() > exact.abs()).all() | (p.double() == exact).all())
    big = nvfp4.mul_rz(torch.tensor([3e38]), torch.tensor([10.0]))
    assert big.item() == torch.finfo(torch.float32).max


def test_kernel_mul_rz_and_e2m1_match_reference(device):
    g = torch.Generator().manual_seed(2)
    n = 1024
    a = torch.randn(n, generator=g) * 4
    a[:16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.0, 0.0, float("nan"),
                           float("inf"), -7.0, 1e-40, -1e-40])
    b = torch.rand(n, generator=g) + 0.5
    b[-4:] = torch.tensor([3e38, 1e-30, 1.0, -2.0])
    p = torch.empty(n, device=device)
    c = torch.empty(n, dtype=torch.uint8, device=device)
    _elementwise_kernel[(1,)](a.to(device), b.to(device), p, c, N=n)
    p, c = p.cpu(), c.cpu()
    ref = nvfp4.mul_rz(a, b)
    # Triton links libdevice with FTZ on the GPU: subnormal operands and products flush to
    # zero (toward zero, so still an RZ result). Such products are below every E2M1 step
    # and encode as code 0 either way; everywhere else the bits must match.
    tiny = 2.0**-126
    flushable = (a.abs() < tiny) | (b.abs() < tiny) | (ref.abs() < tiny)
    exact = ~torch.isnan(ref) & ~flushable
    assert torch.equal(p.view(torch.int32)[exact], ref.view(torch.int32)[exact])
    assert bool((p[flushable].abs() <= ref[flushable].abs()).all())
    assert torch.equal(nvfp4.e2m1_encode(p[flushable]), nvfp4.e2m1_encode(ref[flushable]))
    assert torch.equal(c, nvfp4.e2m1_encode(a))


def _edge_rows(cols: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    rows = [
        torch.zeros(cols),
        -torch.zeros(cols),
        torch.full((cols,), 1e-40),
        torch.randn(cols, generator=g) * 1e-6,
        torch.randn(cols, generator=g) * 1e4,
        torch.randn(cols, generator=g),
        torch.randn(cols, generator=g) * 300,
        torch.tensor([6.0, 3.0, 5.0, 2.5, 1.75, 0.75, 0.25, -5.0] * (cols // 8)),  # exact midpoints
    ]
    dom = torch.randn(cols, generator=g) * 1e-3
    dom[3] = 1e3
    rows.append(dom)
    special = torch.randn(cols, generator=g)
    special[0], special[1], special[5] = float("inf"), float("nan"), -0.0
    rows.append(special)
    while len(rows) < 16:
        rows.append(torch.randn(cols, generator=g) * float(torch.rand(1, generator=g) * 10))
    return torch.stack(rows).float()


@pytest.mark.parametrize("g", [1.0, 0.7, 1.3, 1e-3, 37.0])
def test_kernel_quantizer_bytes_equal_reference(g, device):
    x = _edge_rows(64)
    data = torch.empty(16, 32, dtype=torch.uint8, device=device)
    sf = torch.empty(16, 4, dtype=torch.uint8, device=device)
    _quantize_kernel[(1,)](x.to(device), data, sf, nvfp4.f32_reciprocal(g), ROWS=16, COLS=64)
    data, sf = data.cpu(), sf.cpu()
    ref_data, ref_sf = nvfp4.nvfp4_quantize_ref(x, g)
    assert torch.equal(sf, ref_sf)
    assert torch.equal(data, ref_data)


def test_quantizer_edge_values():
    x = _edge_rows(16)
    data, sf = nvfp4.nvfp4_quantize_ref(x)
    assert sf[0].item() == 0x01 and sf[1].item() == 0x01  # all-zero: scale floored at 2^-9
    assert data[0].eq(0).all() and data[1].eq(0).all()  # -0.0 codes lose their sign
    special = nvfp4.nvfp4_dequantize(data[9], sf[9])
    assert special[0].item() == 6.0 * 448.0  # inf saturates: sf 448, code 6
    assert special[1].item() == 0.0  # NaN encodes as 0
    # a dequantized group is within half an E2M1 step (x scale) of its input (finite rows)
    for i in (3, 5, 6, 7):  # row 4 (1e4) saturates at 6 * 448
        back = nvfp4.nvfp4_dequantize(data[i], sf[i])
        step = sf[i].view(torch.float8_e4m3fn).float().repeat_interleave(16)
        assert bool(((back - x[i]).abs() <= step * 1.0 + 1e-6).all())


def test_midpoint_ties_round_to_even_codes():
    # amax 6 -> sf = 1, so v*r = v exactly: each midpoint must go to its even neighbour
    x = torch.tensor([[6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2])
    data, sf = nvfp4.nvfp4_quantize_ref(x)
    assert sf.tolist() == [[0x38]]  # E4M3 1.0
    codes = nvfp4.unpack_e2m1(data)[0, :8].tolist()
    assert codes == [7, 0, 2, 2, 4, 4, 6, 6]


def test_v_scale_offsets_kernel_matches_format_and_tile_quads(device):
    t_count = 16
    out = torch.empty(t_count, 8, dtype=torch.int32, device=device)
    _v_offset_kernel[(1,)](out, T=t_count)
    out = out.cpu()
    want = torch.tensor([nvfp4.scale_offsets(t, True) for t in range(t_count)], dtype=torch.int32)
    assert torch.equal(out, want)
    # a bijection onto the scale area, each 4-token quad on its own 32 bytes
    assert sorted(want.flatten().tolist()) == list(range(t_count * 8))
    for t in range(t_count):
        assert all(t // 4 * 32 <= o < t // 4 * 32 + 32 for o in want[t].tolist())
    assert nvfp4.scale_offsets(5, False) == list(range(40, 48))


@pytest.mark.parametrize("swizzled", [False, True])
def test_cache_entry_round_trip(swizzled):
    cache = nvfp4.empty_kv_cache(2, 1, 8, page_pad=32)
    assert cache.stride(0) == 2 * 8 * 72 + 32
    row = torch.randn(128)
    # block 1, token 5 = slot 13; the second row (slot -1) is skipped
    nvfp4.write_entries(cache, torch.tensor([13, -1]), torch.stack((row, row + 1)), 0.5, swizzled, slot=1)
    slot = nvfp4.slot_view(cache, 1, 1)
    data, sf = nvfp4.read_entry(slot, 5, swizzled)
    want_data, want_sf = nvfp4.nvfp4_quantize_ref(row, 0.5)
    assert torch.equal(data, want_data) and torch.equal(sf, want_sf)
    # data at t*64, scales after block_size*64 data bytes; nothing else touched
    touched = slot.clone()
    touched[5 * 64 : 6 * 64] = 0
    for o in nvfp4.scale_offsets(5, swizzled):
        touched[8 * 64 + o] = 0
    assert touched.eq(0).all()
    assert cache[0].eq(0).all() and cache[1, 0].eq(0).all()
    back = nvfp4.dequantize_entry(slot, 5, 0.5, swizzled)
    assert torch.allclose(back, nvfp4.nvfp4_dequantize(want_data, want_sf, 0.5))


def test_dequantize_caches_read_back():
    kv = nvfp4.empty_kv_cache(2, 2, 4)
    idx = nvfp4.empty_index_cache(2, 4)
    rows = torch.randn(3, 128)
    six, one = torch.tensor([6]), torch.tensor([1])
    nvfp4.write_entries(kv, six, rows[0:1], 1.0, False, slot=0)  # K of head 0
    nvfp4.write_entries(kv, six, rows[1:2], 2.0, True, slot=3)  # V of head 1
    nvfp4.write_entries(idx, one, rows[2:3], 1.0, False)
    k, v = nvfp4.dequantize_kv_cache(kv, torch.tensor([6, -1]), 1.0, 2.0)
    assert torch.isnan(k[1]).all() and torch.isnan(v[1]).all()
    d, s = nvfp4.nvfp4_quantize_ref(rows[0])
    assert torch.equal(k[0, 0], nvfp4.nvfp4_dequantize(d, s))
    d, s = nvfp4.nvfp4_quantize_ref(rows[1], 2.0)
    assert torch.equal(v[0, 1], nvfp4.nvfp4_dequantize(d, s, 2.0))
    ik = nvfp4.dequantize_index_cache(idx, torch.tensor([1]))
    d, s = nvfp4.nvfp4_quantize_ref(rows[2])
    assert torch.equal(ik[0], nvfp4.nvfp4_dequantize(d, s))


def test_quantize_rejects_bad_width():
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4.nvfp4_quantize_ref(torch.zeros(2, 24))


@pytest.mark.parametrize("call, exc, match", [
    (lambda: nvfp4.empty_kv_cache(2, 1, 6), ValueError, "block_size must be a positive multiple of 4"),
    (lambda: nvfp4.empty_kv_cache(2, 0, 4), ValueError, "nkv must be 1, 2 or 4, got 0"),
    # the QKV op writes 1, 2 or 4 KV heads per rank: a cache for 3 was accepted, then refused there
    (lambda: nvfp4.empty_kv_cache(4, 3, 16), ValueError, "nkv must be 1, 2 or 4, got 3"),
    (lambda: nvfp4.empty_kv_cache(0, 1, 4), ValueError, "num_blocks must be >= 1"),
    (lambda: nvfp4.empty_kv_cache(2, 1, 4, page_pad=8), ValueError, "page_pad must be a non-negative multiple of 32"),
    (lambda: nvfp4.empty_index_cache(2.0, 16), TypeError, "num_blocks must be an int, got float"),
    (lambda: nvfp4.empty_index_cache(2, True), TypeError, "block_size must be an int, got bool"),
    (lambda: nvfp4.empty_kv_cache(2, 1, 4, "gpu"), ValueError, "device must name a device .*got 'gpu'"),
    (lambda: nvfp4.empty_index_cache(2, 4, device=True), TypeError, "device must be a torch.device.*got bool"),
])
def test_cache_constructors_check_their_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_cache_constructors_take_numpy_sizes():
    kv = nvfp4.empty_kv_cache(np.int64(2), np.int32(1), np.int64(8))
    assert kv.shape == (2, 2, 8, 72) and nvfp4.empty_index_cache(np.int64(3), np.int64(4)).shape == (3, 4, 72)
