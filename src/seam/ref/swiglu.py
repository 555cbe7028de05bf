"""Reference SwiGLU-OAI (fp32 and float64) and its MXFP8 outputs (``docs/spec/norm_act.md``).

    g = min(f32(gate), limit)            # upper clamp only
    u = clamp(f32(up), -limit, limit)
    act = g * sigmoid(alpha * g) * (u + beta)

``limit=None`` disables both clamps. Layouts: ``"split"`` (gate = columns [0, I), up =
[I, 2I)) or ``"interleaved"`` (gate = even columns, up = odd).
"""

from __future__ import annotations

import torch

from seam.formats.mxfp8 import ScaleLayout, mxfp8_quantize_ref


def split_gate_up(gate_up: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) views of gate_up [M, 2I] in the ``"split"`` or ``"interleaved"`` layout."""
    if layout == "interleaved":
        return gate_up[:, 0::2], gate_up[:, 1::2]
    if layout == "split":
        inter = gate_up.shape[1] // 2
        return gate_up[:, :inter], gate_up[:, inter:]
    raise ValueError(f"layout must be 'split' or 'interleaved', got {layout!r}")


def _act(gate: torch.Tensor, up: torch.Tensor, alpha: float, beta: float, limit: float | None) -> torch.Tensor:
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


def swiglu_oai_f32_ref(
    gate_up: torch.Tensor, *, alpha: float = 1.702, beta: float = 1.0, limit: float | None = 7.0,
    layout: str = "split",
) -> torch.Tensor:
    """fp32 activation [M, I] (the fused kernel's unrounded ``act``)."""
    gate, up = split_gate_up(gate_up, str(getattr(layout, "value", layout)))
    return _act(gate.float(), up.float(), alpha, beta, limit)


def swiglu_oai_f64_ref(
    gate_up: torch.Tensor, *, alpha: float = 1.702, beta: float = 1.0, limit: float | None = 7.0,
    layout: str = "split",
) -> torch.Tensor:
    """float64 activation [M, I]: the accuracy yardstick for every seam SwiGLU output."""
    gate, up = split_gate_up(gate_up, str(getattr(layout, "value", layout)))
    return _act(gate.double(), up.double(), alpha, beta, limit)


def swiglu_oai_ref(
    gate_up: torch.Tensor, *, alpha: float = 1.702, beta: float = 1.0, limit: float | None = 7.0,
    layout: str = "split",
) -> torch.Tensor:
    """Unfused SwiGLU-OAI: ``bf16(act)`` [M, I]."""
    return swiglu_oai_f32_ref(gate_up, alpha=alpha, beta=beta, limit=limit, layout=layout).to(torch.bfloat16)


def swiglu_oai_mxfp8_ref(
    gate_up: torch.Tensor, *, alpha: float = 1.702, beta: float = 1.0, limit: float | None = 7.0,
    layout: str = "split", round_to_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8 of the fp32 act (default) or of ``bf16(act)`` (``round_to_bf16``)."""
    act = swiglu_oai_f32_ref(gate_up, alpha=alpha, beta=beta, limit=limit, layout=layout)
    if round_to_bf16:
        act = act.to(torch.bfloat16)
    return mxfp8_quantize_ref(act, scale_layout=scale_layout)
