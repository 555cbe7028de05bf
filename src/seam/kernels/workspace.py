"""The per-device scratch of split launches: one registry for every kernel family that keeps one.

A split launch (the MXFP8 GEMM's and the fused QKV kernel's split-K, the mHC kernel's column
split) stores fp32 partials in a workspace and counts arrivals in int32 counters; the last
program to arrive re-arms its counter, so one allocation serves every later launch and every
CUDA-graph replay. Launches that share a family's buffers must be ordered (one stream).
Allocating or growing them while a CUDA graph is captured raises instead: a zero-fill recorded
in a graph runs only at replay, leaving eager calls with stale counters. A buffer outgrown by a
later launch is kept alive (``_RETIRED``): a graph captured earlier still points at it.
"""

from __future__ import annotations

import torch

from seam import runtime

#: (family, device) -> (fp32 partials, int32 arrival counters)
_BUFFERS: dict[tuple[str, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
_RETIRED: list[torch.Tensor] = []  # outgrown buffers that captured graphs may still use


def split_workspace(
    family: str,
    device: torch.device | str,
    partials: int,
    counters: int,
    *,
    grow_partials_to: int,
    grow_counters_to: int,
    capture_error: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partials, int32 counters) of ``family`` on ``device``, with at least ``partials`` and
    ``counters`` elements. A buffer that is missing or too small is replaced by a new one of
    ``grow_partials_to`` / ``grow_counters_to`` elements (the counters zeroed); the other is kept.

    Raises:
        RuntimeError: ``capture_error`` (``{device}`` filled in), when a buffer would have to be
            allocated while the current CUDA stream is capturing a graph.
    """
    device = runtime.normalize_device(device)
    ws, cnt = _BUFFERS.get((family, device), (None, None))
    grow_ws = ws is None or ws.numel() < partials
    grow_cnt = cnt is None or cnt.numel() < counters
    if (grow_ws or grow_cnt) and device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(capture_error.format(device=device))
    if grow_ws:
        if ws is not None:
            _RETIRED.append(ws)
        ws = torch.empty(grow_partials_to, dtype=torch.float32, device=device)
    if grow_cnt:
        if cnt is not None:
            _RETIRED.append(cnt)
        cnt = torch.zeros(grow_counters_to, dtype=torch.int32, device=device)
    _BUFFERS[(family, device)] = (ws, cnt)
    return ws, cnt
