"""Where seam's kernels run: native Triton on a GPU, or the Triton interpreter on CPU.

Triton decides between compiling and interpreting when a kernel is decorated, i.e.
when ``seam.kernels`` is imported. A machine without CUDA gets ``TRITON_INTERPRET=1``
set here, before any kernel module is imported, so that ``seam`` works on CPU tensors
out of the box (slowly: this mode exists for tests and for checking a CPU machine).
Triton's own library functions (``tl.max``, ``tl.sum``, ...) are decorated when triton
is imported, so a triton imported earlier (directly, or by ``torch._dynamo``) in the
other mode cannot serve seam's kernels: :data:`KERNELS_UNAVAILABLE` then says why, and
every op raises it before any launch.

``INTERPRET`` also selects the conversion helpers of ``seam.kernels.numerics``: the
interpreter's float conversions are not round-to-nearest-even (``docs/platform.md``),
so under it every fp32 -> BF16/E4M3 rounding is done with integer bit arithmetic.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

if os.environ.get("TRITON_INTERPRET") is None and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

#: The values Triton reads as true in a boolean environment variable, in any case (its ``getenv_bool``).
TRITON_TRUE = ("1", "true", "on", "yes", "y")


def interpret_requested(value: str | None) -> bool:
    """Whether Triton reads ``TRITON_INTERPRET=value`` (None: unset) as on, as Triton itself does: ``off``,
    ``false``, ``2`` are off."""
    return value is not None and value.lower() in TRITON_TRUE


#: True when Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``).
INTERPRET: bool = interpret_requested(os.environ.get("TRITON_INTERPRET"))


def _kernels_unavailable() -> str | None:
    """Why seam's kernels cannot run in this process, or None: native kernels asked for (TRITON_INTERPRET
    set to a value Triton reads as off: 0, empty, off, ...) where torch sees no CUDA device, or seam's kernels
    would be decorated in the other mode than Triton's own library, which triton decorated when it was imported
    before seam."""
    if not INTERPRET and not torch.cuda.is_available():
        value = os.environ.get("TRITON_INTERPRET")
        return (
            f"TRITON_INTERPRET={value!r} asks for native Triton kernels, but torch sees no CUDA device: unset "
            "TRITON_INTERPRET (seam then runs its kernels in the Triton interpreter, on CPU tensors) or set it to 1"
        )
    if "triton" not in sys.modules:
        return None  # imported after this module: in the mode set above, like seam's kernels
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(tl.standard.max, InterpretedFunction) == INTERPRET:
        return None
    if INTERPRET:
        return (
            "seam's kernels need the Triton interpreter here (no CUDA device, or TRITON_INTERPRET=1), but "
            "triton was imported before seam without TRITON_INTERPRET=1 (directly, or by torch._dynamo / "
            "torch.compile / torch.utils.flop_counter), so Triton's own functions (tl.max, tl.sum, ...) cannot "
            "run in the interpreter in this process: set TRITON_INTERPRET=1 before triton is imported, or import "
            "seam first"
        )
    return (
        "triton was imported before seam with TRITON_INTERPRET=1, but seam's kernels were compiled "
        "natively (TRITON_INTERPRET unset or 0 when seam was imported): Triton's own functions (tl.max, "
        "tl.sum, ...) run only in the interpreter in this process; keep TRITON_INTERPRET the same from "
        "before triton is imported, or import seam first"
    )


#: Why seam's kernels cannot run in this process (every op raises RuntimeError with it before any
#: launch), or None: native kernels asked for without a CUDA device, or triton imported before seam in
#: the other interpreter mode.
KERNELS_UNAVAILABLE: str | None = _kernels_unavailable()

# Never use NVLink multicast (project rule: on a shared host it can take the GPUs out of
# service): forced, overriding the caller's environment, before seam's symmetric memory or
# NCCL use; it also applies to the rest of this process and to processes it starts.
for _var, _val in (
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_var] = _val


#: Environment variable that turns on host-side range checks of index tensors (positions,
#: cache slots): each costs a device sync, so they are off by default.
DEBUG_ENV = "SEAM_DEBUG"


#: The dispatch modes that trace a graph: make_fx's proxy mode, FakeTensorMode, functionalization.
_TRACING_MODES = (torch._C._TorchDispatchModeKey.PROXY, torch._C._TorchDispatchModeKey.FAKE,
                  torch._C._TorchDispatchModeKey.FUNCTIONAL)


def tracing() -> bool:
    """Whether a graph is being traced rather than run: ``torch.compile`` / ``torch.export`` (Dynamo), or a tracing
    dispatch mode on the stack (``make_fx``'s proxy mode, ``FakeTensorMode``, functionalization). Traced calls
    skip what needs real tensors (addresses, host reads) and choices that compare M (a traced graph may run at
    another M). Other dispatch modes (``FlopCounterMode``, a logging mode) run real tensors: the checks stay."""
    # Dynamo folds is_compiling() to True, so it never traces the dispatch-stack queries.
    return torch.compiler.is_compiling() or (
        is_in_torch_dispatch_mode() and any(torch._C._get_dispatch_mode(key) is not None for key in _TRACING_MODES))


def dispatching() -> bool:
    """Whether seam's ops go through the dispatcher (``seam.ops.registry``): while traced (:func:`tracing`) and
    under any dispatch mode, which then sees them as ``torch.ops.seam`` ops."""
    return torch.compiler.is_compiling() or is_in_torch_dispatch_mode()


def host_reads_allowed(device: torch.device) -> bool:
    """Whether the host may read device data now: not while traced (:func:`tracing`: no values)
    nor while a CUDA graph is captured (a sync would break the capture)."""
    if tracing():
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to something other than off
    (unset, empty, ``0``, ``false``, ``no``, ``off``; any case)."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def debug_checks(device: torch.device) -> bool:
    """Whether to run the synchronizing range checks now (``SEAM_DEBUG`` set, host reads allowed)."""
    return env_flag(DEBUG_ENV) and host_reads_allowed(device)


def kernel_device() -> torch.device:
    """The device seam's kernels run on here: ``cuda`` when present, else ``cpu``."""
    if torch.cuda.is_available() and not INTERPRET:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def normalize_device(device: torch.device | str) -> torch.device:
    """``torch.device(device)`` with the current CUDA index filled in (``"cuda"`` -> ``cuda:N``),
    so per-device caches key one device one way."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def num_sms(device: torch.device | str) -> int:
    """SM count of a CUDA device (132 on the H200); 1 under the interpreter (no waves to balance)."""
    device = torch.device(device)
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def supports_pdl(device: torch.device) -> bool:
    """Whether programmatic dependent launch (``launch_pdl=True``) is available.

    PDL needs sm_90 or newer; under the interpreter kernels run one at a time, so
    there is nothing to overlap.
    """
    if INTERPRET or device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def _device_problem(name: str, device: torch.device) -> str | None:
    """Why seam's kernels cannot run on ``device`` here, or None."""
    if device.type == "cuda" and not INTERPRET:
        return None
    if device.type == "cpu" and INTERPRET:
        return None
    if device.type == "cpu":
        return (
            f"{name} is on the CPU, but Triton kernels run natively here; "
            "pass CUDA tensors, or set TRITON_INTERPRET=1 before importing seam"
        )
    if device.type == "cuda":
        return (
            f"{name} is on {device}, but seam's kernels run in the Triton interpreter here "
            "(no CUDA device, or TRITON_INTERPRET=1): pass CPU tensors"
        )
    return f"{name} is on {device}; seam runs on CUDA tensors (or CPU tensors under TRITON_INTERPRET=1)"


def check_kernels_available() -> None:
    """Raise RuntimeError with :data:`KERNELS_UNAVAILABLE` if seam's kernels cannot run in this process."""
    if KERNELS_UNAVAILABLE is not None:
        raise RuntimeError(KERNELS_UNAVAILABLE)


def check_kernel_device(name: str, t: torch.Tensor) -> None:
    """Raise ValueError if ``t`` lives where seam's kernels cannot run (RuntimeError if they cannot
    run in this process at all: :func:`check_kernels_available`)."""
    check_kernels_available()
    problem = _device_problem(name, t.device)
    if problem:
        raise ValueError(problem)


def device_arg(name: str, device: object) -> torch.device:
    """A device argument, normalized (:func:`normalize_device`), where seam's kernels run.

    Raises:
        TypeError: not a torch.device, str or int.
        ValueError: no such device, or one seam cannot run on here (e.g. ``cuda`` on a
            machine without CUDA).
        RuntimeError: seam's kernels cannot run in this process (:data:`KERNELS_UNAVAILABLE`).
    """
    check_kernels_available()
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(f"{name} must be a torch.device, a device string or a CUDA index, got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must name a device (e.g. 'cuda:0' or 'cpu'), got {device!r}") from None
    problem = _device_problem(name, device)
    if problem:
        raise ValueError(problem)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"{name} is {device}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return normalize_device(device)
