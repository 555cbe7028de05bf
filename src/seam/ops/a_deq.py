"""The producers' ``a_deq`` argument: write A_deq (``seam.formats.a_deq``) beside the MXFP8 rows always
(True), never (False) or where the GEMM that reads it gains ("auto",
:func:`seam.kernels.mxfp8_gemm_config.a_deq_pays`)."""

from __future__ import annotations

import torch

from seam import checks
from seam.formats.a_deq import A_DEQ_STEP
from seam.kernels.mxfp8_gemm_config import a_deq_pays


def check_a_deq(a_deq: object) -> bool | str:
    """``a_deq`` itself: True, False or "auto" (in any case, as seam's other string options), returned as
    True, False or "auto".

    Raises:
        TypeError: neither a bool nor a string. ValueError: a string other than "auto".
    """
    if isinstance(a_deq, str):
        if a_deq.lower() != "auto":
            raise ValueError(f"a_deq must be True, False or 'auto', got {a_deq!r}")
        return "auto"
    if not isinstance(a_deq, bool):
        raise TypeError(f"a_deq must be a bool or 'auto', got {checks.type_name(a_deq)}")
    return a_deq


def resolve_a_deq(a_deq: object, m: int, k: int, device: torch.device, *, k_name: str = "hidden") -> bool:
    """Whether a producer of M rows of K columns on ``device`` writes A_deq.

    Raises:
        TypeError, ValueError: as :func:`check_a_deq`; ValueError for ``a_deq`` True with K (named
        ``k_name``) not a multiple of 128.
    """
    if check_a_deq(a_deq) == "auto":
        return a_deq_pays(m, k, device)
    if a_deq:
        checks.multiple_of(f"{k_name} with a_deq", k, A_DEQ_STEP)
    return a_deq
