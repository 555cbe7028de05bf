"""The exact conversion helpers of seam.kernels.numerics against torch, exhaustively where feasible.

Every fused kernel's bit-exactness rests on these helpers: on a GPU they are the native
RNE conversions, under the interpreter integer bit arithmetic (docs/platform.md).
"""

import pytest
import torch

from seam.formats.mxfp8 import e4m3_saturate_ref, ue8m0_from_amax_ref, ue8m0_inverse_ref, ue8m0_to_float
import numerics_probe  # tests/numerics_probe.py


def _same_bits_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    nan = torch.isnan(a.float()) & torch.isnan(b.float())
    bits = a.view(torch.int16) == b.view(torch.int16) if a.dtype == torch.bfloat16 else a == b
    return bits | nan


def _every_bf16_with_rounding_tails() -> torch.Tensor:
    """fp32 values b<<16 | tail for every BF16 pattern b and tails at/around the tie."""
    hi = torch.arange(1 << 16, dtype=torch.int64) << 16
    tails = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=torch.int64)
    bits = (hi[:, None] | tails[None, :]).flatten()
    return bits.to(torch.int32).view(torch.float32)


def _e4m3_boundaries() -> torch.Tensor:
    """Every E4M3 value, every midpoint between neighbours, and one fp32 ulp either side."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # +0 .. 448 (0x7F is NaN)
    vals = codes.view(torch.float8_e4m3fn).float()
    mids = (vals[1:] + vals[:-1]) / 2  # exact in fp32
    up = torch.nextafter(mids, torch.full_like(mids, float("inf")))
    down = torch.nextafter(mids, torch.zeros_like(mids))
    beyond = torch.tensor([448.0, 449.0, 463.99, 464.0, 464.01, 480.0, 500.0, 1e30, float("inf")])
    pos = torch.cat([vals, mids, up, down, beyond])
    return torch.cat([pos, -pos, torch.tensor([float("nan"), -float("nan")])])


def test_bf16_widening_every_pattern(device):
    """bf16_to_f32 is BF16 bits << 16 at every pattern, NaN payloads too (the odd length leaves a lone last element
    in its program)."""
    x = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)[: (1 << 16) - 1]
    got = numerics_probe.widen(x.to(device)).cpu()
    want = (x.view(torch.int16).to(torch.int32) & 0xFFFF) << 16
    assert torch.equal(got.view(torch.int32), want)


def test_bf16_rne_every_pattern_and_tie(device):
    x = _every_bf16_with_rounding_tails()
    got, _ = numerics_probe.convert(x.to(device))
    want = x.bfloat16()
    assert bool(_same_bits_or_both_nan(got.cpu(), want).all())


def test_bf16_rne_random_fp32(device):
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 16,), generator=g, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    got, _ = numerics_probe.convert(x.to(device))
    assert bool(_same_bits_or_both_nan(got.cpu(), x.bfloat16()).all())


def test_e4m3_every_boundary(device):
    x = _e4m3_boundaries()
    _, got = numerics_probe.convert(x.to(device))
    want = e4m3_saturate_ref(x).view(torch.uint8)
    bad = (got.cpu() != want).nonzero().flatten()
    assert bad.numel() == 0, f"first mismatches: {x[bad[:8]].tolist()} got {got.cpu()[bad[:8]].tolist()} want {want[bad[:8]].tolist()}"


def test_e4m3_every_bf16_value(device):
    # every finite BF16 value is an fp32 input the quantizers actually see
    x = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    _, got = numerics_probe.convert(x.to(device))
    assert torch.equal(got.cpu(), e4m3_saturate_ref(x).view(torch.uint8))


def test_e4m3_nan_and_signed_zero(device):
    x = torch.tensor([float("nan"), -0.0, 0.0, float("-inf"), float("inf")])
    _, got = numerics_probe.convert(x.to(device))
    assert got.cpu().tolist() == [0x7E, 0x80, 0x00, 0xFE, 0x7E]


def test_decode_every_code(device):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    e4m3, ue8m0 = numerics_probe.decode(codes.to(device))
    want_e4m3 = codes.view(torch.float8_e4m3fn).float()
    assert torch.equal(torch.isnan(e4m3.cpu()), torch.isnan(want_e4m3))
    finite = ~torch.isnan(want_e4m3)
    assert torch.equal(e4m3.cpu()[finite].view(torch.int32), want_e4m3[finite].view(torch.int32))
    want_s = ue8m0_to_float(codes)
    assert torch.equal(torch.isnan(ue8m0.cpu()), torch.isnan(want_s))
    assert torch.equal(ue8m0.cpu()[:255].view(torch.int32), want_s[:255].view(torch.int32))
    assert ue8m0.cpu()[0].item() == 2.0**-127 and ue8m0.cpu()[127].item() == 1.0


def test_scaled_bf16_every_code_and_scale(device):
    """e4m3_scaled_bf16 (BF16 multiplies on a GPU) is the RNE BF16 of the exact fp32 product, at every E4M3
    byte but the two NaN codes and every scale byte it takes (0..134: subnormal BF16 inputs, outputs and
    round-offs at the low end, 448 * 2^7 at the top)."""
    from seam.kernels.numerics import SCALED_BF16_MAX_SCALE

    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.int32).to(torch.uint8)
    s = torch.arange(SCALED_BF16_MAX_SCALE.value + 1, dtype=torch.int32).to(torch.uint8)
    c2, s2 = codes[:, None].expand(-1, len(s)).flatten(), s[None, :].expand(len(codes), -1).flatten()
    got = numerics_probe.scaled_bf16(c2.to(device), s2.to(device)).cpu()
    want = (c2.view(torch.float8_e4m3fn).float() * ue8m0_to_float(s2)).bfloat16()  # exact product, one RNE
    bad = (got.view(torch.int16) != want.view(torch.int16)).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} differ, first code {c2[bad[0]].item():#x} scale {s2[bad[0]].item()}"
    assert (want == 0).sum() > 2 * len(s) and (want.float().abs() < 2.0**-126).sum() > (want == 0).sum()


def test_scale_rule_boundaries(device):
    inv448 = torch.tensor(0x3B124925, dtype=torch.int32).view(torch.float32)
    k = torch.arange(-140, 128, dtype=torch.float32)
    on = 448.0 * torch.exp2(k)  # amax exactly 448 * 2^k: n is a power of two, no bump
    up = torch.nextafter(on, torch.full_like(on, float("inf")))
    specials = torch.tensor([0.0, 1e-38, 1e-40, 1e-45, 5.6e-39, float("inf"), 3.4e38, 448.0 * 2**-127])
    g = torch.Generator().manual_seed(1)
    rnd = torch.randint(0, 0x7F800000, (1 << 14,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    amax = torch.cat([on, up, specials, rnd])
    s, inv = numerics_probe.scales(amax.to(device))
    want_s = ue8m0_from_amax_ref(amax)
    assert torch.equal(s.cpu(), want_s)
    assert torch.equal(inv.cpu().view(torch.int32), ue8m0_inverse_ref(want_s).view(torch.int32))
    # spec corner cases, stated directly
    table = dict(zip(amax[len(on) * 2 : len(on) * 2 + len(specials)].tolist(), s.cpu()[len(on) * 2 :].tolist()))
    assert table[0.0] == 0 and table[float("inf")] == 254 and table[448.0 * 2**-127] == 0
    assert inv448.item() == torch.tensor(1 / 448, dtype=torch.float32).item()


@pytest.mark.gpu
def test_sigmoid_is_tritons_at_every_fp32_input():
    """numerics.sigmoid against tl.sigmoid on the GPU, at all 2^32 fp32 bit patterns (NaN: NaN)."""
    chunk = 1 << 28
    for start in range(-(1 << 31), 1 << 31, chunk):
        x = torch.arange(start, start + chunk, dtype=torch.int64, device="cuda").to(torch.int32).view(torch.float32)
        ours, theirs = numerics_probe.sigmoid(x)
        same = (ours.view(torch.int32) == theirs.view(torch.int32)) | (ours.isnan() & theirs.isnan())
        bad = (~same).nonzero()
        assert bad.numel() == 0, f"{bad.numel()} inputs differ, first x bits {x[bad[0]].view(torch.int32).item():#x}"
