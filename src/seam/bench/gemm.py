"""Benchmark: ``seam.mxfp8_linear`` at decode M (and 65-128 tokens) against cuBLAS, side by side in one process.

Per layer shape (N x K per rank: the MiniMax-M3.1 layers at TP 4, and its QKV projection at TP 2, the widest
decode shape) and token count M, us per call (CUDA-graph replay of 200
back-to-back calls, ``timing.graph_time_us``; weights rotated over copies exceeding 2x the
60 MiB L2, so every call streams them from HBM):

* ``seam``: ``mxfp8_linear`` on an MXFP8 ``QuantizedActivation`` with the default tile (the Gluon decode kernel at 2 <=
  M <= 64 on Hopper, one token at N >= 2560 and 65 <= M <= 128 where K >= 2048 (K 512-768 on wide N, ``ws_short_k``;
  two 64-token tiles below K 2048 and at 97-128 tokens from it where ``two_token_tiles_split`` takes them),
  ``seam.kernels.mxfp8_wgmma``; at 129 <= M <= 384 its warp-specialized token tiles or a wide tile (136-256 tokens),
  ``pick_token_tiles``, and at 385-2048 its token tiles where ``pick_prefill_token_tiles`` takes them; the Gluon ring
  kernel at 129 <= M <= 256 where ``pick_ring_tile`` takes the shape, ``seam.kernels.mxfp8_wgmma_ring``; the prefill
  path from 65 tokens elsewhere, ``BF16_MM_TILE``);
* ``seam A_deq``: the same activation carrying its A_deq (``seam.formats.a_deq``, made outside the timing, as
  a producer writes it) where the layer wants one (``seam.ops.linear.wants_a_deq``: the GEMM reads it, and "auto"
  writes it or the GEMM would dequantize first), and past
  ``A_DEQ_MAX_M`` tokens from K ``PERMUTED_MIN_K`` (the token tiles and the prefill path read it there; a producer
  writes it with ``a_deq=True``), else ``-``;
* ``seam bf16 x``: the same on the BF16 activation (``quantize="auto"``: in-GEMM at M <= 16 (on the decode kernel
  where the 16-row kernel takes the MXFP8 rows), in the decode kernel's dequantization launch on its 32- to 128-row
  tiles, in the ring / prefill paths' above);
* ``seam tl``: the tl kernel's own pick (``pick_tile(..., tl_only=True)``), the path before it;
* ``cuBLAS FP8``: ``torch._scaled_mm`` with per-tensor scales (E4M3 weights and activations,
  a lossy stand-in for MXFP8: the scales are not per 32);
* ``cuBLAS BF16``: ``torch.mm`` on BF16 weights (twice the bytes);
* ``humming``: vLLM's MXFP8 GEMM backend (the optional package ``humming-kernels``) on the same MXFP8 weight,
  W8A16: the BF16 activation goes in as is (on sm_90 humming takes no MXFP8 activation), BF16 out; the weight
  packed once as vLLM's ``HummingMxfp8LinearKernel`` packs it (``_humming_pack``). ``-`` where humming does not
  import or there is no CUDA device (the reason is printed once), ``mismatch <err>`` where its output is off
  x @ W_deq^T (``_humming_us``), ``error`` where it raised (printed);
* ``floor``: MXFP8 weight bytes (values + scales) / 4.23 TB/s + one 0.54 us launch;
* ``weight stream``: one launch that only reads as many bytes, rotated past L2, 16 KB a program, with no PDL
  (``seam.bench.stream.weight_stream_us``; issue 18's targets are ratios to it);
* ``seam TFLOP/s``: 2 M N K / ``seam``; ``seam / cuBLAS FP8``, ``seam A_deq / cuBLAS FP8``, ``seam / humming``,
  ``seam / cuBLAS BF16``, ``seam A_deq / cuBLAS BF16``, ``seam / tl``, ``seam / weight stream`` and ``floor / seam``:
  ratios, in a second table
  after the times.

A last table times seam's norm -> GEMM chain (``allreduce_gemma_rms_norm_mxfp8`` at TP 1, i.e. the fused norm + MXFP8
kernel, then ``mxfp8_linear`` on its activation, both PDL launches, back to back in one graph) without A_deq and with
the producer's default (``a_deq="auto"``), and what the GEMM adds to the norm alone; another the down projection after
its producer, ``swiglu_oai_mxfp8`` (A_deq where the layer wants one), against the same producer (without A_deq) feeding
cuBLAS FP8 its E4M3 values. Past ``A_DEQ_MAX_M`` tokens the norm -> GEMM chain is timed without and with A_deq
(``a_deq=True``) against the chain an engine would run on cuBLAS BF16: seam's add + Gemma RMSNorm writing BF16 rows only
(``gemma_fused_add_rms_norm``), then ``torch.mm`` on BF16 weights.
"""

from __future__ import annotations

import json

import torch
from rich.table import Table

import seam
from seam.bench.linear import SHAPES as TP4_SHAPES  # the MiniMax-M3.1 TP4 layers: gate_up, down, o_proj, qkv
from seam.bench.stream import weight_stream_us
from seam.bench.timing import floor_us, graph_time_us, rotating
from seam.formats.a_deq import a_deq_from_mxfp8
from seam.kernels.mxfp8_gemm_config import pick_tile
from seam.kernels.wgmma_config import A_DEQ_MAX_M
from seam.ops.linear import wants_a_deq

MS = (1, 8, 16, 32, 64, 128)
#: The TP 4 layers and the QKV projection at TP 2 (nkv 2: N = 39 heads of 128), the widest decode shape.
SHAPES = TP4_SHAPES + (("qkv TP2", 4992, 6144),)
#: The norm -> GEMM chain's projection: the TP 4 QKV layer.
CHAIN_SHAPE = next(shape for shape in TP4_SHAPES if shape[0] == "qkv")

#: humming's weight schema for an MXFP8 weight, as vLLM's ``HummingMxfp8LinearKernel`` passes it: E4M3 values,
#: one UE8M0 scale per 32 K elements. No input schema: the activation stays BF16 (W8A16).
HUMMING_MXFP8 = {"quant_method": "humming", "dtype": "float8e4m3", "scale_dtype": "float8e8m0", "group_size": 32,
                 "weight_scale_type": "group"}
#: vLLM's compute config for a dense humming linear layer (``get_humming_linear_compute_config``, defaults).
HUMMING_COMPUTE = json.dumps({"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": "dense"})
#: int32 Stream-K locks, zeroed once: ``humming.layer.HummingLayer``'s count (the launcher names the count a
#: kernel needs if it is more).
HUMMING_LOCKS = 2048
#: Relative error (Frobenius norm) of humming's output against x @ W_deq^T in fp32 past which its cell reads
#: ``mismatch``: the right GEMM differs only by the BF16 output rounding (<= 2^-9 per element) and fp32
#: summation order, ~2e-3 at most; a wrong packing (scale order, byte order, layout) is off by O(1).
HUMMING_RTOL = 1e-2


def _tile_name(t) -> str:
    if t.bf16_mm:
        return "dequantize + cuBLAS BF16"
    kind = ("gluon ring" if t.ring else "gluon ws" if t.warp_specialized else "gluon 16-row" if t.mma_rows
            else "gluon" if t.wgmma else "tl")
    return f"{kind} {t.block_m}x{t.block_n}x{t.block_k} sk{t.split_k} st{t.num_stages}"


def _humming_missing() -> str | None:
    """Why the ``humming`` column is left out here, or None where it runs: humming needs a CUDA device and
    the optional package ``humming-kernels``, whose import also loads native parts."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import humming  # noqa: F401
    except Exception as exc:  # not installed, or a native part fails to load: the column is left out, not fatal
        return f"import humming failed ({type(exc).__name__}: {exc})"
    return None


def _humming_pack(weight: seam.MXFP8Weight, dev: torch.device):
    """humming's layer config and packed tensors for ``weight`` (a one-time, load-time step), as vLLM's
    ``prepare_humming_linear_layer_config`` makes them: the E4M3 values [N, K] as int32 words [N, K/4] (4 K
    elements each, in memory order), the UE8M0 scales unswizzled to row-major [N, K/32], converted to humming's
    schema, then repacked for its kernels (``transform_humming_tensors``; N padded to 256, K to 128, as vLLM)."""
    from humming.schema import BaseWeightSchema, HummingInputSchema
    from humming.transform import prepare_layer_config, transform_humming_tensors

    n, k = weight.shape
    tensors = {"weight": weight.values.view(torch.int32),
               "weight_scale": seam.unswizzle_scales(weight.scales, n, k).view(torch.float8_e8m0fnu)}
    schema, tensors = BaseWeightSchema.from_config(HUMMING_MXFP8).convert_humming(
        tensors=tensors, shape_n_stacks=[n], shape_k_stacks=[k], param_dtype=torch.bfloat16, device=dev)
    config = prepare_layer_config(shape_n=n, shape_k=k, weight_schema=schema, input_schema=HummingInputSchema(),
                                  pad_n_to_multiple=256, pad_k_to_multiple=128, torch_dtype=torch.bfloat16,
                                  device=dev)
    return config, transform_humming_tensors(config, tensors)


def _humming_us(weight: seam.MXFP8Weight, x: torch.Tensor) -> float | str:
    """us per call of humming's W8A16 GEMM ``out[M, N] = x[M, K] @ W_deq^T`` (BF16 ``x`` as is, MXFP8 ``weight``,
    BF16 ``out`` written in place), timed as the other peers: CUDA-graph replay, the packed weights rotated past
    L2. The packing and the JIT compile (humming's first call) stay outside the timing. That first call's
    output is checked against x @ W_deq^T in fp32; past ``HUMMING_RTOL`` the cell reads ``mismatch <err>``
    instead of a time."""
    from humming.forward import humming_forward

    config, packed = _humming_pack(weight, x.device)
    out = torch.empty(x.shape[0], weight.shape[0], dtype=torch.bfloat16, device=x.device)
    locks = torch.zeros(HUMMING_LOCKS, dtype=torch.int32, device=x.device)

    def gemm(tensors: dict[str, torch.Tensor]) -> None:
        humming_forward(config, inputs=x, outputs=out, locks=locks, compute_config=HUMMING_COMPUTE, **tensors)

    gemm(packed)
    ref = x.float() @ weight.dequantize().t()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    if not err < HUMMING_RTOL:  # NaN too
        return f"mismatch {err:.1e}"
    nbytes = sum(t.numel() * t.element_size() for t in packed.values())
    copies = rotating(lambda: {name: t.clone() for name, t in packed.items()}, nbytes)
    return graph_time_us(lambda: gemm(copies()))


def _row(layer: str, n: int, k: int, m: int, dev: torch.device, g: torch.Generator, with_humming: bool,
         weight_stream: float) -> dict:
    """One row of the GEMM tables; ``weight_stream``: the layer's :func:`~seam.bench.stream.weight_stream_us` (the
    same at every M, so timed once a layer)."""
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
    reads_a_deq, deq_tile = wants_a_deq(m, weight, dev), pick_tile(m, n, k, dev, a_deq=True)
    if reads_a_deq and deq_tile != tile:
        r["tile"] += f"; A_deq: {_tile_name(deq_tile)}"  # the `seam A_deq` column's
    r["seam"] = graph_time_us(lambda: seam.mxfp8_linear(act, mx(), out=out))
    r["seam A_deq"] = "-"
    if reads_a_deq or (m > A_DEQ_MAX_M and deq_tile.reads_a_deq(k)):
        with_deq = seam.QuantizedActivation(xq, xs, torch.bfloat16, (m, k), a_deq=a_deq_from_mxfp8(xq, xs))
        r["seam A_deq"] = graph_time_us(lambda: seam.mxfp8_linear(with_deq, mx(), out=out))
    r["seam bf16 x"] = graph_time_us(lambda: seam.mxfp8_linear(x, mx(), out=out))
    r["seam tl"] = graph_time_us(lambda: seam.mxfp8_linear(act, mx(), out=out, tile=tl_tile))
    r["cuBLAS FP8"] = graph_time_us(lambda: torch._scaled_mm(xq, f8().t(), one, one, out_dtype=torch.bfloat16))
    r["cuBLAS BF16"] = graph_time_us(lambda: torch.mm(x, bf().t()))
    r["humming"] = "-"
    if with_humming:
        try:
            r["humming"] = _humming_us(weight, x)
        except Exception as exc:  # a shape or M humming rejects (or fails to compile): reported, not fatal
            print(f"humming at {layer} M {m}: {type(exc).__name__}: {exc}")
            r["humming"] = "error"
    r["floor"] = floor_us(weight_bytes)
    r["weight stream"] = weight_stream
    r["seam / weight stream"] = r["seam"] / r["weight stream"]
    r["seam / tl"] = r["seam"] / r["seam tl"]
    r["seam / cuBLAS FP8"] = r["seam"] / r["cuBLAS FP8"]
    r["seam / humming"] = r["seam"] / r["humming"] if isinstance(r["humming"], float) else float("nan")
    r["floor / seam"] = r["floor"] / r["seam"]
    r["seam TFLOP/s"] = 2 * m * n * k / r["seam"] / 1e6
    r["seam / cuBLAS BF16"] = r["seam"] / r["cuBLAS BF16"]
    r["seam A_deq / cuBLAS BF16"] = (r["seam A_deq"] / r["cuBLAS BF16"] if isinstance(r["seam A_deq"], float)
                                     else float("nan"))
    r["seam A_deq / cuBLAS FP8"] = (r["seam A_deq"] / r["cuBLAS FP8"] if isinstance(r["seam A_deq"], float)
                                    else float("nan"))
    return r


def _chain_weight(n: int, k: int, dev: torch.device, g: torch.Generator):
    """A random MXFP8 weight [n, k] and a callable rotating its copies past L2 (a chain's GEMM reads HBM)."""
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * k**-0.5).to(dev))
    return w, rotating(lambda: seam.MXFP8Weight(w.values.clone(), w.scales.clone()), n * k)


def _chain_rows(ms: tuple[int, ...], dev: torch.device, g: torch.Generator) -> list[dict]:
    """norm + MXFP8 -> the qkv GEMM per step: at decode M (<= 128) without A_deq, with the producer's default and the
    norm alone; past ``A_DEQ_MAX_M`` tokens without and with A_deq (``a_deq=True``) against seam's add + Gemma RMSNorm
    writing BF16 rows only, then cuBLAS BF16 on BF16 weights (rotated past L2 as the MXFP8 ones)."""
    _, n, hidden = CHAIN_SHAPE
    w, mx = _chain_weight(n, hidden, dev, g)
    bf = None
    if any(m > A_DEQ_MAX_M for m in ms):
        w_bf16 = w.dequantize().to(torch.bfloat16)
        bf = rotating(lambda: w_bf16.clone(), 2 * n * hidden)
    norm_w = torch.randn(hidden, generator=g).to(torch.bfloat16).to(dev)
    rows = []
    for m in ms:
        x = torch.randn(m, hidden, generator=g).to(torch.bfloat16).to(dev)
        residual = torch.randn(m, hidden, generator=g).to(torch.bfloat16).to(dev)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)

        def norm(a_deq=False):
            return seam.allreduce_gemma_rms_norm_mxfp8(x, residual, norm_w, 1e-6, a_deq=a_deq)

        def chain(a_deq=False):
            seam.mxfp8_linear(norm(a_deq)[0], mx(), out=out)

        t_chain = graph_time_us(chain)
        if m <= A_DEQ_MAX_M:
            t_norm, t_auto = graph_time_us(norm), graph_time_us(lambda: chain("auto"))
            rows.append({"M": m, "norm": t_norm, "norm + GEMM": t_chain, "GEMM adds": t_chain - t_norm,
                         "norm + GEMM, A_deq auto": t_auto})
            continue
        t_deq = graph_time_us(lambda: chain(True))
        t_peer = graph_time_us(lambda: torch.mm(seam.gemma_fused_add_rms_norm(x, residual, norm_w, 1e-6)[0], bf().t(),
                                                 out=out))
        rows.append({"M": m, "norm + GEMM": t_chain, "norm + GEMM, A_deq": t_deq, "BF16 norm + cuBLAS BF16": t_peer,
                     "best seam / cuBLAS BF16 chain": min(t_chain, t_deq) / t_peer})
    return rows


def _down_chain_rows(ms: tuple[int, ...], dev: torch.device, g: torch.Generator) -> list[dict]:
    """SwiGLU-OAI + MXFP8 (A_deq where the layer wants it, ``wants_a_deq``) -> the down projection per pair, against the same producer without A_deq (which
    cuBLAS would not read) -> cuBLAS FP8 on its E4M3 values (per-tensor scales 1: a lossy stand-in, as in the GEMM
    table); each chain's "adds" is against its own producer alone."""
    n, inter = next((n, k) for layer, n, k in SHAPES if layer == "down")
    w, mx = _chain_weight(n, inter, dev, g)
    f8 = rotating(lambda: w.values.clone(), n * inter)
    one = torch.ones((), device=dev)
    rows = []
    for m in ms:
        gate_up = torch.randn(m, 2 * inter, generator=g).to(torch.bfloat16).to(dev)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)

        wants = wants_a_deq(m, w, dev)

        def swiglu(a_deq=wants):
            values, scales, *deq = seam.swiglu_oai_mxfp8(gate_up, a_deq=a_deq)  # A_deq returned unless a_deq=False
            return seam.QuantizedActivation(values, scales, torch.bfloat16, (m, inter), a_deq=deq[0] if deq else None)

        def chain():
            seam.mxfp8_linear(swiglu(), mx(), out=out)

        def fp8_chain():
            torch._scaled_mm(swiglu(False).values, f8().t(), one, one, out_dtype=torch.bfloat16)

        t_act, t_chain = graph_time_us(swiglu), graph_time_us(chain)
        t_plain, t_fp8 = graph_time_us(lambda: swiglu(False)), graph_time_us(fp8_chain)
        rows.append({"M": m, "SwiGLU": t_act, "SwiGLU + GEMM": t_chain, "GEMM adds": t_chain - t_act,
                     "SwiGLU, no A_deq": t_plain, "SwiGLU + cuBLAS FP8": t_fp8, "cuBLAS FP8 adds": t_fp8 - t_plain})
    return rows


def _cell(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _table(title: str, rows: list[dict], cols: list[str]) -> Table:
    table = Table(title=title)
    for c in cols:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in cols))
    return table


#: The GEMM table's times (us) and, in a second table, their ratios: one table of both was 20 columns, which a
#: terminal wraps cell by cell.
TIME_COLS = ["layer", "N", "K", "M", "tile", "seam", "seam A_deq", "seam bf16 x", "seam tl", "cuBLAS FP8", "cuBLAS BF16",
             "humming", "floor", "weight stream"]
RATIO_COLS = ["layer", "N", "K", "M", "seam / cuBLAS FP8", "seam A_deq / cuBLAS FP8", "seam / humming",
              "seam / cuBLAS BF16", "seam A_deq / cuBLAS BF16", "seam / tl", "seam / weight stream", "floor / seam",
              "seam TFLOP/s"]


def _gemm_tables(rows: list[dict]) -> list[Table]:
    """The per-call times, then their ratios (:data:`TIME_COLS`, :data:`RATIO_COLS`), one row per layer and M."""
    return [_table("mxfp8_linear vs cuBLAS and humming, us per call (weights from HBM)", rows, TIME_COLS),
            _table("mxfp8_linear: time ratios (seam / a peer below 1: seam faster), floor / seam, TFLOP/s", rows,
                   RATIO_COLS)]


def run(console, ms: tuple[int, ...] = MS) -> list[dict]:
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    humming_missing = _humming_missing()
    if humming_missing:
        console.print(f"humming column left out: {humming_missing}")
    rows = []
    for layer, n, k in SHAPES:
        stream = weight_stream_us(n * k + seam.mxfp8_scale_numel(n, k), dev)
        for m in ms:
            rows.append(_row(layer, n, k, m, dev, g, with_humming=humming_missing is None, weight_stream=stream))
            r = rows[-1]
            # progress, so a run cut short still reports what it measured
            console.print(f"{layer} M {m}: seam {r['seam']:.2f} us ({r['tile']}), tl {r['seam tl']:.2f}, "
                          f"cuBLAS FP8 {r['cuBLAS FP8']:.2f}, BF16 {r['cuBLAS BF16']:.2f}, "
                          f"humming {_cell(r['humming'])}, weight stream {r['weight stream']:.2f}")
    for table in _gemm_tables(rows):
        console.print(table)
    decode, prefill = tuple(m for m in ms if m <= 128), tuple(m for m in ms if m > A_DEQ_MAX_M)
    chain = _chain_rows(decode + prefill, dev, g)
    chain, prefill = chain[:len(decode)], chain[len(decode):]
    down = _down_chain_rows(decode, dev, g)
    if chain:
        console.print(_table(f"norm+MXFP8 -> mxfp8_linear (qkv N {CHAIN_SHAPE[1]}), PDL, us per step", chain,
                             ["M", "norm", "norm + GEMM", "GEMM adds", "norm + GEMM, A_deq auto"]))
        console.print(_table("SwiGLU+MXFP8 -> mxfp8_linear (down), PDL, us per pair", down,
                             ["M", "SwiGLU", "SwiGLU + GEMM", "GEMM adds", "SwiGLU, no A_deq", "SwiGLU + cuBLAS FP8",
                              "cuBLAS FP8 adds"]))
    if prefill:
        console.print(_table(f"norm+MXFP8 -> mxfp8_linear (qkv N {CHAIN_SHAPE[1]}) against norm+BF16 -> cuBLAS BF16, "
                             "us per step", prefill, ["M", "norm + GEMM", "norm + GEMM, A_deq",
                                                      "BF16 norm + cuBLAS BF16", "best seam / cuBLAS BF16 chain"]))
    return (rows + [{"op": "chain", **c} for c in chain] + [{"op": "down chain", **c} for c in down]
            + [{"op": "prefill chain", **c} for c in prefill])
