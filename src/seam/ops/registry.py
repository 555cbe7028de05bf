"""How seam's public ops reach their kernels: ``torch.library`` ops for tracing, direct launches in eager.

Every op is registered as a ``torch.library.custom_op`` that writes into caller-visible
output buffers (``mutates_args``), with a fake implementation, so ``torch.compile``
traces it as one opaque node and CUDA-graph capture records its launch. In eager
mode the dispatcher's Python overhead is of the order of a decode-size kernel
(microseconds), so the public function calls the launcher directly unless it is
being traced; it then bumps the written buffers' version counters itself, as the
dispatcher would, so checks keyed on ``Tensor._version`` (``MXFP8Linear``'s hand-off)
see every write.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch


def register(name: str, mutates: tuple[str, ...], launcher: Callable[..., None]):
    """Register ``launcher`` (annotated, returning None) as ``torch.ops.seam.<name>``.

    Returns a callable with the launcher's signature that goes through the dispatcher
    while ``torch.compile`` traces and calls ``launcher`` directly otherwise.
    """
    op = torch.library.custom_op(f"seam::{name}", mutates_args=mutates)(launcher)
    op.register_fake(_no_output)
    params = list(inspect.signature(launcher).parameters)
    written = [params.index(arg) for arg in mutates]

    def call(*args):
        if torch.compiler.is_compiling():
            op(*args)
        else:
            launcher(*args)
            torch.autograd.graph.increment_version([args[i] for i in written if isinstance(args[i], torch.Tensor)])

    call.op = op
    return call


def _no_output(*args) -> None:
    # Outputs are caller-allocated buffers; shapes need no inference.
    return None
