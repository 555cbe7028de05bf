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
