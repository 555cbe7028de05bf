"""The scripts in examples/ run as a user runs them (on the CPU here: the Triton interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tp1_decode_boundary_runs_and_writes_every_output():
    """The boundary example runs end to end and ends with the QKV op's outputs: q and index_q of M rows, and NVFP4
    cache entries written."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tp1_decode_boundary.py")], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip()
    assert line.startswith("device ") and "residual [4, 256], q [4, 2048], index_q [4, 128]" in line, line
    assert int(line.rsplit(" ", 1)[1]) > 0, line
