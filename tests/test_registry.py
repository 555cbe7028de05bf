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
            "qkv_index_fused_epilogue", "lamport_publish", "lamport_consume", "lamport_mhc_consume",
            "moe_finalize"} <= set(ops)
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


def _captured_call(monkeypatch, module, name: str, public_call) -> tuple:
    """(the torch.ops.seam op, its positional arguments) of the call that ``public_call`` makes through
    ``module.name`` (a ``seam.ops.registry.register`` callable), recorded as it runs."""
    registered, seen = getattr(module, name), []

    def record(*args, **kwargs):
        seen.append(registered.op_args(*args, **kwargs))
        return registered(*args, **kwargs)

    monkeypatch.setattr(module, name, record)
    public_call()
    monkeypatch.setattr(module, name, registered)
    (args,) = seen
    return registered.op, args


def _op_calls(device):
    """Public calls of every op but the Lamport ones (whose spins wait on state a repeated call does not
    re-arm; the MoE finalize of their fallback through its helper), each with the op module and attribute it
    goes through."""
    import seam
    from seam.formats import nvfp4
    from seam.ops import allreduce_base, linear, mhc, mxfp8, norm, qkv, swiglu

    g = torch.Generator().manual_seed(3)
    x, r = (torch.randn(5, 128, generator=g).bfloat16().to(device) for _ in range(2))
    w = torch.randn(128, generator=g).bfloat16().to(device)
    weight = seam.MXFP8Weight.from_bf16((torch.randn(2560, 128, generator=g) * 0.05).bfloat16().to(device))
    qa, _ = norm.gemma_norm_mxfp8_activation(x, r, w, 1e-6)
    cos_sin = torch.randn(16, 64, generator=g).bfloat16().to(device)
    slots = torch.tensor([0, 3, -1, 6, 7], device=device)
    caches = dict(kv_cache=nvfp4.empty_kv_cache(2, 1, 4, device), index_cache=nvfp4.empty_index_cache(2, 4, device),
                  index_q_out=torch.empty(5, 128, dtype=torch.float8_e4m3fn, device=device),
                  q_out=torch.empty(5, 2048, dtype=torch.bfloat16, device=device))
    hc = 2
    res3 = torch.randn(5, hc, 128, generator=g).bfloat16().to(device)
    post, comb, pre = (torch.rand(shape, generator=g).to(device) for shape in ((5, hc), (5, hc, hc), (5, hc)))
    gemm2 = torch.randn(3, 128, generator=g).bfloat16().to(device)
    experts = torch.tensor([[0, 2], [-1, 1], [2, -1], [1, 0], [-1, -1]], dtype=torch.int32, device=device)
    expert_weights = torch.rand(5, 2, generator=g).to(device)
    return {
        "moe_finalize": (allreduce_base, "_finalize_op", lambda: allreduce_base.moe_finalize(
            gemm2, expert_weights, experts, x)),
        "fused_add_rms_norm": (norm, "_norm", lambda: seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6)),
        "swiglu_oai": (swiglu, "_swiglu", lambda: seam.swiglu_oai_mxfp8(torch.cat([x, r], 1), a_deq=True)),  # I 128
        "mxfp8_quantize": (mxfp8, "_quantize", lambda: seam.mxfp8_quantize(x)),
        "mxfp8_linear": (linear, "_linear", lambda: seam.mxfp8_linear(x, weight)),
        "mxfp8_linear rows": (linear, "_linear", lambda: seam.mxfp8_linear(qa, weight)),
        "qkv_index_fused_epilogue": (qkv, "_qkv", lambda: seam.qkv_index_fused_epilogue(
            qa.values, qa.scales, weight.values, weight.scales, torch.arange(5, device=device), cos_sin,
            w, w, w, w, 1e-6, slot_mapping=slots, index_slot_mapping=slots, **caches)),
        "mhc_post_collapse_rms_norm": (mhc, "_mhc", lambda: seam.mhc_post_collapse_rms_norm(
            x, res3, post, comb, pre, w, 1e-6)),
    }


@pytest.mark.parametrize("name", ["moe_finalize", "fused_add_rms_norm", "swiglu_oai", "mxfp8_quantize", "mxfp8_linear",
                                  "mxfp8_linear rows", "qkv_index_fused_epilogue", "mhc_post_collapse_rms_norm"])
def test_opcheck(name, device, monkeypatch):
    """torch.library.opcheck on each op, on the arguments a public call gives it: its fake implementation, its
    aliasing as the schema declares it (the written buffers), and AOT dispatch with dynamic shapes. Not its
    test_schema: torch's schema checker compares float8 outputs with allclose, which has no float8 kernel."""
    module, attr, public_call = _op_calls(device)[name]
    op, args = _captured_call(monkeypatch, module, attr, public_call)
    torch.library.opcheck(op, args, test_utils=("test_autograd_registration", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))


def test_docstring_references_resolve_after_import_seam():
    """Every ``seam.x.y`` a public docstring names (the references in ``seam.ref`` above all) is reachable from
    ``import seam`` alone, in a fresh interpreter (here other tests may have imported their modules already)."""
    import os
    import re
    import subprocess
    import sys

    import seam

    named = set()
    for name in seam.__all__:
        obj = getattr(seam, name)
        members = vars(obj).values() if isinstance(obj, type) else ()
        for doc in (obj.__doc__, *(getattr(m, "__doc__", None) for m in members)):
            named.update(re.findall(r"`(seam(?:\.\w+)+)`", doc or ""))
    assert any(n.startswith("seam.ref.") for n in named)
    probe = ("import functools, seam, sys\n"
             "for dotted in sys.argv[1:]:\n"
             "    try:\n"
             "        functools.reduce(getattr, dotted.split('.')[1:], seam)\n"
             "    except AttributeError as exc:\n"
             "        print(dotted, exc)\n")
    src = os.path.dirname(os.path.dirname(seam.__file__))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", probe, *sorted(named)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "", f"not reachable after `import seam`:\n{done.stdout}"
