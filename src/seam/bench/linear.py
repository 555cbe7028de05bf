"""Benchmark: where ``seam.mxfp8_linear`` should quantize a BF16 activation (issue 6, the in-GEMM carve-out).

``quantize="separate"`` is two launches (``seam.mxfp8_quantize``, then the GEMM on
E4M3 + swizzled scales); ``quantize="in_gemm"`` is one GEMM that quantizes each BF16 A
tile in registers, once per 128-wide N tile. The second saves a launch (~0.5 us of
CUDA-graph replay on the H200) and the E4M3 round trip, and pays N/128 redundant
quantizations of A, so it wins only up to some M. That M, per layer shape, is what
this benchmark measures; it set ``seam.ops.linear.IN_GEMM_MAX_M`` (``quantize="auto"``). Past 64 tokens
on Hopper (the decode kernel's 128-row tile, the ring kernel) ``in_gemm`` quantizes in the launch that dequantizes the activations, once per
element (5cfa41d): those rows do not bear on ``IN_GEMM_MAX_M``.

Shapes: the MiniMax-M3.1 decoder layer at TP 4 (per rank): gate_up N 1536 K 6144,
down N 6144 K 768, o_proj N 6144 K 2048, qkv N 2560 K 6144; M in {1, ..., 128}. Both
paths use the same tile (the default pick), so their outputs are byte-identical
(checked here too, column ``equal``). CUDA-graph replay (``timing.graph_time_us``),
us per call; the weights are rotated over copies exceeding 2x the 60 MiB L2, so each
call streams them from HBM. Weight-stream GB/s = (N*K + N*K/32 scale bytes) / time,
against the device copy bandwidth.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.timing import copy_bandwidth_gbs, graph_time_us, rotating
from seam.kernels.mxfp8_gemm_config import pick_tile

#: (layer, N, K) per rank of the MiniMax-M3.1 layer at TP 4 (hidden 6144).
SHAPES = (("gate_up", 1536, 6144), ("down", 6144, 768), ("o_proj", 6144, 2048), ("qkv", 2560, 6144))
MS = (1, 2, 4, 8, 16, 32, 64, 128)


def _bench_shape(n: int, k: int, m: int, dev: torch.device, g: torch.Generator) -> dict:
    w_bf16 = (torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16).to(dev)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)
    weight_bytes = n * k + weight.scales.numel()
    mx = rotating(lambda: seam.MXFP8Weight(weight.values.clone(), weight.scales.clone()), weight_bytes)
    out_sep = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    out_in = torch.empty_like(out_sep)
    tile = pick_tile(m, n, k, dev, mma_rows=False)  # one tile for both quantizations (the 16-row kernel reads E4M3)

    def separate():
        seam.mxfp8_linear(x, mx(), out=out_sep, tile=tile, quantize="separate")

    def in_gemm():
        seam.mxfp8_linear(x, mx(), out=out_in, tile=tile, quantize="in_gemm")

    t_sep = graph_time_us(separate)
    t_in = graph_time_us(in_gemm)
    equal = torch.equal(out_sep.view(torch.int16), out_in.view(torch.int16))
    return {
        "tile": f"{tile.block_m}x{tile.block_n}x{tile.block_k} sk{tile.split_k}",
        "separate us": t_sep,
        "in_gemm us": t_in,
        "in_gemm/separate": t_in / t_sep,
        "separate GB/s": weight_bytes / (t_sep * 1e-6) / 1e9,
        "in_gemm GB/s": weight_bytes / (t_in * 1e-6) / 1e9,
        "equal": equal,
    }


def carve_out(rows: list[dict], layer: str) -> int:
    """Largest M of ``layer`` up to which in_gemm beats separate at every measured M (0: never)."""
    best = 0
    for row in sorted((r for r in rows if r["layer"] == layer), key=lambda r: r["M"]):
        if row["in_gemm/separate"] >= 1.0:
            break
        best = row["M"]
    return best


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs()
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for layer, n, k in SHAPES:
        for m in ms:
            r = _bench_shape(n, k, m, dev, g)
            rows.append({"op": "mxfp8_linear", "layer": layer, "N": n, "K": k, "M": m, **r,
                         "% copy (in_gemm)": 100 * r["in_gemm GB/s"] / copy_gbs})
            # progress, so a run cut short still reports what it measured
            console.print(f"{layer} M {m}: separate {r['separate us']:.2f} us, in_gemm {r['in_gemm us']:.2f} us")
    table = Table(title=f"MXFP8 linear, BF16 x: separate quantize vs in-GEMM quantize (us per call; "
                        f"copy {copy_gbs:.0f} GB/s)")
    cols = ["layer", "N", "K", "M", "tile", "separate us", "in_gemm us", "in_gemm/separate",
            "separate GB/s", "in_gemm GB/s", "% copy (in_gemm)", "equal"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, float):
                cells.append(f"{v:.0f}" if "GB/s" in c or "%" in c else f"{v:.3f}" if "/" in c else f"{v:.2f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    console.print(table)
    summary = Table(title="In-GEMM carve-out per layer (0: in_gemm never wins)")
    for c in ("layer", "N", "K", "largest M winning at every M up to it", "in_gemm/separate there",
              "largest M winning at all"):
        summary.add_column(c, justify="right")
    for layer, n, k in SHAPES:
        x = carve_out(rows, layer)
        ratio = next((r["in_gemm/separate"] for r in rows if r["layer"] == layer and r["M"] == x), float("nan"))
        # differs from the first column only where the wins are not contiguous in M (noise, waves)
        any_win = max((r["M"] for r in rows if r["layer"] == layer and r["in_gemm/separate"] < 1.0), default=0)
        summary.add_row(layer, str(n), str(k), str(x), f"{ratio:.3f}", str(any_win))
        for r in rows:
            if r["layer"] == layer:
                r["carve-out M"] = x
    console.print(summary)
    return rows
