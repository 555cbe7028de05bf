"""A_deq (``seam.formats.a_deq``) at the ops' edge: the producers' ``a_deq`` argument (write it beside the
MXFP8 rows always, never, or where the GEMM that reads it gains: "auto",
:func:`seam.kernels.wgmma_config.a_deq_pays`), and the consumers' ``SEAM_DEBUG`` check of its bytes."""

from __future__ import annotations

import torch

from seam import checks, runtime
from seam.formats.a_deq import A_DEQ_STEP, a_deq_from_mxfp8
from seam.kernels.wgmma_config import a_deq_pays


def check_a_deq(a_deq: object) -> bool | str:
    """``a_deq`` itself: True, False or "auto" (in any case, as seam's other string options), returned as
    True, False or "auto" (a NumPy bool as the Python bool).

    Raises:
        TypeError: neither a bool nor a string. ValueError: a string other than "auto".
    """
    if isinstance(a_deq, str):
        if a_deq.lower() != "auto":
            raise ValueError(f"a_deq must be True, False or 'auto', got {a_deq!r}")
        return "auto"
    try:
        return checks.flag("a_deq", a_deq)  # a NumPy bool as the Python bool
    except TypeError:
        raise TypeError(f"a_deq must be a bool or 'auto', got {checks.type_name(a_deq)}") from None


def resolve_a_deq(a_deq: object, m: int, k: int, device: torch.device, *, k_name: str = "hidden") -> bool:
    """Whether a producer of M rows of K columns on ``device`` writes A_deq. ``"auto"`` writes none while
    ``torch.compile`` or ``torch.export`` traces: its rule compares M, which with a dynamic M would put guards on
    it (and fail ``mark_dynamic`` / ``Dim`` ranges across them), and traced code cannot tell a dynamic M from a
    static one; pass True where a traced graph's M is a decode size.

    Raises:
        TypeError, ValueError: as :func:`check_a_deq`; ValueError for ``a_deq`` True with K (named
        ``k_name``) not a multiple of 128.
    """
    a_deq = check_a_deq(a_deq)
    if a_deq == "auto":
        return not runtime.tracing() and a_deq_pays(m, k, device)
    if a_deq:
        checks.multiple_of(f"{k_name} with a_deq", k, A_DEQ_STEP)
    return a_deq


def check_a_deq_bytes(name: str, a_deq: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> None:
    """With ``SEAM_DEBUG`` (and host reads allowed, :func:`seam.runtime.debug_checks`), raise ValueError unless
    ``a_deq`` holds the A_deq of ``values`` / ``scales`` (swizzled): what a stale copy, or rows dequantized in
    natural K order (not A_deq's), would break. A NaN's payload is not compared.
    Costs a dequantization and a device sync; off by default."""
    if not runtime.debug_checks(a_deq.device):
        return
    want = a_deq_from_mxfp8(values, scales)
    nan = want.isnan()
    same = torch.equal(a_deq.isnan(), nan) and torch.equal(a_deq.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
    if not same:
        raise ValueError(
            f"{name} does not hold the A_deq of these MXFP8 rows at M={values.shape[0]} (seam.formats.a_deq: the rows "
            "dequantized in its K order, the same at every M; pass none to dequantize here)"
        )
