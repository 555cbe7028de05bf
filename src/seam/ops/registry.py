"""How seam's public ops reach their kernels: ``torch.library`` ops for tracing, direct launches in eager.

Every op is registered as a ``torch.library.custom_op`` that writes into caller-visible
output buffers (``mutates_args``), with a fake implementation, so ``torch.compile``
traces it as one opaque node and CUDA-graph capture records its launch. In eager
mode the dispatcher's Python overhead is of the order of a decode-size kernel
(microseconds), so the public function calls the launcher directly unless it is
being traced; it then bumps the written buffers' version counters itself, as the
dispatcher would, so checks keyed on ``Tensor._version`` (``MXFP8Linear``'s hand-off)
see every write.

The ops check nothing: the public functions validate their arguments (and size the outputs)
before calling them, and the flat arguments include what no check could make safe (raw
mailbox addresses, tile parameters). README says so to users of ``torch.ops.seam``.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.flop_counter import register_flop_formula

from seam import runtime


def _quiet_numpy(launcher: Callable[..., None]) -> Callable[..., None]:
    """``launcher`` with NumPy's floating-point warnings off: the interpreter runs kernels in NumPy, whose
    inf * 0 and NaN arithmetic (part of the MXFP8 and norm rules) would warn in the caller's code."""

    @functools.wraps(launcher)
    def run(*args, **kwargs) -> None:
        with np.errstate(all="ignore"):
            launcher(*args, **kwargs)

    return run


def register(name: str, mutates: tuple[str, ...], launcher: Callable[..., None],
             flops: Callable[..., int] | None = None):
    """Register ``launcher`` (annotated, returning None) as ``torch.ops.seam.<name>``.

    The launcher's parameters are flat (tensors, optional tensors and scalars: the schema is
    inferred from their annotations); an output a variant does not write is an optional
    tensor passed as None. Returns a callable with the launcher's signature (arguments by
    position or name) that goes through the dispatcher while traced or under a dispatch mode
    (:func:`seam.runtime.dispatching`) and calls ``launcher`` directly otherwise; its
    ``op`` is the ``torch.ops.seam`` op and its
    ``op_args(*args, **kwargs)`` the op's positional arguments for such a call (defaults filled in).
    Under the interpreter both run it without NumPy's floating-point warnings. ``flops``: the op's FLOPs for
    ``torch.utils.flop_counter.FlopCounterMode``, from its arguments with every tensor given as its shape (None
    where absent), as ``register_flop_formula`` calls it; without it the mode counts the op as 0.
    """
    schema = _schema_without_defaults(launcher, mutates)
    run = _quiet_numpy(launcher) if runtime.INTERPRET else launcher
    op = torch.library.custom_op(f"seam::{name}", run, mutates_args=mutates, schema=schema)
    op.register_fake(_no_output)
    if flops is not None:
        register_flop_formula(getattr(torch.ops.seam, name))(lambda *args, out_shape=None, **kw: flops(*args, **kw))
    signature = inspect.signature(launcher).parameters
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in signature.values()):
        raise TypeError(f"{name}: a registered launcher takes positional parameters only")
    params = list(signature)
    defaults = {n: p.default for n, p in signature.items() if p.default is not p.empty}
    written = [(params.index(arg), arg) for arg in mutates]

    def op_args(*args, **kwargs) -> tuple:
        # Every argument, defaults included: the schema has none (_schema_without_defaults).
        return (*args, *(kwargs[n] if n in kwargs else defaults[n] for n in params[len(args):]))

    def call(*args, **kwargs):
        if runtime.dispatching():
            op(*op_args(*args, **kwargs))
        else:
            run(*args, **kwargs)
            outs = [args[i] if i < len(args) else kwargs.get(arg) for i, arg in written]
            torch.autograd.graph.increment_version([t for t in outs if isinstance(t, torch.Tensor)])

    call.op, call.op_args = op, op_args
    return call


def _schema_without_defaults(launcher: Callable[..., None], mutates: tuple[str, ...]) -> str:
    """``launcher``'s op schema with no default values.

    The dispatcher hands a Python kernel its arguments with the trailing ones that equal their
    defaults left out, and torch 2.11's custom ops then look up a written argument left out as
    None by position (``IndexError``, pytorch#176078: ``seam bench step``'s compiled unfused chain
    on the H200, log runs 63-64). Without defaults in the schema no argument is left out.
    """
    hints = typing.get_type_hints(launcher)
    signature = inspect.signature(launcher)
    params = [p.replace(default=p.empty, annotation=hints.get(p.name, p.annotation))
              for p in signature.parameters.values()]

    def prototype(*args) -> None:
        """Only its signature is read."""

    prototype.__signature__ = signature.replace(parameters=params, return_annotation=None)
    return torch.library.infer_schema(prototype, mutates_args=mutates)


def _no_output(*args) -> None:
    # Outputs are caller-allocated buffers; shapes need no inference.
    return None
