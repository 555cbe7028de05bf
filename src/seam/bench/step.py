"""Benchmark: the decode-step harness (``seam bench step``), unfused chain vs seam's chain.

Per M, for the MiniMax-M3.1 TP4 boundary and the DeepSeek-V4.1 mHC boundary
(``seam.decode_step``): kernel launches per layer step and rank (torch profiler), us per
layer step and rank under CUDA-graph replay, and whether the two chains' outputs agree.
On CPU it runs reduced shapes under the interpreter and reports agreement only.
Writes ``step.json`` and ``step.png`` (us per step vs M) to ``$SEAM_OUT`` (default ``out/``).
"""

from __future__ import annotations

import json
import os
import pathlib

import torch
from rich.table import Table

from seam import runtime
from seam.bench.timing import graph_time_us
from seam.decode_step import (
    MhcBoundary,
    MhcShape,
    MiniMaxBoundary,
    MiniMaxShape,
    compare_mhc,
    compare_minimax,
    count_launches,
    mhc_ok,
    minimax_ok,
)

MS_GPU = (1, 2, 4, 8, 16, 64, 128)
MS_CPU = (1, 3)


def _measure(boundary, compare, ok, gpu: bool) -> dict:
    metrics = compare(boundary)
    row = {"M": boundary.m, "agree": ok(metrics), **metrics}
    if gpu:
        tp = boundary.shape.tp
        for chain in ("unfused", "seam"):
            fn = getattr(boundary, chain)
            row[f"{chain} launches"] = count_launches(fn) / tp
            row[f"{chain} us"] = graph_time_us(fn, iters=20, reps=10) / tp
        row["speed-up"] = row["unfused us"] / row["seam us"]
    return row


def _table(title: str, rows: list[dict]) -> Table:
    table = Table(title=title)
    cols = list(rows[0])
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*(
            ("yes" if v else "NO") if isinstance(v, bool) else f"{v:.4g}" if isinstance(v, float) else str(v)
            for v in (r[c] for c in cols)
        ))
    return table


def _plot(results: dict[str, list[dict]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4))
    for ax, (name, rows) in zip(axes, results.items()):
        ms = [r["M"] for r in rows]
        for chain in ("unfused", "seam"):
            ax.plot(ms, [r[f"{chain} us"] for r in rows], marker="o", label=chain)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("us per layer step and rank (CUDA graph)")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


#: ``seam bench step`` also runs without a GPU: reduced shapes under the interpreter, agreement only (no timings).
RUNS_ON_CPU = True


def run(console, ms: tuple[int, ...] | None = None) -> dict[str, list[dict]]:
    device = runtime.kernel_device()
    gpu = device.type == "cuda"
    ms = ms or (MS_GPU if gpu else MS_CPU)
    mm_shape = MiniMaxShape() if gpu else MiniMaxShape.reduced()
    mhc_shape = MhcShape() if gpu else MhcShape.reduced()
    results: dict[str, list[dict]] = {"minimax": [], "mhc": []}
    for m in ms:
        results["minimax"].append(_measure(MiniMaxBoundary(mm_shape, m, device), compare_minimax, minimax_ok, gpu))
        results["mhc"].append(_measure(MhcBoundary(mhc_shape, m, device), compare_mhc, mhc_ok, gpu))
        if gpu:
            torch.cuda.empty_cache()
    console.print(_table(f"MiniMax-M3.1 boundary, {mm_shape}", results["minimax"]))
    console.print(_table(f"DeepSeek-V4.1 mHC boundary, {mhc_shape}", results["mhc"]))
    out = pathlib.Path(os.environ.get("SEAM_OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "step.json").write_text(json.dumps({"device": str(device), "results": results}, indent=1))
    if gpu:
        _plot(results, out / "step.png")
    return results
