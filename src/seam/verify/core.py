"""The pieces every ``seam verify`` case uses: context, check, outcome, comparisons.

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


@dataclasses.dataclass(frozen=True)
class Check:
    op: str
    m: int
    shape: str  #: e.g. "hidden=6144"
    run: Callable[[], Outcome]
    #: the spec's rule for the outputs (for a tolerance, also why the bytes may differ): the table
    #: prints it under the op name, so a passing row says what it passed
    rule: str


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def bf16_ulp_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in BF16 units in the last place (ordered-integer distance).

    NaN positions must match and count as 0; +0 and -0 are 0 apart.

    Raises:
        TypeError: a or b not BF16.
    """
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise TypeError(f"bf16_ulp_diff compares BF16 tensors, got {a.dtype} and {b.dtype}")
    ia = a.contiguous().view(torch.int16).to(torch.int32)
    ib = b.contiguous().view(torch.int16).to(torch.int32)
    # map sign-magnitude to a monotonic integer line
    oa = torch.where(ia < 0, -32768 - ia, ia)
    ob = torch.where(ib < 0, -32768 - ib, ib)
    d = (oa - ob).abs()
    both_nan = torch.isnan(a) & torch.isnan(b)
    return torch.where(both_nan, torch.zeros_like(d), d)


def ulp_summary(a: torch.Tensor, b: torch.Tensor, max_ulp: int = 1) -> tuple[bool, str]:
    """(within max_ulp everywhere, 'x% equal, max n ulp') for two BF16 tensors."""
    d = bf16_ulp_diff(a, b)
    worst = int(d.max()) if d.numel() else 0
    eq = float((d == 0).float().mean() * 100) if d.numel() else 100.0
    return worst <= max_ulp, f"{eq:.2f}% equal, max {worst} ulp"
