"""Benchmark: DeepSeek-V4.1 mHC boundary (hidden 5120, hc 4), fused vs unfused, on one GPU.

Two rows per M in {1, 8, 32, 128}, CUDA-graph replay (``timing.graph_time_us``), us per call:

* ``allreduce_mhc`` (simulated TP 4): fused = 4 Lamport publishes + 4 mHC consumers
  (``AllReduceMHC`` with MXFP8 output); unfused = the rank sum, then per rank the chain
  of separate launches: post-mix, collapse, RMSNorm, MXFP8 quantize (:func:`unfused_chain`).
  On one GPU only kernel time means anything (no NVLink traffic, no waiting on peers);
  both columns cover all four ranks, ``/rank`` divides by TP.
* ``mhc_post_collapse_rms_norm`` (the non-TP boundary): one fused launch vs the same
  chain without the sum. ``torch.compile`` of the chain (static shapes, compiled per M) is
  the strong baseline; eager PyTorch is listed for scale.

GB/s from an explicit byte count of the fused path (``bytes_moved``); ``floor`` (standalone op):
``standalone_bytes`` at 4.23 TB/s + one launch.
"""

from __future__ import annotations

import torch
from rich.table import Table

import seam
from seam.bench.timing import compile_static, floor_us, graph_time_us
from seam.comm import SimulatedGroup
from seam.ref import mhc as ref

HIDDEN = 5120
HC = 4
TP = 4
EPS = 1e-6
MS = (1, 8, 32, 128)


def unfused_chain(reduced, residual, post, comb, pre, norm_weight, eps):
    """The boundary as separate PyTorch launches (DeepSeek's ``hc_post`` expression, collapse,
    RMSNorm) plus ``seam.mxfp8_quantize``: what runs without fusion. Its fp32 sums are in
    PyTorch's order, so it is a timing baseline, not a bit-exact reference."""
    r = reduced.float()
    new_res = (post[:, :, None] * r[:, None] + (comb[..., None] * residual.float()[:, :, None]).sum(1)).bfloat16()
    collapse = (pre[:, :, None] * new_res.float()).sum(1).bfloat16()
    c = collapse.float()
    normed = (c * torch.rsqrt(c.square().mean(-1, keepdim=True) + eps) * norm_weight.float()).bfloat16()
    return new_res, normed, seam.mxfp8_quantize(normed)


def bytes_moved(m: int, hidden: int, hc: int, tp: int) -> int:
    """HBM bytes of one rank's fused call: publish (read x, write tp copies), consumer (read and
    re-arm tp fragments, read residual + mixes, write streams, layer input, MXFP8)."""
    row = 2 * hidden
    publish = m * row * (1 + tp)
    consumer = m * (2 * tp * row + 2 * hc * row + row + hidden) + seam.mxfp8_scale_numel(m, hidden)
    mixes = m * 4 * (2 * hc + hc * hc) + row
    return publish + consumer + mixes


def standalone_bytes(m: int, hidden: int, hc: int) -> int:
    """HBM bytes of one fused non-TP call: x, streams and mixes read; streams, layer input, MXFP8 written."""
    row = 2 * hidden
    per_token = row + 2 * hc * row + row + hidden + 4 * (2 * hc + hc * hc)
    return m * per_token + row + seam.mxfp8_scale_numel(m, hidden)


def _inputs(m: int, dev: torch.device):
    g = torch.Generator().manual_seed(m)
    res = torch.randn(m, HC, HIDDEN, generator=g).bfloat16()
    mixes = ref.mhc_pre(res, ref.mhc_params(HC, HIDDEN, seed=m))
    w = (torch.randn(HIDDEN, generator=g) * 0.2 + 1).bfloat16()
    xs = (torch.randn(TP, m, HIDDEN, generator=g) * 2).bfloat16()
    return [t.to(dev) for t in (xs, res, mixes.post, mixes.comb, mixes.pre, w)]


def _time(fn) -> float:
    """Graph replay; 200 eager calls timed with events where a graph cannot capture ``fn``."""
    try:
        return graph_time_us(fn)
    except RuntimeError:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000.0 / 200


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    op = seam.AllReduceMHC(
        hidden_size=HIDDEN, hc_mult=HC, max_num_tokens=max(ms), top_k=1, group=SimulatedGroup(TP, dev),
        quantize_layer_input=True,
    )
    rows = []
    for m in ms:
        xs, res, post, comb, pre, w = _inputs(m, dev)
        mx = [(torch.empty(m, HIDDEN, dtype=torch.float8_e4m3fn, device=dev),
               torch.empty(seam.mxfp8_scale_numel(m, HIDDEN), dtype=torch.uint8, device=dev)) for _ in range(TP)]

        def fused_tp():
            for r in range(TP):
                op.publish(xs[r], rank=r)
            for r in range(TP):
                op.consume(res, post, comb, pre, w, EPS, mx[r], rank=r)

        def unfused_tp():
            reduced = xs.float().sum(0).bfloat16()
            for _ in range(TP):
                unfused_chain(reduced, res, post, comb, pre, w, EPS)

        def fused_one():
            seam.mhc_post_collapse_rms_norm(xs[0], res, post, comb, pre, w, EPS, mxfp8_out=mx[0])

        compiled = compile_static(unfused_chain)
        t = {
            "fused TP": _time(fused_tp),
            "unfused TP": _time(unfused_tp),
            "fused": _time(fused_one),
            "unfused eager": _time(lambda: unfused_chain(xs[0], res, post, comb, pre, w, EPS)),
            "unfused compile": _time(lambda: compiled(xs[0], res, post, comb, pre, w, EPS)),
        }
        gbs = bytes_moved(m, HIDDEN, HC, TP) * TP / (t["fused TP"] * 1e-6) / 1e9
        gbs_one = standalone_bytes(m, HIDDEN, HC) / (t["fused"] * 1e-6) / 1e9
        rows.append({
            "op": "allreduce_mhc", "TP": TP, "M": m, "hidden": HIDDEN, "hc": HC,
            **{f"{k} us": v for k, v in t.items()},
            "fused TP us/rank": t["fused TP"] / TP,
            "speedup TP": t["unfused TP"] / t["fused TP"],
            "fused/compile": t["fused"] / t["unfused compile"],
            "floor us": floor_us(standalone_bytes(m, HIDDEN, HC)),
            "floor/fused": floor_us(standalone_bytes(m, HIDDEN, HC)) / t["fused"],
            "GB/s TP": gbs,
            "GB/s": gbs_one,
        })
    table = Table(
        title=f"mHC boundary, hidden {HIDDEN}, hc {HC}; simulated TP {TP} on one GPU (us per call, all ranks)"
    )
    cols = ["M", "fused TP us", "fused TP us/rank", "unfused TP us", "speedup TP", "GB/s TP",
            "fused us", "GB/s", "unfused eager us", "unfused compile us", "fused/compile", "floor us", "floor/fused"]
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(str(row[c]) if c == "M" else f"{row[c]:.0f}" if c.startswith("GB/s") else f"{row[c]:.2f}"
                        for c in cols))
    console.print(table)
    return rows
