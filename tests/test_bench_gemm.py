"""``seam bench gemm``: its optional humming peer (where it cannot run, its column is left out with the reason) and
its norm -> qkv and SwiGLU -> down chain tables."""

from __future__ import annotations

import sys

import torch

from seam.bench import gemm


def test_humming_left_out_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gemm._humming_missing() == "no CUDA device"


def test_humming_left_out_where_it_does_not_import(monkeypatch):
    """A GPU machine without ``humming-kernels``: the reason, not an exception."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "humming", None)  # `import humming` raises ModuleNotFoundError
    assert gemm._humming_missing().startswith("import humming failed (ModuleNotFoundError")


def _stub_timing(monkeypatch, times: list[float]) -> list:
    """The bench's timer replaced by one that runs each chain once (seam's kernels run here) and returns ``times`` in
    turn, and its weight rotation by the one copy; returns the list of what the timer ran."""
    times, ran = iter(times), []

    def timer(fn, **_):
        fn()
        ran.append(fn)
        return next(times)

    monkeypatch.setattr(gemm, "graph_time_us", timer)
    monkeypatch.setattr(gemm, "rotating", lambda make, nbytes: (lambda obj: (lambda: obj))(make()))
    return ran


def test_down_chain_times_the_producer_then_each_gemm(monkeypatch, device):
    """The SwiGLU -> down table: each of the four timings runs once per M (the producer with and without A_deq, each
    alone and followed by its GEMM: mxfp8_linear, cuBLAS FP8), and each 'adds' column is a chain less its own
    producer. The timer stubbed: each chain runs once, where seam's kernels run here."""
    ran = _stub_timing(monkeypatch, [1.0, 4.5, 0.75, 3.25])
    rows = gemm._down_chain_rows((1,), device, torch.Generator().manual_seed(0))
    assert len(ran) == 4
    assert rows == [{"M": 1, "SwiGLU": 1.0, "SwiGLU + GEMM": 4.5, "GEMM adds": 3.5, "SwiGLU, no A_deq": 0.75,
                     "SwiGLU + cuBLAS FP8": 3.25, "cuBLAS FP8 adds": 2.5}]


def test_norm_chain_times_decode_and_prefill_rows(monkeypatch, device):
    """The norm -> qkv table: at a decode M the norm alone, the chain and the chain with the producer's default A_deq;
    past A_DEQ_MAX_M the chain without and with A_deq and the cuBLAS BF16 peer (seam's BF16 norm, then torch.mm), with
    the best seam over the peer. The timer stubbed: each chain runs once, where seam's kernels run here; a small qkv
    shape stands in for the bench's."""
    ran = _stub_timing(monkeypatch, [5.0, 2.0, 4.5, 30.0, 27.0, 25.0])
    monkeypatch.setattr(gemm, "CHAIN_SHAPE", ("qkv", 128, 256))
    m = gemm.A_DEQ_MAX_M + 1
    rows = gemm._chain_rows((1, m), device, torch.Generator().manual_seed(0))
    assert len(ran) == 6
    assert rows == [{"M": 1, "norm": 2.0, "norm + GEMM": 5.0, "GEMM adds": 3.0, "norm + GEMM, A_deq auto": 4.5},
                    {"M": m, "norm + GEMM": 30.0, "norm + GEMM, A_deq": 27.0, "BF16 norm + cuBLAS BF16": 25.0,
                     "best seam / cuBLAS BF16 chain": 27.0 / 25.0}]


def test_gemm_table_splits_times_from_ratios(monkeypatch, device):
    """The per-call times and their ratios print as two tables (one of 21 columns wrapped cell by cell in a
    terminal), each row's layer and shape in both; every column is one the bench writes into a row (a row on the
    device seam's kernels run on here, the timer stubbed: nothing it times runs)."""
    monkeypatch.setattr(gemm, "graph_time_us", lambda fn, **_: 2.0)
    monkeypatch.setattr(gemm, "rotating", lambda make, nbytes: (lambda obj: (lambda: obj))(make()))
    written = gemm._row("down", 256, 256, 24, device, torch.Generator().manual_seed(0), False, weight_stream=1.6)
    assert set(gemm.TIME_COLS + gemm.RATIO_COLS) <= set(written)
    row = dict(written, **{"seam A_deq": 4.15, "cuBLAS FP8": 4.67, "seam A_deq / cuBLAS FP8": 4.15 / 4.67})
    times, ratios = gemm._gemm_tables([row])
    assert [c.header for c in times.columns] == gemm.TIME_COLS
    assert [c.header for c in ratios.columns] == gemm.RATIO_COLS
    assert gemm.TIME_COLS[:4] == gemm.RATIO_COLS[:4] == ["layer", "N", "K", "M"]
    assert not set(gemm.TIME_COLS[4:]) & set(gemm.RATIO_COLS)  # no column in both
    assert list(ratios.columns[gemm.RATIO_COLS.index("seam A_deq / cuBLAS FP8")].cells) == ["0.89"]
    assert list(times.columns[gemm.TIME_COLS.index("seam A_deq")].cells) == ["4.15"]
    assert list(ratios.columns[gemm.RATIO_COLS.index("seam / weight stream")].cells) == ["1.25"]  # 2.0 / 1.6
