"""``tools/sm90_resources.py`` for the Gluon kernels' compile tests: its path, a skip mark where this Triton build
cannot read a compiled kernel's resources, and a runner for loops that compile for sm_90 in a process of their own."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "sm90_resources.py"


def _has_cuobjdump() -> bool:
    spec = importlib.util.spec_from_file_location("sm90_resources", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool._cuobjdump().exists()


#: Skips a test where this Triton build ships no cuobjdump (the tool reads registers and spills through it).
needs_tool = pytest.mark.skipif(not _has_cuobjdump(), reason="this Triton build ships no cuobjdump")


def with_tool(loop: str, timeout: float | None = None) -> list:
    """Run ``loop`` (Python source printing one JSON value per line) in a process that compiles for sm_90
    (``TRITON_INTERPRET=0``) with ``tools/sm90_resources.py`` loaded as ``tool``; the values it printed."""
    script = (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('sm90_resources', {str(TOOL)!r})\n"
        "tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)\n"
    ) + loop
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]
