"""verify: fused add + (Gemma) RMSNorm (+ MXFP8), and RMSNorm alone, vs the reference (``docs/spec/norm_act.md``).

residual_out bytes equal; normed within 1 BF16 ulp (equal fraction reported); MXFP8 bytes
equal to ``mxfp8_quantize`` of the same call's normed, with and without ``also_bf16``; the
in-place call (``out=(x, residual)``, vLLM's convention) bytes equal to the out-of-place one.
The unfused chain timed against the fused op is seam's own two launches (add + norm, then
the standalone quantizer), i.e. what the fusion removes.
"""

from __future__ import annotations

import seam
from seam.compare import bytes_equal, ulp_summary
from seam.ref.norm import fused_add_rms_norm_ref, gemma_rms_norm_ref
from seam.verify.core import Check, Context, Outcome

EPS = 1e-6


def _inputs(ctx: Context, m: int, hidden: int):
    x = ctx.randn(m, hidden, seed=m, scale=3.0)
    r = ctx.randn(m, hidden, seed=m + 1)
    w = ctx.randn(hidden, seed=7, scale=0.1)
    return x, r, w


def _run_mxfp8(ctx: Context, m: int, hidden: int, layout: str, gemma: bool = True) -> Outcome:
    x, r, w = _inputs(ctx, m, hidden)
    out = seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, gemma=gemma, also_bf16=True, scale_layout=layout)
    values, scales, normed, residual_out = out
    v2, s2, ro2 = seam.fused_add_rms_norm_mxfp8(x, r, w, EPS, gemma=gemma, scale_layout=layout)
    ref_n, ref_ro = fused_add_rms_norm_ref(x, r, w, EPS, gemma=gemma)
    qv, qs = seam.mxfp8_quantize(normed, scale_layout=layout)
    within, summary = ulp_summary(normed, ref_n)
    res_ok = bytes_equal(residual_out, ref_ro) and bytes_equal(ro2, ref_ro)
    quant_ok = bytes_equal(values, qv) and bytes_equal(scales, qs)
    same_without_bf16 = bytes_equal(v2, values) and bytes_equal(s2, scales)
    ok = within and res_ok and quant_ok and same_without_bf16
    detail = f"normed {summary}; residual_out {'bytes equal' if res_ok else 'DIFFERS'}; " + (
        "mxfp8 == quantize(normed)" if quant_ok and same_without_bf16 else "mxfp8 DIFFERS"
    )
    n_norm = (normed, residual_out)
    return Outcome(
        exact=ok,
        detail=detail,
        fused=lambda: seam.fused_add_rms_norm_mxfp8(
            x, r, w, EPS, gemma=gemma, also_bf16=True, scale_layout=layout, out=out
        ),
        unfused=lambda: seam.mxfp8_quantize(
            seam.fused_add_rms_norm(x, r, w, EPS, gemma=gemma, out=n_norm)[0], scale_layout=layout, out=(qv, qs)
        ),
        baseline="seam's add + RMSNorm, then seam.mxfp8_quantize (two launches)",
        bytes_moved=x.numel() * 2 * 4 + w.numel() * 2 + values.numel() + scales.numel(),
    )


def _run_add_norm(ctx: Context, m: int, hidden: int, gemma: bool = True) -> Outcome:
    x, r, w = _inputs(ctx, m, hidden)
    add_norm = seam.gemma_fused_add_rms_norm if gemma else seam.fused_add_rms_norm  # the public name checked
    out = add_norm(x, r, w, EPS)
    ref_n, ref_ro = fused_add_rms_norm_ref(x, r, w, EPS, gemma=gemma)
    within, summary = ulp_summary(out[0], ref_n)
    res_ok = bytes_equal(out[1], ref_ro)
    return Outcome(
        exact=within and res_ok,
        detail=f"normed {summary}; residual_out {'bytes equal' if res_ok else 'DIFFERS'}",
        fused=lambda: add_norm(x, r, w, EPS, out=out),
        unfused=lambda: fused_add_rms_norm_ref(x, r, w, EPS, gemma=gemma),
        baseline="the PyTorch reference (eager)",
        bytes_moved=x.numel() * 2 * 4 + w.numel() * 2,
    )


def _run_in_place(ctx: Context, m: int, hidden: int) -> Outcome:
    x, r, w = _inputs(ctx, m, hidden)
    want = seam.gemma_fused_add_rms_norm(x, r, w, EPS)
    xi, ri = x.clone(), r.clone()
    seam.gemma_fused_add_rms_norm(xi, ri, w, EPS, out=(xi, ri))
    ok = bytes_equal(xi, want[0]) and bytes_equal(ri, want[1])
    return Outcome(exact=ok, detail="x, residual updated in place: bytes equal to out of place" if ok else
                   "in place DIFFERS from out of place")


def _run_rms_norm(ctx: Context, m: int, hidden: int) -> Outcome:
    x, _, w = _inputs(ctx, m, hidden)
    out = seam.gemma_rms_norm(x, w, EPS)
    within, summary = ulp_summary(out, gemma_rms_norm_ref(x, w, EPS))
    return Outcome(
        exact=within, detail=f"normed {summary}",
        fused=lambda: seam.gemma_rms_norm(x, w, EPS, out=out),
        unfused=lambda: gemma_rms_norm_ref(x, w, EPS),
        baseline="the PyTorch reference (eager)",
        bytes_moved=x.numel() * 2 * 2 + w.numel() * 2,
    )


NORMED = "tolerance (reduction order and rsqrt differ): normed within 1 BF16 ulp"
MXFP8_RULE = f"residual_out bit-identical, MXFP8 bit-identical to quantize(normed); {NORMED}"
ADD_NORM_RULE = f"residual_out bit-identical; {NORMED}"
IN_PLACE_RULE = "bit-identical to the same call with separate outputs"


def checks(ctx: Context) -> list[Check]:
    hidden = ctx.pick(6144, 96)
    ms = ctx.pick([1, 8, 16, 32, 64, 128, 192, 256, 2048], [1, 8, 129])
    shape = f"hidden={hidden}"
    out = []
    for m in ms:
        out.append(Check("gemma_fused_add_rms_norm_mxfp8[+bf16,swizzled]", m, shape,
                         lambda m=m: _run_mxfp8(ctx, m, hidden, "swizzled"), rule=MXFP8_RULE))
    for m in ctx.pick([1, 64, 2048], [1, 129]):
        out.append(Check("gemma_fused_add_rms_norm_mxfp8[+bf16,row_major]", m, shape,
                         lambda m=m: _run_mxfp8(ctx, m, hidden, "row_major"), rule=MXFP8_RULE))
        out.append(Check("gemma_fused_add_rms_norm", m, shape, lambda m=m: _run_add_norm(ctx, m, hidden),
                         rule=ADD_NORM_RULE))
        out.append(Check("gemma_fused_add_rms_norm[in place]", m, shape, lambda m=m: _run_in_place(ctx, m, hidden),
                         rule=IN_PLACE_RULE))
        out.append(Check("fused_add_rms_norm[plain weight]", m, shape,
                         lambda m=m: _run_add_norm(ctx, m, hidden, gemma=False), rule=ADD_NORM_RULE))
        out.append(Check("fused_add_rms_norm_mxfp8[plain weight,+bf16,swizzled]", m, shape,
                         lambda m=m: _run_mxfp8(ctx, m, hidden, "swizzled", gemma=False), rule=MXFP8_RULE))
        out.append(Check("gemma_rms_norm", m, shape, lambda m=m: _run_rms_norm(ctx, m, hidden), rule=NORMED))
    return out
