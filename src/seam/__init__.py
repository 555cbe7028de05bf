"""seam: fused layer-boundary kernels for quantized MoE LLM decode under tensor parallelism.

Importing seam on a machine without CUDA switches Triton to its CPU interpreter
(``seam.runtime``) so every op also runs, slowly, on CPU tensors.
"""

from seam import runtime  # noqa: F401  (must precede every kernel import)

# Formats (pure PyTorch)
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import (
    ScaleLayout,
    mxfp8_dequantize,
    mxfp8_scale_numel,
    swizzle_scales,
    unswizzle_scales,
)
from seam.formats.mxfp8_weight import MXFP8Weight

# The pure-PyTorch references the ops' docstrings name (seam.ref.norm.gemma_rms_norm_ref, ...)
from seam import ref  # noqa: F401

# Single-GPU fused ops
from seam.ops.mxfp8 import mxfp8_quantize
from seam.ops.norm import (
    fused_add_rms_norm,
    fused_add_rms_norm_mxfp8,
    gemma_fused_add_rms_norm,
    gemma_fused_add_rms_norm_mxfp8,
    gemma_rms_norm,
)
from seam.ops.swiglu import GateUpLayout, swiglu_oai, swiglu_oai_mxfp8
from seam.ops.mhc import mhc_post_collapse_rms_norm
from seam.ops.linear import LinearQuantize, mxfp8_linear
from seam.ops.qkv import qkv_index_fused_epilogue, qkv_warmup
from seam.layers import MXFP8Linear

# Tensor-parallel fused all-reduce (Lamport, unicast peer stores)
from seam.comm import DistGroup, SimulatedGroup
from seam.ops.allreduce import LamportAllReduce, all_reduce, all_reduce_rms_norm
from seam.ops.allreduce_mhc import AllReduceMHC
from seam.ops.allreduce_moe import (
    FinalizeAllReduceGemmaRMSNormMxfp8,
    MoEOutput,
    UnfinalizedMoEOutput,
    finalize_allreduce_gemma_rms_norm_mxfp8,
    init_fused_moe_finalize,
    supports_fused_moe_finalize,
)
from seam.ops.allreduce_norm import allreduce_gemma_rms_norm_mxfp8

__version__ = "0.1.0"

__all__ = [
    # formats
    "MXFP8Weight",
    "QuantizedActivation",
    "ScaleLayout",
    "mxfp8_dequantize",
    "mxfp8_scale_numel",
    "swizzle_scales",
    "unswizzle_scales",
    # single-GPU fused ops
    "GateUpLayout",
    "LinearQuantize",
    "MXFP8Linear",
    "fused_add_rms_norm",
    "fused_add_rms_norm_mxfp8",
    "gemma_fused_add_rms_norm",
    "gemma_fused_add_rms_norm_mxfp8",
    "gemma_rms_norm",
    "mhc_post_collapse_rms_norm",
    "mxfp8_linear",
    "mxfp8_quantize",
    "qkv_index_fused_epilogue",
    "qkv_warmup",
    "swiglu_oai",
    "swiglu_oai_mxfp8",
    # tensor parallel
    "AllReduceMHC",
    "DistGroup",
    "FinalizeAllReduceGemmaRMSNormMxfp8",
    "LamportAllReduce",
    "MoEOutput",
    "SimulatedGroup",
    "UnfinalizedMoEOutput",
    "all_reduce",
    "all_reduce_rms_norm",
    "allreduce_gemma_rms_norm_mxfp8",
    "finalize_allreduce_gemma_rms_norm_mxfp8",
    "init_fused_moe_finalize",
    "supports_fused_moe_finalize",
]
