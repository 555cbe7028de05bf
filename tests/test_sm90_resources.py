"""The register budget ``pick_qkv_tile`` and ``pick_tile`` rely on, read off sm_90 compiles on any machine.

``tools/sm90_resources.py`` compiles a kernel for sm_90 with Triton's bundled ptxas (no
GPU needed) and reports registers, stack and shared memory. The capped fused QKV tiles
must fit two 8-warp programs per SM (65536 registers, 228 KB shared) without spilling:
an epilogue change that makes them spill would otherwise only show as a slowdown on
the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from seam.kernels.mxfp8_gemm_config import TWO_PER_SM_REGISTERS
from sm90_tool import ROOT, TOOL, needs_tool  # tests/sm90_tool.py

SM90_SHARED_BYTES = 228 * 1024


def _run_tool(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env)


def _resources(*args: str) -> dict:
    out = _run_tool(*args)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


pytestmark = needs_tool


@pytest.mark.parametrize(
    "block_m, split_k, qfp8",  # nkv is a runtime argument: one compile serves every head count
    [(16, 12, False), (16, 6, True), (32, 6, False), (32, 3, True)],
)
def test_capped_qkv_tiles_fit_two_programs_per_sm_without_spills(block_m, split_k, qfp8):
    args = ["qkv", str(block_m), "--split-k", str(split_k), "--max-registers",
            str(TWO_PER_SM_REGISTERS)] + (["--has-qfp8"] if qfp8 else [])
    r = _resources(*args)
    assert r["registers"] <= TWO_PER_SM_REGISTERS
    assert r["stack_bytes"] == 0, f"spills under the cap: {r}"
    assert 2 * r["shared_bytes"] <= SM90_SHARED_BYTES


@pytest.mark.parametrize("k, a_bf16", [(6144, False), (768, False), (6144, True)])
def test_capped_linear_64_row_tile_fits_two_programs_per_sm_without_spills(k, a_bf16):
    # pick_tile gives 64-row tiles split at most two ways the budget (the split does not change the
    # loop); in-GEMM quantization may run them too
    r = _resources("linear", "64", "--split-k", "1", "--k", str(k), "--max-registers", str(TWO_PER_SM_REGISTERS),
                   *(["--a-bf16"] if a_bf16 else []))
    assert r["registers"] <= TWO_PER_SM_REGISTERS
    assert r["stack_bytes"] == 0, f"spills under the cap: {r}"
    assert 2 * r["shared_bytes"] <= SM90_SHARED_BYTES


def test_tool_rejects_an_unknown_kernel():
    out = _run_tool("gemv", "1")
    assert out.returncode == 2 and "invalid choice" in out.stderr
