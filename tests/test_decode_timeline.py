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


def _compile_stamped(src, before_wait: int) -> dict:
    """The stamped 8-row tile at the one-token pick (split 12, 2 stages) compiled for sm_90 with ``before_wait``
    ring stages requested before the PDL wait: its resources, its PTX's stamp count and the TMA copies it issues
    before the wait."""
    probe = ("import json, sm90_resources\n"
             "compile_ = sm90_resources._compile\n"  # the stamped kernel's one constexpr more
             "sm90_resources._compile = lambda fn, types, consts, *a, **k: compile_(fn, types, "
             f"{{**consts, 'BEFORE_WAIT': {before_wait}}}, *a, **k)\n"
             "r = sm90_resources.resources('wgmma', 8, split_k=12, num_stages=2, k=6144, ptx=True)\n"
             "head = r['ptx'].split('griddepcontrol.wait')[0]\n"
             "print(json.dumps({**r, 'ptx': r['ptx'].count('%globaltimer'), "
             "'copies before the wait': head.count('cp.async.bulk.tensor')}))\n")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([str(src), str(TOOL.parent)]))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@needs_tool
def test_the_stamped_decode_kernel_fits_two_programs_per_sm_without_spills(tmp_path):
    r = _compile_stamped(_tool().stamp_source(tmp_path), before_wait=2)
    assert r["ptx"] == 5, r  # the stamped copy was compiled, not seam's own
    assert r["registers"] <= 128 and r["stack_bytes"] == 0, r


@needs_tool
def test_before_wait_moves_the_ring_requests_past_the_pdl_wait(tmp_path):
    """--before-wait N: the copy instructions ahead of the wait are the N stages' (a weight tile and its scales
    each), none at 0; the kernel still fits two programs an SM."""
    src = _tool().stamp_source(tmp_path)
    found = {n: _compile_stamped(src, n) for n in (0, 1, 2)}
    copies = [found[n]["copies before the wait"] for n in (0, 1, 2)]
    assert copies[0] == 0 and 0 < copies[1] < copies[2], copies
    assert copies[2] == 2 * copies[1], copies  # the same requests for each stage
    for r in found.values():
        assert r["registers"] <= 128 and r["stack_bytes"] == 0, r
