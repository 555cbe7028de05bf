"""When seam's row-wise PDL kernels (norm + MXFP8, SwiGLU + MXFP8, the MXFP8 quantizer) let their dependents launch.

A dependent launched early (``gdc_launch_dependents``) can stream what it reads before its own
``gdc_wait`` (the MXFP8 GEMMs: their weights) while this kernel, and even this kernel's
predecessor, still run (``DESIGN.md``, PDL). Triggering at the very start helps where the
dependent's programs fit beside the running ones, and costs where they only take SMs the
predecessor's last programs free. H200 (2026-12-01, ``docs/benchmarks-log.md`` run 40, graph of 200
chains, what ``mxfp8_linear`` adds to the first kernel, us, trigger at start / after the loads):
norm -> qkv N 2560 x K 6144 at M 1 / 8 / 16 / 64: 8.52 / 8.05, 8.43 / 9.60, 11.05 / 11.17,
19.41 / 18.60; norm -> o_proj 6144 x 2048: 7.34 / 7.39, 7.84 / 8.19, 9.03 / 9.33, 12.46 / 12.75;
SwiGLU -> down 6144 x 768: 4.81 / 5.14, 5.54 / 5.77, 6.11 / 6.29, 10.54 / 7.38 (the 64-token
GEMM holds one program per SM).
"""

from __future__ import annotations

#: Largest M at which the kernels trigger their dependents at their start (else after their loads).
EARLY_TRIGGER_MAX_M = 16


def early_trigger(m: int) -> bool:
    """Whether a norm / SwiGLU + MXFP8 launch of ``m`` rows triggers its dependents before its own wait."""
    return m <= EARLY_TRIGGER_MAX_M


#: Largest M at which the standalone MXFP8 quantizer triggers its dependents at its start (else after its loads).
#: H200 (2026-12-04, ``docs/benchmarks-log.md`` run 134, us; H 6144 back to back, graph of 200, without PDL /
#: trigger at start / after the loads): M 1 1.50 / 1.17 / 1.09, M 8 1.88 / 1.51 / 1.29, M 64 1.85 / 1.78 / 1.29,
#: M 192 2.28 / 2.66 / 1.73, M 2048 7.92 / 7.20 / 7.11, M 8192 39.21 / 38.44 / 38.32; but before the GEMM that
#: reads it (``mxfp8_linear(..., quantize="separate")``, o_proj N 6144 x K 2048, per pair): M 8 11.46 / 7.39 / 9.53,
#: M 32 13.81 / 10.46 / 11.98, M 64 16.51 / 13.81 / 14.78. The chain decides: a quantizer feeds a GEMM.
QUANT_EARLY_TRIGGER_MAX_M = 64


def quant_early_trigger(m: int) -> bool:
    """Whether a standalone MXFP8 quantizer launch of ``m`` rows triggers its dependents before its own wait."""
    return m <= QUANT_EARLY_TRIGGER_MAX_M
