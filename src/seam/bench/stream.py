"""The stream peers: the time one launch takes to read and write an op's bytes with no math between (the norm,
SwiGLU and quantize benchmarks), and to read a GEMM's weight bytes (:func:`weight_stream_us`).

The floor (``timing.floor_us``) counts an op's bytes at the copy bandwidth of a 1 GiB copy plus one
empty launch; a launch that moves a few MB may not reach it (its one pass over the data pays a DRAM
latency that a long copy hides). So beside the floor the norm, SwiGLU and quantize benchmarks time
this kernel on the same byte counts: what a kernel moving those bytes in one launch does on this
card, the best of a few block sizes, warp counts and PDL trigger points.

Each program writes ``WRITE`` int32 words and reads ``RATIO`` slices of ``WRITE`` words (``RATIO``: the
ratio of the two byte counts rounded up, so every program that reads also writes); what it writes sums
what it read, so no load is dead. Launched with PDL where seam's kernels are, waiting for its predecessor
at the start and letting its dependents launch at the start or after its loads (seam's kernels do either,
by M: ``seam.kernels.pdl``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam import runtime
from seam.bench.timing import graph_time_us, rotating

#: (words written per program, num_warps, dependents launched at the start) tried; the stream time is the best.
CONFIGS = tuple((block, warps, early) for block in (256, 512, 1024, 2048) for warps in (4, 8)
                for early in (False, True))
#: Buffers are whole multiples of this many words (64 bytes), so that every access can be 16 bytes wide.
WORDS_ALIGN = 16


@triton.jit
def stream_kernel(src_ptr, dst_ptr, n_src, n_dst, salt, WRITE: tl.constexpr, RATIO: tl.constexpr,
                  USE_PDL: tl.constexpr, EARLY_TRIGGER: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    if USE_PDL:
        if EARLY_TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # RATIO loads of WRITE words, so that every load, the sum and the store are in one layout: no shared memory,
    # no barrier.
    i = tl.arange(0, WRITE)
    given = tl.zeros([WRITE], tl.int32)
    for j in tl.static_range(RATIO):
        r = (pid * RATIO + j) * WRITE + i
        given += tl.load(src_ptr + r, mask=r < n_src, other=0)
    if USE_PDL and not EARLY_TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    w = pid * WRITE + i
    # salt is 0 when timed: dst[w] = w, computed from the loads, so the compiler keeps them
    tl.store(dst_ptr + w, w.to(tl.int32) + salt * given, mask=w < n_dst)


#: Most words read per word written (each a load in the kernel's unrolled loop).
MAX_RATIO = 16


def chunks(n_src: int, n_dst: int, block: int) -> tuple[int, int, int]:
    """(RATIO, WRITE, programs): each program writes ``block`` words and reads RATIO = ceil(n_src / n_dst) slices
    of as many; programs to cover the writes (so every read lands in a program that writes).

    Raises:
        ValueError: RATIO above :data:`MAX_RATIO`.
    """
    ratio = -(-n_src // n_dst)
    if ratio > MAX_RATIO:
        raise ValueError(f"the stream peer reads at most {MAX_RATIO} words per word written, got {n_src} / {n_dst}")
    return ratio, block, triton.cdiv(n_dst, block)


def launch_stream(src: torch.Tensor, dst: torch.Tensor, block: int, num_warps: int, early: bool = False,
                  salt: int = 0) -> None:
    """One launch reading every word of ``src`` and writing every word of ``dst`` (int32, 1-D, non-empty)."""
    ratio, write, programs = chunks(src.numel(), dst.numel(), block)
    use_pdl = runtime.supports_pdl(src.device)
    stream_kernel[(programs,)](src, dst, src.numel(), dst.numel(), salt, WRITE=write, RATIO=ratio, USE_PDL=use_pdl,
                               EARLY_TRIGGER=early, num_warps=num_warps, launch_pdl=use_pdl)


def words(nbytes: int) -> int:
    """int32 words holding ``nbytes``, rounded up to :data:`WORDS_ALIGN`."""
    return triton.cdiv(nbytes, 4 * WORDS_ALIGN) * WORDS_ALIGN


def stream_us(read_bytes: int, write_bytes: int, device: torch.device | str = "cuda") -> float:
    """The best graph-replay time (``timing.graph_time_us``, us per call) over :data:`CONFIGS` of one launch that
    reads ``read_bytes`` and writes ``write_bytes`` (each rounded up to :func:`words`)."""
    if read_bytes <= 0 or write_bytes <= 0:
        raise ValueError(f"read_bytes and write_bytes must be positive, got {read_bytes} and {write_bytes}")
    src = torch.zeros(words(read_bytes), dtype=torch.int32, device=device)
    dst = torch.empty(words(write_bytes), dtype=torch.int32, device=device)
    return min(graph_time_us(lambda c=c: launch_stream(src, dst, *c)) for c in CONFIGS)


#: Words one program of the weight stream reads: 16 KB, one 128 x 128 E4M3 tile, as issue 18's probe read them.
READ_SLAB = 4096


@triton.jit
def read_kernel(src_ptr, out_ptr, n_src, SLAB: tl.constexpr):
    # one slab a program, folded by XOR into one word so that no load is dead
    pid = tl.program_id(0).to(tl.int64)
    r = pid * SLAB + tl.arange(0, SLAB)
    tl.store(out_ptr + pid, tl.xor_sum(tl.load(src_ptr + r, mask=r < n_src, other=0), axis=0))


def launch_read(src: torch.Tensor, out: torch.Tensor) -> None:
    """One launch reading every word of ``src`` (int32, 1-D), :data:`READ_SLAB` a program, each program's XOR in
    ``out`` (int32, at least ``ceil(src.numel() / READ_SLAB)`` words)."""
    read_kernel[(triton.cdiv(src.numel(), READ_SLAB),)](src, out, src.numel(), SLAB=READ_SLAB, num_warps=4)


def weight_stream_us(nbytes: int, device: torch.device | str = "cuda") -> float:
    """The GEMM benchmark's stream peer: graph-replay time (``timing.graph_time_us``, us per call) of one launch that
    only reads ``nbytes`` (a weight's values and scales, rounded up to :func:`words`) from copies rotated past L2,
    16 KB a program (:func:`launch_read`), with no PDL. Issue 18 states its decode targets as ratios to this time.
    A GEMM that requests its weights before its PDL wait can run under it back to back (docs/benchmarks-log.md run
    347)."""
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}")
    n = words(nbytes)
    src = rotating(lambda: torch.zeros(n, dtype=torch.int32, device=device), 4 * n)
    out = torch.empty(triton.cdiv(n, READ_SLAB), dtype=torch.int32, device=device)
    return graph_time_us(lambda: launch_read(src(), out))
