"""GPU timing: CUDA-graph replay of back-to-back launches, median of repeats."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable

import torch


#: The H200's L2 (60 MiB): weights rotated over copies past twice this stream from HBM on every call.
L2_BYTES = 60 * 2**20
#: The H200's measured copy bandwidth, bytes per us (``docs/platform.md``), and one empty launch, us.
COPY_BYTES_PER_US = 4.23e6
LAUNCH_US = 0.54


def floor_us(nbytes: int) -> float:
    """The memory floor of a call that moves ``nbytes`` through HBM: the bytes at the copy bandwidth plus
    one launch (what no kernel beats; the benchmarks print it beside their times)."""
    return nbytes / COPY_BYTES_PER_US + LAUNCH_US


def compile_static(fn: Callable, *, reset: bool = True) -> Callable:
    """``torch.compile`` of ``fn`` for one shape (``dynamic=False``; with ``reset``, dynamo's caches reset first):
    the compiled chain an engine captures per batch size, the peer seam's fused ops are timed against."""
    if reset:
        torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def rotating(make: Callable[[], object], nbytes: int) -> Callable[[], object]:
    """A callable cycling over enough copies (made by ``make``, ``nbytes`` each) that together exceed 2x L2."""
    copies = [make() for _ in range(max(2, -(-2 * L2_BYTES // nbytes)))]
    it = itertools.cycle(copies)
    return lambda: next(it)


def fenced(fn: Callable[[], object], device: torch.device | str = "cuda") -> Callable[[], object]:
    """``fn`` followed by a one-element add: a launch without PDL, which starts only once ``fn``'s last kernel has
    finished. Timed back to back (:func:`graph_time_us`) this gives ``fn``'s latency to complete outputs, plus that
    small launch, as in an engine whose next kernel (attention after the QKV projection) is not ``fn``'s PDL
    dependent; plain back-to-back timing also credits ``fn`` with whatever its last kernel lets the next call's
    first kernel overlap (the weight stream of a GEMM that starts before its wait)."""
    sink = torch.zeros(1, device=device)

    def call() -> None:
        fn()
        sink.add_(1.0)

    return call


def graph_time_us(fn: Callable[[], object], *, iters: int = 200, reps: int = 20) -> float:
    """Median microseconds per call of ``fn`` replayed ``iters`` times inside one CUDA graph.

    ``fn`` is run once eagerly first (compiles kernels, allocates), then captured
    ``iters`` times back to back on a side stream; each of ``reps`` replays is timed
    with CUDA events and divided by ``iters``.
    """
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(iters):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    return statistics.median(times)


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device copy bandwidth in GB/s, counting bytes read + written: the memory ceiling.

    An eager device-to-device copy of an ``nbytes`` tensor, timed with CUDA events
    (median of 10). The same method as ``docs/platform.md`` (4.23 TB/s on the H200).
    """
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * nbytes / statistics.median(times) / 1e9
