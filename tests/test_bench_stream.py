"""The benchmarks' stream peer (``seam.bench.stream``): one launch that reads every word of its source and writes
every word of its destination, nothing outside them, and what it writes depends on what it read."""

from __future__ import annotations

import functools
import io
import operator

import pytest
import torch

from seam.bench import stream

GUARD = 64  # words either side of both buffers that the kernel must neither read nor write


@pytest.mark.parametrize("n_src, n_dst, block", [
    (1000, 256, 64),  # SwiGLU's ratio (3.9): 4 slices read per slice written
    (250, 1024, 64),  # writes more than it reads: the last programs read nothing
    (1320, 1000, 256),  # the norm's ratio (1.3): 2 slices, the last programs read nothing
    (2000, 1000, 256),  # the quantizer's ratio (1.9; here exactly 2)
    (5, 3, 16),  # fewer words than one chunk
])
@pytest.mark.parametrize("early", [False, True])
def test_reads_and_writes_exactly_its_buffers(n_src, n_dst, block, early, device):
    """Written: every dst word, ``w + salt * (the sum of the RATIO read words at its offset in each slice of its
    program's chunk)``, nothing past either end; so read: every src word (each in a program that writes), none of
    the guard words past src (their large values would show in the sums)."""
    g = torch.Generator().manual_seed(n_src)
    src_buf = torch.full((n_src + 2 * GUARD,), 1 << 20, dtype=torch.int32)
    src_buf[GUARD:GUARD + n_src] = torch.randint(-100, 100, (n_src,), generator=g, dtype=torch.int32)
    dst_buf = torch.full((n_dst + 2 * GUARD,), -7, dtype=torch.int32)
    src_buf, dst_buf = src_buf.to(device), dst_buf.to(device)
    src, dst = src_buf[GUARD:GUARD + n_src], dst_buf[GUARD:GUARD + n_dst]

    stream.launch_stream(src, dst, block, num_warps=4, early=early)  # salt 0, as timed
    assert torch.equal(dst.cpu(), torch.arange(n_dst, dtype=torch.int32))
    assert (torch.cat([dst_buf[:GUARD], dst_buf[GUARD + n_dst:]]).cpu() == -7).all()

    stream.launch_stream(src, dst, block, num_warps=4, early=early, salt=1)
    ratio, write, programs = stream.chunks(n_src, n_dst, block)
    assert programs * ratio * write >= n_src  # every source word in some program's chunk
    padded = torch.nn.functional.pad(src.cpu().long(), (0, programs * ratio * write - n_src))  # past src: 0
    given = padded.view(programs, ratio, write).sum(1).flatten()[:n_dst]
    assert torch.equal(dst.cpu().long(), given + torch.arange(n_dst))
    assert (torch.cat([dst_buf[:GUARD], dst_buf[GUARD + n_dst:]]).cpu() == -7).all()


@pytest.mark.parametrize("n_src, n_dst, block, expected", [
    (4000, 1000, 1024, (4, 1024, 1)),  # ratio 4
    (1000, 256, 64, (4, 64, 4)),  # 3.9 rounds up to 4
    (1320, 1000, 256, (2, 256, 4)),  # 1.32 rounds up to 2
    (1000, 4000, 1024, (1, 1024, 4)),  # writes more than it reads: 1
])
def test_chunks(n_src, n_dst, block, expected):
    assert stream.chunks(n_src, n_dst, block) == expected


def test_chunks_refuse_a_ratio_past_the_unrolled_loads():
    with pytest.raises(ValueError, match="reads at most 16 words per word written, got 17000 / 1000"):
        stream.chunks(17000, 1000, 256)


def test_words_round_up_to_64_bytes():
    assert [stream.words(n) for n in (1, 64, 65, 4096)] == [16, 16, 32, 1024]


def test_stream_us_refuses_empty_sides():
    with pytest.raises(ValueError, match="read_bytes and write_bytes must be positive"):
        stream.stream_us(0, 10, device="cpu")


def _stub_bench(monkeypatch, module, times: dict[str, float], stream_times: list[float]) -> list:
    """``module``'s timers replaced: graph_time_us runs each call once (seam's kernels run here) and returns the next
    of ``times`` in insertion order, the eager and compiled chains are not run, and stream_us returns the next of
    ``stream_times``; returns the (read, written) byte counts the stream peer was asked for."""
    graph_times, streams, asked = iter(times.values()), iter(stream_times), []

    def graph(fn, **_):
        fn()
        return next(graph_times)

    def stream_stub(read, written, device):
        asked.append((read, written))
        return next(streams)

    monkeypatch.setattr(module, "graph_time_us", graph)
    monkeypatch.setattr(module, "time_us", lambda fn: 100.0)
    monkeypatch.setattr(module, "compile_static", lambda fn, **_: fn)
    monkeypatch.setattr(module, "stream_us", stream_stub)
    return asked


def test_norm_bench_rows_have_floor_and_stream_per_variant(monkeypatch, device):
    """The norm bench at one M: floor and stream for the MXFP8-only op (issue 19's floor) and for the one that also
    writes the BF16 rows, each against its own variant's time."""
    from rich.console import Console

    from seam.bench import norm

    times = {"fused+bf16": 4.0, "fused": 3.0, "seam 2 launches": 5.0}
    asked = _stub_bench(monkeypatch, norm, times, [2.0, 3.2])
    (row,) = norm.run(Console(file=io.StringIO()), ms=(1,), device=device)
    h, scales = norm.HIDDEN, 128 * norm.HIDDEN // 32  # one row: the swizzled scales pad to 128 rows
    read = 2 * h + 2 * h + 2 * h  # x, residual, weight
    assert asked == [(read, 2 * h + h + scales), (read, 2 * h + 2 * h + h + scales)]
    assert row["stream us"] == 2.0 and row["stream/fused"] == 2.0 / 3.0
    assert row["stream +bf16 us"] == 3.2 and row["stream/fused+bf16"] == 3.2 / 4.0
    assert row["floor us"] == pytest.approx((read + 3 * h + scales) / 4.23e6 + 0.54)
    assert row["floor/fused"] == row["floor us"] / 3.0
    assert row["floor/fused+bf16"] == row["floor +bf16 us"] / 4.0


@pytest.mark.parametrize("name, times, seam_key, ratio_key, read_per_column, written_per_column", [
    ("swiglu", {"fused": 2.0, "seam 2 launches": 3.0}, "fused", "stream/fused", 4, 1),  # BF16 [1, 2I] in
    ("quant", {"seam swizzled": 2.0, "seam row-major": 1.8}, "seam swizzled", "stream/seam", 2, 1),  # BF16 [1, H]
])
def test_swiglu_and_quant_bench_rows_have_stream(monkeypatch, device, name, times, seam_key, ratio_key,
                                                 read_per_column, written_per_column):
    """SwiGLU's and the quantizer's stream peer and floor: the op's bytes read and written (one row: the swizzled
    scales pad to 128 rows), against seam's time."""
    import importlib

    from rich.console import Console

    module = importlib.import_module(f"seam.bench.{name}")
    asked = _stub_bench(monkeypatch, module, times, [1.5])
    (row,) = module.run(Console(file=io.StringIO()), ms=(1,), device=device)
    cols = module.INTER if name == "swiglu" else module.HIDDEN
    read, written = read_per_column * cols, written_per_column * cols + 128 * cols // 32
    assert asked == [(read, written)]
    assert row["stream us"] == 1.5 and row[ratio_key] == 1.5 / times[seam_key]
    assert row["floor us"] == pytest.approx((read + written) / 4.23e6 + 0.54)
    assert row[ratio_key.replace("stream", "floor")] == row["floor us"] / times[seam_key]


@pytest.mark.parametrize("n_src", [4096, 10000])
def test_read_kernel_reads_every_word_once(device, n_src):
    """The GEMM benchmark's weight stream: program p writes the XOR of source words [4096 p, 4096 p + 4096) (the last
    slab cut at the end: the guard words past it, which would change the XOR, are not read)."""
    g = torch.Generator().manual_seed(n_src)
    src_buf = torch.full((n_src + GUARD,), 1 << 20, dtype=torch.int32)
    src_buf[:n_src] = torch.randint(-(1 << 30), 1 << 30, (n_src,), generator=g, dtype=torch.int32)
    programs = -(-n_src // stream.READ_SLAB)
    out = torch.full((programs,), -7, dtype=torch.int32, device=device)
    stream.launch_read(src_buf.to(device)[:n_src], out)
    slabs = torch.nn.functional.pad(src_buf[:n_src], (0, programs * stream.READ_SLAB - n_src)).view(programs, -1)
    assert out.cpu().tolist() == [functools.reduce(operator.xor, slab.tolist()) for slab in slabs]


def test_weight_stream_us_refuses_no_bytes():
    with pytest.raises(ValueError, match="nbytes must be positive, got 0"):
        stream.weight_stream_us(0, device="cpu")
