"""``seam bench gemm``'s optional humming peer: where it cannot run, its column is left out with the reason."""

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
