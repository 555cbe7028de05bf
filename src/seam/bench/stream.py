"""The stream peer: the time one launch takes to read and write an op's bytes with no math between.

The floor (``timing.floor_us``) counts an op's bytes at the copy bandwidth of a 1 GiB copy plus one
empty launch; a launch that moves a few MB may not reach it (its one pass over the data pays a DRAM
latency that a long copy hides). So beside the floor the norm, SwiGLU and quantize benchmarks time
this kernel on the same byte counts: what a kernel moving those bytes in one launch does on this
card, the best of a few block sizes and warp counts.

Each program reads one chunk of ``src`` and writes one chunk of ``dst`` (int32 words, chunks sized in
the ratio of the two byte counts rounded to a power of two); what it writes sums what it read, so no
load is dead. Launched with PDL where seam's kernels are (dependents triggered, and the
predecessor waited for, at the start), so it has every overlap they have.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.bench.timing import graph_time_us

#: (words read per program, num_warps) tried; the stream time is the best of them.
CONFIGS = tuple((block, warps) for block in (1024, 2048, 4096, 8192) for warps in (4, 8))


@triton.jit
def stream_kernel(src_ptr, dst_ptr, n_src, n_dst, salt, WRITE: tl.constexpr, RATIO: tl.constexpr,
                  USE_PDL: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # The program's RATIO * WRITE read words as RATIO loads of WRITE, so that every load, the sum and the store are in
    # one layout: 16-byte accesses, no shared memory, no barrier.
    i = tl.arange(0, WRITE)
    given = tl.zeros([WRITE], tl.int32)
    for j in tl.static_range(RATIO):
        r = (pid * RATIO + j) * WRITE + i
        given += tl.load(src_ptr + r, mask=r < n_src, other=0)
    w = pid * WRITE + i
    # salt is 0 when timed: dst[w] = w, computed from the loads, so the compiler keeps them
    tl.store(dst_ptr + w, w.to(tl.int32) + salt * given, mask=w < n_dst)


def chunks(n_src: int, n_dst: int, block: int) -> tuple[int, int, int]:
    """(READ, WRITE, programs): words per program read (``block``) and written, their ratio the power of two
    nearest to ``n_src / n_dst`` (at least 1: where an op writes more than it reads, the extra programs write
    only); programs to cover both."""
    log_ratio = min(max(0, round(math.log2(n_src / n_dst))), int(math.log2(block)))
    write = block >> log_ratio
    return block, write, max(triton.cdiv(n_src, block), triton.cdiv(n_dst, write))


def launch_stream(src: torch.Tensor, dst: torch.Tensor, block: int, num_warps: int, salt: int = 0) -> None:
    """One launch reading every word of ``src`` and writing every word of ``dst`` (int32, 1-D, non-empty)."""
    read, write, programs = chunks(src.numel(), dst.numel(), block)
    use_pdl = runtime.supports_pdl(src.device)
    stream_kernel[(programs,)](src, dst, src.numel(), dst.numel(), salt, WRITE=write, RATIO=read // write,
                               USE_PDL=use_pdl, num_warps=num_warps, launch_pdl=use_pdl)


def stream_us(read_bytes: int, write_bytes: int, device: torch.device | str = "cuda") -> float:
    """The best graph-replay time (``timing.graph_time_us``, us per call) over :data:`CONFIGS` of one launch that
    reads ``read_bytes`` and writes ``write_bytes`` (each rounded up to whole int32 words)."""
    if read_bytes <= 0 or write_bytes <= 0:
        raise ValueError(f"read_bytes and write_bytes must be positive, got {read_bytes} and {write_bytes}")
    src = torch.zeros(triton.cdiv(read_bytes, 4), dtype=torch.int32, device=device)
    dst = torch.empty(triton.cdiv(write_bytes, 4), dtype=torch.int32, device=device)
    return min(graph_time_us(lambda b=b, w=w: launch_stream(src, dst, b, w)) for b, w in CONFIGS)
