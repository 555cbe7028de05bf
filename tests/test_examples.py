"""The scripts in examples/ run as a user runs them (on the CPU here: the Triton interpreter)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tp1_decode_boundary_runs_and_writes_every_output():
    """The boundary example runs end to end and ends with the QKV op's outputs: q and index_q of M rows, and NVFP4
    cache entries written; its own check against seam.ref finds q within a BF16 ulp (the GEMM's fp32 summation
    order apart) and the E4M3 / NVFP4 bytes equal but where such a ulp moves one."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tp1_decode_boundary.py")], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    line, check = out.stdout.strip().split("\n")
    assert line.startswith("device ") and "residual [4, 256], q [4, 2048], index_q [4, 128]" in line, line
    assert int(line.rsplit(" ", 1)[1]) > 0, line
    found = re.fullmatch(r"against seam\.ref: q within (\d+) BF16 ulp, index_q bytes equal ([\d.]+)%, "
                         r"cache bytes equal ([\d.]+)%", check)
    assert found, check
    assert int(found[1]) <= 1 and float(found[2]) >= 99 and float(found[3]) >= 99, check
