"""Where seam's kernels run: the interpreter mode must match the one triton was imported in."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

import seam

_SRC = str(pathlib.Path(seam.__file__).resolve().parents[1])

# Quantize one row into caller buffers filled with 0x55: the buffers show whether anything launched.
_QUANTIZE = """
x = torch.randn(2, 64, dtype=torch.bfloat16)
values = torch.full((2, 64), 0x55, dtype=torch.uint8).view(torch.float8_e4m3fn)
scales = torch.full((2, 2), 0x55, dtype=torch.uint8)
try:
    seam.mxfp8_quantize(x, scale_layout="row_major", out=(values, scales))
except RuntimeError as exc:
    untouched = bool((values.view(torch.uint8) == 0x55).all() and (scales == 0x55).all())
    print(f"RuntimeError untouched={untouched}: {exc}")
else:
    ref_values, ref_scales = seam.formats.mxfp8.mxfp8_quantize_ref(x, scale_layout="row_major")
    same = torch.equal(values.view(torch.uint8), ref_values.view(torch.uint8)) and torch.equal(scales, ref_scales)
    print("quantized", same)
"""


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # this process set it
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [_SRC, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is chosen on a machine without CUDA")
def test_triton_imported_before_seam_is_refused_before_any_launch():
    """triton imported first (here by torch._dynamo) decorates its own tl.max etc. natively; seam's
    interpreted kernels cannot call them: every op says what to do instead of crashing in the kernel."""
    out = _run("import torch, torch._dynamo, seam, seam.cli" + _QUANTIZE + "\nseam.cli.main(['info'])")
    assert "RuntimeError untouched=True: seam's kernels need the Triton interpreter here" in out
    assert "set TRITON_INTERPRET=1 before triton is imported, or import seam first" in out
    assert "kernels: cannot run in this process: seam's kernels need the Triton interpreter" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is chosen on a machine without CUDA")
@pytest.mark.parametrize(
    "imports,env",
    [("import seam, triton, torch", {}), ("import triton, torch, seam", {"TRITON_INTERPRET": "1"})],
    ids=["seam-first", "interpret-set-before-triton"],
)
def test_either_remedy_runs_the_kernels(imports, env):
    assert _run(imports + _QUANTIZE, **env).strip() == "quantized True"


@pytest.mark.skipif(torch.cuda.is_available(), reason="native kernels are asked for on a machine without CUDA")
@pytest.mark.parametrize("value", ["0", "", "off"])
def test_native_kernels_without_cuda_are_refused_before_any_launch(value):
    """TRITON_INTERPRET=0 (or empty, or another value Triton reads as off) where torch sees no CUDA: every op,
    `seam info` and `seam verify` say so and what to do, instead of a device error that asks for CUDA tensors or a
    traceback."""
    code = ("import torch, seam, seam.cli" + _QUANTIZE + "\nseam.cli.main(['info'])"
            "\nprint('verify status', seam.cli.main(['verify', '--only', 'mxfp8_quantize']))")
    out = _run(code, TRITON_INTERPRET=value)
    want = f"TRITON_INTERPRET={value!r} asks for native Triton kernels, but torch sees no CUDA device"
    assert f"RuntimeError untouched=True: {want}" in out
    assert f"kernels: cannot run in this process: {want}" in out
    assert "verify status 2" in out


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "on", "Yes", "y", "0", "", "off", "false", "no", "2", " 1"])
def test_interpret_is_read_as_triton_reads_it(monkeypatch, value):
    """seam decides CPU interpretation from TRITON_INTERPRET exactly as Triton does (``off`` is off, not on)."""
    import triton.knobs

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert seam.runtime.interpret_requested(value) == triton.knobs.env_bool("TRITON_INTERPRET").get()
