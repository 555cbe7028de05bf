"""``tools/decode_timeline.py``, issue 18's per-program profile of the Gluon decode GEMM: its stamps still apply to
the kernels' source, and the stamped decode kernel still compiles for sm_90 at two programs an SM without spills
(the tool runs only on a Hopper GPU; these checks keep it from drifting from the kernels on any machine)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from sm90_tool import ROOT, TOOL, needs_tool  # tests/sm90_tool.py

TIMELINE = ROOT / "tools" / "decode_timeline.py"


def _tool():
    spec = importlib.util.spec_from_file_location("decode_timeline", TIMELINE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stamp_applies_once_and_the_copy_keeps_the_rest(tmp_path):
    tool = _tool()
    src = tool.stamp_source(tmp_path)
    for module in ("mxfp8_wgmma.py", "split_k_sum.py"):
        stamped = (src / "seam" / "kernels" / module).read_text()
        original = (ROOT / "src" / "seam" / "kernels" / module).read_text()
        compile(stamped, module, "exec")
        assert stamped.count("globaltimer()") == (5 if module == "mxfp8_wgmma.py" else 3)
        assert "globaltimer()" not in original
    assert (src / "seam" / "ops" / "linear.py").read_text() == (ROOT / "src" / "seam" / "ops" / "linear.py").read_text()


def test_a_moved_anchor_stops_the_tool_naming_it(tmp_path, monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool, "PATCHES", tool.PATCHES + (("split_k_sum.py", "no such line\n", "x"),))
    with pytest.raises(RuntimeError, match="occurs 0 times, not once.*\nno such line"):
        tool.stamp_source(tmp_path)


@pytest.mark.parametrize("argv, says", [(["--m", "0"], "M must be 1-64"), (["--m", "65"], "M must be 1-64"),
                                        (["--k", "6000"], "K a multiple of 128"), (["--calls", "4"], "--calls at least"),
                                        (["--before-wait", "-1"], "--before-wait must be 0 or more")])
def test_bad_arguments_exit_2_before_any_copy(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        _tool().main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


def _compile_stamped(src, before_wait: int, split_k: int = 12, k: int = 6144) -> dict | str:
    """The stamped 8-row tile (by default at the one-token pick: split 12, 2 stages) compiled for sm_90 with
    ``before_wait`` ring stages requested before the PDL wait: its resources, its PTX's stamp count and where its
    TMA copies stand against the wait; or the compiler's error text where it refuses the kernel."""
    probe = ("import json, sm90_resources\n"
             "compile_ = sm90_resources._compile\n"  # the stamped kernel's one constexpr more
             "sm90_resources._compile = lambda fn, types, consts, *a, **k: compile_(fn, types, "
             f"{{**consts, 'BEFORE_WAIT': {before_wait}}}, *a, **k)\n"
             f"r = sm90_resources.resources('wgmma', 8, split_k={split_k}, num_stages=2, k={k}, ptx=True)\n"
             "head, tail = r['ptx'].split('griddepcontrol.wait')\n"
             "print(json.dumps({**r, 'ptx': r['ptx'].count('%globaltimer'), "
             "'copies before the wait': head.count('cp.async.bulk.tensor'), "
             "'copies after it, before the first stage wait': "
             "tail.split('mbarrier.try_wait')[0].count('cp.async.bulk.tensor'), "
             "'copies': r['ptx'].count('cp.async.bulk.tensor')}))\n")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([str(src), str(TOOL.parent)]))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    return json.loads(out.stdout) if out.returncode == 0 else out.stderr


@needs_tool
def test_the_stamped_decode_kernel_fits_two_programs_per_sm_without_spills(tmp_path):
    r = _compile_stamped(_tool().stamp_source(tmp_path), before_wait=2)
    assert isinstance(r, dict), r[-2000:]
    assert r["ptx"] == 5, r  # the stamped copy was compiled, not seam's own
    assert r["registers"] <= 128 and r["stack_bytes"] == 0, r


@needs_tool
def test_before_wait_moves_the_ring_requests_past_the_pdl_wait(tmp_path):
    """--before-wait N: the copy instructions ahead of the wait are the N stages' (a weight tile and its scales
    each), none at 0; the kernel still fits two programs an SM."""
    src = _tool().stamp_source(tmp_path)
    found = {n: _compile_stamped(src, n) for n in (0, 1, 2)}
    assert all(isinstance(r, dict) for r in found.values()), found
    copies = [found[n]["copies before the wait"] for n in (0, 1, 2)]
    assert copies == [0, 2, 4], copies  # a weight tile and its scales a stage
    # the others right after the wait, before any stage is waited for (none left out: the same copies in all)
    after = [found[n]["copies after it, before the first stage wait"] - found[2]["copies after it, before the first "
                                                                               "stage wait"] for n in (0, 1, 2)]
    assert after == [4, 2, 0] and len({found[n]["copies"] for n in (0, 1, 2)}) == 1, found
    for r in found.values():
        assert r["registers"] <= 128 and r["stack_bytes"] == 0, r


@needs_tool
def test_before_wait_keeps_the_stages_a_tile_waits_for_before_the_wait(tmp_path):
    """At K 2048, split 2 the tile converts one weight step into shared memory before the wait, waiting for its stage
    there: the stamped kernel refuses to compile without that stage requested first (the tool's launch requests it).
    With it, that step's stage and the step its slot takes next go ahead of the wait (4 copies), the other stage after
    it (6 with both stages first), and no copy is left out."""
    src = _tool().stamp_source(tmp_path)
    refused = _compile_stamped(src, 0, split_k=2, k=2048)
    assert isinstance(refused, str) and "a stage waited for before the PDL wait is requested there" in refused
    found = [_compile_stamped(src, n, split_k=2, k=2048) for n in (1, 2)]
    assert [r["copies before the wait"] for r in found] == [4, 6] and found[0]["copies"] == found[1]["copies"], found


def _stamps(calls: int, base: int):
    """Synthetic %globaltimer stamps at an epoch-sized ``base`` (int64 ns, most not multiples of 256): the decode
    kernel's [calls, 4 programs, 8] (programs 0-1 on one SM, 2 and 3 alone) and a sum launch's [calls, 2, 4]."""
    import torch

    raw, sums = torch.zeros(calls, 4, 8, dtype=torch.int64), torch.zeros(calls, 2, 4, dtype=torch.int64)
    for c in range(calls):
        o = base + 10_000 * c + 3
        for p in range(4):
            wait = o + 1000 + 2 * p
            staged = wait + 1500 + p
            loop = staged + 3000
            raw[c, p] = torch.tensor([o + p, wait, staged, loop, loop + 250 + p, (7, 7, 8, 9)[p], 0, 0])
        for q in range(2):
            sums[c, q] = torch.tensor([o + 6000, o + 6100 + 10 * q, o + 7000 + 5 * q, 3])
    return raw, sums


def test_call_stats_reads_the_stamps_to_the_nanosecond():
    """Each statistic from hand-computed stamps, to the ns: a double of an epoch-sized stamp would round each to
    256 ns (docs/benchmarks-log.md runs 352-353)."""
    import torch

    tool = _tool()
    raw, sums = _stamps(6, 1_800_000_000_000_000_000)
    alone = tool.call_stats(raw, torch.zeros_like(sums), 2, 5)
    want = {"release after previous end": 5.238, "staged p50": 1.5015, "loop p50": 3.0, "store p50": 0.2515,
            "end p50, alone on an SM": 4.76, "end p50, two on an SM": 4.752, "last end": 4.762}
    assert alone.keys() == want.keys() and all(abs(alone[k] - v) < 1e-9 for k, v in want.items()), alone
    summed = tool.call_stats(raw, sums, 2, 5)  # the previous call ends with its sum launch
    want.update({"release after previous end": 3.995, "sum released": 5.1, "sum last end": 6.005})
    assert summed.keys() == want.keys() and all(abs(summed[k] - v) < 1e-9 for k, v in want.items()), summed


def test_stream_span_is_first_start_to_last_end():
    import torch

    base = 1_800_000_000_000_000_000
    raw = torch.zeros(5, 3, 4, dtype=torch.int64)
    for c in range(5):
        for p in range(3):
            raw[c, p, :2] = torch.tensor([base + 9000 * c + 3 * p + 1, base + 9000 * c + 7777 + p + 1])
    assert abs(_tool().stream_span(raw, 1, 4) - 7.779) < 1e-9
