"""The README's first example runs as written (on the CPU here: the Triton interpreter); ``./dev`` explains itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_first_call_example_runs():
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first call", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    shape, err = out.stdout.split(")")[0], float(out.stdout.rsplit(" ", 1)[1])
    assert shape == "torch.Size([8, 256]" and 0 <= err < 2.0**-8


def test_dev_help_lists_both_commands_before_installing_anything():
    """``./dev --help`` answers at once: with no Python it could run, it still prints the usage (exit 0); an unknown
    command prints it to stderr (exit 2)."""
    env = dict(os.environ, PYTHON="/nonexistent/python")
    out = subprocess.run(["bash", str(ROOT / "dev"), "--help"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0 and "./dev verify" in out.stdout and "./dev test" in out.stdout
    assert "--only NAME" in out.stdout
    bad = subprocess.run(["bash", str(ROOT / "dev"), "nope"], capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode == 2 and "usage: ./dev verify" in bad.stderr and not bad.stdout
