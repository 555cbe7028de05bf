"""The decode-step harness (``seam.bench.step``) at reduced shapes: both chains run and agree within the stated bounds."""

import io
import json

import pytest
import torch
from rich.console import Console

from seam.bench import step
from seam.bench.step import (
    MhcBoundary,
    MhcShape,
    MiniMaxBoundary,
    MiniMaxShape,
    compare_mhc,
    compare_minimax,
    mhc_ok,
    minimax_ok,
)
from seam.compare import bytes_equal


def test_minimax_chains_agree(device):
    metrics = compare_minimax(MiniMaxBoundary(MiniMaxShape.reduced(), 2, device))
    assert minimax_ok(metrics), metrics
    assert metrics["q rel L2"] > 0  # the chains really differ in rounding; a zero would mean one ran twice


def test_mhc_chains_agree(device):
    metrics = compare_mhc(MhcBoundary(MhcShape.reduced(), 2, device))
    assert mhc_ok(metrics), metrics


@pytest.mark.parametrize("boundary", ["minimax", "mhc"])
def test_unfused_chain_all_reduces_per_rank_around_compiled_per_rank_steps(boundary, device):
    """The unfused chains' all-reduce runs for every simulated rank (publish, then collect: one result each, the fp32
    rank-order sum to BF16), and the compiled chain compiles each rank's steps between the collectives apart, a call
    per rank: no graph holds a Lamport op (no compiler may put a collect before the publishes it waits for) or two
    ranks' work; its bytes are the eager chain's where both run seam's ops on the same values."""
    if boundary == "minimax":
        b = MiniMaxBoundary(MiniMaxShape.reduced(), 2, device)
    else:
        b = MhcBoundary(MhcShape.reduced(), 2, device)
    want = [(b.partials[0].float() + b.partials[1].float()).bfloat16()] * 2
    sums = b.collective(b.partials)
    assert all(bytes_equal(s, w) for s, w in zip(sums, want)) and sums[0].data_ptr() != sums[1].data_ptr()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm

    torch._dynamo.reset()
    stages = tuple(torch.compile(f, backend=backend, fullgraph=True, dynamic=False) for f in b.stages())
    eager, compiled = b.unfused(), b.unfused(stages)
    assert len(stages) <= len(graphs) <= len(stages) * b.shape.tp  # per stage (and rank, where its weights differ)
    assert not any("lamport" in op for ops in graphs for op in ops), graphs
    first = (lambda out: out[0][0]) if boundary == "mhc" else (lambda out: out[0])
    assert bytes_equal(first(eager), first(compiled))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 64])
def test_gpu_full_shapes(m):
    dev = torch.device("cuda")
    assert minimax_ok(compare_minimax(MiniMaxBoundary(MiniMaxShape(), m, dev)))
    assert mhc_ok(compare_mhc(MhcBoundary(MhcShape(), m, dev)))


def test_bench_step_writes_its_results_where_it_says(tmp_path, monkeypatch, device):
    """``seam bench step`` (one token) prints a line as each boundary finishes, writes step.json into $SEAM_OUT and
    names the file it wrote."""
    monkeypatch.setenv("SEAM_OUT", str(tmp_path))
    buf = io.StringIO()
    results = step.run(Console(file=buf, width=200), ms=(1,))
    saved = json.loads((tmp_path / "step.json").read_text())
    assert saved["results"]["minimax"][0]["M"] == 1 and set(saved["results"]) == set(results) == {"minimax", "mhc"}
    assert f"wrote {tmp_path / 'step.json'}" in buf.getvalue()
    assert "  minimax M 1: agree yes (" in buf.getvalue() and "  mhc M 1: agree yes (" in buf.getvalue()
    # what "agree" checks, and the shapes, in words (not the dataclass repr)
    assert "minimax residual rel L2 <= 0.05, q rel L2 <= 0.08, kv bytes differ % <= 20" in buf.getvalue()
    assert "mhc residual max ulp <= 0, layer input rel L2 <= 0.01" in buf.getvalue()
    shape = "tp 4, hidden 6144," if device.type == "cuda" else "tp 2, hidden 256,"  # the full shapes on a GPU
    assert f"MiniMax-M3.1 boundary ({shape}" in buf.getvalue() and "MiniMaxShape(" not in buf.getvalue()


@pytest.mark.gpu
def test_gpu_bench_step_times_then_counts(tmp_path, monkeypatch):
    """On a GPU each chain has its launches beside its time, counted (torch profiler) only after every timing."""
    monkeypatch.setenv("SEAM_OUT", str(tmp_path))
    buf = io.StringIO()
    profiled = []
    count = step.count_launches
    monkeypatch.setattr(step, "count_launches", lambda fn: profiled.append(1) or count(fn))
    timed = []
    time_us = step.graph_time_us
    monkeypatch.setattr(step, "graph_time_us", lambda fn, **kw: timed.append(len(profiled)) or time_us(fn, **kw))
    results = step.run(Console(file=buf, width=200), ms=(1, 2))
    assert timed == [0] * 12 and len(profiled) == 12  # 3 chains x 2 boundaries x 2 M, every timing before any profile
    for rows in results.values():
        for row in rows:
            keys = [k for k in row if "launches" in k or k.endswith(" us") or k == "speed-up"]
            assert keys == [f"{c} {what}" for c in step.CHAINS for what in ("launches", "us")] + ["speed-up"]
            assert 1 <= row["seam launches"] and row["seam us"] > 0
            # the compiled chain counted compiled at every M (dynamo's recompile limit would run it eagerly)
            assert row["unfused compiled launches"] < row["unfused launches"], row


def test_agreement_limits():
    """A boundary agrees only where every limited metric is at most its limit: at the limit yes, past it or NaN no."""
    at = dict(step.MINIMAX_LIMITS)
    assert minimax_ok(at)
    for name in at:
        assert not minimax_ok({**at, name: at[name] * 1.01})
        assert not minimax_ok({**at, name: float("nan")})
    assert mhc_ok({"residual max ulp": 0.0, "layer input rel L2": 0.0})
    assert not mhc_ok({"residual max ulp": 1.0, "layer input rel L2": 0.0})
