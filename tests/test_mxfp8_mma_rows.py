"""The 16-row Gluon decode GEMM behind ``seam.mxfp8_linear`` at 1-8 tokens on K 512-768 (9-16 on its 16-token tile,
narrower layers) and 2-8 on K 3072, 4096, 6144 (``seam.kernels.mxfp8_mma_rows``).

On CPU: its launch rule (and where its activations go), the validation of a caller's tile and of the launcher's
arguments, that every kernel the rule can pick compiles for sm_90 without spills (the compile also proves that both
register relabellings move no data), and that the activations' loads all go out before the first MMA. On the GPU:
bytes equal to the exact product on operands whose sums are exact in any order, at every K the rule takes, with and
without the BF16-multiply weight route, activations staged and in registers, on both token tiles, at N not a multiple
of 16 and rows of other strides; through ``mxfp8_linear``, on MXFP8 rows, BF16 rows and rows that carry an A_deq (not read); and within
fp32 reordering of the tl kernel on random and edge rows.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import seam
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.kernels import mxfp8_mma_rows
from seam.kernels.mxfp8_gemm_config import (
    MMA_ROWS_LONG_MIN_N,
    MMA_ROWS_MIN_N,
    MMA_ROWS_TILE,
    mma_rows_per_sm,
    pick_mma_rows_tile,
    pick_qkv_tile,
    pick_tile,
)
from seam.kernels.mxfp8_mma_rows import (
    BLOCK_MS,
    MAX_REGISTERS,
    block_m_for,
    launch_mxfp8_mma_rows,
    programs_per_sm,
    shared_bytes,
    stages_activations,
    warps_for,
)
from seam.kernels.wgmma_config import (
    MMA_ROWS_LONG_KS,
    MMA_ROWS_LONG_MAX_M,
    MMA_ROWS_LONG_MIN_M,
    MMA_ROWS_LONG_PER_SM,
    MMA_ROWS_MAX_K,
    MMA_ROWS_MIN_K,
    MMA_ROWS_SHORT_MAX_M,
    MMA_ROWS_TOKENS16_MAX_WAVE,
    a_deq_pays,
)
from seam.ops.linear import check_tile
from mxfp8_rows import edge_and_random_rows, exact_block_inputs  # tests/mxfp8_rows.py
from sm90_tool import needs_tool, with_tool  # tests/sm90_tool.py

DOWN = (6144, 768)  # the MoE down projection per rank at TP 4
GATE_UP = (1536, 6144)  # the MoE gate_up projection per rank at TP 4: the long K
RULE_KS = [*range(MMA_ROWS_MIN_K, MMA_ROWS_MAX_K + 1, 256), *MMA_ROWS_LONG_KS]  # every K the rule takes


def test_rule_takes_1_16_tokens_at_k_512_768_and_2_8_at_3072_6144_in_one_wave():
    for m in range(1, 9):
        assert pick_mma_rows_tile(m, *DOWN, 132) == dataclasses.replace(MMA_ROWS_TILE, num_warps=2)
        long_k = pick_mma_rows_tile(m, *GATE_UP, 132)
        assert long_k == (dataclasses.replace(MMA_ROWS_TILE, num_warps=8) if m >= MMA_ROWS_LONG_MIN_M else None), m
    assert MMA_ROWS_LONG_MIN_M == 2  # one token: slower after a producer without PDL (the MoE router)
    for shape in (DOWN, GATE_UP):
        assert pick_mma_rows_tile(0, *shape, 132) is None and pick_mma_rows_tile(17, *shape, 132) is None
    # 9-16 tokens: the 16-token tile at the short K on the narrower layers only (DOWN is wider), never at the long K
    assert (MMA_ROWS_SHORT_MAX_M, MMA_ROWS_LONG_MAX_M, BLOCK_MS, MMA_ROWS_TOKENS16_MAX_WAVE) == (16, 8, (8, 16), 1.5)
    narrow = 16 * 198  # N 3168: 1.5 programs an SM on 132 (2.9 lost after SwiGLU, run 314)
    for m in range(9, 17):
        assert pick_mma_rows_tile(m, *DOWN, 132) is None and pick_mma_rows_tile(m, *GATE_UP, 132) is None
        assert pick_mma_rows_tile(m, 2048, 6144, 132) is None
        for k in (512, 768):
            assert pick_mma_rows_tile(m, narrow, k, 132) == dataclasses.replace(MMA_ROWS_TILE, block_m=16, num_warps=2)
            assert pick_mma_rows_tile(m, narrow + 1, k, 132) is None
            assert pick_mma_rows_tile(m, MMA_ROWS_MIN_N, k, 132) and not pick_mma_rows_tile(m, MMA_ROWS_MIN_N - 1, k, 132)
    assert [block_m_for(m) for m in (1, 8, 9, 16)] == [8, 8, 16, 16]
    # slower after a producer at 256, 1024-2048 and 7168; 5120 not measured
    assert RULE_KS == [512, 768, 3072, 4096, 6144]
    # too short, odd steps (one warp), not whole steps, between the ranges, not measured, too long
    for k in (256, 384, 640, 704, 1024, 1536, 2048, 2560, 3328, 5120, 6400, 7168):
        assert pick_mma_rows_tile(2, 2048, k, 132) is None, k
    assert pick_mma_rows_tile(8, MMA_ROWS_MIN_N, 768, 132) and not pick_mma_rows_tile(8, MMA_ROWS_MIN_N - 1, 768, 132)
    assert pick_mma_rows_tile(8, MMA_ROWS_LONG_MIN_N, 6144, 132)
    assert not pick_mma_rows_tile(8, MMA_ROWS_LONG_MIN_N - 1, 6144, 132)
    # the QKV projection: 160 programs, two fit an SM but its wave takes one (two lost at 8 tokens)
    assert pick_mma_rows_tile(8, 2560, 6144, 132) is None
    for k in RULE_KS:  # one wave at most: N / 16 programs within the SMs' room
        widest, m = 16 * 132 * mma_rows_per_sm(k), 4
        assert pick_mma_rows_tile(m, widest, k, 132) is not None and pick_mma_rows_tile(m, widest + 1, k, 132) is None
        assert pick_mma_rows_tile(m, widest // 2, k, 66) is not None and pick_mma_rows_tile(m, widest, k, 66) is None
        t = pick_mma_rows_tile(m, widest, k, 132)
        assert t.mma_rows and t.wgmma and t.num_warps == warps_for(k) and (k // 128) % t.num_warps == 0
    # the room: registers at K <= 1536, then shared memory; the wave at the long K as measured
    assert [programs_per_sm(k) for k in (768, 1536, 3072, 4096, 6144)] == [8, 4, 2, 3, 2]
    assert [mma_rows_per_sm(k) for k in (768, 1536, 3072, 4096, 6144)] == [8, 4, 2, 2, 1]
    assert [programs_per_sm(k, 16) for k in (512, 768)] == [8, 8]  # 16 tokens: the registers bound it
    assert [mma_rows_per_sm(k, 16) for k in (512, 768)] == [8, 8]
    assert sorted(MMA_ROWS_LONG_PER_SM) == sorted(MMA_ROWS_LONG_KS)


def test_activations_in_registers_but_at_k_3072():
    """Staged in shared memory only at K 3072 (slower after the norm in registers, run 286) and past 8 steps a warp,
    which would not fit the registers; the launch counts the steps on the warps it is given."""
    assert [stages_activations(k) for k in RULE_KS] == [False, False, True, False, False]
    # an override's K: 1 warp at K 1152 (9 steps), 8 at K 9216 (9 steps)
    assert [stages_activations(k) for k in (1024, 1152, 7168, 8192, 9216)] == [False, True, False, False, True]
    assert stages_activations(6144, 4) and not stages_activations(6144, 8) and stages_activations(2048, 1)
    assert shared_bytes(6144) < shared_bytes(6144, True) and shared_bytes(3072) == shared_bytes(3072, True)
    # 16 tokens: twice the registers a step, so held at the short K (2-3 steps a warp), staged from 5 steps a warp
    assert [stages_activations(k, block_m=16) for k in (512, 768, 1024, 1280, 4096)] == [False] * 3 + [True] * 2
    assert shared_bytes(768, block_m=16) == shared_bytes(768) < shared_bytes(768, True, block_m=16)
    assert shared_bytes(768, True, 16) - shared_bytes(768, True) == 4 * 2 * 8 * 132  # 4 (3 padded) steps, 2 warps


@needs_tool
@pytest.mark.timeout(300)
def test_activation_loads_all_go_out_before_the_first_mma():
    """In registers, every step's loads (two 16-byte E4M3 loads and a scale byte a thread and 8-token tile) are issued
    between the PDL wait and the first MMA, and none after it: one round trip (run 284: one step at a time lost 1-4
    us). On both token tiles at the short K."""
    cases = [(k, 8) for k in RULE_KS if not stages_activations(k)] + [(k, 16) for k in (512, 768)]
    results = with_tool(
        f"for k, block_m in {cases}:\n"
        "    lines = tool.resources('rows', block_m, k=k, ptx=True)['ptx'].splitlines()\n"
        "    at = lambda op: [i for i, l in enumerate(lines) if op in l]\n"
        "    wait, mma, loads = at('griddepcontrol.wait')[0], at('mma.sync')[0], at('ld.global')\n"
        "    print(json.dumps([k, block_m, sum(wait < i < mma for i in loads), sum(i > mma for i in loads)]))\n"
    )
    assert [tuple(r[:2]) for r in results] == cases
    for k, block_m, between, after in results:
        assert between == 3 * (k // 128 // warps_for(k)) * (block_m // 8) and after == 0, (k, block_m, between, after)


def test_warps_split_the_steps_evenly():
    ks = (128, 256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 3072, 4096, 4224, 5120, 6144, 7168)
    assert [warps_for(k) for k in ks] == [1, 2, 1, 2, 1, 2, 2, 2, 4, 4, 4, 4, 1, 8, 8, 8]


def test_pick_tile_takes_it_where_it_may(monkeypatch):
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    narrow = (16 * 198, 768)  # the widest 16-token layer on 132 SMs
    for m in (9, 16):  # the 16-token tile, on MXFP8 rows and rows that carry an A_deq, not for the QKV op
        assert pick_tile(m, *narrow, cuda).mma_rows and pick_tile(m, *narrow, cuda).block_m == 16
        assert pick_tile(m, *narrow, cuda, a_deq=True).mma_rows and not pick_qkv_tile(m, *narrow, cuda).mma_rows
        assert not pick_tile(m, *narrow, cuda, mma_rows=False).mma_rows
        # the producers still write A_deq at 9-16 tokens: the wider layers' decode kernel reads it
        assert a_deq_pays(m, 768, cuda) and not a_deq_pays(8, 768, cuda)
    assert not pick_tile(17, *narrow, cuda).mma_rows
    for m in (1, 2, 8):
        assert pick_tile(m, *DOWN, cuda).mma_rows
        assert not pick_tile(m, *DOWN, cuda, mma_rows=False).mma_rows  # BF16 rows quantized in the GEMM
        assert not pick_tile(m, *DOWN, cuda, tl_only=True).wgmma
        assert not pick_qkv_tile(m, *DOWN, cuda).mma_rows  # the QKV op's GEMM writes split-K partials
    assert not pick_tile(9, *DOWN, cuda).mma_rows
    assert pick_tile(4, *DOWN, cuda, a_deq=True).mma_rows  # faster than the decode kernel reading the A_deq
    assert pick_tile(8, 6144, 512, cuda).mma_rows and not pick_tile(8, 6144, 1024, cuda).mma_rows
    for m in (2, 8):  # at the long K too, on MXFP8 rows and on rows that carry an A_deq
        assert pick_tile(m, *GATE_UP, cuda).mma_rows and pick_tile(m, *GATE_UP, cuda, a_deq=True).mma_rows
        assert not pick_tile(m, 2560, 6144, cuda).mma_rows  # two waves
    assert not pick_tile(1, *GATE_UP, cuda).wgmma  # one token there: the GEMV
    assert pick_tile(1, 4096, 3072, cuda).wgmma and not pick_tile(1, 4096, 3072, cuda).mma_rows  # the decode kernel


def test_pick_tile_never_takes_it_off_hopper():
    assert not any(pick_tile(m, *DOWN, torch.device("cpu")).wgmma for m in range(1, 9))


def test_tile_override_checked(monkeypatch):
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    cuda = torch.device("cuda")
    good = dataclasses.replace(MMA_ROWS_TILE, num_warps=2)
    good16 = dataclasses.replace(good, block_m=16)
    assert check_tile(good, 768, 8, cuda) == good and check_tile(good16, 768, 16, cuda) == good16
    assert check_tile(good16, 768, 3, cuda) == good16  # a larger token tile than M needs runs too
    for tile, m, k, msg in (
        (dataclasses.replace(good, num_warps=8), 4, 768, "must be Tile"),  # K 768's steps take 2 warps
        (good, 9, 768, "M <= block_m"),
        (good16, 17, 768, "M <= block_m"),
        (dataclasses.replace(good, block_m=32), 4, 768, r"block_m one of \(8, 16\)"),
        (dataclasses.replace(good16, num_warps=8), 4, 6144, "fits shared memory"),  # 16 tokens staged: 237 KB
        (dataclasses.replace(good, split_k=2), 4, 768, "must be Tile"),
        (dataclasses.replace(good, num_stages=2), 4, 768, "must be Tile"),
        (dataclasses.replace(good, num_warps=8), 4, 14336, "fits shared memory"),
        (dataclasses.replace(good, num_warps=1), 4, 8320, "fits shared memory"),  # 65 steps: scale rows padded to 128
        (good, 4, 704, "multiple of 128"),
    ):
        with pytest.raises(ValueError, match=msg):
            check_tile(tile, k, m, cuda)


def test_launcher_refuses_what_it_cannot_run():
    xq = torch.zeros(17, 768, dtype=torch.float8_e4m3fn)
    w = torch.zeros(6144, 768, dtype=torch.float8_e4m3fn)
    s = torch.zeros(1, dtype=torch.uint8)
    out = torch.zeros(17, 6144, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="M=17 exceeds 16"):
        launch_mxfp8_mma_rows(xq, s, w, s, out, 2, False)
    for block_m in (8, 32):
        with pytest.raises(ValueError, match=r"block_m must be one of \(8, 16\) holding M=9"):
            launch_mxfp8_mma_rows(xq[:9], s, w, s, out, 2, False, block_m=block_m)
    with pytest.raises(ValueError, match="K=768 must be a multiple of 128 whose steps 4 warps split evenly"):
        launch_mxfp8_mma_rows(xq[:8], s, w, s, out, 4, False)


@needs_tool
@pytest.mark.timeout(300)
def test_every_kernel_the_rule_picks_compiles_for_sm90_without_spills():
    """Each K the rule takes (the code depends on K and its warps), with the weight through fp32 and by BF16
    multiplies, the activations where the launch puts them (and the other way at K 768, 3072 and 6144, weights by
    BF16 multiplies): no spills, at most MAX_REGISTERS a thread, the shared memory shared_bytes says (the one-wave
    rule and the override check read both); K 256, 640 and 1536 too (2, 1 and 4 warps), which an override may take;
    the 16-token tile at the short K, held and staged, and at K 1024 and 1280 (held, staged: an override's)."""
    short = list(range(MMA_ROWS_MIN_K, MMA_ROWS_MAX_K + 1, 256))
    results = with_tool(
        f"for k in {list(RULE_KS) + [256, 640, 1536]}:\n"
        f"    for bf16_mul in ((False, True) if k in {list(RULE_KS)} else (True,)):\n"
        "        print(json.dumps([k, 8, bf16_mul, None, tool.resources('rows', 8, k=k, bf16_mul=bf16_mul)]))\n"
        "for k, staged in ((768, True), (3072, False), (6144, True)):\n"
        "    print(json.dumps([k, 8, True, staged, tool.resources('rows', 8, k=k, bf16_mul=True, acts_staged=staged)]))\n"
        f"for k in {short}:\n"
        "    for bf16_mul in (False, True):\n"
        "        print(json.dumps([k, 16, bf16_mul, None, tool.resources('rows', 16, k=k, bf16_mul=bf16_mul)]))\n"
        f"for k, staged in ((768, True), (1024, None), (1280, None)):\n"
        "    print(json.dumps([k, 16, True, staged, tool.resources('rows', 16, k=k, bf16_mul=True, acts_staged=staged)]))\n"
    )
    assert len(results) == 2 * len(RULE_KS) + 6 + 2 * len(short) + 3
    for k, block_m, bf16_mul, staged, r in results:
        assert r["stack_bytes"] == 0, (k, block_m, bf16_mul, r)
        assert r["shared_bytes"] == mxfp8_mma_rows.shared_bytes(k, staged, block_m), (k, block_m, staged, r)
        assert r["registers"] <= MAX_REGISTERS, (k, block_m, bf16_mul, r)


# GPU: bytes on exact sums, through the launcher and through mxfp8_linear.


def _exact_operands(m, n, k, seed):
    x, w, want = exact_block_inputs(m, n, k, seed=seed)
    xq, xs = seam.mxfp8_quantize(x)
    return x, xq, xs, w, want


@pytest.mark.gpu
@pytest.mark.parametrize("k", [128, 256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 3072, 4096, 6144, 7168])
@pytest.mark.parametrize("m,n", [(1, 6144), (2, 6152), (5, 200), (8, 6144), (3, 8)])
@pytest.mark.parametrize("bf16_mul", [False, True])
@pytest.mark.parametrize("acts_staged", [True, False])
def test_bit_exact_gpu(m, n, k, bf16_mul, acts_staged):
    """Every K the rule takes, others (one warp at odd step counts, 4 warps from 1536, 8 from 5120): N past a
    multiple of 16 (TMA fills the last program's rows with zeros) and below it (one program, half its rows past N),
    weights by either route."""
    _, xq, xs, w, want = _exact_operands(m, n, k, seed=m * k + n)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch_mxfp8_mma_rows(xq, xs, w.values, w.scales, out, warps_for(k), True, bf16_mul=bf16_mul,
                          acts_staged=acts_staged)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("k", [256, 384, 512, 768, 1024, 1280, 1536, 2048])
@pytest.mark.parametrize("m,n,block_m", [(9, 6152, None), (16, 6144, None), (12, 200, None), (16, 8, None),
                                         (3, 2056, 16)])
@pytest.mark.parametrize("bf16_mul", [False, True])
@pytest.mark.parametrize("acts_staged", [True, False])
def test_bit_exact_16_tokens_gpu(m, n, block_m, k, bf16_mul, acts_staged):
    """The 16-token tile: the short K the rule takes and others an override may run (K 384: 1 warp, 1536 and 2048: 4),
    N past and below a multiple of 16, 9-16 tokens and a tile wider than M (rows past M masked)."""
    _, xq, xs, w, want = _exact_operands(m, n, k, seed=m * k + n + 1)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch_mxfp8_mma_rows(xq, xs, w.values, w.scales, out, warps_for(k), True, bf16_mul=bf16_mul,
                          acts_staged=acts_staged, block_m=block_m)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [6, 14])
@pytest.mark.parametrize("acts_staged", [True, False])
def test_strided_rows_gpu(m, acts_staged):
    """Activation rows at an odd offset and stride, weight rows with a stride past K, output rows with one past N in
    a buffer of 16 rows: read and written in place, nothing else touched (not the rows past M either); both token
    tiles."""
    n, k = 6144, 768
    _, xq, xs, w, want = _exact_operands(m, n, k, seed=7)
    wide = torch.zeros(m, k + 257, dtype=torch.float8_e4m3fn, device="cuda")
    wide[:, 65:65 + k] = xq
    w_wide = torch.zeros(n, k + 128, dtype=torch.float8_e4m3fn, device="cuda")
    w_wide[:, :k] = w.values
    out = torch.full((16, n + 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch_mxfp8_mma_rows(wide[:, 65:65 + k], xs, w_wide[:, :k], w.scales, out[:m, :n], warps_for(k), True,
                          acts_staged=acts_staged)
    assert torch.equal(out[:m, :n].view(torch.int16), want.view(torch.int16))
    assert out[:m, n:].isnan().all() and out[m:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, *DOWN), (3, *DOWN), (8, *DOWN), (2, *GATE_UP), (8, *GATE_UP),
                                   (9, 2048, 768), (16, 3064, 512)])
def test_mxfp8_linear_picks_it_and_writes_the_exact_bytes_gpu(monkeypatch, m, n, k):
    """It runs on MXFP8 rows, on rows that carry an A_deq (not read) and on BF16 rows quantized apart; BF16 rows
    quantized in the GEMM ("in_gemm", and "auto": faster there, log run 273) take the decode kernel: the same exact
    bytes. At the short K (down), the long K (gate_up, 8 warps) and on the 16-token tile."""
    from seam.kernels import gluon_launch

    launched, launch = [], gluon_launch.launch_mxfp8_mma_rows
    monkeypatch.setattr(gluon_launch, "launch_mxfp8_mma_rows",
                        lambda *a, **kw: launched.append(kw["block_m"]) or launch(*a, **kw))
    if pick_tile(m, n, k, torch.device("cuda")) != pick_mma_rows_tile(m, n, k, torch.cuda.get_device_properties(0)
                                                                      .multi_processor_count):
        pytest.skip("the rule does not take this shape on this GPU")
    x, xq, xs, w, want = _exact_operands(m, n, k, seed=m)
    assert pick_tile(m, n, k, x.device).mma_rows
    acts = (seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k)),
            seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs)))
    for arg, quantize in ((acts[0], "auto"), (acts[1], "auto"), (x, "separate"), (x, "in_gemm"), (x, "auto")):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        before = len(launched)
        seam.mxfp8_linear(arg, w, out=out, quantize=quantize)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), quantize
        ran = len(launched) > before
        assert ran == (arg is not x or quantize == "separate"), (quantize, ran)
        assert not ran or launched[-1] == (16 if m > 8 else 8), launched


@pytest.mark.gpu
@pytest.mark.parametrize("m", [8, 16])
@pytest.mark.parametrize("acts_staged", [True, False])
def test_within_fp32_reordering_of_the_tl_kernel_gpu(m, acts_staged):
    """Random and edge rows (zeros, a scale byte 0, one dominating element, inf / NaN, huge, -0.0): the tl
    kernel's outputs up to fp32 summation order, non-finite outputs in the same places; both token tiles."""
    n, k = DOWN
    x = edge_and_random_rows(m, k, seed=3).cuda()
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=torch.Generator().manual_seed(4)) * 0.05).cuda())
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    got = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    launch_mxfp8_mma_rows(xq, xs, w.values, w.scales, got, warps_for(k), True, acts_staged=acts_staged)
    tl_tile = pick_tile(m, n, k, x.device, tl_only=True)
    want = seam.mxfp8_linear(act, w, tile=tl_tile)
    finite = want.isfinite()
    assert torch.equal(finite, got.isfinite()) and torch.equal(want.isnan(), got.isnan())
    deq_x = seam.mxfp8_dequantize(xq, xs).double()
    deq_w = seam.mxfp8_dequantize(w.values, w.scales).double()
    bound = k * 2.0**-24 * (deq_x.abs() @ deq_w.abs().t()) + want.double().abs() * 2.0**-8  # sums + BF16 rounding
    assert ((got.double() - want.double()).abs()[finite] <= 2 * bound[finite]).all()


@pytest.mark.gpu
def test_weights_bf16_multiplies_cannot_take_keep_the_fp32_path_gpu(monkeypatch):
    """mxfp8_linear launches the BF16-multiply weight route for a quantized weight, and the fp32 one for a weight
    with scale bytes above 134 or a NaN code (exact bytes, the NaN column NaN); on random sums both routes give the
    same bytes (the same BF16 operands, the same MMAs)."""
    from seam.kernels import gluon_launch

    m, n, k = 8, *DOWN
    if not pick_tile(m, n, k, torch.device("cuda")).mma_rows:
        pytest.skip("the rule does not take this shape on this GPU")
    launched, launch = [], gluon_launch.launch_mxfp8_mma_rows
    monkeypatch.setattr(gluon_launch, "launch_mxfp8_mma_rows",
                        lambda *args, **kw: launched.append(kw["bf16_mul"]) or launch(*args, **kw))
    x, xq, xs, w, want = _exact_operands(m, n, k, seed=11)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    assert torch.equal(seam.mxfp8_linear(act, w).view(torch.int16), want.view(torch.int16))
    big = seam.MXFP8Weight.from_bf16(w.dequantize().to(torch.bfloat16) * 2.0**20)
    want_big = (want.double() * 2.0**20).to(torch.bfloat16)
    assert torch.equal(seam.mxfp8_linear(act, big).view(torch.int16), want_big.view(torch.int16))
    values = w.values.view(torch.uint8).clone()
    values[5, 100] = 0x7F
    got = seam.mxfp8_linear(act, seam.MXFP8Weight(values, w.scales))
    assert got[:, 5].isnan().all()
    assert torch.equal(torch.cat([got[:, :5], got[:, 6:]], 1).view(torch.int16),
                       torch.cat([want[:, :5], want[:, 6:]], 1).view(torch.int16))
    assert launched == [True, False, False]
    rnd = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=torch.Generator().manual_seed(5)) * 0.05).cuda())
    xr = (torch.randn(m, k, generator=torch.Generator().manual_seed(6)) * 4).to(torch.bfloat16).cuda()
    xrq, xrs = seam.mxfp8_quantize(xr)
    outs = []
    for on in (True, False):
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        launch(xrq, xrs, rnd.values, rnd.scales, out, warps_for(k), True, bf16_mul=on)
        outs.append(out.view(torch.int16))
    assert torch.equal(*outs)
