"""Per-program timeline of the Gluon decode GEMM on a Hopper GPU: where a call's time goes after its PDL release.

Issue 18 asks for a profile, not a guess, wherever a decode target is missed. This tool copies seam's source to a
temporary folder, adds ``%globaltimer`` / ``%smid`` stamps to the decode kernel (``seam.kernels.mxfp8_wgmma``: start,
PDL wait passed, activations staged, K loop done, end) and to the split-K sum launch (``seam.kernels.split_k_sum``:
start, wait passed, end), runs itself on that copy, and times CUDA graphs of back-to-back calls with the weights
rotated past L2, beside a stamped read-only stream of the same weight bytes (16 KB a program, the ``weight stream``
column of ``seam bench gemm``)::

    python tools/decode_timeline.py --n 2560 --k 6144 --m 1 8 --case stream partials linear chain
    python tools/decode_timeline.py --n 4992 --m 1 --case partials --stages 4 --json /tmp/tl.json

Cases: ``stream``; ``partials`` (the pick's kernel storing its split-K partials only, as the fused QKV op runs it);
``linear`` (``mxfp8_linear``'s launches, with its split-K sum); ``chain`` (seam's add + Gemma RMSNorm + MXFP8, then
``linear``, PDL-chained). ``--stages`` / ``--split`` override the picked tile's ring depth and K split;
``--before-wait N`` requests only the ring's first N stages before the PDL wait and the rest right after the
activations' copies (docs/benchmarks-log.md run 353 requested them ahead of those copies, which then waited behind
them; a tile that converts weight steps into shared memory before the wait still requests those steps' stages there;
each case reports the stages its launches requested before the wait).

Times are us from the call's release (its first program past the PDL wait), medians over the analysed calls (the
stamps are subtracted as integers: docs/benchmarks-log.md runs 352-353 ran these stamps from a scratch script that
rounded each to 256 ns first). ``us`` is the stamped graph's replay time per call: the stamps take registers (126 against 107 at
the 8-row tile, still two programs an SM). A stamp anchor that no longer matches the kernels' source stops the tool
with the anchor's text.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_STAMPED = "SEAM_TIMELINE_STAMPED"

_NOW = "tl.extra.cuda.globaltimer()"
_DECODE_STORE = """    _sp = stamp_ptr.to(gl.pointer_type(gl.int64)) + gl.program_id(0) * 8
    gl.store(_sp + 0, _t0)
    gl.store(_sp + 1, _t1)
    gl.store(_sp + 2, _t2)
    gl.store(_sp + 3, _t3)
    gl.store(_sp + 4, _t4)
    gl.store(_sp + 5, tl.extra.cuda.smid().to(gl.int64))
"""
_SUM_STORE = """    _sp = stamp_ptr.to(tl.pointer_type(tl.int64)) + (tile * tl.num_programs(1) + m) * 4
    tl.store(_sp + 0, _t0)
    tl.store(_sp + 1, _t1)
    tl.store(_sp + 2, _t2)
    tl.store(_sp + 3, tl.extra.cuda.smid().to(tl.int64))
"""
_STORE_TILE = """    store_tile(acc, acc_t, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, 0, M, N, stride_om, BN, MP, TAIL, SPLIT_K,
               COMBINE, PARTIALS, COMBINERS, num_warps)
"""
_RING = """    for s in gl.static_range(STAGES):
        _issue_step(w_desc, s_desc, w_ring, s_ring, bars, s, lo + s, n0, K_STEPS, s < n_steps)
"""


def _ring(condition: str) -> str:
    """The ring's first requests, only for the stages where ``condition`` holds."""
    return _RING.replace("        _issue_step", f"        if {condition}:\n            _issue_step")


_ACTIVATIONS = """    else:
        _issue_activations(x_desc, xs_desc, x_smem, xs_smem, x_bars, lo, n_steps, MP, MAX_STEPS, A_BF16, A_DEQ)
"""
_LAUNCH_GLOBALS = """STAMP = None  # the next launch's stamps
BEFORE_WAIT = None  # ring stages the next launch requests before its PDL wait (None: all)
BEFORE_WAIT_USED = None  # what the last launch requested there


def _before_wait(stages, smem_steps):
    global BEFORE_WAIT_USED
    BEFORE_WAIT_USED = stages if BEFORE_WAIT is None else max(min(BEFORE_WAIT, stages), smem_steps)
    return BEFORE_WAIT_USED

"""
_SUM_OUT = "    tl.store(out_ptr + m.to(tl.int64) * stride_om + n, to_bf16_rne(total), mask=n < N)\n"
#: (module, anchor, replacement): each anchor must occur exactly once in seam's source.
PATCHES = (
    ("mxfp8_wgmma.py", "    counter_ptr,  # int32 [tiles] arrival counters, zero between launches\n",
     "    counter_ptr,  # int32 [tiles] arrival counters, zero between launches\n    stamp_ptr,\n"),
    ("mxfp8_wgmma.py", "    BN: gl.constexpr = 16 * num_warps\n    K_STEPS",
     f"    _t0 = {_NOW}\n    _t1 = _t0\n    BN: gl.constexpr = 16 * num_warps\n    K_STEPS"),
    ("mxfp8_wgmma.py", "        tl.extra.cuda.gdc_wait()\n        if PARTIALS:",
     f"        tl.extra.cuda.gdc_wait()\n        _t1 = {_NOW}\n        if PARTIALS:"),
    ("mxfp8_wgmma.py", "    fence_async_shared()  # the generic-proxy stores above are read by wgmma (async proxy)\n"
     "    gl.thread_barrier()\n",
     "    fence_async_shared()  # the generic-proxy stores above are read by wgmma (async proxy)\n"
     f"    gl.thread_barrier()\n    _t2 = {_NOW}\n"),
    ("mxfp8_wgmma.py", _STORE_TILE, f"    _t3 = {_NOW}\n{_STORE_TILE}    _t4 = {_NOW}\n{_DECODE_STORE}"),
    ("mxfp8_wgmma.py", "        w_desc, s_desc, x_desc, xt_desc, xs_desc, out, work, counters, m, n, out.stride(0),\n",
     "        w_desc, s_desc, x_desc, xt_desc, xs_desc, out, work, counters, STAMP, m, n, out.stride(0),\n"),
    ("mxfp8_wgmma.py", "\ndef launch_mxfp8_linear_wgmma(", f"\n{_LAUNCH_GLOBALS}\n\ndef launch_mxfp8_linear_wgmma("),
    # --before-wait: the stages past BEFORE_WAIT requested right after the activations' copies, not ahead of the wait
    # (at least the weight steps converted into shared memory before the wait: those wait for their stages there)
    ("mxfp8_wgmma.py", "    TAIL: gl.constexpr,  # 64 + TAIL tiles",
     "    BEFORE_WAIT: gl.constexpr,\n    TAIL: gl.constexpr,  # 64 + TAIL tiles"),
    ("mxfp8_wgmma.py", "    BN: gl.constexpr = 16 * num_warps\n",
     "    gl.static_assert(BEFORE_WAIT >= SMEM_STEPS, 'a stage waited for before the PDL wait is requested there')\n"
     "    BN: gl.constexpr = 16 * num_warps\n"),
    ("mxfp8_wgmma.py", _RING, _ring("s < BEFORE_WAIT")),
    ("mxfp8_wgmma.py", _ACTIVATIONS, _ACTIVATIONS + _ring("s >= BEFORE_WAIT")),
    ("mxfp8_wgmma.py", "TAIL=tail, num_warps=NUM_WARPS,\n",
     "TAIL=tail, num_warps=NUM_WARPS,\n"
     "        BEFORE_WAIT=_before_wait(stages, smem_steps),\n"),
    ("split_k_sum.py", "def split_k_sum_kernel(part_ptr, out_ptr, N,", "def split_k_sum_kernel(part_ptr, out_ptr, stamp_ptr, N,"),
    ("split_k_sum.py", "    if USE_PDL:  # the next kernel", f"    _t0 = {_NOW}\n    _t1 = _t0\n    if USE_PDL:  # the next kernel"),
    ("split_k_sum.py", "        tl.extra.cuda.gdc_wait()\n", f"        tl.extra.cuda.gdc_wait()\n        _t1 = {_NOW}\n"),
    ("split_k_sum.py", _SUM_OUT, f"{_SUM_OUT}    _t2 = {_NOW}\n{_SUM_STORE}"),
    ("split_k_sum.py", "    split_k_sum_kernel[(tiles, m)](partials, out, n,", "    split_k_sum_kernel[(tiles, m)](partials, out, STAMP, n,"),
    ("split_k_sum.py", "\ndef launch_split_k_sum(", "\nSTAMP = None  # the next launch's stamps\n\n\ndef launch_split_k_sum("),
)


def stamp_source(dest: Path) -> Path:
    """A copy of seam's source under ``dest`` with the stamps of :data:`PATCHES`; returns the folder to put on
    PYTHONPATH. Raises RuntimeError naming the anchor that no longer occurs exactly once."""
    shutil.copytree(ROOT / "src" / "seam", dest / "seam", ignore=shutil.ignore_patterns("__pycache__"))
    for module, anchor, new in PATCHES:
        path = dest / "seam" / "kernels" / module
        text = path.read_text()
        if text.count(anchor) != 1:
            raise RuntimeError(f"{module}: the stamp anchor occurs {text.count(anchor)} times, not once; update "
                               f"tools/decode_timeline.py for the kernel's new source:\n{anchor}")
        path.write_text(text.replace(anchor, new))
    return dest


if os.environ.get(_STAMPED):  # the run on the stamped copy: seam first, so that it sees triton imported after it
    import seam  # noqa: F401
    import triton
    import triton.language as tl

    @triton.jit
    def _stamped_read(src_ptr, out_ptr, stamp_ptr, n_src, SLAB: tl.constexpr):
        """The weight stream's kernel (``seam.bench.stream.read_kernel``) with its start and end stamped."""
        t0 = tl.extra.cuda.globaltimer()
        pid = tl.program_id(0).to(tl.int64)
        r = pid * SLAB + tl.arange(0, SLAB)
        tl.store(out_ptr + pid, tl.xor_sum(tl.load(src_ptr + r, mask=r < n_src, other=0), axis=0))
        t1 = tl.extra.cuda.globaltimer()
        tl.store(stamp_ptr + pid * 4, t0)
        tl.store(stamp_ptr + pid * 4 + 1, t1)


def _since(times, base: int):
    """int64 %globaltimer stamps as ns after ``base``, in doubles: subtracted first, since a double of an epoch-based
    stamp (~1.8e18 ns) holds only multiples of 256 ns."""
    return (times - base).double()


def _us(ns) -> float:
    return float(ns) / 1e3


def _median(t) -> float:
    return statistics.median(t.tolist())


def stream_span(raw, first: int, last: int) -> float:
    """The weight stream's span, us: for each call ``first`` to ``last - 1`` the time from its first program's start
    to its last program's end, the median of those. ``raw``: int64 [calls, programs, 4], (start, end, ...) stamps."""
    s = _since(raw[..., :2], int(raw[..., :2].min()))
    return statistics.median(_us(s[c, :, 1].max() - s[c, :, 0].min()) for c in range(first, last))


def call_stats(raw, sum_raw, first: int, last: int) -> dict:
    """The decode kernel's per-call times, us, each the median over calls ``first`` to ``last - 1``, times of one
    call after its release (its first program past the PDL wait). ``raw``: int64 [calls, programs, 8], each program's
    stamps (start, PDL wait passed, activations staged, K loop done, end) and its SM; ``sum_raw``: int64 [calls,
    programs, 4] of the split-K sum launch (start, wait passed, end, SM), all 0 where the calls have none.
    "release after previous end": from the previous call's last program (its sum launch's, where it has one), so in
    the chain case it holds the norm launched between them."""
    import torch

    has_sum = bool((sum_raw[first, :, 0] > 0).all())
    base = int(raw[..., :5].min())
    s, sm = _since(raw[..., :5], base), raw[..., 5]
    ss = _since(sum_raw[..., :3], base) if has_sum else None
    rows = []
    for c in range(first, last):
        t, rel = s[c], s[c, :, 1].min()
        prev_end = max(s[c - 1, :, 4].max(), ss[c - 1, :, 2].max()) if has_sum else s[c - 1, :, 4].max()
        per_sm = torch.bincount(sm[c])[sm[c]]  # this call's programs on each program's SM
        row = {"release after previous end": _us(rel - prev_end), "staged p50": _us(_median(t[:, 2] - t[:, 1])),
               "loop p50": _us(_median(t[:, 3] - t[:, 2])), "store p50": _us(_median(t[:, 4] - t[:, 3])),
               "end p50, alone on an SM": _us(_median(t[per_sm == 1, 4]) - rel) if (per_sm == 1).any() else None,
               "end p50, two on an SM": _us(_median(t[per_sm == 2, 4]) - rel) if (per_sm == 2).any() else None,
               "last end": _us(t[:, 4].max() - rel)}
        if has_sum:
            row["sum released"] = _us(ss[c, :, 1].min() - rel)
            row["sum last end"] = _us(ss[c, :, 2].max() - rel)
        rows.append(row)
    found = {}
    for key in rows[0]:
        vals = [r[key] for r in rows if r[key] is not None]
        found[key] = statistics.median(vals) if vals else None
    return found


def _measure(args: argparse.Namespace) -> dict:
    """Run on the stamped copy (imports seam from it)."""
    import dataclasses

    import torch
    import triton

    import seam
    from seam.bench.timing import graph_time_us, rotating
    from seam.kernels import mxfp8_wgmma, split_k_sum
    from seam.kernels.gluon_launch import launch_gluon
    from seam.kernels.mxfp8_gemm_config import pick_tile

    if not torch.cuda.is_available():
        raise SystemExit("decode_timeline.py runs the Gluon decode kernel: it needs a Hopper GPU")
    if not hasattr(mxfp8_wgmma, "STAMP"):
        raise RuntimeError(f"seam here is not the stamped copy: {mxfp8_wgmma.__file__}")
    dev, calls, first, last = torch.device("cuda"), args.calls, args.calls // 4, args.calls - 3

    def timed(call) -> float:
        """``graph_time_us`` of ``calls`` back-to-back calls, call(c) writing stamp buffer c: the eager warm-up takes
        0, the graph 1, 2, ..., calls - 1, then 0 (the analysed calls are consecutive)."""
        count = itertools.count()
        return graph_time_us(lambda: call(next(count) % calls), iters=calls)

    def stream(n: int, k: int) -> dict:
        words = triton.cdiv(n * k + n * k // 32, 16384) * 4096
        src = rotating(lambda: torch.zeros(words, dtype=torch.int32, device=dev), 4 * words)
        programs = words // 4096
        sink = torch.empty(programs, dtype=torch.int32, device=dev)
        stamps = torch.zeros(calls, programs * 4, dtype=torch.int64, device=dev)
        t = timed(lambda c: _stamped_read[(programs,)](src(), sink, stamps[c], words, SLAB=4096, num_warps=4))
        return {"us": t, "programs": programs, "span": stream_span(stamps.view(calls, programs, 4).cpu(), first, last)}

    def gemm(case: str, n: int, k: int, m: int) -> dict:
        g = torch.Generator().manual_seed(0)
        w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16).to(dev))
        weights = rotating(lambda: (w.values.clone(), w.scales.clone()), n * k + w.scales.numel())
        x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)
        residual = torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)
        norm_w = torch.randn(k, generator=g).to(torch.bfloat16).to(dev)
        xq, xs = seam.mxfp8_quantize(x)
        act = None
        if case == "chain":  # the norm's rows, with the A_deq its "auto" writes, which mxfp8_linear's pick reads
            act = seam.allreduce_gemma_rms_norm_mxfp8(x, residual, norm_w, 1e-6)[0]
        # each case's own pick: the fused QKV op's for the partials, mxfp8_linear's given or without A_deq
        tile = pick_tile(m, n, k, dev, mma_rows=case != "partials", partials=case == "partials",
                         a_deq=act is not None and act.a_deq is not None)
        tile = dataclasses.replace(tile, num_stages=args.stages or tile.num_stages, split_k=args.split or tile.split_k)
        if not tile.wgmma or tile.mma_rows or tile.ring or tile.warp_specialized:
            raise RuntimeError(f"M={m}, N={n}, K={k} picks {tile}, not the plain decode kernel this tool stamps")
        bf16_mul = mxfp8_wgmma.bf16_mul_exact(w.byte_facts())
        programs, n_tiles = triton.cdiv(n, 128) * tile.split_k, triton.cdiv(n, 128)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        stamps = torch.zeros(calls, programs * 8, dtype=torch.int64, device=dev)
        sum_stamps = torch.zeros(calls, n_tiles * m * 4, dtype=torch.int64, device=dev)

        def norm():
            return seam.allreduce_gemma_rms_norm_mxfp8(x, residual, norm_w, 1e-6)[0]

        def call(c: int):
            mxfp8_wgmma.STAMP, split_k_sum.STAMP = stamps[c], sum_stamps[c]
            mxfp8_wgmma.BEFORE_WAIT = args.before_wait
            wq, ws = weights()
            if case == "partials":
                return launch_gluon(xq, xs, wq, ws, None, tile, True, partials=True, weight_bf16_mul=bf16_mul)
            act = norm() if case == "chain" else seam.QuantizedActivation(xq, xs)
            return launch_gluon(act.values, act.scales, wq, ws, out, tile, True, a_deq=act.a_deq,
                                weight_bf16_mul=bf16_mul)

        if call(0) is None:
            raise RuntimeError(f"{tile} does not run the Gluon decode kernel at M={m}, N={n}, K={k}")
        if case == "linear":  # the stamped launches' product, against fp32 (a sanity check, not a byte check)
            want = seam.QuantizedActivation(xq, xs).dequantize() @ w.dequantize().t()
            err = ((out.float() - want).norm() / want.norm()).item()
            if not err < 1e-2:
                raise RuntimeError(f"the stamped kernel's product is off by {err:.1e}")
        result = {"us": timed(call), "tile": str(tile), "stages before the wait": mxfp8_wgmma.BEFORE_WAIT_USED}
        if case == "chain":
            result["norm us"] = graph_time_us(norm, iters=calls)
        result.update(call_stats(stamps.view(calls, programs, 8).cpu(), sum_stamps.view(calls, -1, 4).cpu(), first,
                                 last))
        return result

    found = {}
    for n in args.n:
        for case in args.case:
            for m in ([None] if case == "stream" else args.m):
                name = f"{case} N {n} x K {args.k}" + ("" if m is None else f", M {m}")
                try:
                    found[name] = stream(n, args.k) if m is None else gemm(case, n, args.k, m)
                except RuntimeError as exc:  # e.g. a pick this tool does not stamp: reported, the other cases run
                    found[name] = {"error": str(exc)}
                print(name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in found[name].items()}),
                      flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[2560], help="weight rows N (default 2560)")
    parser.add_argument("--k", type=int, default=6144, help="K, a multiple of 128 (default 6144)")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 8], help="tokens M, 1-64 (default 1 8)")
    parser.add_argument("--case", nargs="+", default=["stream", "partials", "linear"],
                        choices=["stream", "partials", "linear", "chain"])
    parser.add_argument("--stages", type=int, default=0, help="ring depth in place of the pick's")
    parser.add_argument("--split", type=int, default=0, help="K split in place of the pick's")
    parser.add_argument("--before-wait", type=int, help="ring stages requested before the PDL wait, the rest right "
                        "after the activations' copies (default: all before it, as the kernel does)")
    parser.add_argument("--calls", type=int, default=24, help="calls per graph (the middle ones are analysed)")
    parser.add_argument("--json", type=Path, help="also write every statistic here")
    args = parser.parse_args(argv)
    if any(not 1 <= m <= 64 for m in args.m) or args.k % 128 or args.calls < 12:
        parser.error("M must be 1-64, K a multiple of 128, --calls at least 12")
    if args.before_wait is not None and args.before_wait < 0:
        parser.error("--before-wait must be 0 or more")
    if os.environ.get(_STAMPED):
        found = _measure(args)
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        src = stamp_source(Path(tmp))
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **{_STAMPED: "1"})
        return subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])],
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
