"""seam.qkv_index_fused_epilogue (``docs/spec/qkv_epilogue.md``).

- the epilogue on a given fp32 accumulator: bytes equal to ``seam.ref.qkv`` (the
  kernel's own code path with the GEMM replaced by a load);
- the fused GEMM + epilogue against the unfused chain (``mxfp8_linear`` -> BF16 qkv ->
  PyTorch epilogue): q within 2e-2 relative (max error over a row against the row's
  max magnitude: the BF16 round trip of qkv moves each value by <= 2^-9 relative, which
  norm and RoPE keep at that order; FP8 q / index_q also get one E4M3 step of their
  own value), cache entries within one E2M1 code and one E4M3 scale step, bytes of untouched slots (slot -1) unchanged;
- every bad argument rejected before any byte is written.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import seam
from seam import runtime
from seam.bench.qkv import qkv_unfused
from seam.formats import nvfp4
from seam.kernels import mxfp8_gemm_config as gemm_config
from seam.kernels import mxfp8_wgmma_ws, wgmma_config, workspace
from seam.kernels.mxfp8_gemm_config import (
    BF16_MM_TILE,
    GEMV_TILE,
    LARGE_TILE,
    TWO_PER_SM_REGISTERS,
    Tile,
    pick_qkv_tile,
    pick_tile,
    small_tile,
)
from seam.ops import qkv as qkv_ops
from seam.kernels.gemm_workspace import gemm_scratch
from seam.kernels.qkv_config import epilogue_tile, epilogue_tile_after, workspace_floats
from seam.kernels import qkv_epilogue as qkv_epilogue_mod
from seam.kernels.qkv_epilogue import launch_qkv_epilogue
from seam.ops.qkv import qkv_epilogue
from seam.ref.norm import sqrt_rn
from seam.ref.qkv import qkv_epilogue_ref, qkv_gemm_ref


@dataclasses.dataclass
class Problem:
    nkv: int
    m: int
    k: int
    block_size: int
    num_blocks: int
    x: torch.Tensor
    weight: seam.MXFP8Weight
    positions: torch.Tensor
    cos_sin_cache: torch.Tensor
    norm_weights: tuple
    slots: torch.Tensor
    index_slots: torch.Tensor

    @property
    def n(self) -> int:
        return (19 * self.nkv + 1) * 128

    def outputs(self, *, q=True, q_fp8=True, page_pad=32, fill=None) -> dict:
        dev = self.x.device
        kv = nvfp4.empty_kv_cache(self.num_blocks, self.nkv, self.block_size, dev, page_pad)
        idx = nvfp4.empty_index_cache(self.num_blocks, self.block_size, dev, page_pad)
        if fill is not None:
            g = torch.Generator().manual_seed(fill)
            for c in (kv, idx):
                c.copy_(torch.randint(0, 256, c.shape, generator=g, dtype=torch.uint8))
        qn = 16 * self.nkv * 128
        return dict(
            kv_cache=kv,
            index_cache=idx,
            index_q_out=torch.zeros(self.m, self.nkv * 128, dtype=torch.float8_e4m3fn, device=dev),
            q_out=torch.zeros(self.m, qn, dtype=torch.bfloat16, device=dev) if q else None,
            q_fp8_out=torch.zeros(self.m, qn, dtype=torch.float8_e4m3fn, device=dev) if q_fp8 else None,
        )

    def args(self):
        return (self.positions, self.cos_sin_cache, *self.norm_weights, 1e-6)

    def kw(self, **scales):
        return dict(slot_mapping=self.slots, index_slot_mapping=self.index_slots, **scales)


def make_problem(nkv=1, m=5, k=256, block_size=4, seed=0, device="cpu", num_blocks=None, integer=False) -> Problem:
    """A random problem; ``integer``: x and w hold small integers, so every GEMM partial sum is exact in fp32."""
    g = torch.Generator().manual_seed(seed)
    n = (19 * nkv + 1) * 128
    num_blocks = num_blocks or max(2, -(-2 * m // block_size))
    if integer:
        # |x*w| <= 16 and K <= 6144: sums stay integers below 2^24 in any order
        x = torch.randint(-4, 5, (m, k), generator=g).to(torch.bfloat16)
        w = torch.randint(-4, 5, (n, k), generator=g).to(torch.bfloat16)
    else:
        x = torch.randn(m, k, generator=g).to(torch.bfloat16)
        w = (torch.randn(n, k, generator=g) * k**-0.5 * 4).to(torch.bfloat16)
    max_pos = 64
    angle = torch.arange(max_pos)[:, None] * torch.exp2(-torch.arange(32) / 4.0)[None, :]
    cs = torch.cat((angle.cos(), angle.sin()), dim=1).to(torch.bfloat16)
    norm_weights = tuple((torch.randn(128, generator=g) * 0.2).to(torch.bfloat16).to(device) for _ in range(4))
    perm = torch.randperm(num_blocks * block_size, generator=g)
    slots = perm[:m].clone()
    index_slots = perm[m : 2 * m].clone() if 2 * m <= perm.numel() else perm[:m].flip(0).clone()
    slots[1::3] = -1
    index_slots[2::3] = -1
    return Problem(
        nkv, m, k, block_size, num_blocks, x.to(device), seam.MXFP8Weight.from_bf16(w.to(device)),
        torch.randint(0, max_pos, (m,), generator=g).to(device), cs.to(device), norm_weights,
        slots.to(device), index_slots.to(device),
    )


def _bytes(t):
    return None if t is None else t.view(torch.uint8)


def _assert_outputs_equal(a: dict, b: dict, nan_aware_q: bool = False) -> None:
    for name in a:
        if a[name] is None:
            assert b[name] is None
            continue
        if name == "q_out" and nan_aware_q:
            x, y = a[name].float(), b[name].float()
            both_nan = torch.isnan(x) & torch.isnan(y)
            assert torch.equal(torch.isnan(x), torch.isnan(y)), name
            assert torch.equal(_bytes(a[name])[~both_nan.repeat_interleave(2, 1)],
                               _bytes(b[name])[~both_nan.repeat_interleave(2, 1)]), name
            continue
        assert torch.equal(_bytes(a[name]), _bytes(b[name])), name


def _edge_accumulator(p: Problem, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    acc = torch.randn(p.m, p.n, generator=g) * 4
    heads = acc.view(p.m, -1, 128)
    heads[0, 0] = 0.0  # all-zero q head: r = 1/sqrt(eps)
    heads[0, 16 * p.nkv] = 0.0  # all-zero k head
    heads[0, 17 * p.nkv] = -0.0  # all-zero v head (-0.0)
    if p.m > 1:
        heads[1, :, :] *= 1e-20  # tiny rows
        heads[1, :, 7] = 1e3  # one dominating element per head
    if p.m > 2:
        heads[2, 1] = 1e-42  # subnormal q head
        heads[2, 17 * p.nkv, ::3] = 5.0  # v head with exact E2M1 midpoints at sf = 1
        heads[2, 17 * p.nkv, 1::3] = 6.0
    return acc.to(p.x.device)


@pytest.mark.parametrize("nkv,block_size,m", [(1, 4, 5), (2, 16, 3), (1, 16, 1)])
def test_epilogue_on_given_accumulator_is_bit_exact(nkv, block_size, m, device):
    p = make_problem(nkv=nkv, m=m, block_size=block_size, seed=nkv * 10 + m, device=device)
    acc = _edge_accumulator(p, seed=m)
    scales = dict(q_fp8_scale=0.37, k_scale=0.8, v_scale=1.7)
    got, want = p.outputs(fill=1), p.outputs(fill=1)
    qkv_epilogue(acc, *p.args(), **p.kw(**scales), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(**scales), **want)
    _assert_outputs_equal(got, want)
    if m == 5:  # a caller's tile with a K split: there is no K here, so the split does not apply
        split = p.outputs(fill=1)
        qkv_epilogue(acc, *p.args(), **p.kw(**scales), tile=dataclasses.replace(small_tile(m), split_k=4), **split)
        _assert_outputs_equal(split, want)


def test_epilogue_caller_block_n_does_not_apply(device, monkeypatch):
    """Each epilogue program is one 128-wide head (the staged rows' workspace is sized by block_n):
    a caller's tile reaches the launch with block_n 128 and gives the same bytes."""
    tiles, launch = [], qkv_ops.launch_qkv_epilogue
    monkeypatch.setattr(qkv_ops, "launch_qkv_epilogue", lambda **kw: tiles.append(kw["tile"]) or launch(**kw))
    p = make_problem(nkv=1, m=5, block_size=4, seed=15, device=device)
    acc = _edge_accumulator(p, seed=5)
    got, want = p.outputs(fill=1), p.outputs(fill=1)
    qkv_epilogue(acc, *p.args(), **p.kw(), tile=dataclasses.replace(small_tile(5), block_n=64), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want)
    assert [t.block_n for t in tiles] == [128]


@pytest.mark.parametrize("tile", sorted({epilogue_tile(m) for m in (1, 17, 65)}, key=repr), ids=str)
def test_epilogue_every_default_tile_is_bit_exact(tile, device):
    # the epilogue-only launch's tiles (one-row programs of 2 or 1 warps, 16-row 4-warp programs) on edge rows
    p = make_problem(nkv=1, m=19, block_size=8, seed=88, device=device)
    acc = _edge_accumulator(p, seed=19)
    scales = dict(q_fp8_scale=0.37, k_scale=0.8, v_scale=1.7)
    got, want = p.outputs(fill=1), p.outputs(fill=1)
    qkv_epilogue(acc, *p.args(), **p.kw(**scales), tile=tile, **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(**scales), **want)
    _assert_outputs_equal(got, want)


def test_epilogue_sums_the_gluon_gemms_partials_in_split_order(device):
    """The two-launch path on Hopper: the Gluon GEMM leaves its split-K partials [heads, splits, MP, 128] and
    the epilogue kernel sums them from +0.0 in split order (the GEMM's own combine, bit for bit), then runs
    the epilogue: equal to the reference on that sum, edge values (-0.0, inf, NaN, huge) among the partials."""
    p = make_problem(nkv=1, m=5, block_size=4, seed=64, device=device)
    g = torch.Generator().manual_seed(64)
    parts = torch.randn(p.n // 128, 3, 8, 128, generator=g) * torch.exp2(torch.randint(-20, 20, (1, 3, 1, 128),
                                                                                         generator=g).float())
    parts[:, :, 0, :4] = -0.0  # all three -0.0: the sum from +0.0 is +0.0
    parts[2, 1, 1, 5], parts[3, 2, 2, 6], parts[17, 0, 3, 7] = float("inf"), float("nan"), 3e38
    parts[17, 1, 3, 7] = 3e38  # overflows to inf in the sum
    want_acc = torch.zeros(8, p.n)
    for s in range(3):
        want_acc += parts[:, s].permute(1, 0, 2).reshape(8, p.n)
    scales = dict(q_fp8_scale=0.37, k_scale=0.8, v_scale=1.7)
    got, want = p.outputs(fill=1), p.outputs(fill=1)
    with np.errstate(all="ignore"):  # the bare launcher: seam's ops silence the interpreter's inf/NaN warnings
        launch_qkv_epilogue(
            xq=None, xsf=None, wq=None, wsf=None, acc=parts.to(device), positions=p.positions,
            cos_sin_cache=p.cos_sin_cache, norm_weights=tuple(p.norm_weights), eps=1e-6, slot_mapping=p.slots,
            index_slot_mapping=p.index_slots, **got,
            inv_scales=tuple(nvfp4.f32_reciprocal(v) for v in scales.values()), nkv=1, tile=epilogue_tile(8),
        )
    qkv_epilogue_ref(want_acc[: p.m].to(device), *p.args(), **p.kw(**scales), **want)
    _assert_outputs_equal(got, want, nan_aware_q=True)


@pytest.mark.parametrize("m, k, block_m", [(20, 256, 8), (257, 128, 256)])
def test_a_tile_traced_at_fewer_tokens_is_picked_again(m, k, block_m, device, monkeypatch):
    """The fused op's launch on a Gluon tile recorded for fewer tokens (a trace replayed at another M by an engine
    that skips Dynamo's guards) picks again for M: a decode-kernel tile (mxfp8_gemm_config.covers), and a ring tile
    past its 256 rows (the ring kernel computes every row, but the epilogue reads one 256-row M tile of its
    partials: the others at wrong offsets). The Gluon GEMM then gets a tile that covers M (here refused by a
    stand-in, so the tl path runs; at 257 tokens and K 128 the pick is the tl path itself), and the bytes are the
    reference's."""
    from seam.kernels import qkv_epilogue as launch_mod
    from seam.kernels.mxfp8_gemm_config import covers

    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    ran = []
    monkeypatch.setattr(launch_mod, "launch_gluon", lambda *a, **kw: ran.append(a[5]))  # None: TMA cannot read
    p = make_problem(nkv=1, m=m, k=k, block_size=4, seed=65, device=device, integer=True)
    xq, xsf = seam.mxfp8_quantize(p.x)
    got, want = p.outputs(fill=2), p.outputs(fill=2)
    with np.errstate(all="ignore"):
        launch_qkv_epilogue(
            xq=xq, xsf=xsf, wq=p.weight.values, wsf=p.weight.scales, acc=None, positions=p.positions,
            cos_sin_cache=p.cos_sin_cache, norm_weights=tuple(p.norm_weights), eps=1e-6, slot_mapping=p.slots,
            index_slot_mapping=p.index_slots, **got, inv_scales=(1.0, 1.0, 1.0), nkv=1,
            tile=Tile(block_m, 128, 128, 8, 2, 1, wgmma=True),  # block_m 256: the ring kernel
        )
    picked = pick_qkv_tile(m, p.n, k, xq.device)
    assert ran == ([picked] if picked.wgmma else []) and all(covers(t, m, partials=True) for t in ran)
    qkv_epilogue_ref(qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales), *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want)


@pytest.mark.parametrize(
    "m, block_m, split, want",
    [
        (1, 8, 1, (True, 1, 2)),  # decode kernel: one-row 2-warp programs, inputs read before the wait
        (5, 8, 3, (True, 5, 2)),
        (20, 32, 2, (True, 20, 2)),  # epilogue_tile(32), the rule before, ran one warp here
        (70, 128, 6, (True, 70, 2)),  # the decode kernel's 128-token streamed tile at split 6: one-row programs
        (70, 128, 2, (True, 18, 4)),  # ... at split 2: 4-row 4-warp programs, rows staged past the partials
        (81, 96, 3, (True, 21, 4)),  # a 64 + tail tile's partials, [heads, split, 96, 128]
        (81, 96, 4, (True, 81, 2)),  # ... at split 4 (K 2048 at nkv 1 picks it): one-row programs
        (40, 64, 2, (True, 40, 2)),  # the 64-row tile at split 2: one-row programs (measured to 64 rows so)
        (130, 256, 2, (False, 33, 4)),  # the 256-token ring kernel: 4-row programs too
    ],
)
def test_gluon_gemm_partials_take_the_epilogue_tile_after_it(m, block_m, split, want, device, monkeypatch):
    """The fused op's Hopper two-launch path, the Gluon launch replaced by the reference's partials (written
    into the workspace, where the GEMM leaves them): the epilogue kernel after it runs
    epilogue_tile_after's tile, the INPUTS_BEFORE_WAIT variant after the decode kernel only (it triggers
    this kernel past its own wait, so the inputs may be read before the epilogue's wait), and writes the
    reference's bytes."""
    p = make_problem(nkv=1, m=m, block_size=4, seed=11 + m, integer=True, device=device,
                     num_blocks=-(-3 * m // 4) + 2)
    xq, xsf = seam.mxfp8_quantize(p.x)
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)  # exact: integer operands
    heads = p.n // 128
    tile = Tile(block_m, 128, 128, 8, 2, split_k=split, wgmma=True)

    def gluon_partials(xq, xs, wq, ws, out, tile, use_pdl, *, partials=False, a_deq=None):
        assert partials
        work, _ = workspace._BUFFERS[("mxfp8_gemm", runtime.normalize_device(device))]
        parts = work[: heads * tile.split_k * tile.block_m * 128].view(heads, tile.split_k, tile.block_m, 128)
        parts.zero_()  # split 0 holds the sums, the others +0.0
        parts[:, 0, :m] = acc.view(m, heads, 128).permute(1, 0, 2)
        return parts

    kernel, seen = qkv_epilogue_mod.qkv_epilogue_kernel, []

    class Launch:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append((kwargs["INPUTS_BEFORE_WAIT"], grid[0], kwargs["num_warps"]))
                return kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(qkv_epilogue_mod, "launch_gluon", gluon_partials)
    monkeypatch.setattr(qkv_epilogue_mod, "qkv_epilogue_kernel", Launch())
    got, want_out = p.outputs(fill=3), p.outputs(fill=3)
    with np.errstate(all="ignore"):  # the bare launcher: seam's ops silence the interpreter's inf/NaN warnings
        launch_qkv_epilogue(
            xq=xq, xsf=xsf, wq=p.weight.values, wsf=p.weight.scales, acc=None, positions=p.positions,
            cos_sin_cache=p.cos_sin_cache, norm_weights=tuple(p.norm_weights), eps=1e-6, slot_mapping=p.slots,
            index_slot_mapping=p.index_slots, **got, inv_scales=(1.0, 1.0, 1.0), nkv=1, tile=tile,
        )
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want_out)
    _assert_outputs_equal(got, want_out)
    assert seen == [want]
    assert epilogue_tile_after(BF16_MM_TILE) == epilogue_tile(BF16_MM_TILE.block_m)  # after the prefill GEMM


def test_reference_sqrt_is_correctly_rounded():
    # seam's rsqrt is 1/sqrt_rn; torch's fp32 CPU sqrt is one ulp off for some inputs
    v = torch.cat((torch.tensor([0x41797E28], dtype=torch.int32).view(torch.float32),
                   torch.rand(4096, generator=torch.Generator().manual_seed(0)) * 1e4))
    s = sqrt_rn(v)
    err = lambda t: (t.double() ** 2 - v.double()).abs()  # noqa: E731
    assert bool((err(s) <= err(torch.nextafter(s, torch.tensor(float("inf"))))).all())
    assert bool((err(s) <= err(torch.nextafter(s, torch.tensor(0.0)))).all())


def test_epilogue_bit_exact_on_many_rows(device):
    # 130 rows of random heads: enough norms to hit values where a library sqrt is not correctly rounded
    p = make_problem(nkv=1, m=130, block_size=8, seed=135, num_blocks=33, device=device)
    acc = (torch.randn(p.m, p.n, generator=torch.Generator().manual_seed(130)) * 4).to(device)
    scales = dict(q_fp8_scale=0.5, k_scale=0.9, v_scale=1.1)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    qkv_epilogue(acc, *p.args(), **p.kw(**scales), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(**scales), **want)
    _assert_outputs_equal(got, want)


def test_epilogue_inf_nan_rows_match_reference(device):
    p = make_problem(nkv=1, m=2, block_size=4, seed=3, device=device)
    acc = _edge_accumulator(p, seed=5)
    acc[0, 5] = float("inf")
    acc[1, 3 * 128 + 2] = float("nan")
    acc[1, 17 * 128 + 9] = float("inf")  # v head: sf saturates to 448, code 6
    got, want = p.outputs(), p.outputs()
    qkv_epilogue(acc, *p.args(), **p.kw(), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want, nan_aware_q=True)


@pytest.mark.parametrize("q,q_fp8", [(True, False), (False, True)])
def test_single_q_output(q, q_fp8, device):
    p = make_problem(nkv=1, m=3, seed=7, device=device)
    acc = _edge_accumulator(p, seed=7)
    got, want = p.outputs(q=q, q_fp8=q_fp8), p.outputs(q=q, q_fp8=q_fp8)
    qkv_epilogue(acc, *p.args(), **p.kw(q_fp8_scale=2.0), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(q_fp8_scale=2.0), **want)
    _assert_outputs_equal(got, want)


def test_unfused_triton_epilogue_on_bf16_qkv_matches_torch(device):
    p = make_problem(nkv=1, m=4, seed=8, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    got, want = p.outputs(), p.outputs()
    qkv_t = qkv_unfused(xq, xsf, p.weight, *p.args(), epilogue="triton", **p.kw(k_scale=0.5), **got)
    qkv_r = qkv_unfused(xq, xsf, p.weight, *p.args(), epilogue="torch", **p.kw(k_scale=0.5), **want)
    assert torch.equal(qkv_t, qkv_r)
    _assert_outputs_equal(got, want)


def _cache_within_one_step(got: torch.Tensor, want: torch.Tensor, block_size: int) -> None:
    """Per slot: data codes within one E2M1 step (on the signed line), scale bytes within one E4M3 step."""
    data_bytes = block_size * 64
    g = got.reshape(-1, block_size * 72)
    w = want.reshape(-1, block_size * 72)
    gc = nvfp4.unpack_e2m1(g[:, :data_bytes]).to(torch.int32)
    wc = nvfp4.unpack_e2m1(w[:, :data_bytes]).to(torch.int32)
    line_g = torch.where(gc >= 8, -(gc - 8), gc)
    line_w = torch.where(wc >= 8, -(wc - 8), wc)
    assert int((line_g - line_w).abs().max()) <= 1
    sg = g[:, data_bytes:].to(torch.int32)
    sw = w[:, data_bytes:].to(torch.int32)
    assert int((sg - sw).abs().max()) <= 1


def _q_close(got: torch.Tensor, want: torch.Tensor, fp8: bool = False) -> None:
    """Max error of a row <= 2e-2 of the row's max magnitude (+ one E4M3 step for FP8 outputs)."""
    g, w = got.float(), want.float()
    bound = 2e-2 * w.abs().amax(dim=1, keepdim=True) + (w.abs() * 2.0**-3 if fp8 else 0.0)
    assert bool(((g - w).abs() <= bound).all()), float(((g - w).abs() - bound).max())


@pytest.mark.parametrize("nkv,block_size,m", [(1, 4, 5), (2, 16, 3)])
def test_fused_matches_unfused_chain(nkv, block_size, m, device):
    p = make_problem(nkv=nkv, m=m, block_size=block_size, seed=20 + nkv, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    scales = dict(q_fp8_scale=0.5, k_scale=0.9, v_scale=1.1)
    got, want = p.outputs(fill=2), p.outputs(fill=2)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(**scales), **got)
    qkv_unfused(xq, xsf, p.weight, *p.args(), epilogue="torch", **p.kw(**scales), **want)
    _q_close(got["q_out"], want["q_out"])
    _q_close(got["q_fp8_out"], want["q_fp8_out"], fp8=True)
    _q_close(got["index_q_out"], want["index_q_out"], fp8=True)
    _cache_within_one_step(got["kv_cache"], want["kv_cache"], block_size)
    _cache_within_one_step(got["index_cache"], want["index_cache"], block_size)


@pytest.mark.parametrize("split_k", [1, 2])
def test_fused_slot_minus_one_leaves_caches_untouched(split_k, device):
    p = make_problem(nkv=1, m=3, block_size=4, seed=30, device=device)
    p.slots[:] = -1
    p.index_slots[:] = torch.tensor([-1, 5, -1])
    xq, xsf = seam.mxfp8_quantize(p.x)
    out = p.outputs(fill=9)
    before = {k: v.clone() for k, v in out.items() if v is not None}
    tile = dataclasses.replace(small_tile(3), split_k=split_k)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=tile, **out)
    assert torch.equal(out["kv_cache"], before["kv_cache"])
    changed = (out["index_cache"] != before["index_cache"]).reshape(p.num_blocks, -1)
    # only index slot 5 (block 1, token 1) changed: its 64 data bytes and 8 linear scale bytes
    assert not changed[0].any()
    page = changed[1]
    allowed = torch.zeros_like(page)
    allowed[64:128] = True
    allowed[4 * 64 + 8 : 4 * 64 + 16] = True
    assert not (page & ~allowed).any()


@pytest.mark.parametrize("m", [0, 1, 3])
def test_reference_writes_no_entry_like_the_kernel(m, device):
    """Every slot -1 (a batch that inserts nothing, as a warm-up's) or no token at all: the reference runs (its NVFP4
    quantizer on zero rows) and gives the kernel's bytes, caches untouched."""
    p = make_problem(nkv=2, m=max(m, 1), seed=31, device=device)
    if m == 0:
        p = dataclasses.replace(p, m=0, positions=p.positions[:0], slots=p.slots[:0], index_slots=p.index_slots[:0])
    p.slots.fill_(-1)
    p.index_slots.fill_(-1)
    acc = torch.randn(m, p.n, generator=torch.Generator().manual_seed(31)).to(device)
    got, want = p.outputs(fill=7), p.outputs(fill=7)
    before = {k: v.clone() for k, v in got.items() if v is not None}
    qkv_epilogue(acc, *p.args(), **p.kw(), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want)
    assert torch.equal(got["kv_cache"], before["kv_cache"]) and torch.equal(got["index_cache"], before["index_cache"])


def test_fused_matches_epilogue_on_reference_accumulator_mostly(device):
    # the fused accumulator differs from the reference GEMM only by fp32 reordering:
    # nearly every output byte agrees with the exact epilogue of the reference accumulator
    p = make_problem(nkv=1, m=4, seed=40, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    got, want = p.outputs(), p.outputs()
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got)
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    eq = (_bytes(got["q_out"]) == _bytes(want["q_out"])).float().mean()
    assert eq > 0.95
    _q_close(got["q_out"], want["q_out"])


def test_fused_tile_override(device):
    """Every tile, the 128-row one included, gives the same q and cache entries."""
    p = make_problem(nkv=1, m=3, seed=50, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    a, b = p.outputs(), p.outputs()
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=small_tile(64), **a)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=small_tile(3), **b)
    _q_close(a["q_out"], b["q_out"])
    _cache_within_one_step(a["kv_cache"], b["kv_cache"], p.block_size)
    c = p.outputs()
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=LARGE_TILE, **c)
    _q_close(c["q_out"], b["q_out"])
    _cache_within_one_step(c["kv_cache"], b["kv_cache"], p.block_size)


def _assert_fused_exact_on_integer_problem(p: Problem, tile) -> None:
    """With an order-independent (integer) accumulator the fused kernel must equal the reference bytes."""
    xq, xsf = seam.mxfp8_quantize(p.x)
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    assert torch.equal(acc, acc.round()) and float(acc.abs().max()) < 2**24
    scales = dict(q_fp8_scale=0.5, k_scale=0.9, v_scale=1.1)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(**scales),
                                  tile=tile, **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(**scales), **want)
    _assert_outputs_equal(got, want)
    _assert_counters_rearmed(p.x.device)


def _assert_counters_rearmed(device) -> None:
    """Every split-K / arrival counter of the GEMM family is back at zero (a later launch relies on it)."""
    buffers = workspace._BUFFERS.get(("mxfp8_gemm", runtime.normalize_device(device)))
    if buffers is not None:
        assert not buffers[1].any(), buffers[1].nonzero().flatten()[:8]


@pytest.mark.parametrize("tile", [
    Tile(16, 128, 64, 8, 4), Tile(32, 128, 64, 8, 4), Tile(64, 128, 64, 8, 4), Tile(64, 128, 32, 8, 4),
    Tile(16, 128, 64, 4, 1),  # unpipelined K loop
    Tile(16, 128, 64, 8, 4, split_k=2), Tile(32, 128, 32, 8, 4, split_k=4), LARGE_TILE,
    GEMV_TILE, dataclasses.replace(GEMV_TILE, split_k=2), Tile(1, 128, 64, 8, 1),
    Tile(64, 128, 64, 8, 3, split_k=2, max_registers=128),  # a capped 64-row tile (spills)
    Tile(64, 128, 64, 8, 3, split_k=2, max_registers=128, f16_operands=True),  # pick_qkv_tile's
    BF16_MM_TILE,  # the prefill GEMM into an fp32 accumulator, then the epilogue kernel on it
], ids=str)
def test_fused_bit_exact_on_exact_accumulator(tile, device):
    # GEMM + epilogue in one kernel, every tile shape: nothing but the summation order may differ
    # from the reference, and here the order cannot matter (32- and 128-row tiles once wrote wrong
    # E2M1 codes on the H200: see seam.kernels.nvfp4.nvfp4_quantize_group)
    m = 5 if tile.block_m == 1 else 37  # one-row tiles: few rows keep the interpreter quick
    _assert_fused_exact_on_integer_problem(make_problem(nkv=1, m=m, block_size=4, seed=61, integer=True,
                                                        device=device), tile)


@pytest.mark.parametrize("split_k", [2, 4])
def test_fused_split_k(split_k, device):
    # split K combines in split order in the kernel: close to one program, and deterministic
    p = make_problem(nkv=1, m=3, k=512, seed=55, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    tile = dataclasses.replace(small_tile(3), split_k=split_k)
    a, b, c = p.outputs(fill=5), p.outputs(fill=5), p.outputs(fill=5)
    call = (xq, xsf, p.weight.values, p.weight.scales, *p.args())
    seam.qkv_index_fused_epilogue(*call, **p.kw(), tile=tile, **a)
    seam.qkv_index_fused_epilogue(*call, **p.kw(), tile=tile, **b)
    seam.qkv_index_fused_epilogue(*call, **p.kw(), tile=small_tile(3), **c)
    _assert_outputs_equal(a, b)
    _q_close(a["q_out"], c["q_out"])
    _cache_within_one_step(a["kv_cache"], c["kv_cache"], p.block_size)
    _cache_within_one_step(a["index_cache"], c["index_cache"], p.block_size)


def test_qkv_tile_choice_caps_registers_where_two_programs_per_sm_pay():
    cap = TWO_PER_SM_REGISTERS
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("seam.runtime.num_sms", lambda device: 132)
        sm90 = torch.device("cuda")

        def pick(m, nkv):
            t = pick_qkv_tile(m, (19 * nkv + 1) * 128, 6144, sm90, tl_only=True)
            assert t.f16_operands == (t.block_m == 64 and t.max_registers == cap)  # F16 operands where capped at 64 rows
            return t.block_m, t.split_k, t.max_registers

        assert pick(1, 1) == (1, 12, None)  # the GEMV keeps pick_tile's choice
        assert pick(1, 1) == (1, pick_tile(1, 2560, 6144, sm90, tl_only=True).split_k, None)
        assert pick(8, 1) == (16, 12, cap) and pick(8, 2) == (16, 6, cap)  # 16 rows: always capped
        # 32 rows: one wave already splits K 6 ways (20 heads) -> uncapped; 3 ways (39) -> capped, two per SM
        assert pick(32, 1) == (32, 6, None)
        assert pick(32, 2) == (32, 6, cap)
        assert pick(64, 1) == (32, 6, cap) and pick(64, 2) == (32, 3, cap)
        # 64 rows: capped only where one wave would split K at most 2 ways
        assert pick(128, 1) == (64, 3, None)
        assert pick(128, 2) == (64, 3, cap)
        assert pick(256, 1) == (64, 3, cap)
        assert pick(2048, 1) == (64, 1, cap)  # 32 x 20 64-row tiles (pick_tile: 5 waves against 3 of 128 rows)
        assert pick(2048, 2) == (128, 1, None)  # the 128-row prefill tile is left as it is
    assert pick_qkv_tile(16, 2560, 6144, torch.device("cpu")).split_k == 1  # the interpreter has 1 "SM"


def test_qkv_tile_takes_the_linear_gemm_where_it_picks_gluon_or_prefill(monkeypatch):
    """On a Hopper GPU the op takes pick_tile's Gluon tile (M 2..64; 65..128 at K >= 2048 on its 64 + tail and
    128-token tiles; its warp-specialized token tiles at 129..384, log run 207: ahead of the ring kernel at nkv 2 too),
    the wide tiles included (nkv 2 at 129..256: 136, 144, 160, 192 or 256 tokens), its token tiles past 384 up to
    QKV_TOKEN_TILES_MAX_M (run 246), and its prefill tile above; one token takes the Gluon decode tile too (every QKV
    N, (19 nkv + 1) * 128, is >= 2560); tl_only keeps the one-kernel tl path, refit."""
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    monkeypatch.setattr(wgmma_config, "wgmma_supported", lambda device: True)
    monkeypatch.setattr(gemm_config, "bf16_mm_supported", lambda device: True)
    sm90 = torch.device("cuda")
    for nkv in (1, 2):
        n = (19 * nkv + 1) * 128
        for m in (1, 2, 8, 33, 64, 65, 80, 96, 97, 128, 129, 137, 144, 145, 160, 192, 193, 256, 257, 384, 385, 512,
                  1024, 1025, 2048):
            t, linear = pick_qkv_tile(m, n, 6144, sm90), pick_tile(m, n, 6144, sm90)
            refit = pick_qkv_tile(m, n, 6144, sm90, tl_only=True)
            assert not (refit.wgmma or refit.bf16_mm)
            if m <= 64:
                assert t == linear and t.wgmma and t.block_m <= 64, m
            elif m <= 128:  # the 64 + tail tiles to 96 tokens, then the 128-token tile (where mxfp8_linear takes
                # two 64-token tiles, nkv 1 from 97 tokens, the op keeps it: not measured for its partials)
                assert t.block_m in ((72, 80, 96) if m <= 96 else (128,)), m
                assert t == linear or nkv == 1 and m > 96 and linear.block_m == 64, m
                assert t.warp_specialized == (t.split_k <= wgmma_config.WS_MAX_SPLIT), m
            elif m <= 384:  # mxfp8_linear's token tiles, the wide ones included
                assert t == linear == gemm_config.pick_token_tiles(m, n, 6144, 132) and linear.warp_specialized, m
                wide = nkv == 2 and m <= 256
                assert t.block_m in mxfp8_wgmma_ws.WIDE_TILES if wide else t.block_m <= 128, m
                assert not wide or t.block_m == gemm_config.wide_block_m(m), m
            else:  # past 384: the token tiles where mxfp8_linear takes them, up to 1024 tokens
                assert linear == (gemm_config.pick_prefill_token_tiles(m, n, 6144, 132) or BF16_MM_TILE), m
                assert t == (linear if m <= gemm_config.QKV_TOKEN_TILES_MAX_M else BF16_MM_TILE), m
        # run 246's points: the token tiles at 512 and 1024 tokens (nkv 1: 256 and 192 tokens; nkv 2: 192)
        assert [pick_qkv_tile(m, n, 6144, sm90).block_m for m in (385, 512, 1024)] == (
            [256, 256, 192] if nkv == 1 else [192, 192, 192])
        assert pick_qkv_tile(1025, n, 6144, sm90) == BF16_MM_TILE


def test_two_launch_path_with_an_epilogue_only_tile_is_rejected(device):
    # the epilogue alone runs no GEMM: a GEMM-path tile is a caller's mistake there
    p = make_problem(nkv=1, m=3, k=128, block_size=4, seed=62, device=device)
    acc = torch.zeros(3, p.n, device=device)
    out = p.outputs(fill=7)
    with pytest.raises(ValueError, match="applies to a GEMM launch only"):
        qkv_epilogue(acc, *p.args(), **p.kw(), tile=BF16_MM_TILE, **out)
    assert out["q_out"].view(torch.int16).eq(p.outputs(fill=7)["q_out"].view(torch.int16)).all()


@pytest.mark.parametrize("m, block_m, error", [
    (300, 256, r"tile.wgmma needs M <= block_m here \(any M warp-specialized\), got M=300 and block_m=256"),
])
def test_gluon_tile_the_op_cannot_take_is_rejected(m, block_m, error, device, monkeypatch):
    """Refused before any launch, every output as it was: a ring tile (any M in mxfp8_linear) with M above its 256
    rows (the epilogue sums the ring kernel's partials of one M tile)."""
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    p = make_problem(nkv=1, m=m, k=256, block_size=4, seed=63, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    out = p.outputs(fill=7)
    with pytest.raises(ValueError, match=error):
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(),
                                      tile=Tile(block_m, 128, 128, 8, 2, 1, wgmma=True), **out)
    _assert_outputs_equal(out, p.outputs(fill=7))


def test_192_token_tile_override_reaches_the_gluon_launch(device, monkeypatch):
    """A warp-specialized 192-token override (any M: token tiles of 192 rows) passes the op's checks and reaches the
    Gluon launch as given; where that launch cannot read the operands (here it says so) the op runs the tl kernel,
    whose bytes are those of the op's own pick."""
    p = make_problem(nkv=1, m=200, k=256, block_size=4, seed=64, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    want = p.outputs(fill=7)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **want)
    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)
    seen = []
    monkeypatch.setattr("seam.kernels.qkv_epilogue.launch_gluon", lambda *args, **kw: seen.append(args[5]))
    tile = Tile(192, 128, 128, 8, 2, 1, wgmma=True, warp_specialized=True)
    got = p.outputs(fill=7)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=tile, **got)
    assert seen == [tile]
    _assert_outputs_equal(got, want)


def test_warmup_compiles_and_writes_nothing_visible(device):
    tiles = seam.qkv_warmup(1, device=str(device), has_q=True, has_qfp8=True, hidden_size=128, max_tokens=256)
    # every tile the picker can choose up to max_tokens, and nothing else
    assert set(tiles) == {pick_qkv_tile(m, 2560, 128, device) for m in range(1, 257)}
    assert seam.qkv_warmup(1, device=str(device), hidden_size=128, max_tokens=64, a_deq=True) == sorted(
        {pick_qkv_tile(m, 2560, 128, device) for m in range(1, 65)}, key=tiles.index)
    with pytest.raises(ValueError, match="nkv"):
        seam.qkv_warmup(3, device=device, hidden_size=128)
    with pytest.raises(ValueError, match="no q output"):
        seam.qkv_warmup(1, device=device, has_q=False, hidden_size=128)
    with pytest.raises(ValueError, match="device"):
        seam.qkv_warmup(1, device="meta", hidden_size=128)
    for kw, exc, msg in [
        (dict(nkv=1.0), TypeError, "nkv must be an int"), (dict(nkv=True), TypeError, "nkv must be an int"),
        (dict(hidden_size=128.0), TypeError, "hidden_size must be an int"),
        (dict(max_tokens=0), ValueError, r"max_tokens must be in \[1, 131072\], got 0"),
        (dict(max_tokens=10**9), ValueError, r"max_tokens must be in \[1, 131072\], got 1000000000"),
        (dict(has_q="no"), TypeError, "has_q must be a bool, got str"),
        (dict(has_qfp8=1), TypeError, "has_qfp8 must be a bool, got int"),
        (dict(a_deq="yes"), ValueError, "a_deq must be True, False or 'auto', got 'yes'"),
        (dict(a_deq=1), TypeError, "a_deq must be a bool or 'auto', got int"),
        (dict(block_size=3), ValueError, "block_size must be a positive multiple of 4"),
    ]:
        with pytest.raises(exc, match=msg):
            seam.qkv_warmup(**{"nkv": 1, "device": device, "hidden_size": 128, **kw})


@pytest.mark.skipif(not runtime.INTERPRET, reason="natively the warm-up must compile every tile")
def test_warmup_under_the_interpreter_runs_no_dummy_problem(monkeypatch):
    """Nothing compiles under the interpreter: qkv_warmup at model shapes launches nothing (it took
    minutes on CPU), still returns every tile the picker chooses and allocates the workspace."""
    launches = []
    monkeypatch.setattr(qkv_ops, "qkv_index_fused_epilogue", lambda *args, **kw: launches.append(kw["tile"]))
    monkeypatch.setattr(workspace, "_BUFFERS", {})
    tiles = seam.qkv_warmup(4, hidden_size=6144, max_tokens=8192)
    assert launches == []
    assert set(tiles) == {pick_qkv_tile(m, 9856, 6144, torch.device("cpu")) for m in range(1, 8193)}
    assert ("mxfp8_gemm", runtime.normalize_device("cpu")) in workspace._BUFFERS
    with pytest.raises(ValueError, match="hidden_size must be a positive multiple of 128"):
        seam.qkv_warmup(4, hidden_size=6100)


def test_warmup_dummy_problem_runs_each_tile(device, monkeypatch):
    # the launches qkv_warmup makes where kernels compile (skipped under the interpreter) also run here: each
    # tile once (each of a_deq_tiles once more, with an A_deq), the outputs each call asks for
    launches, run = [], qkv_ops.qkv_index_fused_epilogue

    def spy(*args, **kw):
        launches.append((kw["tile"], kw["q_out"] is not None, kw["q_fp8_out"] is not None, "a_deq" in kw))
        return run(*args, **kw)

    monkeypatch.setattr(qkv_ops, "qkv_index_fused_epilogue", spy)
    tiles = [GEMV_TILE, small_tile(16)]
    qkv_ops._run_once_each(tiles, nkv=1, k=128, device=device, has_q=False, has_qfp8=True, block_size=4)
    qkv_ops._run_once_each(tiles, nkv=1, k=128, device=device, has_q=True, has_qfp8=False, block_size=4)
    assert launches == [(t, False, True, False) for t in tiles] + [(t, True, False, False) for t in tiles]
    if wgmma_config.wgmma_supported(device):  # a Gluon decode tile, and its variant that reads A_deq
        decode = pick_qkv_tile(16, 2560, 128, device)
        qkv_ops._run_once_each([decode], nkv=1, k=128, device=device, has_q=True, has_qfp8=False, block_size=4,
                               a_deq_tiles={decode})
        assert launches[4:] == [(decode, True, False, False), (decode, True, False, True)]


def test_warmup_feeds_a_deq_to_the_decode_tiles_its_producers_write_it_for(monkeypatch):
    """qkv_warmup's A_deq variants: every Gluon decode tile with a_deq=True, none with False, and with
    "auto" those picked at the M where the producers write A_deq (seam.kernels.wgmma_config.a_deq_pays);
    never a ring tile (the ring kernel reads A_deq in the variant it always compiles) or a tl tile."""
    from seam.ops import a_deq as a_deq_ops

    # a stand-in rule that leaves the 8-row tile out, so "auto" differs from True (the real one starts at 2, or 1 where K <= 2048, 9 at K 512 and 768)
    monkeypatch.setattr(a_deq_ops, "a_deq_pays", lambda m, k, device: 9 <= m <= 128 and k % 128 == 0)
    d8, d16 = Tile(8, 128, 128, 8, 2, 12, wgmma=True), Tile(16, 128, 128, 8, 2, 12, wgmma=True)
    d64, d128 = Tile(64, 128, 128, 8, 2, 6, wgmma=True), Tile(128, 128, 128, 8, 2, 6, wgmma=True)
    ring = Tile(256, 128, 128, 8, 2, 3, wgmma=True)
    picks = {1: GEMV_TILE, 8: d8, 9: d16, 16: d16, 64: d64, 65: d128, 200: ring, 300: small_tile(64)}
    cpu = torch.device("cpu")
    assert qkv_ops.tiles_fed_a_deq(picks, True, 6144, cpu) == {d8, d16, d64, d128}
    assert qkv_ops.tiles_fed_a_deq(picks, False, 6144, cpu) == set()
    assert qkv_ops.tiles_fed_a_deq(picks, "auto", 6144, cpu) == {d16, d64, d128}
    assert qkv_ops.tiles_fed_a_deq(picks, "auto", 6100, cpu) == set()  # "auto" writes none where K is not whole steps


@pytest.mark.parametrize("nkv, max_tokens, ms", [(4, 1, (1,)), (1, 20, (1, 20))])
def test_warmup_allocates_every_workspace_later_calls_need(nkv, max_tokens, ms, device, monkeypatch):
    """After qkv_warmup(max_tokens), neither the fused op nor the separate epilogue grows the
    workspace at any M <= max_tokens (growing it during a CUDA-graph capture raises)."""
    monkeypatch.setattr(workspace, "_BUFFERS", {})
    seam.qkv_warmup(nkv, device=str(device), hidden_size=128, max_tokens=max_tokens, block_size=4)
    key = ("mxfp8_gemm", runtime.normalize_device(device))
    ws = workspace._BUFFERS.get(key, (None,))[0]  # None: no launch up to max_tokens needs one
    for m in ms:
        p = make_problem(nkv=nkv, m=m, k=128, block_size=4, seed=m, device=device)
        xq, xsf = seam.mxfp8_quantize(p.x)
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **p.outputs())
        acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
        qkv_epilogue(acc, *p.args(), **p.kw(), **p.outputs())
        assert workspace._BUFFERS.get(key, (None,))[0] is ws, m


def _raw_kv_cache(num_blocks, nkv, block_size, device, page_pad=0):
    """A kv_cache laid out as ``nvfp4.empty_kv_cache`` would, without its checks (for sizes the op refuses)."""
    page = 2 * nkv * block_size * nvfp4.TOKEN_BYTES + page_pad
    raw = torch.zeros(num_blocks, page, dtype=torch.uint8, device=device)
    return raw.as_strided((num_blocks, 2 * nkv, block_size, 72), (page, block_size * 72, 72, 1))


def _bad_cases(p: Problem, xq, xsf):
    """(description, kwargs override, exception, message) for every rejected argument."""
    dev = p.x.device
    base = p.outputs()
    n = p.n
    kv = base["kv_cache"]
    misaligned_raw = torch.zeros(kv.numel() + 64, dtype=torch.uint8, device=dev)
    misaligned = misaligned_raw[1 : 1 + kv.numel()].view(kv.shape)
    with torch.inference_mode():
        inference_kv = kv.clone()
    return [
        ("xq", dict(xq=xq.view(torch.uint8)), TypeError, "xq must have dtype"),
        ("xq K", dict(xq=xq[:, :96].contiguous()), ValueError, "multiple of 128"),
        ("wq N", dict(wq=p.weight.values[: n - 128]), ValueError, r"\(19\*nkv \+ 1\)\*128"),
        ("wq K", dict(wq=torch.zeros(n, 128, dtype=torch.float8_e4m3fn, device=dev)), ValueError,
         rf"xq has K={xq.shape[1]} but wq has K=128"),
        ("wq 1-D", dict(wq=torch.zeros(n, dtype=torch.float8_e4m3fn, device=dev)), ValueError, "wq must have shape"),
        ("xsf", dict(xsf=xsf[:-1]), ValueError, "xsf must hold"),
        ("wsf", dict(wsf=p.weight.scales[:-4]), ValueError, "wsf must hold"),
        ("xsf 2-D", dict(xsf=xsf.view(-1, 16)), ValueError, r"xsf must hold \d+ bytes as a flat"),  # swizzled: 1-D
        ("positions", dict(positions=p.positions.int()), TypeError, "positions must have dtype"),
        ("slot", dict(slot_mapping=p.slots[:-1]), ValueError, "slot_mapping must have shape"),
        ("index slot", dict(index_slot_mapping=p.index_slots.float()), TypeError, "index_slot_mapping"),
        ("cos_sin", dict(cos_sin_cache=p.cos_sin_cache[:, :32]), ValueError, "cos_sin_cache must have shape"),
        ("cos_sin dtype", dict(cos_sin_cache=p.cos_sin_cache.float()), TypeError, "cos_sin_cache"),
        ("cos_sin empty", dict(cos_sin_cache=p.cos_sin_cache[:0]), ValueError, "at least one position"),
        ("weight", dict(k_norm_weight=p.norm_weights[1][:64]), ValueError, "k_norm_weight"),
        ("no q", dict(q_out=None, q_fp8_out=None), ValueError, "no q output"),
        ("q_out", dict(q_out=base["q_out"][:, :128]), ValueError, "q_out must have shape"),
        ("q_fp8", dict(q_fp8_out=base["q_out"]), TypeError, "q_fp8_out must have dtype"),
        ("index_q", dict(index_q_out=base["index_q_out"].view(torch.uint8)), TypeError, "index_q_out"),
        ("kv dtype", dict(kv_cache=kv.view(torch.int8)), TypeError, "kv_cache must have dtype"),
        ("kv inference", dict(kv_cache=inference_kv), ValueError, "kv_cache is an inference tensor"),
        ("kv heads", dict(kv_cache=nvfp4.empty_kv_cache(2, 2, p.block_size, dev)), ValueError, "kv_cache must have shape"),
        ("block size", dict(kv_cache=_raw_kv_cache(2, p.nkv, 6, dev)), ValueError, "multiple of 4"),
        ("kv strides", dict(kv_cache=kv.transpose(1, 2)), ValueError, "kv_cache"),
        ("kv align", dict(kv_cache=misaligned), ValueError, "32-byte aligned"),
        ("kv page stride", dict(kv_cache=_raw_kv_cache(2, p.nkv, p.block_size, dev, page_pad=8)),
         ValueError, "multiple of 32"),
        ("kv pages overlap", dict(kv_cache=kv[:1].expand(3, -1, -1, -1)), ValueError, "kv_cache pages must not overlap"),
        ("kv pages overlap 32", dict(kv_cache=kv.as_strided((2, *kv.shape[1:]), (32, *kv.stride()[1:]))),
         ValueError, "kv_cache pages must not overlap"),
        ("index pages overlap", dict(index_cache=base["index_cache"][:1].expand(2, -1, -1)), ValueError,
         "index_cache pages must not overlap"),
        ("index bs", dict(index_cache=nvfp4.empty_index_cache(2, 2 * p.block_size, dev)), ValueError, "index_cache"),
        ("eps", dict(eps=-1.0), ValueError, "eps"),
        ("eps type", dict(eps="1e-6"), TypeError, "eps"),
        ("eps past float", dict(eps=10**400), ValueError, "eps must be a finite float .* got an int of 1329 bits"),
        ("k_scale", dict(k_scale=0.0), ValueError, "k_scale"),
        ("v_scale", dict(v_scale=float("nan")), ValueError, "v_scale"),
        ("q_fp8_scale huge", dict(q_fp8_scale=1e38), ValueError, r"q_fp8_scale must be in \[2\^-126"),
        ("q_fp8_scale inf in fp32", dict(q_fp8_scale=1e39), ValueError, "q_fp8_scale must be a finite positive"),
        ("k_scale tiny", dict(k_scale=1e-45), ValueError, r"k_scale must be in \[2\^-126"),
        ("k_scale tensor", dict(k_scale=torch.tensor(0.5)), TypeError,
         r"k_scale must be a float or int \(not a bool\), got torch.Tensor \(a tensor's value: pass float\(t\)"),
        ("tile", dict(tile=LARGE_TILE.__class__(16, 64, 128, 4, 1)), ValueError, "block_n"),
        ("tile registers", dict(tile=dataclasses.replace(small_tile(3), max_registers=300)), ValueError,
         "max_registers"),
        ("tile registers type", dict(tile=dataclasses.replace(small_tile(3), max_registers=True)), TypeError,
         "max_registers"),
        ("tile f16 type", dict(tile=dataclasses.replace(small_tile(3), f16_operands="yes")), TypeError,
         "f16_operands"),
        ("tile f16 gemv", dict(tile=dataclasses.replace(GEMV_TILE, f16_operands=True)), ValueError, "f16_operands"),
        ("tile rows per warp", dict(tile=Tile(32, 128, 64, 4, 1)), ValueError, "at most 4 rows per warp"),
    ]


def test_bad_arguments_rejected_and_buffers_untouched(device):
    p = make_problem(nkv=1, m=3, block_size=4, seed=60, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    out = p.outputs(fill=3)
    before = {k: v.clone() for k, v in out.items()}
    names = ["xq", "xsf", "wq", "wsf", "positions", "cos_sin_cache", "q_norm_weight", "k_norm_weight",
             "index_q_norm_weight", "index_k_norm_weight", "eps"]
    good = dict(zip(names, (xq, xsf, p.weight.values, p.weight.scales, *p.args())))
    for desc, override, exc, msg in _bad_cases(p, xq, xsf):
        call = {**good, **p.kw(), **out, **override}
        pos = [call.pop(k) for k in names]
        with pytest.raises(exc, match=msg):
            seam.qkv_index_fused_epilogue(*pos, **call)
    for k, v in out.items():
        assert torch.equal(_bytes(v), _bytes(before[k])), k
    # overlapping outputs
    with pytest.raises(ValueError, match="overlap"):
        seam.qkv_index_fused_epilogue(
            xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(),
            **{**out, "q_fp8_out": out["q_out"].view(torch.float8_e4m3fn).view(-1)[: 3 * 16 * 128].view(3, -1)},
        )


def test_debug_mode_range_checks_indices(device, monkeypatch):
    """With SEAM_DEBUG=1, out-of-range positions and slots (which the kernel would only contain:
    ``test_out_of_range_indices_stay_in_bounds_without_debug``) and a repeated slot are rejected on the host
    before the launch; -1 slots stay valid (repeated too)."""
    p = make_problem(nkv=1, m=3, block_size=4, seed=61, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    capacity = p.num_blocks * p.block_size
    monkeypatch.setenv("SEAM_DEBUG", "1")
    cases = [
        (dict(positions=p.positions.clone().fill_(p.cos_sin_cache.shape[0])), r"positions must lie in \[0, "),
        (dict(positions=p.positions.clone().fill_(-1)), "positions must lie"),
        (dict(slot_mapping=p.slots.clone().fill_(capacity)), rf"slot_mapping must lie in \[-1, {capacity - 1}\]"),
        (dict(index_slot_mapping=p.index_slots.clone().fill_(-2)), "index_slot_mapping must lie"),
        (dict(slot_mapping=torch.stack([p.slots[0]] * 3)), "slot_mapping must not repeat a slot"),
    ]
    out = p.outputs(fill=5)
    before = {k: v.clone() for k, v in out.items()}
    for override, msg in cases:
        a = dict(zip(("positions", "slot_mapping", "index_slot_mapping"), (p.positions, p.slots, p.index_slots)))
        a.update(override)
        with pytest.raises(ValueError, match=msg):
            seam.qkv_index_fused_epilogue(
                xq, xsf, p.weight.values, p.weight.scales, a["positions"], p.cos_sin_cache, *p.norm_weights, 1e-6,
                slot_mapping=a["slot_mapping"], index_slot_mapping=a["index_slot_mapping"], **out,
            )
    for k, v in out.items():
        assert torch.equal(_bytes(v), _bytes(before[k])), k
    # in-range indices (with -1 slots) pass the debug checks and run
    slots = p.slots.clone()
    slots[0] = -1
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), slot_mapping=slots,
                                  index_slot_mapping=p.index_slots, **out)


@pytest.mark.parametrize("m, tile", [(1, GEMV_TILE), (5, small_tile(5)), (5, Tile(64, 128, 64, 8, 3)),
                                     pytest.param(8, "gluon", marks=pytest.mark.gpu)],
                         ids=["one-token", "staged-16-rows", "group-loop-64-rows", "gluon-decode-gpu"])
def test_out_of_range_indices_stay_in_bounds_without_debug(m, tile, device, monkeypatch):
    """Without SEAM_DEBUG the index tensors are not read on the host; the kernel skips a slot outside
    [0, capacity) like -1 (every store path: one token, staged rows, group loop) and rotates a
    position outside [0, max_pos) with cos = sin = 0. The caches sit between guard pages that an
    out-of-bounds store would hit; the cos/sin cache is followed by rows of ones, which an
    out-of-bounds read would pick up."""
    monkeypatch.delenv("SEAM_DEBUG", raising=False)
    k = 1024 if tile == "gluon" else 256  # Gluon: K 1024 splits 8 ways, so the epilogue sums 8 partials
    p = make_problem(nkv=1, m=m, k=k, block_size=4, seed=70 + m, device=device)
    if tile == "gluon":  # the Gluon decode GEMM's partials, then the epilogue kernel
        tile = pick_qkv_tile(m, p.n, k, p.x.device)
        assert tile.wgmma and not tile.ring, tile
    xq, xsf = seam.mxfp8_quantize(p.x)
    capacity = p.num_blocks * p.block_size
    max_pos = p.cos_sin_cache.shape[0]
    cs = p.cos_sin_cache
    guarded_cs = torch.cat([cs, torch.ones_like(cs[:2])])[:max_pos]  # rows of ones past its end
    zero_row_cs = torch.cat([cs, torch.zeros_like(cs[:1])])

    def run(slots, index_slots, positions, cs):
        g = torch.Generator().manual_seed(3)
        kv = nvfp4.empty_kv_cache(p.num_blocks + 2, 1, p.block_size, device, 32)
        idx = nvfp4.empty_index_cache(p.num_blocks + 2, p.block_size, device, 32)
        for c in (kv, idx):
            c.copy_(torch.randint(0, 256, c.shape, generator=g, dtype=torch.uint8))
        out = p.outputs()
        out.update(kv_cache=kv[1:-1], index_cache=idx[1:-1])
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, positions, cs, *p.norm_weights,
                                      1e-6, slot_mapping=slots, index_slot_mapping=index_slots, tile=tile, **out)
        out.update(kv_cache=kv, index_cache=idx)
        return out

    slots, index_slots, positions = p.slots.clone(), p.index_slots.clone(), p.positions.clone()
    slots[0], index_slots[0], positions[0] = capacity, capacity + 3, max_pos
    if m > 1:
        slots[2], index_slots[3], positions[4] = -5, capacity, max_pos + 1
    got = run(slots, index_slots, positions, guarded_cs)
    # the same tokens skipped by -1 and rotated with an explicit zero row (position max_pos of zero_row_cs)
    want = run(torch.where((slots >= 0) & (slots < capacity), slots, -1),
               torch.where((index_slots >= 0) & (index_slots < capacity), index_slots, -1),
               torch.where(positions < max_pos, positions, max_pos), zero_row_cs)
    _assert_outputs_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("q, q_fp8", [(True, False), (False, True), (True, True)], ids=["q", "q_fp8", "both"])
def test_gluon_decode_epilogue_edge_rows_gpu(q, q_fp8):
    """The Hopper decode path (the Gluon GEMM's split-K partials, then the epilogue kernel) on integer
    operands with edge rows, each output alone and both, block_size 16: a zero row; a row with one
    dominating activation (sums ~2^110: the norm's square overflows, rows scale to 0); a row whose one huge
    activation overflows some sums to +-inf (one term each, so in any summation order; the norm then makes
    NaN): the reference's bytes (a NaN's payload aside)."""
    m = 8
    p = make_problem(nkv=1, m=m, k=6144, block_size=16, seed=92, device="cuda", integer=True, num_blocks=4)
    assert (lambda t: t.wgmma and not t.ring)(pick_qkv_tile(m, p.n, 6144, p.x.device))
    x = p.x.clone()
    x[2] = 0
    x[4, 40] = 2.0**110
    x[6, 64] = 2.0**126  # times a weight of +-4: past fp32's range
    xq, xsf = seam.mxfp8_quantize(x)
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    assert acc[6].isinf().any() and not acc.isnan().any() and acc[4].abs().max() > 2.0**100
    got, want = p.outputs(q=q, q_fp8=q_fp8, fill=7), p.outputs(q=q, q_fp8=q_fp8, fill=7)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want, nan_aware_q=True)


def test_epilogue_entry_rejects_bad_accumulator(device):
    p = make_problem(nkv=1, m=2, device=device)
    out = p.outputs()
    with pytest.raises(TypeError, match="acc"):
        qkv_epilogue(torch.zeros(2, p.n, dtype=torch.float16, device=device), *p.args(), **p.kw(), **out)
    with pytest.raises(ValueError, match=r"acc.shape\[1\]"):
        qkv_epilogue(torch.zeros(2, 1000, device=device), *p.args(), **p.kw(), **out)
    with pytest.raises(ValueError, match="at most 4 rows per warp"):  # a staging tile sm_90 miscompiled
        qkv_epilogue(torch.zeros(2, p.n, device=device), *p.args(), **p.kw(), tile=Tile(16, 128, 64, 2, 1), **out)


@pytest.mark.gpu
@pytest.mark.parametrize("nkv", [1, 2, 4])
@pytest.mark.parametrize("m", [1, 7, 64, 513])
def test_fused_full_shapes_gpu(nkv, m):
    p = make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=m + nkv, device="cuda",
                     num_blocks=max(4, -(-3 * m // 64)))
    xq, xsf = seam.mxfp8_quantize(p.x)
    scales = dict(q_fp8_scale=0.5, k_scale=0.9, v_scale=1.1)
    got, want = p.outputs(fill=2), p.outputs(fill=2)
    seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(**scales), **got)
    qkv_unfused(xq, xsf, p.weight, *p.args(), epilogue="torch", **p.kw(**scales), **want)
    _q_close(got["q_out"], want["q_out"])
    _q_close(got["index_q_out"], want["index_q_out"], fp8=True)
    _cache_within_one_step(got["kv_cache"], want["kv_cache"], 64)
    _cache_within_one_step(got["index_cache"], want["index_cache"], 64)
    # the epilogue alone, on a given accumulator, is bit-exact on the GPU too
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    a, b = p.outputs(fill=4), p.outputs(fill=4)
    qkv_epilogue(acc, *p.args(), **p.kw(**scales), **a)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(**scales), **b)
    _assert_outputs_equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("nkv", [1, 2, 4])
@pytest.mark.parametrize("m", [1, 2, 20, 64, 80, 128, 160, 192, 300, 513])
def test_fused_bit_exact_every_picked_tile_gpu(nkv, m):
    n = (19 * nkv + 1) * 128
    p = make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=70 + m, device="cuda", integer=True,
                     num_blocks=max(4, -(-3 * m // 64)))
    tiles = {pick_qkv_tile(m, n, 6144, p.x.device), pick_qkv_tile(m, n, 6144, p.x.device, tl_only=True),
             dataclasses.replace(small_tile(m), split_k=1)}
    for tile in sorted(tiles, key=repr):
        _assert_fused_exact_on_integer_problem(p, tile)


@pytest.mark.gpu
@pytest.mark.parametrize("nkv, m, block_m, split_k, ws", [
    (1, 65, 72, 6, True), (1, 80, 80, 6, True), (2, 96, 96, 3, True), (1, 72, 72, 2, True),  # 65-96 tokens
    (1, 129, 72, 3, True), (2, 192, 96, 1, True), (1, 160, 80, 3, True),  # token tiles of 64 + tail rows, 129-192
    (1, 70, 72, 8, False), (2, 96, 96, 3, False),  # the plain decode kernel's partials with a tail (split 8: its pick)
    (1, 40, 72, 2, False),  # the tail's rows wholly past M
])
def test_fused_bit_exact_on_64_plus_tail_tiles_gpu(nkv, m, block_m, split_k, ws):
    """The op on mxfp8_linear's 64 + tail tiles (picked at 65-96 tokens and as token tiles at 129-192; here also at
    splits and kernels the picker does not take there): the warp-specialized kernel's partials (each token tile's 64 + tail rows, the epilogue reading them across token
    tiles) and the plain decode kernel's (one M tile, the tail's rows after the first 64): the reference bytes on an
    exact accumulator, counters back at zero."""
    p = make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=90 + m, device="cuda", integer=True,
                     num_blocks=max(4, -(-3 * m // 64)))
    tile = Tile(block_m, 128, 128, 8, 4, split_k=split_k, wgmma=True, warp_specialized=ws)  # TAIL_STAGES
    _assert_fused_exact_on_integer_problem(p, tile)


@pytest.mark.gpu
@pytest.mark.parametrize("nkv, m, block_m, stages, split_k", [
    (2, 160, 192, 3, 3),  # log run 208's pick at N 4992
    (2, 129, 192, 3, 3),  # one token on the 64-token accumulator
    (1, 192, 192, 3, 6),  # both accumulators full; split 6: the one-row epilogue after the tile
    (2, 350, 192, 3, 2),  # two token tiles: the second's rows 192..349, its 64-token part (320..383) partly past M
    (4, 100, 192, 3, 1),  # the 64-token accumulator wholly past M
    (2, 129, 136, 4, 3),  # the picks at nkv 2 (run 234): one token on the 8-token accumulator
    (2, 144, 144, 4, 3),
    (2, 150, 160, 3, 3),  # the 32-token accumulator part full
    (1, 300, 136, 4, 6),  # three token tiles; split 6: the one-row epilogue
    (2, 256, 256, 2, 3),  # the pick at nkv 2, 193-256 tokens (run 237)
    (2, 200, 256, 2, 3),  # the second 128-token accumulator part full
    (1, 512, 256, 2, 3),  # the picks past 384 tokens (pick_prefill_token_tiles): two token tiles
    (2, 512, 192, 3, 1),  # three token tiles, the last one's second accumulator past M
])
def test_fused_bit_exact_on_the_wide_tiles_gpu(nkv, m, block_m, stages, split_k):
    """The op on the warp-specialized wide tiles (a 128- and an 8-128-token accumulator per program; picked at nkv 2,
    129-256 tokens, and past 384 tokens): their partials, [heads, split, token tiles x block_m, 128], read by the epilogue (4-row programs
    after them at splits up to 3, one-row above), the reference bytes on an exact accumulator, counters back at zero."""
    p = make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=95 + m, device="cuda", integer=True,
                     num_blocks=max(4, -(-3 * m // 64)))
    _assert_fused_exact_on_integer_problem(p, Tile(block_m, 128, 128, 8, stages, split_k=split_k, wgmma=True,
                                                   warp_specialized=True))


def test_workspace_holds_the_gluon_partials_and_the_staged_rows():
    """After a Gluon GEMM the workspace holds its partials (every token tile's rows), then the epilogue's staged
    NVFP4 rows: none for the one-row tile of epilogue_tile_after on the decode kernel's tiles at splits above 3,
    4-row tiles' rows after tiles of more than 64 rows at splits up to 3 (the token tiles, the ring kernel). After the
    prefill GEMM the 16-row epilogue tile stages its rows there (its accumulator is not in it)."""
    streamed = Tile(128, 128, 128, 8, 2, split_k=6, wgmma=True)
    assert workspace_floats(100, streamed, 20) == 20 * 6 * 128 * 128
    token_tiles = Tile(128, 128, 128, 8, 4, split_k=2, wgmma=True, warp_specialized=True)
    assert workspace_floats(300, token_tiles, 20) == 20 * 2 * 3 * 128 * 128 + 20 * 75 * 4 * 128
    wide = Tile(192, 128, 128, 8, 3, split_k=3, wgmma=True, warp_specialized=True)  # 128 + 64 tokens per token tile
    assert workspace_floats(160, wide, 39) == 39 * 3 * 192 * 128 + 39 * 40 * 4 * 128
    assert workspace_floats(300, dataclasses.replace(wide, split_k=2), 39) == 39 * 2 * 2 * 192 * 128 + 39 * 75 * 4 * 128
    ring256 = Tile(256, 128, 128, 8, 2, split_k=3, wgmma=True)
    assert workspace_floats(200, ring256, 20) == 20 * 3 * 256 * 128 + 20 * 50 * 4 * 128
    decode = Tile(16, 128, 128, 8, 2, split_k=12, wgmma=True)
    assert workspace_floats(9, decode, 20) == 20 * 12 * 16 * 128
    assert workspace_floats(200, BF16_MM_TILE, 20) == 20 * 13 * 16 * 128
    assert workspace_floats(1, GEMV_TILE, 20) == 0


@pytest.mark.parametrize("in_workspace", [False, True], ids=["own tensor", "in the workspace"])
def test_epilogue_stages_rows_past_partials_kept_in_the_workspace(in_workspace, device):
    """Partials given as the accumulator from the workspace itself (where the Gluon GEMM leaves them): the
    16-row epilogue tile's staged NVFP4 rows must not land on them (other heads' programs read them later)."""
    m = 100
    p = make_problem(nkv=1, m=m, block_size=8, seed=7, device=device, num_blocks=30)
    heads = p.n // 128
    g = torch.Generator().manual_seed(1)
    parts = torch.randn(heads, 1, 128, 128, generator=g).to(device)
    if in_workspace:
        ws, _ = gemm_scratch(device, parts.numel() + heads * 7 * 16 * 128, parts.numel() // 128)
        acc = ws[: parts.numel()].view_as(parts)
        acc.copy_(parts)
    else:
        acc = parts.clone()
    got, want = p.outputs(fill=1), p.outputs(fill=1)
    with np.errstate(all="ignore"):
        launch_qkv_epilogue(
            xq=None, xsf=None, wq=None, wsf=None, acc=acc, positions=p.positions, cos_sin_cache=p.cos_sin_cache,
            norm_weights=tuple(p.norm_weights), eps=1e-6, slot_mapping=p.slots, index_slot_mapping=p.index_slots,
            **got, inv_scales=(1.0, 1.0, 1.0), nkv=1, tile=epilogue_tile(m),
        )
    qkv_epilogue_ref(parts[:, 0].permute(1, 0, 2).reshape(128, p.n)[:m], *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("nkv, m", [(1, 8), (1, 64), (1, 128), (2, 160), (2, 300), (4, 200)])
def test_fused_back_to_back_calls_each_read_their_own_partials_gpu(nkv, m):
    """Two different problems launched back to back on the one workspace (no synchronization between them):
    both give the reference bytes (nkv 2 at 300 tokens: three token tiles' partials; at 160 tokens the 160-token
    wide tile's; after it, after the token tiles and after the 256-token ring GEMM (nkv 4 at 200 tokens) the epilogue
    stages NVFP4 rows in the workspace while other heads' programs still read the GEMM's partials there: the staged
    rows must lie past them), and the counters are back at zero."""
    problems = [make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=seed, device="cuda", integer=True,
                             num_blocks=max(4, -(-3 * m // 64))) for seed in (80 + m, 81 + m)]
    assert pick_qkv_tile(m, problems[0].n, 6144, problems[0].x.device).wgmma
    got = [p.outputs(fill=3) for p in problems]
    for p, out in zip(problems, got):
        xq, xsf = seam.mxfp8_quantize(p.x)
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **out)
    for p, out in zip(problems, got):
        xq, xsf = seam.mxfp8_quantize(p.x)
        want = p.outputs(fill=3)
        qkv_epilogue_ref(qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales), *p.args(), **p.kw(), **want)
        _assert_outputs_equal(out, want)
    _assert_counters_rearmed(problems[0].x.device)


@pytest.mark.gpu
def test_two_launch_path_falls_back_where_tma_cannot_read_gpu():
    # an activation whose base is not 16-byte aligned: the Gluon GEMM cannot take it, the one-kernel
    # path runs on its tl tile, still exact on integer operands
    p = make_problem(nkv=1, m=8, k=1024, block_size=64, seed=63, device="cuda", integer=True)
    xq, xsf = seam.mxfp8_quantize(p.x)
    raw = torch.empty(xq.numel() + 16, dtype=torch.uint8, device="cuda")[1:1 + xq.numel()]
    shifted = raw.view(torch.float8_e4m3fn).view(xq.shape)
    shifted.copy_(xq)
    assert shifted.data_ptr() % 16 and pick_qkv_tile(8, p.n, 1024, p.x.device).wgmma
    acc = qkv_gemm_ref(xq, xsf, p.weight.values, p.weight.scales)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    seam.qkv_index_fused_epilogue(shifted, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), **got)
    qkv_epilogue_ref(acc, *p.args(), **p.kw(), **want)
    _assert_outputs_equal(got, want)


def _assert_f16_operands_same_bytes(p: Problem, tile: Tile) -> None:
    # the BF16 loop for the first 64-row tile (a row with blocks 40 binades apart) and the third (a
    # row of inf: scale 254, where the BF16 loop's dequantization overflows); F16 operands elsewhere
    x = p.x.clone()
    x[0, :32] *= 2.0**40
    x[130] = float("inf")
    xq, xsf = seam.mxfp8_quantize(x)
    got, want = p.outputs(fill=3), p.outputs(fill=3)
    call = (xq, xsf, p.weight.values, p.weight.scales, *p.args())
    seam.qkv_index_fused_epilogue(*call, **p.kw(), tile=dataclasses.replace(tile, f16_operands=True), **got)
    seam.qkv_index_fused_epilogue(*call, **p.kw(), tile=tile, **want)
    _assert_outputs_equal(got, want)


def test_fused_f16_operands_same_bytes(device):
    p = make_problem(nkv=1, m=140, k=256, seed=74, device=device)
    _assert_f16_operands_same_bytes(p, Tile(64, 128, 64, 8, 3, split_k=2, max_registers=128))


@pytest.mark.gpu
@pytest.mark.timeout(450)  # two compiles of the 128-row fused kernel: past 150 s under the suite's load (run 178)
@pytest.mark.parametrize("nkv,m", [(1, 256), (2, 513), (1, 2048)])
def test_fused_f16_operands_same_bytes_gpu(nkv, m):
    p = make_problem(nkv=nkv, m=m, k=6144, block_size=64, seed=75, device="cuda", num_blocks=-(-3 * m // 64))
    tile = pick_qkv_tile(m, p.weight.shape[0], 6144, p.x.device, tl_only=True)
    _assert_f16_operands_same_bytes(p, dataclasses.replace(tile, f16_operands=False))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 7])
def test_gpu_workspace_not_allocated_during_capture(m, monkeypatch):
    """The kernel's workspace (split-K partials, multi-row NVFP4 staging) is not allocated
    inside a CUDA-graph capture (its zero-filled counters would only exist at replay): that
    raises; after one eager call a captured call replays to the eager bytes."""
    monkeypatch.setattr(workspace, "_BUFFERS", {})
    p = make_problem(nkv=1, m=m, k=1024, block_size=16, seed=90 + m, device="cuda")
    xq, xsf = seam.mxfp8_quantize(p.x)
    call = (xq, xsf, p.weight.values, p.weight.scales, *p.args())
    got = p.outputs(fill=6)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before CUDA-graph capture"):
        with torch.cuda.graph(graph):
            seam.qkv_index_fused_epilogue(*call, **p.kw(), **got)
    eager = p.outputs(fill=6)
    seam.qkv_index_fused_epilogue(*call, **p.kw(), **eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        seam.qkv_index_fused_epilogue(*call, **p.kw(), **got)
    graph.replay()
    torch.cuda.synchronize()
    _assert_outputs_equal(got, eager)


def test_block_k_must_divide_k(device):
    """A block_k that leaves a K tail would drop it: refused (the fused kernel has no tail)."""
    p = make_problem(nkv=1, m=2, k=384, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    bad = small_tile(2).__class__(16, 128, 256, 4, 1)
    with pytest.raises(ValueError, match="block_k=256 must divide K=384"):
        seam.qkv_index_fused_epilogue(xq, xsf, p.weight.values, p.weight.scales, *p.args(), **p.kw(), tile=bad, **p.outputs())


def test_unfused_chain_validates_before_writing_qkv(device):
    """A bad epilogue argument must leave the caller's qkv buffer untouched (the GEMM runs after all checks)."""
    p = make_problem(nkv=1, m=2, device=device)
    xq, xsf = seam.mxfp8_quantize(p.x)
    qkv_out = torch.full((2, p.n), 3.0, dtype=torch.bfloat16, device=device)
    kw = {**p.kw(), **p.outputs()}
    kw["slot_mapping"] = kw["slot_mapping"].int()  # wrong dtype: int32
    with pytest.raises(TypeError, match="slot_mapping"):
        qkv_unfused(xq, xsf, p.weight, *p.args(), qkv_out=qkv_out, **kw)
    assert qkv_out.eq(3.0).all()
