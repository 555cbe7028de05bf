"""verify: the standalone MXFP8 quantizer, both scale layouts, vs the reference (bytes)."""

from __future__ import annotations


import seam
from seam.compare import bytes_equal
from seam.formats.mxfp8 import mxfp8_quantize_ref
from seam.verify.core import Check, Context, Outcome


def _run(ctx: Context, m: int, k: int, layout: str) -> Outcome:
    x = ctx.randn(m, k, seed=m, scale=3.0)
    values, scales = seam.mxfp8_quantize(x, scale_layout=layout)
    ref_v, ref_s = mxfp8_quantize_ref(x.cpu(), scale_layout=layout)
    ok = bytes_equal(values.cpu(), ref_v) and bytes_equal(scales.cpu(), ref_s)
    out = (values, scales)
    return Outcome(
        exact=ok,
        detail="bytes equal" if ok else "bytes differ",
        fused=lambda: seam.mxfp8_quantize(x, scale_layout=layout, out=out),
        unfused=lambda: mxfp8_quantize_ref(x, scale_layout=layout),
        baseline="the PyTorch reference (eager)",
        bytes_moved=x.numel() * 2 + values.numel() + scales.numel(),
    )


def checks(ctx: Context) -> list[Check]:
    k = ctx.pick(6144, 256)
    ms = ctx.pick([1, 8, 16, 32, 64, 128, 192, 256, 2048], [1, 8, 129])
    out = []
    for layout in ("swizzled", "row_major"):
        for m in ms:
            out.append(Check(f"mxfp8_quantize[{layout}]", m, f"K={k}",
                             lambda m=m, layout=layout: _run(ctx, m, k, layout), rule="bit-identical to the reference"))
    return out
