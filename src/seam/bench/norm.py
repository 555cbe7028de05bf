"""Benchmark: fused add + Gemma RMSNorm + MXFP8 (+ BF16 normed) at MiniMax-M3.1 TP4 (hidden 6144).

CUDA-graph replay of 200 launches (``timing.graph_time_us``), us per call, for:
fused (one launch, with and without the BF16 normed output), seam's two-launch chain
(add + norm, then the standalone quantizer), the eager PyTorch chain (the reference), and
``torch.compile`` of that chain, compiled for each M (static shapes: what an engine captures per
batch size). ``floor``: the fused op's bytes (with the BF16 rows) at 4.23 TB/s + one launch; GB/s
from the same byte count against the measured copy bandwidth.
Targets (issue 19): fused <= the best peer at every M; >= 90% of the floor (floor / fused) at M >= 2048.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.timing import compile_static, copy_bandwidth_gbs, floor_us, graph_time_us
from seam.ref.norm import gemma_fused_add_rms_norm_mxfp8_ref

HIDDEN = 6144
EPS = 1e-6
MS = (1, 8, 16, 32, 64, 128, 192, 256, 512, 2048, 8192)


def bytes_moved(m: int, hidden: int, also_bf16: bool) -> int:
    """HBM bytes of the fused op: x, residual, weight read; residual_out, [normed], values, scales written."""
    scales = seam.mxfp8_scale_numel(m, hidden)
    return 2 * m * hidden * (2 + 1 + (1 if also_bf16 else 0)) + 2 * hidden + m * hidden + scales


def _chain(x, r, w):
    return gemma_fused_add_rms_norm_mxfp8_ref(x, r, w, EPS, also_bf16=True)


def time_us(fn) -> float:
    """Graph-replay time; if ``fn`` cannot be captured (the reference chain copies a CPU
    constant to the device), 200 back-to-back eager calls timed with CUDA events instead."""
    try:
        return graph_time_us(fn)
    except RuntimeError:
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(200):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / 200)
        return sorted(times)[len(times) // 2]


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs()
    g = torch.Generator(device="cpu").manual_seed(0)
    w = (torch.randn(HIDDEN, generator=g) * 0.1).bfloat16().to(dev)
    rows = []
    for m in ms:
        compiled = compile_static(_chain)
        x = (torch.randn(m, HIDDEN, generator=g) * 3).bfloat16().to(dev)
        r = torch.randn(m, HIDDEN, generator=g).bfloat16().to(dev)
        out4 = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True)
        out3 = (out4[0], out4[1], out4[3])
        pair = (torch.empty_like(x), torch.empty_like(x))
        q = (torch.empty_like(out4[0]), torch.empty_like(out4[1]))
        t = {
            "fused+bf16": graph_time_us(
                lambda: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, also_bf16=True, out=out4)
            ),
            "fused": graph_time_us(lambda: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, EPS, out=out3)),
            "seam 2 launches": graph_time_us(
                lambda: seam.mxfp8_quantize(seam.gemma_fused_add_rms_norm(x, r, w, EPS, out=pair)[0], out=q)
            ),
            "eager": time_us(lambda: _chain(x, r, w)),
            "compile": time_us(lambda: compiled(x, r, w)),
        }
        gbs = bytes_moved(m, HIDDEN, True) / (t["fused+bf16"] * 1e-6) / 1e9
        floor = floor_us(bytes_moved(m, HIDDEN, True))
        rows.append({
            "op": "gemma_fused_add_rms_norm_mxfp8", "M": m, "hidden": HIDDEN,
            **{f"{k} us": v for k, v in t.items()},
            "fused/compile": t["fused+bf16"] / t["compile"],
            "floor us": floor, "floor/fused": floor / t["fused+bf16"],
            "GB/s": gbs, "% copy": 100 * gbs / copy_gbs,
        })
    table = Table(title=f"add + Gemma RMSNorm + MXFP8, hidden {HIDDEN} (us per call; copy {copy_gbs:.0f} GB/s)")
    cols = ["M", "fused+bf16 us", "fused us", "seam 2 launches us", "eager us", "compile us",
            "fused/compile", "floor us", "floor/fused", "GB/s", "% copy"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c == "M" else f"{row[c]:.0f}" if c in ("GB/s", "% copy") else f"{row[c]:.2f}"
                        for c in cols))
    console.print(table)
    return rows
