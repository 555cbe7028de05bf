"""Test configuration: GPU tests are skipped without CUDA; kernels run under the interpreter on CPU."""

import collections

import pytest
import torch

import seam  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU-only machines before kernels load)
from seam import runtime

if runtime.INTERPRET:
    import fast_interpreter  # tests/fast_interpreter.py

    fast_interpreter.install()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and not runtime.INTERPRET:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device seam's kernels run on here (cuda, or cpu under the interpreter)."""
    return runtime.kernel_device()


def pytest_terminal_summary(terminalreporter):
    """The skipped tests counted by reason, a line each (``-rs`` lists each one: hundreds of GPU tests on a CPU)."""
    reasons = collections.Counter(
        (r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)).removeprefix("Skipped: ")
        for r in terminalreporter.stats.get("skipped", [])
    )
    if reasons:
        terminalreporter.write_sep("-", "skipped, by reason")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{count}: {reason}")
