"""The pieces every ``seam verify`` case uses: context, check, outcome (comparisons: ``seam.compare``).

A case module ``seam/verify/case_<op>.py`` defines ``checks(ctx) -> list[Check]``. Each
``Check.run()`` computes the fused op and its reference on ``ctx.device`` and returns an
``Outcome`` saying whether the outputs meet the spec's exactness rule, plus optional
zero-argument callables for the fused and the unfused chain, which the runner times on
a GPU (CUDA-graph replay) and skips on CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from seam import runtime


@dataclasses.dataclass(frozen=True)
class Context:
    """Where and at what size verify runs."""

    device: torch.device
    full: bool  #: GPU: model shapes; CPU (interpreter): reduced shapes

    @classmethod
    def here(cls) -> "Context":
        device = runtime.kernel_device()
        return cls(device=device, full=device.type == "cuda")

    def pick(self, full, reduced):
        """``full`` on a GPU, ``reduced`` under the interpreter."""
        return full if self.full else reduced

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(seed)

    def randn(self, *shape, seed: int, scale: float = 1.0, dtype=torch.bfloat16) -> torch.Tensor:
        """Reproducible normal samples made on CPU, moved to the device."""
        g = self.generator(seed)
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(self.device)


@dataclasses.dataclass
class Outcome:
    exact: bool  #: outputs meet the spec's rule (bytes equal / within the stated tolerance)
    detail: str  #: e.g. "bytes equal", "normed: 99.7% equal, max 1 ulp"
    fused: Callable[[], object] | None = None
    unfused: Callable[[], object] | None = None
    bytes_moved: int | None = None  #: minimal HBM bytes of the fused op, for GB/s
    #: what ``unfused`` runs, named in the table beside its time (e.g. "the PyTorch reference (eager)")
    baseline: str = ""


@dataclasses.dataclass(frozen=True)
class Check:
    op: str
    m: int
    shape: str  #: e.g. "hidden=6144"
    run: Callable[[], Outcome]
    #: the spec's rule for the outputs (for a tolerance, also why the bytes may differ): the table
    #: prints it under the op name, so a passing row says what it passed
    rule: str
