"""What every Lamport object shares: group, mailbox, split-step ledger, debug mode, path choice.

``docs/spec/lamport.md`` (State, Publish, Consumer). :class:`LamportBase` is subclassed by
:class:`seam.ops.allreduce.LamportAllReduce` (plain contributions, the core consumer's epilogues),
:class:`seam.ops.allreduce_moe.FinalizeAllReduceGemmaRMSNormMxfp8` (the MoE finalize publish,
Consumer A) and :class:`seam.ops.allreduce_mhc.AllReduceMHC` (both publishes, its own mHC
consumer and all-gather fallback). Subclasses check every argument once, at their public entry;
the protected methods here take checked input.

Split-step protocol per rank: a publish -> exactly one collect (AllReduceMHC: consume) with the
same M. The ledger refuses a second publish before the collect; a collect that raises on bad
input, or whose launch raises, leaves the publish pending, so the mailbox never holds rows that
no consumer re-arms. What debug mode checks, and what happens without it when the ranks of a
real group call with different M: the module doc of :mod:`seam.ops.allreduce`.
"""

from __future__ import annotations

import torch

from seam import checks, runtime
from seam.comm.group import DistGroup, Group, SimulatedGroup
from seam.comm.ledger import CallLedger
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import ScaleLayout, mxfp8_scale_numel
from seam.kernels.lamport import EPILOGUE_RMS_NORM_MXFP8, launch_lamport_consumer, launch_lamport_publish
from seam.kernels.moe_finalize import launch_moe_finalize
from seam.ops.a_deq import resolve_a_deq
from seam.ops.registry import register

#: Re-loads of one fragment before a debug-mode spin gives up. On a GPU one re-load is
#: well under a microsecond, so this is seconds; under the interpreter each is slow.
DEFAULT_SPIN_LIMIT = 200 if runtime.INTERPRET else 1 << 24
#: The device spin counter is int32.
SPIN_LIMIT_MAX = 2**31 - 1
#: Largest hidden_size of the core consumer: it keeps one whole row in registers.
MAX_HIDDEN = 16384
#: Largest capacity: the debug-mode M exchange (``seam.comm.mailbox.M_DIGITS``) reads M up to 2**24.
MAX_TOKENS = 1 << 24
#: Largest top_k of the MoE finalize publish (the kernel unrolls its loop over k).
MAX_TOP_K = 64
DEBUG_ENV = "SEAM_LAMPORT_DEBUG"


# The kernels' launchers (flat annotated arguments, optional outputs), registered as they are:
# torch.ops.seam.lamport_publish and lamport_consume.
_publish_op = register("lamport_publish", ("mailbox", "stage_state"), launch_lamport_publish)
_consume_op = register(
    "lamport_consume",
    ("mailbox", "stage_state", "error", "out", "residual_out", "values", "scales", "a_deq"),
    launch_lamport_consumer,
)
_finalize_op = register("moe_finalize", ("out",), launch_moe_finalize)


def moe_finalize(gemm2: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """The fallback's MoE finalize (no peer access, TP 1) of checked operands, as
    :func:`seam.kernels.moe_finalize.launch_moe_finalize` takes them: BF16 [M, hidden], the contribution the
    fused path's publish stores (``docs/spec/lamport.md``, MoE finalize publish)."""
    out = torch.empty_like(shared)
    _finalize_op(gemm2, weights, idx, shared, out)
    return out


class LamportBase:
    """The state and steps of a Lamport object (a base class: build one of its subclasses).

    Construction is collective over ``group``: it checks the sizes, makes every rank agree on
    them and on ``debug``, picks the path and allocates the mailbox:

    * ``fused`` True: the group has peer access (and, if real, TP > 1). Contributions go
      through the Lamport mailbox (``mailbox``; ``use_pdl`` where the device has PDL). A
      simulated TP 1 group keeps this path so that single-rank simulation runs the kernels.
    * ``fused`` False: ``mailbox`` is None and the subclass's fallback moves the data with
      ``torch.distributed`` (the core's all-reduce: :meth:`_fallback_sum`).

    Args:
        hidden_size: row width, a positive multiple of 32 (MXFP8 blocks), at most ``_max_hidden`` where the
            subclass's consumer sets one (:data:`MAX_HIDDEN` for the core consumer).
        max_num_tokens: mailbox capacity, the largest M of any call, in [1, 2**24].
        group: a :class:`seam.comm.Group` (real or simulated).
        device: None, or the group's device (``"cuda"`` names any CUDA index).
        debug: bound every consumer spin and raise RuntimeError on the host when a peer's
            fragment never arrives (a host sync per call), and on a real group check before
            each call that every rank has the same M (one more small all-reduce; ValueError on
            every rank otherwise). Every rank must pass the same value. Default: the
            ``SEAM_LAMPORT_DEBUG`` environment variable.
        spin_limit: re-loads per fragment before a debug-mode spin gives up, in [1, 2**31 - 1].
        agree: the subclass's own checked sizes and flags that every rank must share, by name,
            in the order the agreement error lists them after hidden_size and max_num_tokens.

    Sizes are Python or NumPy ints, stored as ints.

    Raises:
        TypeError: group not a Group; sizes not ints; debug not a bool.
        ValueError: sizes out of range; device not the group's or not one seam's kernels run
            on; another rank passed other sizes or another debug (every rank raises).
    """

    #: Widest hidden_size (None: any): the core consumer keeps one whole row in registers.
    _max_hidden: int | None = MAX_HIDDEN
    #: The consumer step's name in the ledger's errors.
    _collect_verb = "collect"

    def __init__(
        self,
        *,
        hidden_size: int,
        max_num_tokens: int,
        group: Group | None,
        device: torch.device | str | None,
        debug: bool | None,
        spin_limit: int,
        agree: dict[str, object] | None = None,
    ) -> None:
        if group is None:  # torch.distributed's default process group, for every Lamport op alike
            group = DistGroup(device=device)
        if not isinstance(group, Group):
            raise TypeError(f"group must be a seam.comm.Group, got {type(group).__name__}")
        hidden_size = checks.integer("hidden_size", hidden_size)
        max_num_tokens = checks.integer("max_num_tokens", max_num_tokens)
        spin_limit = checks.integer("spin_limit", spin_limit)
        checks.multiple_of("hidden_size", hidden_size, 32)  # MXFP8 blocks
        if self._max_hidden is not None:
            checks.in_range("hidden_size", hidden_size, 32, self._max_hidden)
        checks.in_range("max_num_tokens", max_num_tokens, 1, MAX_TOKENS)
        checks.in_range("spin_limit", spin_limit, 1, SPIN_LIMIT_MAX)
        group.check_device(device)
        runtime.check_kernel_device("device", torch.empty(0, device=group.device))
        self.debug = runtime.env_flag(DEBUG_ENV) if debug is None else checks.flag("debug", debug)
        # Peers address each other's rows with the mailbox shape, and debug's M check is collective.
        agreed = {"hidden_size": hidden_size, "max_num_tokens": max_num_tokens, **(agree or {}), "debug": self.debug}
        group.agree(f"({', '.join(agreed)})", tuple(agreed.values()))
        self.group = group
        self.device = group.device
        self.tp = group.tp
        self.hidden_size = hidden_size
        self.capacity = max_num_tokens
        self.spin_limit = spin_limit if self.debug else 0
        self.fused = group.peer_access and (group.tp > 1 or isinstance(group, SimulatedGroup))
        self.mailbox = group.create_mailbox(hidden_size, max_num_tokens) if self.fused else None
        self.use_pdl = self.fused and runtime.supports_pdl(self.device)
        self._ledger = CallLedger(group.tp, isinstance(group, SimulatedGroup) and not self.debug, self._collect_verb)

    def reset(self) -> None:
        """Re-arm every mailbox slot and stage_state, forget pending publishes (collective).

        Needed only after a debug-mode timeout left the ranks out of step.
        """
        self._ledger.clear()
        if self.mailbox is not None:
            self.mailbox.reset()

    # -- checks shared by the public entries ----------------------------------------------
    def _rows(self, name: str, t: object, m: int | None = None) -> int:
        """Check a BF16 [M, hidden] contiguous 16-byte-aligned input on the group's device,
        1 <= M <= capacity (or M == ``m``); return M."""
        checks.tensor(name, t, dtype=torch.bfloat16, shape=(-1 if m is None else m, self.hidden_size), align=16)
        if t.device != self.device:
            raise ValueError(f"{name} is on {t.device}, expected the group's device {self.device}")
        if m is None:
            checks.in_range(f"M ({name}.shape[0])", t.shape[0], 1, self.capacity)
        return t.shape[0]

    def _mailbox_rank(self, rank: int | None) -> int:
        """The driven rank of a split step that needs the mailbox (RuntimeError on the fallback)."""
        if not self.fused:
            raise RuntimeError(
                "publish/collect need peer access (this group uses the fallback): call the one-call methods"
            )
        return self.group.check_rank(rank)

    def _check_norm_inputs(self, m: int, residual: object, weight: object, eps: object,
                           names: tuple[str, str] = ("weight", "eps")) -> float:
        """Check the core consumer's norm inputs for M tokens (``names``: what the caller calls the weight and
        eps arguments, for the errors); return eps as a float."""
        self._rows("residual", residual, m)
        checks.tensor(names[0], weight, dtype=torch.bfloat16, shape=(self.hidden_size,), device=self.device)
        eps = checks.finite_float(names[1], eps)
        if eps < 0:
            raise ValueError(f"{names[1]} must be >= 0, got {eps}")
        return eps

    # -- the ledger and debug mode --------------------------------------------------------
    def _check_publish(self, rank: int, m: int) -> None:
        """Refuse a publish of ``rank`` that the ledger forbids, then (debug) agree on M.

        The last step before the publish or the fallback collective: ranks with different M
        would hang or abort there, so debug mode spends one small all-reduce per call.
        """
        self._ledger.check_publish(rank, m)
        self._agree_on_m(m)

    def _agree_on_m(self, m: int) -> None:
        """Debug mode only: ValueError on every rank unless all call with M tokens (``Group.agree_on_m``)."""
        if self.debug:
            self.group.agree_on_m(m, self.mailbox, self.spin_limit)

    def _pending_m(self, rank: int) -> int:
        """M of ``rank``'s pending publish (ValueError if none, or if a simulated call is incomplete)."""
        return self._ledger.pending_m(rank)

    def _collected(self, rank: int) -> None:
        """Mark ``rank``'s publish consumed, after its consumer's launch (a launch that raises, a
        compile error say, leaves the publish pending); in debug mode raise a spin timeout."""
        self._ledger.collected(rank)
        if self.debug and self.mailbox is not None and runtime.host_reads_allowed(self.device):
            self.mailbox.check_error(rank)

    # -- the Lamport path (fused) ---------------------------------------------------------
    def _publish(
        self,
        rank: int,
        m: int,
        x: torch.Tensor,
        gemm2: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        idx: torch.Tensor | None = None,
    ) -> None:
        """Publish checked rows as ``rank``: ``x`` itself, or with ``gemm2`` the MoE finalize of
        (gemm2, weights, idx) plus ``x`` as the shared-expert output (spec: Publish, MoE finalize
        publish). Runs :meth:`_check_publish` first."""
        self._check_publish(rank, m)
        s = self.mailbox.state(rank)
        _publish_op(m, x, s.mailbox, s.address, s.peer_offsets, s.stage_state, rank, gemm2=gemm2, weights=weights,
                    idx=idx,
                    use_pdl=self.use_pdl)
        self._ledger.published(rank, m)

    def _launch_consumer(self, rank: int, m: int, epilogue: int, **buffers: object) -> None:
        """The core consumer (``seam.kernels.lamport.launch_lamport_consumer``) of ``rank``'s pending publish
        with one ``EPILOGUE_*`` on checked ``buffers`` (its keyword arguments: residual, weight, eps, gemma,
        out, residual_out, values, scales), then :meth:`_collected`."""
        s = self.mailbox.state(rank)
        _consume_op(m, epilogue, s.mailbox, s.address, s.stage_state, s.error, **buffers, spin_limit=self.spin_limit,
                    use_pdl=self.use_pdl)
        self._collected(rank)

    def _consume_gemma_rms_norm_mxfp8(
        self, rank: int, m: int, residual: torch.Tensor, weight: torch.Tensor, eps: float, also_bf16: bool,
        a_deq: bool = False,
    ) -> tuple[QuantizedActivation, torch.Tensor] | tuple[QuantizedActivation, torch.Tensor, torch.Tensor]:
        """Consumer A on checked inputs (``a_deq`` checked by :meth:`_check_a_deq`): ``(QuantizedActivation,
        residual_out[, normed])``, the activation carrying A_deq with ``a_deq``."""
        hidden = self.hidden_size
        values = torch.empty((m, hidden), dtype=torch.float8_e4m3fn, device=self.device)
        scales = torch.empty(mxfp8_scale_numel(m, hidden), dtype=torch.uint8, device=self.device)
        residual_out = torch.empty_like(residual)
        normed = torch.empty_like(residual) if also_bf16 else None
        deq = torch.empty((m, hidden), dtype=torch.bfloat16, device=self.device) if a_deq else None
        self._launch_consumer(
            rank, m, EPILOGUE_RMS_NORM_MXFP8, residual=residual, weight=weight, eps=eps, gemma=True,
            out=normed, residual_out=residual_out, values=values, scales=scales, a_deq=deq,
        )
        qa = QuantizedActivation(values, scales, torch.bfloat16, (m, hidden), ScaleLayout.SWIZZLED, a_deq=deq)
        return (qa, residual_out, normed) if also_bf16 else (qa, residual_out)

    def _check_a_deq(self, a_deq: object, m: int) -> bool:
        """Whether a norm + MXFP8 consumer of M rows writes A_deq (:func:`seam.ops.a_deq.resolve_a_deq`)."""
        return resolve_a_deq(a_deq, m, self.hidden_size, self.device, k_name="hidden_size")

    # -- the fallback (no peer access) ----------------------------------------------------
    def _fallback_sum(self, x: torch.Tensor, *, owned: bool = False) -> torch.Tensor:
        """``torch.distributed`` all-reduce of checked rows ``x`` (after debug's M check): of a copy, or with
        ``owned`` (a buffer this call made) of ``x`` itself."""
        self._agree_on_m(x.shape[0])
        y = x if owned else x.clone()
        self.group.all_reduce_(y)
        return y
