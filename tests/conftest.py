"""Test configuration: GPU tests are skipped without CUDA; kernels run under the interpreter on CPU."""

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
    skip = pytest.mark.skip(reason="needs a CUDA GPU (runs on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device seam's kernels run on here (cuda, or cpu under the interpreter)."""
    return runtime.kernel_device()


def pytest_terminal_summary(terminalreporter):
    """The skipped tests counted by reason, a line each (``-rs`` lists each one: hundreds of GPU tests on a CPU)."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        _, _, reason = report.longrepr if isinstance(report.longrepr, tuple) else ("", 0, str(report.longrepr))
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.write_sep("-", "skipped, by reason")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{count}: {reason}")
