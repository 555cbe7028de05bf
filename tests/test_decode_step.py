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
def test_unfused_chain_all_reduces_per_rank_in_kernels_a_compiler_keeps(boundary, device):
    """The unfused chains' all-reduce runs for every simulated rank (publish, then collect: one result each, the fp32
    rank-order sum to BF16) as seam's Lamport kernels, which torch.compile keeps as calls: no compiled chain sums the
    ranks once for all of them or fuses the sum into the next op (what no TP engine's collective allows)."""
    if boundary == "minimax":
        b, rounds = MiniMaxBoundary(MiniMaxShape.reduced(), 2, device), 2
    else:
        b, rounds = MhcBoundary(MhcShape.reduced(), 2, device), 1
    want = [(b.partials[0].float() + b.partials[1].float()).bfloat16()] * 2
    sums = b.collective(b.partials)
    assert all(bytes_equal(s, w) for s, w in zip(sums, want)) and sums[0].data_ptr() != sums[1].data_ptr()
    ops = []

    def backend(gm, example_inputs):
        ops.extend(str(n.target) for n in gm.graph.nodes if "lamport" in str(n.target))
        return gm

    torch._dynamo.reset()
    torch.compile(b.unfused, backend=backend, fullgraph=True)()
    tp = b.shape.tp
    assert ops == (["seam.lamport_publish.default"] * tp + ["seam.lamport_consume.default"] * tp) * rounds, ops


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 64])
def test_gpu_full_shapes(m):
    dev = torch.device("cuda")
    assert minimax_ok(compare_minimax(MiniMaxBoundary(MiniMaxShape(), m, dev)))
    assert mhc_ok(compare_mhc(MhcBoundary(MhcShape(), m, dev)))


def test_bench_step_writes_its_results_where_it_says(tmp_path, monkeypatch):
    """``seam bench step`` (one token) writes step.json into $SEAM_OUT and names the file it wrote."""
    monkeypatch.setenv("SEAM_OUT", str(tmp_path))
    buf = io.StringIO()
    results = step.run(Console(file=buf, width=200), ms=(1,))
    saved = json.loads((tmp_path / "step.json").read_text())
    assert saved["results"]["minimax"][0]["M"] == 1 and set(saved["results"]) == set(results) == {"minimax", "mhc"}
    assert f"wrote {tmp_path / 'step.json'}" in buf.getvalue()
