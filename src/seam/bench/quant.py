"""Benchmark: standalone MXFP8 quantization (``seam.mxfp8_quantize``) at hidden 6144, both scale layouts.

CUDA-graph replay of 200 launches (``timing.graph_time_us``), us per call, for: seam with
128x4-swizzled scales and with row-major scales, the PyTorch reference quantizer (eager) and
``torch.compile`` of it, compiled for each M (static shapes: what an engine captures per batch size),
both swizzled. ``floor``: the op's bytes (BF16 rows read, E4M3 values and scales written) at 4.23
TB/s + one launch; ``stream``: one launch reading and writing those bytes with no math
(``seam.bench.stream``): what any kernel moving them can do on this card.
Targets (issue 19): seam <= the best peer at every M; >= 85% of the floor (floor / seam) at M >= 2048.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.norm import time_us
from seam.bench.stream import stream_us
from seam.bench.timing import compile_static, floor_us, graph_time_us
from seam.formats.mxfp8 import mxfp8_quantize_ref

HIDDEN = 6144
MS = (1, 8, 64, 192, 2048, 8192)


def bytes_read_written(m: int, hidden: int) -> tuple[int, int]:
    """HBM bytes: BF16 [M, hidden] read, E4M3 values and the swizzled scales written."""
    return 2 * m * hidden, m * hidden + seam.mxfp8_scale_numel(m, hidden)


def run(console, ms: tuple[int, ...] = MS, device: torch.device | str = "cuda") -> list[dict]:
    dev = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for m in ms:
        compiled = compile_static(mxfp8_quantize_ref)
        x = (torch.randn(m, HIDDEN, generator=g) * 4).bfloat16().to(dev)
        swizzled = seam.mxfp8_quantize(x)
        row_major = seam.mxfp8_quantize(x, scale_layout="row_major")
        t = {
            "seam swizzled": graph_time_us(lambda: seam.mxfp8_quantize(x, out=swizzled)),
            "seam row-major": graph_time_us(lambda: seam.mxfp8_quantize(x, scale_layout="row_major", out=row_major)),
            "eager": time_us(lambda: mxfp8_quantize_ref(x)),
            "compile": time_us(lambda: compiled(x)),
        }
        read, written = bytes_read_written(m, HIDDEN)
        floor, stream = floor_us(read + written), stream_us(read, written, dev)
        rows.append({
            "op": "mxfp8_quantize", "M": m, "hidden": HIDDEN,
            **{f"{k} us": v for k, v in t.items()},
            "seam/compile": t["seam swizzled"] / t["compile"],
            "floor us": floor, "floor/seam": floor / t["seam swizzled"],
            "stream us": stream, "stream/seam": stream / t["seam swizzled"],
        })
    table = Table(title=f"MXFP8 quantize, hidden {HIDDEN} (us per call)")
    cols = ["M", "seam swizzled us", "seam row-major us", "eager us", "compile us", "seam/compile", "floor us",
            "floor/seam", "stream us", "stream/seam"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c == "M" else f"{row[c]:.2f}" for c in cols))
    console.print(table)
    return rows
