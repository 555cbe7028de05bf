"""seam: fused layer-boundary kernels for quantized MoE LLM decode under tensor parallelism.

Importing seam on a machine without CUDA switches Triton to its CPU interpreter
(``seam.runtime``) so every op also runs, slowly, on CPU tensors.
"""

from seam import runtime  # noqa: F401  (must precede every kernel import)
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import (
    ScaleLayout,
    mxfp8_dequantize,
    mxfp8_scale_numel,
    swizzle_scales,
    unswizzle_scales,
)
from seam.ops.mxfp8 import mxfp8_quantize

__version__ = "0.1.0"

__all__ = [
    "QuantizedActivation",
    "ScaleLayout",
    "mxfp8_dequantize",
    "mxfp8_quantize",
    "mxfp8_scale_numel",
    "swizzle_scales",
    "unswizzle_scales",
]
