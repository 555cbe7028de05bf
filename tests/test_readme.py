"""The README's first example runs as written (on the CPU here: the Triton interpreter)."""

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
