"""Input validation shared by every public op: each check raises before any launch.

Errors name the argument, what it is and what was expected (``TypeError`` for a wrong
Python type or dtype, ``ValueError`` for shapes, devices, strides, alignment, ranges).
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np
import torch

from seam import runtime

E = TypeVar("E", bound=enum.Enum)


def tensor(
    name: str,
    t: object,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    shape: Sequence[int] | None = None,
    device: torch.device | None = None,
    contiguous: bool = True,
    align: int = 0,
    written: bool = False,
) -> torch.Tensor:
    """Check one tensor argument and return it.

    Args:
        name: argument name used in the message.
        dtype: allowed dtype(s).
        shape: expected shape; -1 entries match any size.
        device: device it must share with the op's other tensors.
        contiguous: require ``t.is_contiguous()``.
        align: required byte alignment of ``data_ptr()`` (0: none).
        written: the op writes ``t`` in place (an ``out=`` buffer, a cache): refuse it where torch would
            refuse an in-place update (:func:`writable`).

    Raises:
        TypeError: not a tensor, not dense (a sparse layout), or wrong dtype.
        ValueError: wrong shape, device, strides or alignment; a written tensor that requires grad, or an
            inference tensor outside inference mode.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type_name(t)}")
    if t.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            want = " or ".join(str(d) for d in allowed)
            # a uint8 buffer holds E4M3 bytes as well: the view costs nothing and keeps the format in the type
            hint = (f" (bytes in a uint8 buffer: pass {name.split(' ')[0]}.view(torch.float8_e4m3fn))"
                    if allowed == (torch.float8_e4m3fn,) and t.dtype == torch.uint8 else "")
            raise TypeError(f"{name} must have dtype {want}, got {t.dtype}{hint}")
    if shape is not None:
        if t.dim() != len(shape) or any(w != -1 and s != w for s, w in zip(t.shape, shape)):
            want = _sizes(["*" if w == -1 else w for w in shape], "[]")
            raise ValueError(f"{name} must have shape {want}, got {_sizes(t.shape, '[]')}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} like the other inputs")
    if contiguous and not t.is_contiguous():
        raise ValueError(_not_contiguous(name, t, written))
    if align and not runtime.tracing() and t.data_ptr() % align:
        raise ValueError(f"{name} must be {align}-byte aligned (data_ptr % {align} = {t.data_ptr() % align})")
    if written:
        writable(name, t)
    return t


def _sizes(values, brackets: str) -> str:
    """Sizes or strides as a list "[a, b]" or a tuple "(a, b)" / "(a,)" prints them, each through f"{}": under
    torch.compile with a dynamic M they are symbolic, and Dynamo formats those to their values, where str() fails
    and a list's repr shows the symbols."""
    one = "," if brackets == "()" and len(values) == 1 else ""
    return f"{brackets[0]}{', '.join(f'{v}' for v in values)}{one}{brackets[1]}"


def _not_contiguous(name: str, t: torch.Tensor, written: bool) -> str:
    """The message for a tensor that is not contiguous: its strides against the contiguous ones for its
    shape (the shape alone may match), and why a stride of 0 (an ``expand()``) is refused."""
    want, step = [], 1
    for size in reversed(t.shape):
        want.insert(0, step)
        step *= max(size, 1)
    msg = (f"{name} must be contiguous: strides {_sizes(want, '()')} for shape {_sizes(t.shape, '[]')}, got "
           f"{_sizes(t.stride(), '()')}")
    if any(st == 0 and size > 1 for size, st in zip(t.shape, t.stride())):
        msg += " (a stride of 0, as from expand(), repeats elements in memory" + (
            ": the op's writes to them would overlap)" if written else ")")
    return msg


def writable(name: str, t: torch.Tensor) -> None:
    """Raise ValueError for a buffer the op writes in place (``out=``, a cache) where torch refuses an
    in-place update. One that requires grad while grad mode is on: seam's ops record no autograd graph, so
    the write would leave a tensor whose gradient is silently wrong (torch's own out= arguments are refused
    there too, "functions with out=... arguments don't support automatic differentiation", and accepted under
    ``torch.no_grad()`` / ``torch.inference_mode()``). An inference tensor (made under
    ``torch.inference_mode()``) outside inference mode: torch refuses "Inplace update to inference tensor
    outside InferenceMode", and a kernel's write would bypass that rule. (Not while ``torch.compile`` traces:
    fake tensors do not answer ``is_inference()``.)"""
    if not runtime.tracing() and t.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(f"{name} is an inference tensor (made under torch.inference_mode()), which torch does not "
                         "let be updated in place outside inference mode: call under torch.inference_mode(), or "
                         "pass a tensor made outside it")
    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{name} requires grad, but seam's ops write it in place and do not support automatic "
                         "differentiation (as torch's out= arguments): pass a tensor that does not require grad, "
                         "or call under torch.no_grad()")


def kernel_device(name: str, t: torch.Tensor) -> torch.device:
    """Raise unless seam's kernels can run on ``t``'s device; return that device."""
    runtime.check_kernel_device(name, t)
    return t.device


def type_name(value: object) -> str:
    """The name of ``value``'s type for an error message, module-qualified outside the builtins (a NumPy
    bool is ``numpy.bool``, not ``bool``)."""
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def option(cls: type[E], value: object, name: str, aliases: Mapping[str, E] | None = None) -> E:
    """A member of the str enum ``cls``: the member itself, or its value (or one of ``aliases``) in any case.

    Raises:
        TypeError: neither a member nor a str.
        ValueError: a str naming no member; the message lists the accepted names.
    """
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or seam.{cls.__name__}, got {type_name(value)}")
    aliases = aliases or {}
    key = value.lower()
    if key in aliases:
        return aliases[key]
    try:
        return cls(key)
    except ValueError:
        names = [f"'{v}'" for v in [m.value for m in cls] + list(aliases)]
        raise ValueError(f"{name} must be {', '.join(names[:-1])} or {names[-1]}, got {value!r}") from None


def flag(name: str, value: object) -> bool:
    """A flag argument: a Python bool, or a NumPy bool (``numpy.bool_``, returned as the Python bool), as
    :func:`integer` takes NumPy ints; raise TypeError for anything else (an int such as 0 or 1, a truthy
    string: not a flag)."""
    if isinstance(value, np.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type_name(value)}")
    return value


def out_buffers(name: str, out: object, names: Sequence[str]) -> tuple:
    """``out``, a tuple or list of ``len(names)`` caller buffers (named ``names`` in order), as a tuple; each
    buffer is checked by the op. Raise TypeError naming what was expected and what was given otherwise."""
    want = f"{name} must be a tuple or list of {len(names)} buffers ({', '.join(names)})"
    if not isinstance(out, (tuple, list)):
        raise TypeError(f"{want}, got {type_name(out)}")
    if len(out) != len(names):
        raise TypeError(f"{want}, got a {'list' if isinstance(out, list) else 'tuple'} of {len(out)}")
    return tuple(out)


def integer(name: str, value: object) -> int:
    """A Python or NumPy int argument (not a bool), as an int, or a traced one (``torch.SymInt``: a dynamic size
    while ``torch.export`` or ``torch.compile`` traces) as it is; raise TypeError otherwise."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type_name(value)}")
    return int(value)


def same_rows(m: int, source: str, *named: tuple[str, object]) -> None:
    """Raise ValueError naming both where a named tensor's rows (its first dimension) differ from the M that
    ``source`` gave: the message then blames the tensor that disagrees with ``source``, not one whose whole
    shape merely differs from [M, ...]. Non-tensors and 0-d tensors are left to their own checks."""
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] != m:
            raise ValueError(f"{name} has {t.shape[0]} rows but {source} has {m}: they must agree (one row per "
                             "token)")


def multiple_of(name: str, value: int, k: int) -> None:
    """Raise ValueError unless ``value`` is a positive multiple of ``k``."""
    if value <= 0 or value % k:
        raise ValueError(f"{name} must be a positive multiple of {k}, got {value}")


def in_range(name: str, value: int, lo: int, hi: int) -> None:
    """Raise ValueError unless ``lo <= value <= hi``."""
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside [{lo}, {hi}]")


def elements_in_range(name: str, t: torch.Tensor, lo: int, hi: int, why: str = "") -> None:
    """Raise ValueError unless every element of the integer tensor ``t`` lies in ``[lo, hi]``.

    Reads ``t`` on the host (a device sync), so callers run it in debug mode only, to report
    indices that the kernels would otherwise skip without a word.
    """
    if t.numel() and (int(t.min()) < lo or int(t.max()) > hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}]{why}")


#: Largest finite fp32 value: the kernels take float arguments as fp32.
_FP32_MAX = 3.4028234663852886e38


def finite_float(name: str, value: object, *, positive: bool = False) -> float:
    """A real scalar argument (eps, scales): a float or an int, Python or NumPy, as torch takes a float
    scalar, but not a bool (numerically an int, but a flag passed by mistake); finite in fp32, where the
    kernels use it. Raise TypeError/ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # an engine keeps such scalars (KV-cache scales) as tensors: a launch reads a Python number, at the call
        hint = " (a tensor's value: pass float(t), read at the call)" if isinstance(value, torch.Tensor) else ""
        raise TypeError(f"{name} must be a float or int (not a bool), got {type_name(value)}{hint}")
    try:
        v = float(value)
    except OverflowError:  # an int past the float range
        raise ValueError(_not_finite(name, positive, f"an int of {abs(value).bit_length()} bits")) from None
    if not abs(v) <= _FP32_MAX or (positive and v <= 0):
        raise ValueError(_not_finite(name, positive, v))
    return v


def _not_finite(name: str, positive: bool, got: object) -> str:
    # built only where finite_float raises: it runs on every eager call, and under tracing
    return (f"{name} must be a finite{' positive' if positive else ''} float (in fp32, where the kernels use it), "
            f"got {got}")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, past-last) byte addresses ``t`` can touch, from its shape and strides."""
    if t.numel() == 0:
        return 0, 0
    extent = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


def no_overlap(*named: tuple[str, torch.Tensor | None]) -> None:
    """Raise ValueError if two of the named buffers (None entries skipped) share bytes.

    Skipped while traced (:func:`seam.runtime.tracing`): fake tensors have no addresses.
    """
    if runtime.tracing():
        return
    spans = sorted((*_span(t), name) for name, t in named if t is not None and t.numel())
    for (_s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise ValueError(f"{n0} and {n1} overlap in memory; pass separate buffers")


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements: address, dtype, shape and strides."""
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


def outputs_apart(
    outputs: list[tuple[str, torch.Tensor | None]],
    inputs: list[tuple[str, torch.Tensor | None]],
    *,
    in_place: tuple[tuple[str, str], ...] = (),
) -> None:
    """Outputs must not overlap each other nor any input: a kernel reads and writes them from
    different programs in no fixed order, so an alias gives wrong results. Raises ValueError
    naming both buffers. ``in_place``: (output, input) name pairs that may be the very same view
    (:func:`same_view`), where the kernel reads every element before writing it in the same thread
    (row-local kernels); any other overlap of them still raises. Skipped while traced
    (:func:`seam.runtime.tracing`: fake tensors have no addresses).
    """
    if runtime.tracing():
        return
    no_overlap(*outputs)
    for on, o in outputs:
        if o is None or not o.numel():
            continue
        o0, o1 = _span(o)
        for iname, i in inputs:
            if i is None or not i.numel():
                continue
            i0, i1 = _span(i)
            if o0 < i1 and i0 < o1:
                if (on, iname) in in_place:
                    if same_view(o, i):
                        continue
                    raise ValueError(f"{on} overlaps input {iname} in memory; pass a separate buffer or {iname} "
                                     "itself (the same tensor: updated in place)")
                raise ValueError(f"{on} overlaps input {iname} in memory; pass a separate buffer")
