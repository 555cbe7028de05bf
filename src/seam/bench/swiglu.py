"""Benchmark: SwiGLU-OAI + MXFP8 at MiniMax-M3.1 TP4 (shared-expert I 768, gate_up [M, 1536]).

CUDA-graph replay of 200 launches (``timing.graph_time_us``), us per call, for: fused
(one launch, fp32 act quantized directly), seam's two-launch chain (``swiglu_oai`` then the
standalone quantizer), the eager PyTorch chain (reference activation, BF16, reference
quantizer) and ``torch.compile`` of it, compiled for each M (static shapes: what an engine
captures per batch size). ``floor``: the fused op's bytes at 4.23 TB/s + one launch; ``stream``: one
launch reading and writing those bytes with no math (``seam.bench.stream``): what any kernel moving
them can do on this card.
Targets (issue 19): fused <= the best peer at every M; >= 90% of the floor (floor / fused) at M >= 2048.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.norm import time_us
from seam.bench.stream import stream_us
from seam.bench.timing import compile_static, floor_us, graph_time_us
from seam.formats.mxfp8 import mxfp8_quantize_ref
from seam.ref.swiglu import swiglu_oai_ref

INTER = 768
MS = (1, 8, 16, 32, 64, 128, 192, 256, 512, 2048, 8192)


def bytes_read_written(m: int, inter: int) -> tuple[int, int]:
    """HBM bytes of the fused op: gate_up read (BF16 [M, 2I]), E4M3 values and scales written."""
    return 4 * m * inter, m * inter + seam.mxfp8_scale_numel(m, inter)


def _chain(gate_up):
    return mxfp8_quantize_ref(swiglu_oai_ref(gate_up))


def run(console, ms: tuple[int, ...] = MS, device: torch.device | str = "cuda") -> list[dict]:
    dev = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for m in ms:
        compiled = compile_static(_chain)
        x = (torch.randn(m, 2 * INTER, generator=g) * 8).bfloat16().to(dev)
        out = seam.swiglu_oai_mxfp8(x)
        act = torch.empty(m, INTER, dtype=torch.bfloat16, device=dev)
        q = (torch.empty_like(out[0]), torch.empty_like(out[1]))
        t = {
            "fused": graph_time_us(lambda: seam.swiglu_oai_mxfp8(x, out=out)),
            "seam 2 launches": graph_time_us(lambda: seam.mxfp8_quantize(seam.swiglu_oai(x, out=act), out=q)),
            "eager": time_us(lambda: _chain(x)),
            "compile": time_us(lambda: compiled(x)),
        }
        read, written = bytes_read_written(m, INTER)
        floor, stream = floor_us(read + written), stream_us(read, written, dev)
        rows.append({
            "op": "swiglu_oai_mxfp8", "M": m, "I": INTER,
            **{f"{k} us": v for k, v in t.items()},
            "fused/compile": t["fused"] / t["compile"],
            "floor us": floor, "floor/fused": floor / t["fused"],
            "stream us": stream, "stream/fused": stream / t["fused"],
        })
    table = Table(title=f"SwiGLU-OAI + MXFP8, I {INTER} (us per call)")
    cols = ["M", "fused us", "seam 2 launches us", "eager us", "compile us", "fused/compile", "floor us",
            "floor/fused", "stream us", "stream/fused"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c == "M" else f"{row[c]:.2f}" for c in cols))
    console.print(table)
    return rows
