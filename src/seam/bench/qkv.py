"""Benchmark: MXFP8 QKV+indexer GEMM with fused norm / RoPE / NVFP4-KV epilogue (issue 5).

MiniMax-M3 shapes, K = 6144: TP4 (nkv 1, N 2560) and TP2 (nkv 2, N 4992), M in
{1, 8, 64, 256, 2048}. CUDA-graph replay (``timing.graph_time_us``), us per call, of:
- ``fused``: ``seam.qkv_index_fused_epilogue`` as picked (Hopper M 2..128 and CUDA M >= 129 at K 6144: the
  ``mxfp8_linear`` GEMM into an fp32 accumulator, then the epilogue kernel; else one kernel);
- ``fused A_deq``: the same given the activation's A_deq (``seam.formats.a_deq``, made outside the timing), as the
  norm + MXFP8 producer hands it on Hopper from 2 tokens (the Gluon GEMMs read it instead of dequantizing);
- ``one kernel``: the same op on its one-kernel tl tile (``pick_qkv_tile(..., tl_only=True)``);
- ``linear``: ``seam.mxfp8_linear`` alone (BF16 qkv to memory), the issue's yardstick (fused <= linear + 1 us);
- ``fenced``: ``fused`` and ``linear`` again, each call followed by a launch without PDL
  (``timing.fenced``): their latency to complete outputs, where back to back also counts what the call's last
  kernel lets the next call's GEMM overlap (at decode ``mxfp8_linear``'s last kernel, the decode kernel or its
  split-K sum, triggers it before its own wait; the op's epilogue kernel after the decode GEMM's partials once it has
  loaded them), so ``fused - linear, fenced`` is what the op adds over ``mxfp8_linear`` before a kernel that waits;
- ``unfused``: ``seam.mxfp8_linear`` (BF16 qkv to memory) + the Triton epilogue on it;
- ``bf16+epi``: cuBLAS BF16 GEMM (``x @ w.T``) + the same Triton epilogue;
- ``fp8+epi``: cuBLAS FP8 with tensor-wise scales (``torch._scaled_mm``) + the epilogue
  (skipped where this torch build rejects the shape).
The weights are rotated over enough copies to exceed the 60 MiB L2, so every call
streams them from HBM. Weight-stream GB/s = (N*K + N*K/32 scale bytes) / time, against
the device copy bandwidth; ``floor`` = those bytes / 4.23 TB/s + one launch
(``seam.bench.timing.floor_us``); TFLOP/s = 2*M*N*K / time, against the ~790 TFLOP/s BF16 dense
peak. Targets (issue 18): at M <= 64 fused <= ``mxfp8_linear`` + 1 us and <= 0.6x (cuBLAS FP8 + epilogue).

Also the unfused chain as one call (:func:`qkv_unfused`), which ``seam verify``, the
decode-step harness (``seam.bench.step``) and the tests run.
"""

from __future__ import annotations

import time

import torch
from rich.table import Table

import seam
from seam import checks
from seam.bench.timing import copy_bandwidth_gbs, fenced, floor_us, graph_time_us, rotating
from seam.formats import nvfp4
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8_weight import MXFP8Weight
from seam.kernels.mxfp8_gemm_config import pick_qkv_tile
from seam.ops.linear import mxfp8_linear
from seam.ops.qkv import prepare_epilogue, qkv_epilogue
from seam.ref.qkv import qkv_epilogue_ref

K = 6144
SHAPES = (("TP4", 1), ("TP2", 2))  # (name, nkv)
MS = (1, 8, 64, 128, 256, 2048)
BLOCK_SIZE = 64
EPS = 1e-6
BF16_PEAK_TFLOPS = 790.0


def qkv_unfused(
    xq: torch.Tensor,
    xsf: torch.Tensor,
    weight: MXFP8Weight,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    *,
    epilogue: str = "triton",
    qkv_out: torch.Tensor | None = None,
    **outputs,
) -> torch.Tensor:
    """The unfused chain: ``qkv = mxfp8_linear(x, weight)`` (BF16 [M, N] in memory), then the epilogue.

    ``epilogue="triton"`` runs :func:`seam.ops.qkv.qkv_epilogue` on the BF16 qkv (a second launch),
    ``"torch"`` runs :func:`seam.ref.qkv.qkv_epilogue_ref` (PyTorch ops). ``outputs``
    are the keyword arguments of :func:`seam.qkv_index_fused_epilogue` from ``slot_mapping``
    on. Returns the BF16 qkv.

    Raises:
        ValueError: unknown ``epilogue``; otherwise as :func:`seam.mxfp8_linear` and
            :func:`seam.ops.qkv.qkv_epilogue`.
    """
    if epilogue not in ("triton", "torch"):
        raise ValueError(f"epilogue must be 'triton' or 'torch', got {epilogue!r}")
    checks.tensor("xq", xq, dtype=torch.float8_e4m3fn)
    checks.tensor("xsf", xsf, dtype=torch.uint8)
    if not isinstance(weight, MXFP8Weight):
        raise TypeError(f"weight must be a seam.MXFP8Weight, got {type(weight).__name__}")
    shape = (xq.shape[0], weight.shape[0])
    if qkv_out is None:
        qkv = torch.empty(shape, dtype=torch.bfloat16, device=xq.device)
    else:
        qkv = checks.tensor("qkv_out", qkv_out, dtype=torch.bfloat16, shape=shape, device=xq.device)
    args = (positions, cos_sin_cache, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight, eps)
    # Every epilogue argument is checked before the GEMM writes qkv: bad input changes nothing.
    launch = prepare_epilogue(qkv, *args, **outputs)
    x = QuantizedActivation(xq, xsf.reshape(-1), torch.bfloat16, tuple(xq.shape))
    mxfp8_linear(x, weight, out=qkv)
    if epilogue == "triton":
        launch()
    else:
        outputs.pop("tile", None)
        qkv_epilogue_ref(qkv, *args, **outputs)
    return qkv


def _fp8_tensorwise(w: torch.Tensor):
    """(fp8 weight [N, K], fp32 scale) for torch._scaled_mm."""
    scale = w.float().abs().amax().clamp(min=1e-12) / 448.0
    return (w.float() / scale).to(torch.float8_e4m3fn), scale.reshape(())


def _bench_shape(nkv: int, m: int, dev: torch.device, g: torch.Generator) -> dict:
    n = (19 * nkv + 1) * 128
    w_bf16 = (torch.randn(n, K, generator=g) * K**-0.5).to(torch.bfloat16).to(dev)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    x = torch.randn(m, K, generator=g).to(torch.bfloat16).to(dev)
    xq, xsf = seam.mxfp8_quantize(x)
    num_blocks = -(-m // BLOCK_SIZE) + 1
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:m].to(dev)
    islots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:m].to(dev)
    pos = torch.randint(0, 4096, (m,), generator=g).to(dev)
    cs = torch.randn(4096, 64, generator=g).to(torch.bfloat16).to(dev)
    ws = tuple((torch.randn(128, generator=g) * 0.2).to(torch.bfloat16).to(dev) for _ in range(4))
    args = (pos, cs, *ws, EPS)
    outs = dict(
        kv_cache=nvfp4.empty_kv_cache(num_blocks, nkv, BLOCK_SIZE, dev),
        index_cache=nvfp4.empty_index_cache(num_blocks, BLOCK_SIZE, dev),
        index_q_out=torch.empty(m, nkv * 128, dtype=torch.float8_e4m3fn, device=dev),
        q_out=torch.empty(m, 16 * nkv * 128, dtype=torch.bfloat16, device=dev),
        slot_mapping=slots,
        index_slot_mapping=islots,
    )
    qkv = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    weight_bytes = n * K + weight.scales.numel()
    mx = rotating(lambda: seam.MXFP8Weight(weight.values.clone(), weight.scales.clone()), weight_bytes)
    bf = rotating(lambda: w_bf16.clone(), 2 * n * K)
    act = seam.QuantizedActivation(xq, xsf, torch.bfloat16, (m, K))

    def fused(tile=None, a_deq=None):
        w = mx()
        seam.qkv_index_fused_epilogue(xq, xsf, w.values, w.scales, *args, **outs, tile=tile, a_deq=a_deq)

    a_deq = a_deq_from_mxfp8(xq, xsf)  # what the norm + MXFP8 producer hands the op from 2 tokens on Hopper

    one_kernel = pick_qkv_tile(m, n, K, dev, tl_only=True)

    def linear():
        seam.mxfp8_linear(act, mx(), out=qkv)

    def unfused():
        linear()
        qkv_epilogue(qkv, *args, **outs)

    def bf16_epi():
        torch.matmul(x, bf().t(), out=qkv)
        qkv_epilogue(qkv, *args, **outs)

    t = {"fused": graph_time_us(fused), "fused A_deq": graph_time_us(lambda: fused(a_deq=a_deq)),
         "one kernel": graph_time_us(lambda: fused(one_kernel)),
         "linear": graph_time_us(linear),
         "unfused": graph_time_us(unfused), "bf16+epi": graph_time_us(bf16_epi),
         "fused fenced": graph_time_us(fenced(fused, dev)),
         "linear fenced": graph_time_us(fenced(linear, dev))}
    try:
        w8, sw = _fp8_tensorwise(w_bf16)
        x8, sx = _fp8_tensorwise(x)
        f8 = rotating(lambda: w8.clone(), n * K)

        def fp8_epi():
            torch._scaled_mm(x8, f8().t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, out=qkv)
            qkv_epilogue(qkv, *args, **outs)

        t["fp8+epi"] = graph_time_us(fp8_epi)
    except (RuntimeError, TypeError):
        t["fp8+epi"] = float("nan")
    best_cublas = min(v for k, v in t.items() if k in ("bf16+epi", "fp8+epi") and v == v)
    return {
        "n": n,
        **{f"{k} us": v for k, v in t.items()},
        "fused/cuBLAS+epi": t["fused"] / best_cublas,
        "fused - linear": t["fused"] - t["linear"],
        "fused - linear, fenced": t["fused fenced"] - t["linear fenced"],
        "floor us": floor_us(weight_bytes),
        "weight GB/s": weight_bytes / (t["fused"] * 1e-6) / 1e9,
        "TFLOP/s": 2 * m * n * K / (t["fused"] * 1e-6) / 1e12,
    }


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs()
    g = torch.Generator(device="cpu").manual_seed(0)
    for _, nkv in SHAPES:
        start = time.perf_counter()
        tiles = seam.qkv_warmup(nkv, hidden_size=K, device=dev, max_tokens=max(ms))
        console.print(f"qkv_warmup nkv {nkv}: {len(tiles)} tiles compiled in {time.perf_counter() - start:.0f} s")
    rows = []
    for name, nkv in SHAPES:
        for m in ms:
            r = _bench_shape(nkv, m, dev, g)
            rows.append({
                "op": "qkv_index_fused_epilogue", "shape": name, "nkv": nkv, "M": m, "K": K, **r,
                "% copy": 100 * r["weight GB/s"] / copy_gbs,
                "% bf16 peak": 100 * r["TFLOP/s"] / BF16_PEAK_TFLOPS,
            })
            # progress, so a run cut short still reports what it measured
            console.print(f"{name} M {m}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k.endswith("us")))
    table = Table(title=f"QKV+indexer MXFP8 GEMM + fused epilogue, K {K} (us per call; copy {copy_gbs:.0f} GB/s)")
    cols = ["shape", "M", "fused us", "fused A_deq us", "one kernel us", "linear us", "fused - linear",
            "fused - linear, fenced", "unfused us", "bf16+epi us", "fp8+epi us", "fused/cuBLAS+epi", "floor us",
            "weight GB/s", "% copy", "TFLOP/s", "% bf16 peak"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c in ("shape", "M") else f"{row[c]:.0f}" if c in ("weight GB/s",) else
                        f"{row[c]:.2f}" for c in cols))
    console.print(table)
    return rows
