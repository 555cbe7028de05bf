"""Public SwiGLU-OAI ops: BF16 activation, and activation + MXFP8 in one launch.

Spec: ``docs/spec/norm_act.md`` (SwiGLU-OAI, SwiGLU-OAI + MXFP8).
"""

from __future__ import annotations

import enum

import torch

from seam import checks
from seam.formats.mxfp8 import ScaleLayout
from seam.kernels.swiglu_quant import launch_swiglu_oai
from seam.ops.a_deq import check_a_deq, resolve_a_deq
from seam.ops.mxfp8 import check_mxfp8_out
from seam.ops.registry import register


class GateUpLayout(str, enum.Enum):
    """Where gate and up live in the [M, 2I] gate_up tensor. Spec: ``docs/spec/norm_act.md`` (SwiGLU-OAI)."""

    SPLIT = "split"  #: gate = columns [0, I), up = [I, 2I)
    INTERLEAVED = "interleaved"  #: gate = even columns, up = odd (gpt-oss)

    @classmethod
    def parse(cls, value: "GateUpLayout | str", name: str = "layout") -> "GateUpLayout":
        """The enum or its string value in any case (:func:`seam.checks.option`)."""
        return checks.option(cls, value, name)


# One op for both variants: the BF16 ``out`` or the MXFP8 ``values``/``scales`` (the others None).
_swiglu = register("swiglu_oai", ("out", "values", "scales", "a_deq"), launch_swiglu_oai)


def _check_inputs(gate_up, alpha, beta, limit, layout):
    """Validate everything but the outputs; return (m, inter, device, alpha, beta, limit, layout)."""
    layout = GateUpLayout.parse(layout)
    checks.tensor("gate_up", gate_up, dtype=torch.bfloat16, contiguous=False)
    if gate_up.dim() != 2:
        raise ValueError(f"gate_up must be 2-D [M, 2I], got shape {list(gate_up.shape)}")
    m, two_i = gate_up.shape
    if two_i % 2:
        raise ValueError(f"gate_up.shape[1] must be even (2I), got {two_i}")
    if two_i > 1 and gate_up.stride(1) != 1:
        raise ValueError(f"gate_up must have unit column stride, got strides {gate_up.stride()}")
    device = checks.kernel_device("gate_up", gate_up)
    alpha = checks.finite_float("alpha", alpha)
    beta = checks.finite_float("beta", beta)
    if limit is not None:
        limit = checks.finite_float("limit", limit, positive=True)
        if limit < 2.0**-126:  # an fp32 subnormal: the interpreter cannot pass it as an fp32 kernel argument
            raise ValueError(f"limit must be at least 2^-126 (the smallest normal fp32), got {limit}")
    return m, two_i // 2, device, alpha, beta, limit, layout


def swiglu_oai(
    gate_up: torch.Tensor,
    *,
    alpha: float = 1.702,
    beta: float = 1.0,
    limit: float | None = 7.0,
    layout: GateUpLayout | str = GateUpLayout.SPLIT,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """SwiGLU-OAI activation, BF16 out: ``bf16( g * sigmoid(alpha * g) * (u + beta) )`` with
    ``g = min(gate, limit)``, ``u = clamp(up, -limit, limit)`` in fp32.

    Spec: ``docs/spec/norm_act.md`` (SwiGLU-OAI). Relative L2 error < 5e-3 against the
    float64 reference (the sigmoid differs between targets). One launch. The defaults are gpt-oss's;
    the plain SwiGLU of Llama, Qwen or DeepSeek, ``silu(gate) * up``, is ``alpha=1.0, beta=0.0, limit=None``.

    Args:
        gate_up: BF16 [M, 2I], rows contiguous at any row stride (0 too: one row broadcast by
            ``expand()``). Read only.
        alpha, beta: finite floats or ints, not bools (1.702, 1.0).
        limit: finite float or int (not a bool), at least 2^-126 (a normal fp32), or None to disable both clamps.
        layout: ``"split"`` (gate = [:, :I], up = [:, I:]) or ``"interleaved"`` (gate even
            columns, up odd).
        out: optional BF16 [M, I] contiguous buffer, written in place.

    Returns:
        BF16 [M, I] (``out`` when given).

    Raises:
        TypeError: gate_up/out of the wrong type or dtype, alpha, beta or limit not a float or int
            (a bool is refused), layout not a str or :class:`seam.GateUpLayout`.
        ValueError: odd 2I, wrong shapes/strides/devices, non-finite scalars, limit below 2^-126,
            unknown layout, ``out`` not contiguous, overlapping gate_up or requiring grad while grad
            mode is on.
    """
    m, inter, device, alpha, beta, limit, layout = _check_inputs(gate_up, alpha, beta, limit, layout)
    if out is None:
        out = torch.empty((m, inter), dtype=torch.bfloat16, device=device)
    checks.tensor("out", out, dtype=torch.bfloat16, shape=(m, inter), device=device, written=True)
    checks.outputs_apart([("out", out)], [("gate_up", gate_up)])
    _swiglu(gate_up, alpha, beta, limit, layout is GateUpLayout.INTERLEAVED, out=out)
    return out


def swiglu_oai_mxfp8(
    gate_up: torch.Tensor,
    *,
    alpha: float = 1.702,
    beta: float = 1.0,
    limit: float | None = 7.0,
    layout: GateUpLayout | str = GateUpLayout.SPLIT,
    round_to_bf16: bool = False,
    scale_layout: ScaleLayout | str = ScaleLayout.SWIZZLED,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    a_deq: bool | str = False,
) -> tuple[torch.Tensor, ...]:
    """SwiGLU-OAI + MXFP8 in one launch: ``mxfp8_quantize(act)`` of the fp32
    ``act = g * sigmoid(alpha * g) * (u + beta)`` (no BF16 round trip), or of ``bf16(act)``
    with ``round_to_bf16`` (then bit-identical to ``mxfp8_quantize(swiglu_oai(gate_up))``).

    Spec: ``docs/spec/norm_act.md`` (SwiGLU-OAI + MXFP8), ``docs/spec/mxfp8.md``. A NaN or +-inf activation is
    stored as +448 in its block (as :func:`seam.mxfp8_quantize` says): a NaN reads back finite, an inf as +inf.
    The default differs from the unfused chain in about 2% of E4M3 bytes and is at least
    as close to the exact activation. Plain SwiGLU (``silu(gate) * up``): ``alpha=1.0, beta=0.0, limit=None``.

    Args:
        gate_up: BF16 [M, 2I], I a multiple of 32, rows contiguous at any row stride (0 too). Read only.
        alpha, beta: finite floats or ints, not bools.
        limit: finite float or int (not a bool), at least 2^-126 (a normal fp32), or None to disable both clamps.
        layout: ``"split"`` or ``"interleaved"`` (see :func:`swiglu_oai`).
        round_to_bf16: quantize ``bf16(act)`` instead of the fp32 act.
        scale_layout: ``"swizzled"`` (flat uint8 ``[mxfp8_scale_numel(M, I)]``, padding
            written as 0) or ``"row_major"`` (uint8 [M, I // 32]).
        out: optional (values float8_e4m3fn [M, I], scales uint8) buffers, contiguous and
            16-byte aligned, written in place.
        a_deq: True: also write the rows' A_deq (a new BF16 [M, I] tensor, ``seam.formats.a_deq``; I a
            multiple of 128, swizzled scales), for a :class:`seam.QuantizedActivation` whose Hopper
            GEMM (the down projection) then reads it instead of dequantizing the MXFP8 rows; "auto": where
            that GEMM gains (Hopper, 2-64 tokens, 1-64 at I <= 2048 but 9-64 at I 512 and 768,
            65-384 at I >= 2048 and 65-128 from 256, swizzled scales,
            :func:`seam.kernels.wgmma_config.a_deq_pays`); False (default): never.

    Returns:
        (values float8_e4m3fn [M, I], scales uint8); with ``a_deq`` True or "auto" (values, scales, A_deq),
        A_deq None where "auto" wrote none.

    Raises:
        TypeError: wrong types/dtypes, ``out`` not a pair, round_to_bf16 not a bool, a_deq neither a bool
            nor a string.
        ValueError: I not a multiple of 32 (of 128 with ``a_deq`` True), wrong shapes/strides/devices/sizes/
            alignment, bad scalars (limit below 2^-126), unknown layouts, overlapping buffers, ``out`` buffers
            requiring grad while grad mode is on, ``a_deq`` True with row-major scales, ``a_deq`` a string other
            than "auto".
    """
    scale_layout = ScaleLayout.parse(scale_layout)
    round_to_bf16 = checks.flag("round_to_bf16", round_to_bf16)
    m, inter, device, alpha, beta, limit, layout = _check_inputs(gate_up, alpha, beta, limit, layout)
    checks.multiple_of("I (gate_up.shape[1] // 2)", inter, 32)
    a_deq = check_a_deq(a_deq)  # True, False or "auto" (a NumPy bool as a Python bool)
    returns_a_deq = a_deq is not False
    if a_deq is True and scale_layout is not ScaleLayout.SWIZZLED:
        raise ValueError("a_deq goes with swizzled scales (the Hopper GEMMs'), got scale_layout 'row_major'")
    a_deq = resolve_a_deq(a_deq, m, inter, device, k_name="I (gate_up.shape[1] // 2)")
    a_deq = a_deq and scale_layout is ScaleLayout.SWIZZLED
    values, scales = check_mxfp8_out(out, m, inter, scale_layout, device)
    checks.outputs_apart([("out[0] (values)", values), ("out[1] (scales)", scales)], [("gate_up", gate_up)])
    deq = torch.empty((m, inter), dtype=torch.bfloat16, device=device) if a_deq else None
    _swiglu(gate_up, alpha, beta, limit, layout is GateUpLayout.INTERLEAVED, values=values, scales=scales,
            round_to_bf16=round_to_bf16, swizzled=scale_layout is ScaleLayout.SWIZZLED, a_deq=deq)
    return (values, scales, deq) if returns_a_deq else (values, scales)

