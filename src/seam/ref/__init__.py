"""Pure-PyTorch references of every seam op, step by step from ``docs/spec`` (same rounding points)."""

from seam.formats.mxfp8 import mxfp8_dequantize, mxfp8_quantize_ref
from seam.ref import lamport, mhc, norm, qkv, swiglu  # noqa: F401  (seam.ref.norm etc. after `import seam`)

__all__ = ["mxfp8_dequantize", "mxfp8_quantize_ref"]
