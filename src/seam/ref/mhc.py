"""Reference of the DeepSeek-V4.1 mHC layer boundary (``docs/spec/lamport.md``, Consumer B).

Pure PyTorch, step by step with the spec's rounding points, runnable on CPU:

    reduced   = bf16(acc)                       # acc = sum over ranks, rank 0 first
    mixed_j   = f32(reduced) * post[j] + sum_{i=0..hc-1} f32(residual[i]) * comb[i, j]
    new_res_j = bf16(mixed_j)                   # -> residual_output [M, hc, hidden]
    collapse  = bf16(sum_j f32(new_res_j) * pre[j])
    normed    = bf16(f32(collapse) * rsqrt(sum(f32(collapse)^2) / hidden + eps) * f32(w))

Every product is a separate fp32 multiply rounded before its add (eager PyTorch never
contracts ``a * b + c``), sums run in the spec's order. The rank sum and the MoE finalize
contribution are the Lamport core's (``seam.ref.lamport``). Also here: ``mhc_pre``, the
mixes DeepSeek's mHC makes from the residual streams (sigmoid pre/post, softmax + Sinkhorn comb), so tests, benchmarks and
the decode harness feed the boundary realistic ``post``/``comb``/``pre``.
"""

from __future__ import annotations

import dataclasses

import torch

from seam.formats.mxfp8 import mxfp8_quantize_ref
from seam.ref.lamport import lamport_sum_ref, moe_finalize_ref

__all__ = [
    "MhcMixes",
    "MhcParams",
    "allreduce_mhc_ref",
    "hc_split_sinkhorn",
    "lamport_reduce_ref",
    "mhc_collapse_ref",
    "mhc_params",
    "mhc_post_collapse_rms_norm_ref",
    "mhc_post_ref",
    "mhc_pre",
    "moe_finalize_ref",  # the finalize variant's per-rank contribution (Lamport core's reference)
    "rms_norm_ref",
]

#: DeepSeek-V4.1 mHC constants (public config): post = POST_MULT * sigmoid, 20 Sinkhorn iterations.
POST_MULT = 2.0
SINKHORN_ITERS = 20
HC_EPS = 1e-6
NORM_EPS = 1e-6


def _mix_rows(t: torch.Tensor, m: int, hc: int) -> torch.Tensor:
    """post/pre as fp32 [M, hc] ([M, hc, 1] is accepted)."""
    return t.reshape(m, hc).float()


def lamport_reduce_ref(contributions: torch.Tensor) -> torch.Tensor:
    """``reduced = bf16(sum_p f32(x_p))`` over ranks in order, as the Lamport consumer reduces.

    Args:
        contributions: BF16 [TP, M, hidden], rank p's TP-partial output at index p (an MoE
            rank's is :func:`seam.ref.lamport.moe_finalize_ref` of its unfinalized output).

    Returns:
        BF16 [M, hidden].
    """
    return lamport_sum_ref(list(contributions)).bfloat16()


def mhc_post_ref(
    reduced: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """``new_res_j = bf16(f32(reduced) * post[j] + sum_i f32(residual[i]) * comb[i, j])``.

    Args:
        reduced: BF16 [M, hidden], the all-reduced sublayer output.
        residual: BF16 [M, hc, hidden] residual streams.
        post: FP32 [M, hc] or [M, hc, 1].
        comb: FP32 [M, hc, hc], indexed [source, target].

    Returns:
        BF16 [M, hc, hidden] ``residual_output``.
    """
    m, hc, _ = residual.shape
    post = _mix_rows(post, m, hc)
    comb = comb.float()
    r = reduced.float()
    res = residual.float()
    out = []
    for j in range(hc):
        mixed = r * post[:, j, None]
        for i in range(hc):
            mixed = mixed + res[:, i] * comb[:, i, j, None]
        out.append(mixed.bfloat16())
    return torch.stack(out, dim=1)


def mhc_collapse_ref(new_res: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """``collapse = bf16(sum_j f32(new_res_j) * pre[j])``, j in order, the sum starting at +0.0.

    Args:
        new_res: BF16 [M, hc, hidden].
        pre: FP32 [M, hc] (or [M, hc, 1]).

    Returns:
        BF16 [M, hidden].
    """
    m, hc, _ = new_res.shape
    pre = _mix_rows(pre, m, hc)
    acc = torch.zeros_like(new_res[:, 0], dtype=torch.float32)
    for j in range(hc):
        acc = acc + new_res[:, j].float() * pre[:, j, None]
    return acc.bfloat16()


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Plain RMSNorm: ``bf16(f32(x) * rsqrt(sum(f32(x)^2) / hidden + eps) * f32(w))`` per row."""
    xf = x.float()
    inv_rms = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + eps)
    return (xf * inv_rms * weight.float()).bfloat16()


def mhc_post_collapse_rms_norm_ref(
    reduced: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    pre: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Consumer B's epilogue on an already-reduced input: ``(residual_output, layer_input)``.

    ``pre`` and ``norm_weight`` None (the residual-only variant): ``(residual_output, None)``.
    """
    new_res = mhc_post_ref(reduced, residual, post, comb)
    if pre is None:
        return new_res, None
    return new_res, rms_norm_ref(mhc_collapse_ref(new_res, pre), norm_weight, norm_eps)


def allreduce_mhc_ref(
    contributions: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    pre: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    norm_eps: float,
    *,
    quantize: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
    """The whole boundary of ``AllReduceMHC``: reduce over ranks, then Consumer B.

    Args:
        contributions: BF16 [TP, M, hidden] (every rank sees the same reduced sum).
        residual, post, comb, pre, norm_weight, norm_eps: as in
            :func:`mhc_post_collapse_rms_norm_ref`.
        quantize: also return ``mxfp8_quantize_ref(layer_input)`` (swizzled scales).

    Returns:
        (residual_output, layer_input or None, (values, scales) or None).
    """
    reduced = lamport_reduce_ref(contributions)
    new_res, normed = mhc_post_collapse_rms_norm_ref(reduced, residual, post, comb, pre, norm_weight, norm_eps)
    q = mxfp8_quantize_ref(normed) if quantize and normed is not None else None
    return new_res, normed, q


# --- mHC pre: the mixes DeepSeek's hyper-connections compute (to make realistic inputs) ---


@dataclasses.dataclass(frozen=True)
class MhcParams:
    """One sublayer's mHC mixing parameters (DeepSeek's ``hc_fn``, ``hc_scale``, ``hc_base``)."""

    fn: torch.Tensor  #: FP32 [(2 + hc) * hc, hc * hidden] projection of the flattened streams
    scale: torch.Tensor  #: FP32 [3]: pre, post, comb logit scales
    base: torch.Tensor  #: FP32 [(2 + hc) * hc] logit biases


@dataclasses.dataclass(frozen=True)
class MhcMixes:
    """The mixes of one sublayer: ``layer_input`` collapses the streams with ``pre``."""

    pre: torch.Tensor  #: FP32 [M, hc]
    post: torch.Tensor  #: FP32 [M, hc]
    comb: torch.Tensor  #: FP32 [M, hc, hc], [source, target], doubly stochastic
    layer_input: torch.Tensor  #: BF16 [M, hidden]


def mhc_params(hc: int, hidden: int, *, seed: int = 0, device: torch.device | str = "cpu") -> MhcParams:
    """Synthetic but realistically scaled mHC parameters.

    ``fn`` has unit-variance rows over ``hc * hidden`` inputs (so logits are O(1) after the
    RMS scaling), pre/post biases centre the sigmoids, and the comb bias favours the
    identity as a trained hyper-connection does (each stream mostly keeps itself).
    """
    g = torch.Generator().manual_seed(seed)
    mix = (2 + hc) * hc
    fn = torch.randn(mix, hc * hidden, generator=g) / (hc * hidden) ** 0.5
    scale = torch.tensor([0.5, 0.5, 0.5])
    base = torch.cat([
        torch.full((hc,), 0.5),  # pre ~ sigmoid(0.5)
        torch.zeros(hc),  # post ~ 2 * sigmoid(0) = 1
        (2.0 * torch.eye(hc)).flatten(),  # comb ~ near identity
    ])
    return MhcParams(fn.to(device), scale.to(device), base.to(device))


def hc_split_sinkhorn(
    mixes: torch.Tensor,
    scale: torch.Tensor,
    base: torch.Tensor,
    hc: int,
    *,
    iters: int = SINKHORN_ITERS,
    eps: float = HC_EPS,
    post_mult: float = POST_MULT,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split mHC logits [..., (2 + hc) * hc] into (pre, post, comb), DeepSeek's rule.

    ``pre = sigmoid(l_pre * s0 + b_pre) + eps``; ``post = post_mult * sigmoid(l_post * s1 + b_post)``;
    ``comb = softmax_rows(l_comb * s2 + b_comb) + eps``, then a column normalisation and
    ``iters - 1`` (row, column) normalisation pairs, each dividing by ``sum + eps``.
    """
    pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    post = post_mult * torch.sigmoid(mixes[..., hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
    logits = (mixes[..., 2 * hc :] * scale[2] + base[2 * hc :]).unflatten(-1, (hc, hc))
    comb = logits.softmax(-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


def mhc_pre(
    residual: torch.Tensor,
    params: MhcParams,
    *,
    norm_eps: float = NORM_EPS,
    hc_eps: float = HC_EPS,
    sinkhorn_iters: int = SINKHORN_ITERS,
    post_mult: float = POST_MULT,
) -> MhcMixes:
    """The mixes DeepSeek's mHC makes from the residual streams before a sublayer.

    ``x = f32(residual).flatten(hc, hidden)``; ``logits = (x @ fn.T) * rsqrt(mean(x^2) + norm_eps)``;
    ``(pre, post, comb) = hc_split_sinkhorn(logits)``; ``layer_input = bf16(sum_j pre[j] * x_j)``.

    Args:
        residual: BF16 [M, hc, hidden].
        params: :class:`MhcParams` for this sublayer.

    Returns:
        :class:`MhcMixes` (FP32 pre/post/comb, BF16 layer_input).
    """
    m, hc, hidden = residual.shape
    x = residual.float().reshape(m, hc * hidden)
    inv_rms = torch.rsqrt(x.square().mean(-1, keepdim=True) + norm_eps)
    logits = (x @ params.fn.T) * inv_rms
    pre, post, comb = hc_split_sinkhorn(
        logits, params.scale, params.base, hc, iters=sinkhorn_iters, eps=hc_eps, post_mult=post_mult
    )
    layer_input = (pre[:, :, None] * residual.float()).sum(1).bfloat16()
    return MhcMixes(pre.contiguous(), post.contiguous(), comb.contiguous(), layer_input)
