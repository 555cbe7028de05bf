"""Public mHC boundary on an already-reduced input: post-mix + collapse + RMSNorm (+MXFP8).

One launch of ``seam.kernels.mhc`` (``docs/spec/lamport.md``, Consumer B's epilogue).
It is the non-TP DeepSeek-V4.1 mHC boundary, and the tail of ``AllReduceMHC``'s
fallback after a ``torch.distributed`` collective.
"""

from __future__ import annotations

import torch

from seam import checks
from seam.formats.mxfp8 import ScaleLayout
from seam.kernels.mhc import launch_mhc_post_collapse_rms_norm
from seam.ops.mxfp8 import check_mxfp8_out
from seam.ops.registry import register

#: Residual stream counts the kernels are built for (a power of two: one tile row per stream).
HC_MULTS = (1, 2, 4, 8)


# One op for every variant: layer_input (with pre and norm_weight) and values/scales are optional.
_mhc = register(
    "mhc_post_collapse_rms_norm", ("residual_out", "layer_input", "values", "scales"), launch_mhc_post_collapse_rms_norm
)


def check_mhc_inputs(
    m: int,
    hidden: int,
    hc: int,
    residual: object,
    post: object,
    comb: object,
    pre: object,
    norm_weight: object,
    norm_eps: object,
    device: torch.device,
) -> float:
    """Validate the mixes and norm arguments of one boundary of M tokens; return eps as float.

    Shapes: residual BF16 [M, hc, hidden]; post FP32 [M, hc] or [M, hc, 1]; comb FP32
    [M, hc, hc]; pre FP32 [M, hc] (or [M, hc, 1]) and norm_weight BF16 [hidden], both or
    neither (the residual-only variant). All contiguous, on ``device``.
    """
    checks.tensor("residual", residual, dtype=torch.bfloat16, shape=(m, hc, hidden), device=device)
    _check_mix("post", post, m, hc, device)
    checks.tensor("comb", comb, dtype=torch.float32, shape=(m, hc, hc), device=device)
    if (pre is None) != (norm_weight is None):
        given, missing = ("pre", "norm_weight") if pre is not None else ("norm_weight", "pre")
        raise ValueError(f"{given} was given without {missing}: pass both (full boundary) or neither (residual only)")
    if pre is not None:
        _check_mix("pre", pre, m, hc, device)
        checks.tensor("norm_weight", norm_weight, dtype=torch.bfloat16, shape=(hidden,), device=device)
    eps = checks.finite_float("norm_eps", norm_eps)
    if eps < 0:
        raise ValueError(f"norm_eps must be >= 0, got {eps}")
    return eps


def _check_mix(name: str, t: object, m: int, hc: int, device: torch.device) -> None:
    checks.tensor(name, t, dtype=torch.float32, device=device)
    if tuple(t.shape) not in ((m, hc), (m, hc, 1)):
        raise ValueError(f"{name} must have shape [{m}, {hc}] or [{m}, {hc}, 1], got {list(t.shape)}")


def check_hidden_hc(hidden: int, hc: int, hidden_name: str = "hidden_size", hc_name: str = "hc_mult") -> None:
    """hidden a positive multiple of 32 (MXFP8 blocks), hc in (1, 2, 4, 8); errors name the
    arguments they come from."""
    checks.multiple_of(hidden_name, hidden, 32)
    if hc not in HC_MULTS:
        raise ValueError(f"{hc_name} must be one of {HC_MULTS}, got {hc}")


def launch_checked(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    pre: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    eps: float,
    mxfp8: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Allocate outputs and launch the right variant on validated inputs (x: [M, H] or [TP, M, H])."""
    residual_out = torch.empty_like(residual)
    m, _, hidden = residual.shape
    layer_input = None if pre is None else torch.empty((m, hidden), dtype=torch.bfloat16, device=residual.device)
    values, scales = (None, None) if mxfp8 is None else mxfp8
    _mhc(x, residual, post, comb, pre, norm_weight, eps, residual_out, layer_input, values, scales)
    return residual_out, layer_input


def mhc_post_collapse_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    pre: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    norm_eps: float,
    *,
    mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """DeepSeek-V4.1 mHC boundary: post-mix the streams, collapse them, RMSNorm the collapse.

    Per token, with ``x`` the (already all-reduced) sublayer output::

        new_res_j   = bf16(f32(x) * post[j] + sum_i f32(residual[i]) * comb[i, j])    (i in order)
        collapse    = bf16(sum_j f32(new_res_j) * pre[j])                              (j in order)
        layer_input = bf16(f32(collapse) * rsqrt(sum(f32(collapse)^2) / hidden + eps) * f32(w))

    One Triton launch. ``residual_output`` is bit-identical to
    :func:`seam.ref.mhc.mhc_post_collapse_rms_norm_ref`, ``layer_input`` within 1 BF16 ulp
    (RMS reduction order, rsqrt), MXFP8 bit-identical to ``mxfp8_quantize(layer_input)``.

    At decode M the launch splits each row over several programs that combine the RMS
    through a per-device scratch (``seam.kernels.mhc.split_scratch``) that the first call
    on a device allocates: make one eager call (any M) before capturing a CUDA graph, and
    do not run calls on several streams concurrently (they would share its counters).

    Args:
        x: BF16 [M, hidden], hidden a multiple of 32; not modified.
        residual: BF16 [M, hc, hidden] residual streams, hc in (1, 2, 4, 8); not modified.
        post: FP32 [M, hc] or [M, hc, 1] post-mix.
        comb: FP32 [M, hc, hc] residual mix, indexed [source, target].
        pre: FP32 [M, hc] (or [M, hc, 1]) pre-mix of the collapse, or None together with
            ``norm_weight`` (residual only: no collapse, no norm).
        norm_weight: BF16 [hidden] plain RMSNorm weight (not 1 + w), or None with ``pre``.
        norm_eps: RMSNorm epsilon (finite, >= 0).
        mxfp8_out: optional caller buffers (values float8_e4m3fn [M, hidden], scales uint8
            [mxfp8_scale_numel(M, hidden)]), 16-byte aligned, written in place with
            ``layer_input`` as MXFP8, 128x4-swizzled scales, padding scale rows zero.

    Returns:
        (residual_output BF16 [M, hc, hidden], layer_input BF16 [M, hidden] or None).

    Raises:
        TypeError: an argument of the wrong type or dtype (mxfp8_out not a tuple or list of two buffers included).
        RuntimeError: the first call on a device (or one at a hidden size needing more
            scratch) happens during CUDA-graph capture.
        ValueError: wrong shapes, non-contiguous tensors, mixed devices, hidden not a multiple
            of 32, hc not in (1, 2, 4, 8), pre/norm_weight given without the other,
            mxfp8_out without a layer input, or mxfp8_out buffers of the wrong size, not contiguous or 16-byte
            aligned, overlapping an input or each other, or requiring grad while grad mode is on.

    Spec: ``docs/spec/lamport.md`` (Consumer B), ``docs/spec/mxfp8.md``.
    """
    checks.tensor("x", x, dtype=torch.bfloat16)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, hidden], got shape {list(x.shape)}")
    m, hidden = x.shape
    device = checks.kernel_device("x", x)
    checks.tensor("residual", residual, dtype=torch.bfloat16, contiguous=False)  # its rank first; the rest below
    if residual.dim() != 3:
        raise ValueError(f"residual must be 3-D [M, hc, hidden], got shape {list(residual.shape)}")
    hc = residual.shape[1]
    check_hidden_hc(hidden, hc, "x.shape[1] (hidden)", "residual.shape[1] (hc_mult)")
    eps = check_mhc_inputs(m, hidden, hc, residual, post, comb, pre, norm_weight, norm_eps, device)
    mxfp8 = None
    if mxfp8_out is not None:
        if pre is None:
            raise ValueError(
                "mxfp8_out was given for a residual-only call (pre and norm_weight None): no layer input to quantize"
            )
        mxfp8 = check_mxfp8_out(
            mxfp8_out, m, hidden, ScaleLayout.SWIZZLED, device, name="mxfp8_out", layout_arg=None,
            inputs=[("x", x), ("residual", residual), ("post", post), ("comb", comb), ("pre", pre),
                    ("norm_weight", norm_weight)],
        )
    if m == 0:
        empty = None if pre is None else torch.empty((0, hidden), dtype=torch.bfloat16, device=device)
        return torch.empty_like(residual), empty
    return launch_checked(x, residual, post, comb, pre, norm_weight, eps, mxfp8)
