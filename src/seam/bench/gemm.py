"""Benchmark: ``seam.mxfp8_linear`` at decode M (and 65-128 tokens) against cuBLAS, side by side in one process.

Per layer shape (N x K per rank) and token count M, us per call (CUDA-graph replay of 200
back-to-back calls, ``timing.graph_time_us``; weights rotated over copies exceeding 2x the
60 MiB L2, so every call streams them from HBM):

* ``seam``: ``mxfp8_linear`` on an MXFP8 ``QuantizedActivation`` with the default tile (the
  Gluon decode kernel at 2 <= M <= 64 on Hopper, ``seam.kernels.mxfp8_wgmma``; the Gluon ring
  kernel at 65 <= M <= 128 where K >= 2048, and at 129 <= M <= 256 where ``pick_ring_tile`` takes the
  shape, ``seam.kernels.mxfp8_wgmma_ring``);
* ``seam bf16 x``: the same on the BF16 activation (``quantize="auto"``: in-GEMM at M <= 16);
* ``seam tl``: the tl kernel's own pick (``pick_tile(..., tl_only=True)``), the path before it;
* ``cuBLAS FP8``: ``torch._scaled_mm`` with per-tensor scales (E4M3 weights and activations,
  a lossy stand-in for MXFP8: the scales are not per 32);
* ``cuBLAS BF16``: ``torch.mm`` on BF16 weights (twice the bytes);
* ``floor``: MXFP8 weight bytes (values + scales) / 4.23 TB/s + one 0.54 us launch.

A last table times seam's norm -> GEMM chain (``gemma_fused_add_rms_norm_mxfp8`` then
``mxfp8_linear`` on its MXFP8 rows, both PDL launches, back to back in one graph) and what
the GEMM adds to the norm alone.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.linear import SHAPES  # the MiniMax-M3.1 TP4 layers: gate_up, down, o_proj, qkv
from seam.bench.timing import floor_us, graph_time_us, rotating
from seam.kernels.mxfp8_gemm_config import pick_tile

MS = (1, 8, 16, 32, 64, 128)


def _tile_name(t) -> str:
    if t.bf16_mm:
        return "dequantize + cuBLAS BF16"
    kind = "gluon ring" if t.ring else "gluon" if t.wgmma else "tl"
    return f"{kind} {t.block_m}x{t.block_n}x{t.block_k} sk{t.split_k} st{t.num_stages}"


def _row(layer: str, n: int, k: int, m: int, dev: torch.device, g: torch.Generator) -> dict:
    w_bf16 = (torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16).to(dev)
    weight = seam.MXFP8Weight.from_bf16(w_bf16)
    weight_bytes = n * k + weight.scales.numel()
    mx = rotating(lambda: seam.MXFP8Weight(weight.values.clone(), weight.scales.clone()), weight_bytes)
    f8 = rotating(lambda: weight.values.clone(), n * k)
    bf = rotating(lambda: w_bf16.clone(), 2 * n * k)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)
    xq, xs = seam.mxfp8_quantize(x)
    act = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k))
    out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    tile, tl_tile = pick_tile(m, n, k, dev), pick_tile(m, n, k, dev, tl_only=True)
    one = torch.ones((), device=dev)
    r = {"layer": layer, "N": n, "K": k, "M": m, "tile": _tile_name(tile)}
    r["seam"] = graph_time_us(lambda: seam.mxfp8_linear(act, mx(), out=out))
    r["seam bf16 x"] = graph_time_us(lambda: seam.mxfp8_linear(x, mx(), out=out))
    r["seam tl"] = graph_time_us(lambda: seam.mxfp8_linear(act, mx(), out=out, tile=tl_tile))
    r["cuBLAS FP8"] = graph_time_us(lambda: torch._scaled_mm(xq, f8().t(), one, one, out_dtype=torch.bfloat16))
    r["cuBLAS BF16"] = graph_time_us(lambda: torch.mm(x, bf().t()))
    r["floor"] = floor_us(weight_bytes)
    r["seam / tl"] = r["seam"] / r["seam tl"]
    r["seam / cuBLAS FP8"] = r["seam"] / r["cuBLAS FP8"]
    r["floor / seam"] = r["floor"] / r["seam"]
    return r


def _chain_rows(ms: tuple[int, ...], dev: torch.device, g: torch.Generator) -> list[dict]:
    _, n, hidden = SHAPES[-1]
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, hidden, generator=g) * hidden**-0.5).to(dev))
    mx = rotating(lambda: seam.MXFP8Weight(w.values.clone(), w.scales.clone()), n * hidden)
    norm_w = torch.randn(hidden, generator=g).to(torch.bfloat16).to(dev)
    rows = []
    for m in ms:
        x = torch.randn(m, hidden, generator=g).to(torch.bfloat16).to(dev)
        residual = torch.randn(m, hidden, generator=g).to(torch.bfloat16).to(dev)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)

        def norm():
            return seam.gemma_fused_add_rms_norm_mxfp8(x, residual, norm_w, 1e-6)

        def chain():
            values, scales, _ = norm()
            seam.mxfp8_linear(seam.QuantizedActivation(values, scales, torch.bfloat16, (m, hidden)), mx(), out=out)

        t_norm, t_chain = graph_time_us(norm), graph_time_us(chain)
        rows.append({"M": m, "norm": t_norm, "norm + GEMM": t_chain, "GEMM adds": t_chain - t_norm})
    return rows


def _table(title: str, rows: list[dict], cols: list[str]) -> Table:
    table = Table(title=title)
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    return table


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for layer, n, k in SHAPES:
        for m in ms:
            rows.append(_row(layer, n, k, m, dev, g))
            r = rows[-1]
            # progress, so a run cut short still reports what it measured
            console.print(f"{layer} M {m}: seam {r['seam']:.2f} us ({r['tile']}), tl {r['seam tl']:.2f}, "
                          f"cuBLAS FP8 {r['cuBLAS FP8']:.2f}, BF16 {r['cuBLAS BF16']:.2f}")
    cols = ["layer", "N", "K", "M", "tile", "seam", "seam bf16 x", "seam tl", "cuBLAS FP8", "cuBLAS BF16", "floor",
            "seam / tl", "seam / cuBLAS FP8", "floor / seam"]
    console.print(_table("mxfp8_linear vs cuBLAS, us per call (weights from HBM)", rows, cols))
    chain = _chain_rows(tuple(m for m in ms if m <= 64), dev, g)
    console.print(_table(f"norm+MXFP8 -> mxfp8_linear (qkv N {SHAPES[-1][1]}), PDL, us per step", chain,
                         ["M", "norm", "norm + GEMM", "GEMM adds"]))
    return rows + [{"op": "chain", **c} for c in chain]
