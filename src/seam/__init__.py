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
from seam.formats.mxfp8_weight import MXFP8Weight
from seam.ops.linear import mxfp8_linear
from seam.ops.qkv import qkv_index_fused_epilogue, qkv_warmup
from seam.ops.norm import (
    fused_add_rms_norm_mxfp8,
    gemma_fused_add_rms_norm,
    gemma_fused_add_rms_norm_mxfp8,
    gemma_rms_norm,
)
from seam.ops.swiglu import GateUpLayout, swiglu_oai, swiglu_oai_mxfp8
from seam.ops.mhc import mhc_post_collapse_rms_norm
from seam.ops.allreduce_mhc import AllReduceMHC
from seam.comm import DistGroup, SimulatedGroup
from seam.ops.allreduce import (
    FinalizeAllReduceGemmaRMSNormMxfp8,
    LamportAllReduce,
    MoEOutput,
    UnfinalizedMoEOutput,
    all_reduce,
    all_reduce_gemma_rms_norm_mxfp8,
    all_reduce_rms_norm,
    finalize_allreduce_gemma_rms_norm_mxfp8,
    init_fused_moe_finalize,
    supports_fused_moe_finalize,
)

__version__ = "0.1.0"

__all__ = [
    "AllReduceMHC",
    "mhc_post_collapse_rms_norm",
    "DistGroup",
    "FinalizeAllReduceGemmaRMSNormMxfp8",
    "LamportAllReduce",
    "MoEOutput",
    "SimulatedGroup",
    "UnfinalizedMoEOutput",
    "all_reduce",
    "all_reduce_gemma_rms_norm_mxfp8",
    "all_reduce_rms_norm",
    "finalize_allreduce_gemma_rms_norm_mxfp8",
    "init_fused_moe_finalize",
    "supports_fused_moe_finalize",
    "MXFP8Weight",
    "mxfp8_linear",
    "qkv_index_fused_epilogue",
    "qkv_warmup",
    "GateUpLayout",
    "QuantizedActivation",
    "ScaleLayout",
    "fused_add_rms_norm_mxfp8",
    "gemma_fused_add_rms_norm",
    "gemma_fused_add_rms_norm_mxfp8",
    "gemma_rms_norm",
    "mxfp8_dequantize",
    "mxfp8_quantize",
    "mxfp8_scale_numel",
    "swizzle_scales",
    "swiglu_oai",
    "swiglu_oai_mxfp8",
    "unswizzle_scales",
]
