"""The Lamport kernels compile for sm_90 (H200) without a GPU: Triton's CUDA backend, ahead of time.

The interpreter accepts code the real compiler rejects (non-constexpr globals, branches
that bind one name to two types), so every kernel variant is compiled here to PTX and a
cubin for ``GPUTarget("cuda", 90, 32)``, in a subprocess with ``TRITON_INTERPRET=0``.
The PTX is also checked for what the spec relies on: volatile loads in the spin, PDL
instructions, and no FMA in the MoE finalize (products rounded before each add).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from seam.kernels import lamport as L

    target = GPUTarget("cuda", 90, 32)

    def build(fn, sig, consts, **opts):
        return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target, options=opts)

    def publish_sig(wdt, small):
        return {"x_ptr": "*bf16", "gemm2_ptr": "*bf16", "weights_ptr": wdt, "idx_ptr": "*i32",
                "mailbox_ptr": "*bf16", "peer_offsets_ptr": "*i64", "stage_state_ptr": "*i32",
                "capacity": "constexpr" if small else "i32", "hidden": "i32",
                "rank": "constexpr" if small else "i32", "gemm2_rows": "i32", "TP": "constexpr",
                "FINALIZE": "constexpr",
                "TOP_K": "constexpr", "BLOCK_N": "constexpr", "USE_PDL": "constexpr"}

    for finalize, wdt in ((False, "*bf16"), (True, "*fp32"), (True, "*bf16")):
        for small in (False, True):  # Triton specializes int arguments equal to 1 as constexpr
            consts = {"TP": 8, "FINALIZE": finalize, "TOP_K": 4, "BLOCK_N": 1024, "USE_PDL": True}
            if small:
                consts.update(capacity=1, rank=1)
            k = build(L.lamport_publish_kernel, publish_sig(wdt, small), consts, num_warps=4, enable_fp_fusion=False)
            ptx = k.asm["ptx"]
            assert "cubin" in k.asm and "griddepcontrol.wait" in ptx
            assert "fma.rn.f32" not in ptx, "finalize products must not be fused into FMA"

    for epilogue in (0, 1, 2):
        for spin in (0, 1000):
            for small in (False, True):
                sig = {"mailbox_ptr": "*bf16", "stage_state_ptr": "*i32", "error_ptr": "*i32",
                       "residual_ptr": "*bf16", "weight_ptr": "*bf16", "out_ptr": "*bf16",
                       "residual_out_ptr": "*bf16", "values_ptr": "*u8", "scales_ptr": "*u8",
                       "M": "constexpr" if small else "i32", "capacity": "constexpr" if small else "i32",
                       "hidden": "i32", "eps": "fp32", "TP": "constexpr", "EPILOGUE": "constexpr",
                       "GEMMA": "constexpr", "STORE_NORMED": "constexpr", "SPIN_LIMIT": "constexpr",
                       "BLOCK_H": "constexpr", "PAD_ROWS": "constexpr", "USE_PDL": "constexpr"}
                consts = {"TP": 8, "EPILOGUE": epilogue, "GEMMA": epilogue == 2, "STORE_NORMED": epilogue != 2,
                          "SPIN_LIMIT": spin, "BLOCK_H": 8192, "PAD_ROWS": L.PAD_ROWS, "USE_PDL": True}
                if small:
                    consts.update(M=1, capacity=1)
                k = build(L.lamport_consumer_kernel, sig, consts, num_warps=16)
                ptx = k.asm["ptx"]
                assert "cubin" in k.asm and "ld.volatile" in ptx and "griddepcontrol" in ptx
    print("compiled")
    """
)


def _cuda_backend() -> bool:
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _cuda_backend(), reason="Triton's CUDA backend is not installed")
def test_lamport_kernels_compile_for_sm90():
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-4000:]
