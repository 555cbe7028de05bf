"""seam's ``torch.library`` ops (``seam.ops.registry``) and the Tile they carry as flat arguments."""

import dataclasses
import importlib

import pytest
import torch

from seam.kernels.mxfp8_gemm_config import Tile

# What an op's schema may take: tensors and scalars (str too), each optionally None; no lists, tuples or records.
FLAT_TYPES = {"Tensor", "int", "SymInt", "float", "bool", "str"}


def _registered() -> dict[str, torch._ops.OpOverload]:
    importlib.import_module("seam")  # the package imports every ops module, and each registers its ops
    ns = torch.ops.seam
    return {name: getattr(ns, name).default for name in dir(ns) if hasattr(getattr(ns, name), "default")}


def test_every_registered_op_has_a_flat_schema():
    ops = _registered()
    # Every op seam's public functions launch through, so the check is not vacuous.
    assert {"fused_add_rms_norm", "swiglu_oai", "mhc_post_collapse_rms_norm", "mxfp8_quantize", "mxfp8_linear",
            "qkv_index_fused_epilogue", "lamport_publish", "lamport_consume", "lamport_mhc_consume"} <= set(ops)
    for name, op in ops.items():
        schema = op._schema
        assert not schema.returns, f"seam::{name} returns {schema.returns}: outputs are caller buffers"
        for arg in schema.arguments:
            t = str(arg.type)
            inner = t[len("Optional["):-1] if t.startswith("Optional[") else t
            assert inner in FLAT_TYPES, f"seam::{name} argument {arg.name} has type {t}"
            if arg.alias_info is not None and arg.alias_info.is_write:
                assert inner == "Tensor", f"seam::{name} writes {arg.name} of type {t}"
            # no defaults: the dispatcher would leave trailing default arguments out of a Python kernel's
            # call, and torch 2.11 then failed to find the written ones (log runs 63-65)
            assert not arg.has_default_value(), f"seam::{name} argument {arg.name} has a default"


def _distinct(field: dataclasses.Field):
    """A value of ``field``'s type that no default or other test tile uses."""
    if field.name in ("f16_operands", "wgmma", "bf16_mm", "warp_specialized"):
        return True
    return 96 if field.name == "max_registers" else 7


@pytest.mark.parametrize("field", dataclasses.fields(Tile), ids=lambda f: f.name)
def test_tile_args_round_trip_every_field(field):
    t = dataclasses.replace(Tile(16, 128, 64, 8, 3), **{field.name: _distinct(field)})
    args = t.to_args()
    assert args[[f.name for f in dataclasses.fields(Tile)].index(field.name)] == _distinct(field)
    assert Tile.from_args(*args) == t
    assert all(not isinstance(a, (tuple, list, Tile)) for a in args)
