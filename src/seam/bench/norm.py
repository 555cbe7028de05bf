"""Benchmark: fused add + Gemma RMSNorm + MXFP8 (+ BF16 normed) at MiniMax-M3.1 TP4 (hidden 6144).

CUDA-graph replay of 200 launches (``timing.graph_time_us``), us per call, for:
fused (one launch, with and without the BF16 normed output), seam's two-launch chain
(add + norm, then the standalone quantizer), the eager PyTorch chain (the reference), and
``torch.compile`` of that chain, compiled for each M (static shapes: what an engine captures per
batch size). For each variant (``fused``: the MXFP8 rows; ``+bf16``: the BF16 rows too): ``floor``,
its bytes at 4.23 TB/s + one launch, and ``stream``, one launch reading and writing those bytes with
no math (``seam.bench.stream``): what any kernel moving them can do on this card.
Targets (issue 19): fused <= the best peer at every M; >= 90% of the floor (floor / fused) at M >= 2048.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.stream import stream_us
from seam.bench.timing import compile_static, floor_us, graph_time_us
from seam.ref.norm import gemma_fused_add_rms_norm_mxfp8_ref

HIDDEN = 6144
EPS = 1e-6
MS = (1, 8, 16, 32, 64, 128, 192, 256, 512, 2048, 8192)


def bytes_read_written(m: int, hidden: int, also_bf16: bool) -> tuple[int, int]:
    """HBM bytes of the fused op: x, residual, weight read; residual_out, [normed], values, scales written."""
    written = 2 * m * hidden * (2 if also_bf16 else 1) + m * hidden + seam.mxfp8_scale_numel(m, hidden)
    return 4 * m * hidden + 2 * hidden, written


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


def run(console, ms: tuple[int, ...] = MS, device: torch.device | str = "cuda") -> list[dict]:
    dev = torch.device(device)
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
        row = {"op": "gemma_fused_add_rms_norm_mxfp8", "M": m, "hidden": HIDDEN,
               **{f"{k} us": v for k, v in t.items()}, "fused/compile": t["fused+bf16"] / t["compile"]}
        for variant, also_bf16 in (("fused", False), ("fused+bf16", True)):
            suffix = " +bf16" if also_bf16 else ""
            read, written = bytes_read_written(m, HIDDEN, also_bf16)
            floor, stream = floor_us(read + written), stream_us(read, written, dev)
            row.update({f"floor{suffix} us": floor, f"floor/{variant}": floor / t[variant],
                        f"stream{suffix} us": stream, f"stream/{variant}": stream / t[variant]})
        rows.append(row)
    table = Table(title=f"add + Gemma RMSNorm + MXFP8, hidden {HIDDEN} (us per call)")
    cols = ["M", "fused+bf16 us", "fused us", "seam 2 launches us", "eager us", "compile us", "fused/compile",
            "floor us", "floor/fused", "stream us", "stream/fused", "floor +bf16 us", "floor/fused+bf16",
            "stream +bf16 us", "stream/fused+bf16"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c == "M" else f"{row[c]:.2f}" for c in cols))
    console.print(table)
    return rows
