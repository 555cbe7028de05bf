"""Benchmark: the decode-step harness (``seam bench step``), one decoder-layer boundary run as the
unfused chain and as seam's chain.

Per M, for the two boundaries below: kernel launches per layer step and rank (torch
profiler), us per layer step and rank under CUDA-graph replay, and whether the two chains'
outputs agree. The unfused chain is timed eager and under a static per-M ``torch.compile``; the
speed-up is seam's against the faster of the two. On CPU it runs reduced shapes under the interpreter and reports agreement only.
Writes ``step.json`` and, on a GPU, ``step.png`` (us per step vs M) to ``$SEAM_OUT`` (default ``out/``).

Two boundaries (``docs/spec/integration.md``, seed 004's launch-count tables):

* **MiniMax-M3.1 at TP 4** (hidden 6144, 64/4 heads of 128, one KV head per rank, top_k 4
  of 128 experts, shared expert I 768 per rank, SwiGLU-OAI, MXFP8 weights): o_proj output
  all-reduce -> residual add + post-attention Gemma RMSNorm -> router and MXFP8 shared
  expert (gate_up, SwiGLU, down) -> MoE finalize -> all-reduce -> residual add + next
  layer's input Gemma RMSNorm -> QKV projection with q/k norm, RoPE and NVFP4 KV insert.
* **DeepSeek-V4.1 mHC at TP 4** (hidden 5120, hc 4): all-reduce -> mHC post-mix ->
  collapse -> RMSNorm -> MXFP8 layer input.

The **unfused chain** is what an engine runs with separate kernels: an all-reduce
(see below), seam's add+norm kernel, a separate MXFP8 quantizer launch before each MXFP8
GEMM (inside ``mxfp8_linear``), BF16 SwiGLU, a PyTorch MoE finalize, the QKV GEMM to BF16
and a separate norm/RoPE/insert kernel, and PyTorch ops for the mHC mixes. The **seam
chain** uses the fused kernels: Lamport all-reduce + add + norm + MXFP8 (+BF16),
the pre-quantized hand-off to the shared expert, SwiGLU+MXFP8, the finalize + all-reduce
+ norm + MXFP8 fusion, the QKV GEMM with its fused epilogue, and AllReduceMHC.

TP ranks are simulated in one process on one device (``seam.comm.SimulatedGroup``): every
rank's work of the step runs back to back, publishes before consumers. Each rank has its
own weights and inputs (so the L2 does not serve one rank's weights to the next). In
the unfused chain the all-reduce, which NCCL or a custom all-reduce does across GPUs, is seam's
Lamport all-reduce without a fused consumer (:class:`Collective`: every rank publishes, then every
rank collects the fp32 rank-order sum in BF16, the same value seam's fused chain reduces; two launches
per rank, as seam's chain pays its publish and consume), and each rank runs its own steps between the
collectives. The compiled chain compiles those steps (``stages``), called once per rank, and runs
the collectives eagerly between them, as an engine's per-rank graph around its collective: no compiled op
serves two ranks, and no compiler reorders a collect before the publishes it waits for. (Until 2026-12-05
one PyTorch sum served every rank and the whole simulated step was one compiled graph, in which Inductor
also fused the ranks' mHC mixes into one kernel.) Reported figures
are per rank: launches and time of the whole simulated step divided by TP. The routed
experts' GEMMs are outside seam's scope: ``gemm2_permuted`` is made once, before timing,
and both chains read the same tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Callable

import torch
from rich.table import Table

import seam
from seam import runtime
from seam.bench.qkv import qkv_unfused
from seam.bench.timing import compile_static, graph_time_us
from seam.comm import SimulatedGroup
from seam.compare import bf16_ulp_diff
from seam.formats.mxfp8_weight import MXFP8Weight
from seam.formats.nvfp4 import empty_index_cache, empty_kv_cache
from seam.layers import MXFP8Linear
from seam.ref.mhc import mhc_collapse_ref, mhc_params, mhc_post_ref, mhc_pre, rms_norm_ref

HEAD_DIM = 128


@dataclasses.dataclass(frozen=True)
class MiniMaxShape:
    """Per-rank shapes of the MiniMax-M3.1 boundary."""

    tp: int = 4
    hidden: int = 6144
    nkv: int = 1  #: KV heads per rank (q heads = 16 * nkv)
    shared_i: int = 768  #: shared-expert intermediate per rank
    experts: int = 128
    top_k: int = 4
    routed_scale: float = 2.0
    eps: float = 1e-6
    block_size: int = 64
    max_pos: int = 8192

    @classmethod
    def reduced(cls) -> "MiniMaxShape":
        """Interpreter-sized: the same structure at hidden 256, I 64, 8 experts, TP 2."""
        return cls(tp=2, hidden=256, shared_i=64, experts=8, top_k=2, block_size=16, max_pos=64)


@dataclasses.dataclass(frozen=True)
class MhcShape:
    """Per-rank shapes of the DeepSeek-V4.1 mHC boundary."""

    tp: int = 4
    hidden: int = 5120
    hc: int = 4
    eps: float = 1e-6

    @classmethod
    def reduced(cls) -> "MhcShape":
        return cls(tp=2, hidden=256, hc=4)


def _randn(g: torch.Generator, *shape, scale: float, device, dtype=torch.bfloat16) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)


class Collective:
    """The unfused chains' all-reduce: every simulated rank publishes its BF16 partial and then collects the sum
    (seam's Lamport all-reduce without a fused consumer, ``bf16`` of the fp32 sum in rank order), two launches per
    rank. It stands in for the collective an engine runs across GPUs (NCCL, a custom all-reduce): one result per
    rank, outside the ranks' compiled steps, as seam's fused chain pays for its own."""

    def __init__(self, group: SimulatedGroup, hidden: int, m: int) -> None:
        self.allreduce = seam.LamportAllReduce(hidden_size=hidden, max_num_tokens=m, group=group)

    def __call__(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        for r, part in enumerate(parts):
            self.allreduce.publish(part, rank=r)
        return [self.allreduce.collect(rank=r) for r in range(len(parts))]


class MiniMaxBoundary:
    """Weights, inputs and output buffers of every simulated rank, for one M."""

    def __init__(self, shape: MiniMaxShape, m: int, device: torch.device, seed: int = 0) -> None:
        s = self.shape = shape
        self.m = m
        self.device = device
        g = torch.Generator().manual_seed(seed)
        h, tp = s.hidden, s.tp
        self.n_qkv = (19 * s.nkv + 1) * HEAD_DIM
        self.w_post = _randn(g, h, scale=0.1, device=device)
        self.w_in = _randn(g, h, scale=0.1, device=device)
        self.router = _randn(g, s.experts, h, scale=h**-0.5, device=device)
        self.residual = _randn(g, m, h, scale=1.0, device=device)
        self.partials = [_randn(g, m, h, scale=0.5, device=device) for _ in range(tp)]
        self.gate_up = [MXFP8Linear.from_bf16(_randn(g, 2 * s.shared_i, h, scale=h**-0.5, device=device)) for _ in range(tp)]
        self.down = [MXFP8Linear.from_bf16(_randn(g, h, s.shared_i, scale=s.shared_i**-0.5, device=device)) for _ in range(tp)]
        self.qkv = [MXFP8Weight.from_bf16(_randn(g, self.n_qkv, h, scale=h**-0.5, device=device)) for _ in range(tp)]
        # the producers' a_deq for gate_up's and down's input at this M: one shape on every rank, so picked once
        self.gate_up_a_deq, self.down_a_deq = (layer[0].wants_a_deq(m) for layer in (self.gate_up, self.down))
        # Routed experts (outside seam's scope): each rank's unweighted GEMM2 rows, permuted.
        self.gemm2 = [_randn(g, m * s.top_k, h, scale=0.3, device=device) for _ in range(tp)]
        self.idx = torch.randperm(m * s.top_k, generator=g).to(torch.int32).reshape(m, s.top_k).to(device)
        # Attention-side inputs of the QKV epilogue.
        self.positions = torch.randint(0, s.max_pos, (m,), generator=g).to(device)
        angles = torch.arange(s.max_pos)[:, None] * (5e6 ** (-torch.arange(32) / 32))[None, :]
        self.cos_sin = torch.cat([angles.cos(), angles.sin()], dim=1).bfloat16().to(device)
        self.norm_w = [_randn(g, HEAD_DIM, scale=0.1, device=device) for _ in range(4)]
        blocks = -(-m // s.block_size) + 1
        self.slots = torch.randperm(blocks * s.block_size, generator=g)[:m].to(device)
        self.index_slots = torch.randperm(blocks * s.block_size, generator=g)[:m].to(device)
        self.blocks = blocks
        self.group = SimulatedGroup(tp, device)
        self.allreduce = seam.LamportAllReduce(hidden_size=h, max_num_tokens=m, group=self.group)
        self.collective = Collective(self.group, h, m)
        self.finalize = seam.FinalizeAllReduceGemmaRMSNormMxfp8(
            hidden_size=h, max_num_tokens=m, top_k=s.top_k, fp32_weights=True, group=self.group
        )
        self.outputs = {name: self._outputs() for name in ("unfused", "seam")}

    def _outputs(self) -> list[dict[str, torch.Tensor]]:
        s, m, dev = self.shape, self.m, self.device
        out = []
        for _ in range(s.tp):
            out.append(dict(
                kv_cache=empty_kv_cache(self.blocks, s.nkv, s.block_size, dev),
                index_cache=empty_index_cache(self.blocks, s.block_size, dev),
                index_q_out=torch.empty((m, s.nkv * HEAD_DIM), dtype=torch.float8_e4m3fn, device=dev),
                q_out=torch.empty((m, 16 * s.nkv * HEAD_DIM), dtype=torch.bfloat16, device=dev),
            ))
        return out

    # -- shared pieces ------------------------------------------------------------------------
    def _route(self, normed: torch.Tensor) -> torch.Tensor:
        """Router GEMM + top-k + softmax over the chosen experts, scaled: FP32 [M, top_k]."""
        logits = (normed @ self.router.T).float()
        top = logits.topk(self.shape.top_k, dim=-1).values
        return top.softmax(-1) * self.shape.routed_scale

    def _qkv_kwargs(self, rank: int, chain: str) -> dict:
        o = self.outputs[chain][rank]
        return dict(
            slot_mapping=self.slots, index_slot_mapping=self.index_slots, kv_cache=o["kv_cache"],
            index_cache=o["index_cache"], index_q_out=o["index_q_out"], q_out=o["q_out"],
        )

    def _qkv_args(self):
        return (self.positions, self.cos_sin, *self.norm_w, self.shape.eps)

    # -- the two chains ---------------------------------------------------------------------------
    def unfused(self, stages: tuple[Callable, Callable] | None = None) -> list[torch.Tensor]:
        """The unfused chain for every rank; returns each rank's new residual. Each rank runs its own steps between
        the two collectives: ``stages`` (default :meth:`stages`, eager; the compiled chain passes them compiled)."""
        after_attention, next_layer = stages or self.stages()
        reduced = self.collective(self.partials)
        mid = [after_attention(r, reduced[r]) for r in range(self.shape.tp)]
        reduced2 = self.collective([c for _, c in mid])
        return [next_layer(r, reduced2[r], mid[r][0]) for r in range(self.shape.tp)]

    def stages(self) -> tuple[Callable, Callable]:
        """The unfused chain's per-rank steps: after the first collective (the residual add and norm, the router,
        the shared expert with a separate quantizer launch before each MXFP8 GEMM, the MoE finalize), and after the
        second (the next layer's add and norm, its quantizer, the QKV GEMM to BF16 and its epilogue kernel)."""
        s = self.shape

        def after_attention(r: int, reduced: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            normed, residual = seam.gemma_fused_add_rms_norm(reduced, self.residual, self.w_post, s.eps)
            weights = self._route(normed)
            act = seam.swiglu_oai(self.gate_up[r](normed, quantize="separate"))
            shared = self.down[r](act, quantize="separate")
            routed = (self.gemm2[r][self.idx.long()].float() * weights[..., None]).sum(1)
            return residual, (routed + shared.float()).bfloat16()

        def next_layer(r: int, reduced: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
            normed2, residual2 = seam.gemma_fused_add_rms_norm(reduced, residual, self.w_in, s.eps)
            xq, xs = seam.mxfp8_quantize(normed2)
            qkv_unfused(xq, xs, self.qkv[r], *self._qkv_args(), **self._qkv_kwargs(r, "unfused"))
            return residual2

        return after_attention, next_layer

    def seam(self) -> list[torch.Tensor]:
        """seam's chain for every rank; returns each rank's new residual."""
        s = self.shape
        eps = s.eps
        for r in range(s.tp):
            self.allreduce.publish(self.partials[r], rank=r)
        mid = []
        for r in range(s.tp):
            # the normed rows feed the router (BF16) and gate_up: A_deq only where gate_up's GEMM reads it
            qa, residual, normed = self.allreduce.collect_gemma_rms_norm_mxfp8(
                self.residual, self.w_post, eps, also_bf16=True, rank=r, a_deq=self.gate_up_a_deq
            )
            weights = self._route(normed)
            self.gate_up[r].set_prequant(normed, qa)
            gu = self.gate_up[r](normed)  # consumes the hand-off: no quantizer launch
            values, scales, *a_deq = seam.swiglu_oai_mxfp8(gu, a_deq=self.down_a_deq)
            act = seam.QuantizedActivation(values, scales, a_deq=a_deq[0] if a_deq else None)
            shared = self.down[r](act)
            moe = seam.MoEOutput(seam.UnfinalizedMoEOutput(self.gemm2[r], weights, self.idx), shared)
            self.finalize.publish(moe, rank=r)
            mid.append(residual)
        out = []
        for r in range(s.tp):
            qa2, residual2 = self.finalize.collect(mid[r], self.w_in, eps, rank=r)
            w = self.qkv[r]
            seam.qkv_index_fused_epilogue(
                qa2.values, qa2.scales, w.values, w.scales, *self._qkv_args(), **self._qkv_kwargs(r, "seam"),
                a_deq=qa2.a_deq,
            )
            out.append(residual2)
        return out


class MhcBoundary:
    """The DeepSeek-V4.1 mHC boundary for every simulated rank, for one M."""

    def __init__(self, shape: MhcShape, m: int, device: torch.device, seed: int = 0) -> None:
        s = self.shape = shape
        self.m = m
        g = torch.Generator().manual_seed(seed)
        h, hc = s.hidden, s.hc
        self.residual = _randn(g, m, hc, h, scale=1.0, device=device)
        mixes = mhc_pre(self.residual, mhc_params(hc, h, seed=seed, device=device))
        self.post, self.comb, self.pre = mixes.post, mixes.comb, mixes.pre
        self.weight = (1 + _randn(g, h, scale=0.1, device=device).float()).bfloat16()
        self.partials = [_randn(g, m, h, scale=0.5, device=device) for _ in range(s.tp)]
        self.group = SimulatedGroup(s.tp, device)
        self.collective = Collective(self.group, h, m)
        self.op = seam.AllReduceMHC(
            hidden_size=h, hc_mult=hc, max_num_tokens=m, top_k=1, group=self.group, quantize_layer_input=True
        )
        self.mxfp8 = [
            (torch.empty((m, h), dtype=torch.float8_e4m3fn, device=device),
             torch.empty(seam.mxfp8_scale_numel(m, h), dtype=torch.uint8, device=device))
            for _ in range(s.tp)
        ]

    def unfused(self, stages: tuple[Callable] | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The collective, then every rank's mHC post-mix, collapse, RMSNorm and MXFP8 quantization as separate ops
        (``stages``: default :meth:`stages`, eager; the compiled chain passes them compiled)."""
        (mix,) = stages or self.stages()
        reduced = self.collective(self.partials)
        return [mix(r, reduced[r]) for r in range(self.shape.tp)]

    def stages(self) -> tuple[Callable]:
        """The unfused chain's per-rank steps after the collective."""
        s = self.shape

        def mix(r: int, reduced: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
            new_res = mhc_post_ref(reduced, self.residual, self.post, self.comb)
            normed = rms_norm_ref(mhc_collapse_ref(new_res, self.pre), self.weight, s.eps)
            return new_res, seam.mxfp8_quantize(normed)

        return (mix,)

    def seam(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        s = self.shape
        for r in range(s.tp):
            self.op.publish(self.partials[r], rank=r)
        out = []
        for r in range(s.tp):
            new_res, _ = self.op.consume(
                self.residual, self.post, self.comb, self.pre, self.weight, s.eps, mxfp8_out=self.mxfp8[r], rank=r
            )
            out.append((new_res, self.mxfp8[r]))
        return out


# -- measurement -------------------------------------------------------------------------------


def count_launches(fn: Callable[[], object]) -> int:
    """GPU kernel launches (kernels, memcpys and memsets) of one eager call, from the torch profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def compare_minimax(b: MiniMaxBoundary) -> dict[str, float]:
    """Outputs of the two chains on the same inputs (rank 0; run both chains first).

    The chains round differently by design (the fused all-reduce keeps the rank sum in
    fp32 until the residual add; the fused SwiGLU quantizes the fp32 activation), and
    every MXFP8 re-quantization turns a 1-ulp BF16 difference into up to one E4M3 step
    (1/8 relative) on the elements it moves, so this reports distances, checked against
    the tolerances in :func:`minimax_ok`. Each op's own exactness is ``seam verify``'s job.
    """
    res_u = b.unfused()[0]
    res_s = b.seam()[0]
    ou, os_ = b.outputs["unfused"][0], b.outputs["seam"][0]
    q_u, q_s = ou["q_out"].float(), os_["q_out"].float()
    return {
        "residual rel L2": _rel(res_s, res_u),
        "q rel L2": _rel(q_s, q_u),
        "kv bytes differ %": float((ou["kv_cache"] != os_["kv_cache"]).float().mean() * 100),
    }


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp32."""
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


#: The MiniMax boundary's chain-level agreement: each metric's largest accepted value (measured at reduced shapes:
#: residual 2.4e-2, q 3.8e-2, 2.6% of cache bytes; on the H200 at 1 / 8 / 64 tokens 0.18 / 1.73 / 12.69% of cache bytes,
#: ``docs/benchmarks-log.md`` run 230: a share of the whole cache, whose written slots grow with the tokens). The shared
#: expert dominates: its input rows differ by the unfused chain's double BF16 rounding (all-reduce, then add), which
#: moves some E4M3 codes by a step (1/8 relative), and the fused SwiGLU quantizes the fp32 activation where the unfused
#: chain rounds it to BF16 first (~2% of E4M3 bytes differ, seed 004): ~2% on the shared expert's output, which feeds
#: the new residual and then q, k, v.
MINIMAX_LIMITS = {"residual rel L2": 5e-2, "q rel L2": 8e-2, "kv bytes differ %": 20.0}

#: The mHC boundary's: new_res is bit-identical (same formula and order); the layer input differs only where
#: the RMSNorm's 1-ulp tolerance moves a value across an E4M3 rounding boundary.
MHC_LIMITS = {"residual max ulp": 0.0, "layer input rel L2": 1e-2}


def within(metrics: dict[str, float], limits: dict[str, float]) -> bool:
    """Whether every metric named in ``limits`` is at most its limit (NaN fails)."""
    return all(metrics[name] <= limit for name, limit in limits.items())


def limits_text(limits: dict[str, float]) -> str:
    """The rule a boundary's "agree" column checks, for the console: ``name <= limit`` joined."""
    return ", ".join(f"{name} <= {limit:g}" for name, limit in limits.items())


def minimax_ok(metrics: dict[str, float]) -> bool:
    """The MiniMax boundary's agreement: :data:`MINIMAX_LIMITS`."""
    return within(metrics, MINIMAX_LIMITS)


def compare_mhc(b: MhcBoundary) -> dict[str, float]:
    """Rank 0: new residual streams must be bit-identical, the MXFP8 layer input nearly so."""
    (res_u, (vu, su)), (res_s, (vs, ss)) = b.unfused()[0], b.seam()[0]
    deq_u = seam.mxfp8_dequantize(vu, su, dtype=torch.float32)
    deq_s = seam.mxfp8_dequantize(vs, ss, dtype=torch.float32)
    return {
        "residual max ulp": float(bf16_ulp_diff(res_u, res_s).max()),
        "layer input rel L2": _rel(deq_s, deq_u),
    }


def mhc_ok(metrics: dict[str, float]) -> bool:
    """The mHC boundary's agreement: :data:`MHC_LIMITS`."""
    return within(metrics, MHC_LIMITS)


# -- seam bench step ----------------------------------------------------------------------------

MS_GPU = (1, 2, 4, 8, 16, 64, 128)
MS_CPU = (1, 3)


CHAINS = ("unfused", "unfused compiled", "seam")


def _chains(boundary) -> dict[str, Callable[[], object]]:
    """The boundary's three chains; the unfused one's steps compiled per rank afresh (``torch._dynamo`` reset first, so
    no earlier boundary's compiles count against its recompile limit): a call per rank, no op serving two ranks, the
    collectives between them eager (publishes before collects)."""
    compiled = tuple(compile_static(f, reset=i == 0) for i, f in enumerate(boundary.stages()))
    return {"unfused": boundary.unfused, "unfused compiled": lambda: boundary.unfused(compiled), "seam": boundary.seam}


def _measure(boundary, compare, ok, gpu: bool) -> dict:
    """Agreement; on a GPU us per rank of the eager unfused chain, of the same chain under a static
    ``torch.compile`` (what an engine captures per batch size: Inductor fuses its PyTorch ops, seam's ops stay
    opaque custom ops), and of seam's chain; the speed-up is against the faster unfused one. Their launches
    :func:`_count` adds once every timing of the run is done."""
    metrics = compare(boundary)
    row = {"M": boundary.m, "agree": ok(metrics), **metrics}
    if not gpu:
        return row
    tp = boundary.shape.tp
    for chain, fn in _chains(boundary).items():
        row[f"{chain} launches"] = float("nan")  # :func:`_count`'s, after every timing; here for the column order
        try:
            row[f"{chain} us"] = graph_time_us(fn, iters=20, reps=10) / tp
        except Exception as exc:  # a chain torch.compile cannot take is reported, not fatal
            print(f"{chain} at M {boundary.m}: {type(exc).__name__}: {exc}")
            row[f"{chain} us"] = float("nan")
    timed = [t for t in (row["unfused us"], row["unfused compiled us"]) if t == t]  # not NaN
    row["speed-up"] = min(timed) / row["seam us"] if timed else float("nan")
    return row


def _count(row: dict, boundary) -> None:
    """Adds each chain's launches per rank (torch profiler; NaN where it fails) to ``row``, beside its time, on a
    fresh ``boundary`` of the same shape and M (launches do not depend on the data). Called after every timing of the
    run: run 313's timings, taken after such profiler sessions, were 11-12 us per rank above the MiniMax seam chain
    timed alone (log run 314); one profiler session slows every later replay in the process 7-18 % (run 315)."""
    for chain, fn in _chains(boundary).items():
        try:
            row[f"{chain} launches"] = count_launches(fn) / boundary.shape.tp
        except Exception as exc:  # reported, not fatal: the timings stand (and the NaN :func:`_measure` left)
            print(f"{chain} launches at M {boundary.m}: {type(exc).__name__}: {exc}")


def _shape_text(shape: MiniMaxShape | MhcShape) -> str:
    """A boundary's per-rank shape for a table title: ``tp 4, hidden 6144, ...``."""
    return ", ".join(f"{f.name} {getattr(shape, f.name):g}" for f in dataclasses.fields(shape))


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
        for chain in CHAINS:
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
#: The most tokens ``seam bench step`` takes there: its time grows with M (2 CPU cores, 2026-12-07: M 1 / 16 / 64
#: took 9.8 / 27.8 / 92.1 s for both boundaries), so M 256 takes about 6 minutes and M 100000 would take days.
CPU_MAX_M = 256


def out_folder() -> pathlib.Path:
    """Where :func:`run` writes its files: ``$SEAM_OUT`` (default ``out``; empty: the current folder), which
    ``seam bench`` checks before the run."""
    return pathlib.Path(os.environ.get("SEAM_OUT", "out"))


def run(console, ms: tuple[int, ...] | None = None) -> dict[str, list[dict]]:
    device = runtime.kernel_device()
    gpu = device.type == "cuda"
    ms = ms or (MS_GPU if gpu else MS_CPU)
    mm_shape = MiniMaxShape() if gpu else MiniMaxShape.reduced()
    mhc_shape = MhcShape() if gpu else MhcShape.reduced()
    results: dict[str, list[dict]] = {"minimax": [], "mhc": []}
    console.print(f"{len(ms)} token counts x 2 boundaries on {device}"
                  + ("" if gpu else " (reduced shapes, TP 2, agreement only)") + "; a line as each finishes")
    console.print(f"  agree: seam's chain against the unfused chain, minimax {limits_text(MINIMAX_LIMITS)}; "
                  f"mhc {limits_text(MHC_LIMITS)}")
    timed = []  # (row, make, shape, m): launches are counted after every timing
    for m in ms:
        for name, make, shape, compare, ok in (("minimax", MiniMaxBoundary, mm_shape, compare_minimax, minimax_ok),
                                               ("mhc", MhcBoundary, mhc_shape, compare_mhc, mhc_ok)):
            start = time.perf_counter()
            row = _measure(make(shape, m, device), compare, ok, gpu)
            results[name].append(row)
            timed.append((row, make, shape, m))
            console.print(f"  {name} M {m}: agree {'yes' if row['agree'] else 'NO'} "
                          f"({time.perf_counter() - start:.1f} s)")
        if gpu:
            torch.cuda.empty_cache()
    if gpu:
        console.print("  counting launches (torch profiler, after every timing)")
        for row, make, shape, m in timed:
            _count(row, make(shape, m, device))
            torch.cuda.empty_cache()
    console.print(_table(f"MiniMax-M3.1 boundary ({_shape_text(mm_shape)})", results["minimax"]))
    console.print(_table(f"DeepSeek-V4.1 mHC boundary ({_shape_text(mhc_shape)})", results["mhc"]))
    out = out_folder()
    out.mkdir(parents=True, exist_ok=True)
    (out / "step.json").write_text(json.dumps({"device": str(device), "results": results}, indent=1))
    written = [out / "step.json"]
    if gpu:
        _plot(results, out / "step.png")
        written.append(out / "step.png")
    console.print(f"wrote {', '.join(map(str, written))} (SEAM_OUT sets the folder)")
    return results
