"""verify: MXFP8 QKV+indexer GEMM with fused norm / RoPE / NVFP4-KV epilogue (``docs/spec/qkv_epilogue.md``).

Three checks per shape:
- ``qkv_epilogue[acc]``: the kernel's epilogue on a given fp32 accumulator, bytes equal
  to ``seam.ref.qkv.qkv_epilogue_ref`` on every output (q, q_fp8, index_q, both caches);
- ``qkv_index_fused_epilogue[int]``: GEMM + epilogue (one kernel, or the Gluon / prefill GEMM
  then the epilogue kernel, as picked) on small-integer operands, whose fp32 accumulator is exact in any summation order, so every output's
  bytes must equal the reference epilogue of the exact accumulator (this catches a
  miscompiled epilogue under the GEMM's register layouts, which the given-accumulator
  check cannot);
- ``qkv_index_fused_epilogue``: the fused op vs the unfused chain (``mxfp8_linear`` ->
  BF16 qkv -> epilogue): q within 2e-2 of each row's max magnitude (FP8 outputs plus one
  E4M3 step), cache codes within one E2M1 code and scale bytes within one E4M3 step.
  The unfused chain timed against it is seam's two launches (GEMM to BF16, then the
  Triton epilogue on the BF16 qkv).
"""

from __future__ import annotations

import torch

import seam
from seam.bench.qkv import qkv_unfused
from seam.compare import bytes_equal
from seam.formats import nvfp4
from seam.kernels.mxfp8_gemm_config import pick_qkv_tile
from seam.ops.qkv import qkv_epilogue
from seam.ref.qkv import qkv_epilogue_ref, qkv_gemm_ref
from seam.verify.core import Check, Context, Outcome

EPS = 1e-6
SCALES = dict(q_fp8_scale=0.5, k_scale=0.9, v_scale=1.1)


def _problem(ctx: Context, nkv: int, m: int, k: int, block_size: int, integer: bool = False):
    n = (19 * nkv + 1) * 128
    num_blocks = max(2, -(-3 * m // block_size))
    g = ctx.generator(m * 7 + nkv)
    if integer:
        # |x*w| <= 16, K <= 6144: every partial sum is an integer below 2^24, exact in fp32
        x = torch.randint(-4, 5, (m, k), generator=g).to(torch.bfloat16).to(ctx.device)
        w = torch.randint(-4, 5, (n, k), generator=g).to(torch.bfloat16).to(ctx.device)
        weight = seam.MXFP8Weight.from_bf16(w)
    else:
        x = ctx.randn(m, k, seed=m)
        weight = seam.MXFP8Weight.from_bf16(ctx.randn(n, k, seed=m + 1, scale=4 * k**-0.5))
    angle = torch.arange(256)[:, None] * torch.exp2(-torch.arange(32) / 4.0)[None, :]
    cs = torch.cat((angle.cos(), angle.sin()), dim=1).to(torch.bfloat16).to(ctx.device)
    weights = tuple(ctx.randn(128, seed=100 + i, scale=0.2) for i in range(4))
    perm = torch.randperm(num_blocks * block_size, generator=g)
    slots, islots = perm[:m].clone(), perm[m : 2 * m].clone()
    slots[1::4] = -1
    islots[2::4] = -1
    pos = torch.randint(0, 256, (m,), generator=g).to(ctx.device)
    args = (pos, cs, *weights, EPS)
    kw = dict(slot_mapping=slots.to(ctx.device), index_slot_mapping=islots.to(ctx.device), **SCALES)
    return x, weight, args, kw, num_blocks


def _outputs(ctx: Context, nkv: int, m: int, block_size: int, num_blocks: int) -> dict:
    qn = 16 * nkv * 128
    return dict(
        kv_cache=nvfp4.empty_kv_cache(num_blocks, nkv, block_size, ctx.device),
        index_cache=nvfp4.empty_index_cache(num_blocks, block_size, ctx.device),
        index_q_out=torch.zeros(m, nkv * 128, dtype=torch.float8_e4m3fn, device=ctx.device),
        q_out=torch.zeros(m, qn, dtype=torch.bfloat16, device=ctx.device),
        q_fp8_out=torch.zeros(m, qn, dtype=torch.float8_e4m3fn, device=ctx.device),
    )


def _bytes_moved(nkv: int, m: int, k: int) -> int:
    n = (19 * nkv + 1) * 128
    weights = n * k + seam.mxfp8_scale_numel(n, k)
    act = m * k + seam.mxfp8_scale_numel(m, k)
    outs = m * 16 * nkv * 128 * 3 + m * nkv * 128 + m * (2 * nkv + 1) * 72
    return weights + act + outs + m * 24 + 4 * 128 * 2


def _run_epilogue(ctx: Context, nkv: int, m: int, k: int, block_size: int) -> Outcome:
    x, weight, args, kw, nb = _problem(ctx, nkv, m, k, block_size)
    xq, xsf = seam.mxfp8_quantize(x)
    acc = qkv_gemm_ref(xq, xsf, weight.values, weight.scales)
    got, want = _outputs(ctx, nkv, m, block_size, nb), _outputs(ctx, nkv, m, block_size, nb)
    qkv_epilogue(acc, *args, **kw, **got)
    qkv_epilogue_ref(acc, *args, **kw, **want)
    bad = [name for name in got if not bytes_equal(got[name], want[name])]
    return Outcome(exact=not bad, detail="bytes equal" if not bad else "DIFFERS: " + ", ".join(bad))


def _run_fused_integer(ctx: Context, nkv: int, m: int, k: int, block_size: int) -> Outcome:
    x, weight, args, kw, nb = _problem(ctx, nkv, m, k, block_size, integer=True)
    xq, xsf = seam.mxfp8_quantize(x)
    acc = qkv_gemm_ref(xq, xsf, weight.values, weight.scales)
    got, want = _outputs(ctx, nkv, m, block_size, nb), _outputs(ctx, nkv, m, block_size, nb)
    seam.qkv_index_fused_epilogue(xq, xsf, weight.values, weight.scales, *args, **kw, **got)
    qkv_epilogue_ref(acc, *args, **kw, **want)
    bad = [name for name in got if not bytes_equal(got[name], want[name])]
    t = pick_qkv_tile(m, weight.shape[0], k, ctx.device)
    cap = (f" max {t.max_registers} registers" if t.max_registers else "") + (" F16 operands" if t.f16_operands else "")
    path = "prefill GEMM + epilogue kernel, " if t.bf16_mm else "Gluon GEMM + epilogue kernel, " if t.wgmma else ""
    tile = f"{path}tile {t.block_m}x{t.block_n}x{t.block_k} split {t.split_k}{cap}"
    return Outcome(exact=not bad, detail=f"bytes equal ({tile})" if not bad else f"DIFFERS ({tile}): " + ", ".join(bad))


def _rows_close(got: torch.Tensor, want: torch.Tensor, fp8: bool) -> bool:
    g, w = got.float(), want.float()
    bound = 2e-2 * w.abs().amax(dim=1, keepdim=True) + (w.abs() * 2.0**-3 if fp8 else 0.0)
    return bool(((g - w).abs() <= bound).all())


def _cache_steps(got: torch.Tensor, want: torch.Tensor, block_size: int) -> tuple[int, int]:
    """(max E2M1 code distance, max scale byte distance) over all slots."""
    g = got.reshape(-1, block_size * 72)
    w = want.reshape(-1, block_size * 72)
    d = block_size * 64

    def line(c):
        c = nvfp4.unpack_e2m1(c).to(torch.int32)
        return torch.where(c >= 8, -(c - 8), c)

    codes = int((line(g[:, :d]) - line(w[:, :d])).abs().max())
    scales = int((g[:, d:].to(torch.int32) - w[:, d:].to(torch.int32)).abs().max())
    return codes, scales


def _run_fused(ctx: Context, nkv: int, m: int, k: int, block_size: int) -> Outcome:
    x, weight, args, kw, nb = _problem(ctx, nkv, m, k, block_size)
    xq, xsf = seam.mxfp8_quantize(x)
    got, want = _outputs(ctx, nkv, m, block_size, nb), _outputs(ctx, nkv, m, block_size, nb)
    seam.qkv_index_fused_epilogue(xq, xsf, weight.values, weight.scales, *args, **kw, **got)
    qkv = qkv_unfused(xq, xsf, weight, *args, epilogue="triton", **kw, **want)
    q_ok = _rows_close(got["q_out"], want["q_out"], False)
    q8_ok = _rows_close(got["q_fp8_out"], want["q_fp8_out"], True)
    iq_ok = _rows_close(got["index_q_out"], want["index_q_out"], True)
    kv_steps = _cache_steps(got["kv_cache"], want["kv_cache"], block_size)
    ik_steps = _cache_steps(got["index_cache"], want["index_cache"], block_size)
    ok = q_ok and q8_ok and iq_ok and max(kv_steps + ik_steps) <= 1
    q_eq = float((got["q_out"] == want["q_out"]).float().mean() * 100)
    detail = (
        f"q {q_eq:.1f}% equal, q/q_fp8/index_q {'ok' if q_ok and q8_ok and iq_ok else 'OUT OF TOLERANCE'}; "
        f"kv max steps (code, scale) {kv_steps}, index {ik_steps}"
    )
    return Outcome(
        exact=ok,
        detail=detail,
        fused=lambda: seam.qkv_index_fused_epilogue(xq, xsf, weight.values, weight.scales, *args, **kw, **got),
        unfused=lambda: qkv_unfused(xq, xsf, weight, *args, epilogue="triton", qkv_out=qkv, **kw, **want),
        baseline="seam.mxfp8_linear to BF16, then seam's epilogue kernel",
        bytes_moved=_bytes_moved(nkv, m, k),
    )


EPILOGUE_RULE = "bit-identical to the reference epilogue on the same accumulator"
INTEGER_RULE = "bit-identical to the reference (small-integer operands: the accumulator is exact in any order)"
FUSED_RULE = (
    "tolerance (the unfused chain rounds qkv to BF16): q, q_fp8, index_q within 2e-2 of the chain's row max "
    "(+1 E4M3 step for FP8), cache codes within one E2M1 code, scales within one E4M3 step"
)


def checks(ctx: Context) -> list[Check]:
    k = ctx.pick(6144, 256)
    block_size = ctx.pick(64, 4)
    out = []
    for nkv in ctx.pick([1, 2, 4], [1]):
        shape = f"nkv={nkv} N={(19 * nkv + 1) * 128} K={k}"
        for m in ctx.pick([1, 8, 64, 256, 2048], [3]):
            out.append(Check("qkv_epilogue[acc]", m, shape,
                             lambda m=m, nkv=nkv: _run_epilogue(ctx, nkv, m, k, block_size), rule=EPILOGUE_RULE))
            out.append(Check("qkv_index_fused_epilogue", m, shape,
                             lambda m=m, nkv=nkv: _run_fused(ctx, nkv, m, k, block_size), rule=FUSED_RULE))
        # M values that make the picker choose every path on Hopper (the Gluon decode GEMM + epilogue at 1, 20, 64, 80
        # (a 64 + tail tile) and 128 tokens (its streamed tile), the warp-specialized token tiles at 144, 192 (1 KV head)
        # and 300, its wide tiles at 144, 192 and 256 for 2 KV heads, the Gluon ring GEMM at 192 for 4 KV heads, the token tiles
        # past 384 at 513, the prefill GEMM above; the epilogue after the streamed tiles in one-row programs at split 6
        # (1 KV head), 4-row at splits up to 3) and, under the interpreter, the tl tiles (the one-token GEMV kernel there)
        for m in ctx.pick([1, 20, 64, 80, 128, 144, 192, 256, 300, 513, 2048], [1, 3, 20]):
            out.append(Check("qkv_index_fused_epilogue[int]", m, shape,
                             lambda m=m, nkv=nkv: _run_fused_integer(ctx, nkv, m, k, block_size), rule=INTEGER_RULE))
    return out
