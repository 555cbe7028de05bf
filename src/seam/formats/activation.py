"""QuantizedActivation: the MXFP8 rows one kernel hands to the next (``docs/spec/integration.md``)."""

from __future__ import annotations

import dataclasses

import torch

from seam.formats.mxfp8 import ScaleLayout, scale_numel


@dataclasses.dataclass(frozen=True)
class QuantizedActivation:
    """MXFP8 rows of an activation, as produced by seam's fused kernels.

    Attributes:
        values: float8_e4m3fn [M, K].
        scales: uint8 UE8M0 bytes: flat ``[mxfp8_scale_numel(M, K)]`` when ``layout`` is
            swizzled (padding bytes zero), ``[M, K // 32]`` when row-major.
        dtype: dtype of the unquantized rows (BF16 for every seam producer).
        shape: (M, K) of the unquantized rows.
        layout: the scale layout.
    """

    values: torch.Tensor
    scales: torch.Tensor
    dtype: torch.dtype
    shape: tuple[int, int]
    layout: ScaleLayout = ScaleLayout.SWIZZLED

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", ScaleLayout.parse(self.layout, "layout"))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.values.dtype != torch.float8_e4m3fn or tuple(self.values.shape) != self.shape:
            raise ValueError(
                f"values must be float8_e4m3fn {self.shape}, got {self.values.dtype} "
                f"{tuple(self.values.shape)}"
            )
        m, k = self.shape
        want = scale_numel(m, k, self.layout)
        if self.scales.dtype != torch.uint8 or self.scales.numel() != want:
            raise ValueError(
                f"scales must be uint8 with {want} bytes for {self.layout.value} layout, got "
                f"{self.scales.dtype} with {self.scales.numel()}"
            )

    def require_layout(self, layout: ScaleLayout | str, name: str = "x") -> None:
        """Raise ValueError if the scales are not in ``layout`` (what a consumer reads)."""
        layout = ScaleLayout.parse(layout)
        if self.layout is not layout:
            raise ValueError(
                f"{name} has {self.layout.value} scales; this consumer needs {layout.value}"
            )
