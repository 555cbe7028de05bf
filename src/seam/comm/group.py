"""TP groups: who the ranks are, how their mailboxes reach each other, the fallback collective.

Two implementations behind :class:`Group`:

* :class:`DistGroup`: one rank per process, a ``torch.distributed`` process group (NCCL
  for the fallback all-reduce) and torch symmetric memory for the mailbox, reached with
  **unicast** peer pointers only (``buffer_ptrs`` of the rendezvous handle; multicast is
  never used and ``seam.runtime`` sets ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``).
* :class:`SimulatedGroup`: all TP ranks in one process on one device (CUDA, or CPU under
  the Triton interpreter), each with its own mailbox and stage_state, for tests and
  single-GPU benchmarks. The driver publishes for every rank before any consumer.
"""

from __future__ import annotations

import abc
import socket

import torch

from seam import checks, runtime
from seam.comm.mailbox import M_DIGITS, LamportMailbox, LamportRankState, m_row, ms_from_row, peer_offsets
from seam.kernels.lamport import GENERATIONS


class Group(abc.ABC):
    """A TP group as the Lamport ops see it.

    Attributes:
        tp: number of ranks.
        ranks: the ranks this process drives (``(rank,)`` for a real group, all when simulated).
        device: the device every driven rank's tensors live on.
        peer_access: every rank can store into every other rank's mailbox (decided
            collectively at construction).
    """

    tp: int
    ranks: tuple[int, ...]
    device: torch.device
    peer_access: bool

    def check_device(self, device: object) -> None:
        """Check an object's optional ``device`` argument: None, or this group's device
        (``"cuda"`` matches any CUDA index). TypeError/ValueError otherwise."""
        if device is None:
            return
        same = runtime.device_arg("device", device) == self.device
        if not same and torch.device(device) != torch.device(self.device.type):
            raise ValueError(f"device={device} differs from the group's device {self.device}")

    def check_rank(self, rank: int | None) -> int:
        """The driven rank meant by ``rank`` (None: the only one; a Python or NumPy int).

        Raises:
            TypeError: rank is not None nor an int.
            ValueError: rank None for a simulated group, or a rank this process does not drive.
        """
        if rank is None:
            if len(self.ranks) != 1:
                raise ValueError(f"a simulated group drives ranks {self.ranks} in one process: name the rank "
                                 "(the split steps publish(..., rank=r) / collect(..., rank=r), one call per rank)")
            return self.ranks[0]
        rank = checks.integer("rank", rank)
        if rank not in self.ranks:
            raise ValueError(f"rank={rank} is not driven by this process (ranks {self.ranks})")
        return rank

    @abc.abstractmethod
    def create_mailbox(self, hidden: int, capacity: int) -> LamportMailbox:
        """Allocate and arm the Lamport mailboxes of the driven ranks (collective): each BF16
        ``[3, tp, capacity, hidden]``, every slot the sentinel -0.0, and a stage_state int32 [2] of zeros.

        Args:
            hidden: row width in BF16 elements (checked by the Lamport ops that call this).
            capacity: rows per rank slot, the largest M (tokens) of a call.

        Raises:
            RuntimeError: no peer access.

        Spec: ``docs/spec/lamport.md`` (State, per rank).
        """

    @abc.abstractmethod
    def agree(self, what: str, value: object) -> None:
        """Raise ValueError unless every rank passes an equal ``value`` (collective)."""

    @abc.abstractmethod
    def agree_on_m(self, m: int, mailbox: LamportMailbox | None = None, spin_limit: int = 0) -> None:
        """Raise ValueError on every rank unless every rank calls with ``m`` tokens (collective).

        What debug mode runs before each call's publish or fallback collective: ranks that
        disagree on M would otherwise hang or abort in it (see ``seam.ops.allreduce``).

        Args:
            m: this rank's token count.
            mailbox: the op's Lamport mailbox (its path has peer access), or None (fallback).
            spin_limit: the debug spin limit, > 0 with a mailbox.

        Raises:
            ValueError: the ranks' M differ (every rank raises, naming each rank's M).
            RuntimeError: with a mailbox, a peer did not join within the spin limit.
        """

    @abc.abstractmethod
    def all_reduce_(self, t: torch.Tensor) -> None:
        """Fallback collective: sum ``t`` in place over the group (real groups only)."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait for every rank (device work of the driven ranks included)."""


def _check_agreement(what: str, everyone: list) -> None:
    """Raise ValueError naming each rank's value unless all are equal. Every rank passes the
    same gathered list, so every rank raises the same error."""
    if any(v != everyone[0] for v in everyone):
        each = ", ".join(f"rank {r} has {v}" for r, v in enumerate(everyone))
        raise ValueError(f"TP ranks disagree on {what}: {each}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Most ranks a :class:`SimulatedGroup` takes: the largest NVLink domain (72 GPUs). Each simulated rank holds a
#: mailbox with a slot per rank, so the memory grows with tp squared.
MAX_SIMULATED_TP = 72


class SimulatedGroup(Group):
    """``tp`` ranks in this process on one device: each rank its own mailbox and stage_state.

    Args:
        tp: number of simulated ranks, 1 to :data:`MAX_SIMULATED_TP`.
        device: where the mailboxes live; default ``seam.runtime.kernel_device()``.

    Raises:
        TypeError: ``tp`` not an int; ``device`` not a torch.device, device string or CUDA index.
        ValueError: ``tp`` outside [1, :data:`MAX_SIMULATED_TP`]; ``device`` one seam's kernels do not run on here
            (meta, or CUDA on a machine without it).
        RuntimeError: seam's kernels cannot run in this process (``seam.runtime.KERNELS_UNAVAILABLE``).

    Spec: ``docs/spec/lamport.md`` (Testing without several GPUs).
    """

    def __init__(self, tp: int, device: torch.device | str | None = None) -> None:
        tp = checks.integer("tp", tp)
        checks.in_range("tp", tp, 1, MAX_SIMULATED_TP)
        self.tp = tp
        self.ranks = tuple(range(tp))
        self.device = runtime.device_arg("device", device) if device is not None else runtime.kernel_device()
        self.peer_access = True

    def create_mailbox(self, hidden: int, capacity: int) -> LamportMailbox:
        boxes = [
            torch.empty((GENERATIONS, self.tp, capacity, hidden), dtype=torch.bfloat16, device=self.device)
            for _ in range(self.tp)
        ]
        ptrs = [b.data_ptr() for b in boxes]
        states = {}
        for r, box in enumerate(boxes):
            state = LamportRankState(
                rank=r,
                mailbox=box,
                stage_state=torch.zeros(2, dtype=torch.int32, device=self.device),
                peer_offsets=peer_offsets(ptrs[r], ptrs, self.device),
                error=torch.zeros(1, dtype=torch.int32, device=self.device),
            )
            state.arm()
            states[r] = state
        _sync(self.device)
        return LamportMailbox(tp=self.tp, capacity=capacity, hidden=hidden, states=states, group=self)

    def agree(self, what: str, value: object) -> None:
        return None  # one process builds every rank with the same arguments

    def agree_on_m(self, m: int, mailbox: LamportMailbox | None = None, spin_limit: int = 0) -> None:
        # Nothing to exchange: one process publishes for every rank, one at a time. Outside debug
        # mode its ledger refuses a second M; in debug mode (the only caller) the bounded spin of
        # the rank that waits for rows a peer never published reports it.
        return None

    def all_reduce_(self, t: torch.Tensor) -> None:
        raise RuntimeError("a simulated group has no fallback collective (it always has peer access)")

    def barrier(self) -> None:
        _sync(self.device)


class DistGroup(Group):
    """This process's rank of a ``torch.distributed`` group, with symmetric-memory mailboxes.

    Construction is collective: every rank gathers (host, device) of all ranks and the
    group has peer access only if all ranks share a host and every pair of devices can
    access each other (``torch.cuda.can_device_access_peer``).

    Args:
        process_group: the TP group, a ``torch.distributed.ProcessGroup`` (default: the default process group).
        device: this rank's device, a torch.device, a device string or a CUDA index (default: the current CUDA
            device; the CPU where torch has no CUDA: the interpreter's kernels, tests only).

    Raises:
        RuntimeError: torch.distributed not initialized; seam's kernels cannot run in this process.
        TypeError: process_group not a ProcessGroup, device not a torch.device, str or int.
        ValueError: no such device, or one seam's kernels cannot run on here.

    Spec: ``docs/spec/lamport.md`` (State, per rank; Errors and safety: peer access and the fallback).
    """

    def __init__(self, process_group=None, device: torch.device | str | int | None = None) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("DistGroup needs torch.distributed.init_process_group() first")
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be a torch.distributed.ProcessGroup (or None: the default group), "
                            f"got {type(process_group).__name__}")
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.device = runtime.device_arg("device", device)
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.tp = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        self.ranks = (self.rank,)
        self._handles = []  # rendezvous handles keep the peer mappings alive
        self.peer_access = self._all_ranks_true(self._local_peer_access())

    def _local_peer_access(self) -> bool:
        import torch.distributed as dist

        if self.device.type != "cuda" or runtime.INTERPRET:
            where = (socket.gethostname(), -1)
        else:
            where = (socket.gethostname(), self.device.index)
        everyone = [None] * self.tp
        dist.all_gather_object(everyone, where, group=self.process_group)
        if where[1] < 0 or any(host != where[0] or idx < 0 for host, idx in everyone):
            return False
        return all(idx == where[1] or torch.cuda.can_device_access_peer(where[1], idx) for _, idx in everyone)

    def _all_ranks_true(self, flag: bool) -> bool:
        import torch.distributed as dist

        everyone = [None] * self.tp
        dist.all_gather_object(everyone, bool(flag), group=self.process_group)
        return all(everyone)

    def create_mailbox(self, hidden: int, capacity: int) -> LamportMailbox:
        if not self.peer_access:
            raise RuntimeError(
                "no peer access between every pair of TP ranks (different hosts, or "
                "can_device_access_peer is False): use the fallback (torch.distributed.all_reduce)"
            )
        import torch.distributed._symmetric_memory as symm_mem

        box = symm_mem.empty((GENERATIONS, self.tp, capacity, hidden), dtype=torch.bfloat16, device=self.device)
        handle = symm_mem.rendezvous(box, self.process_group)
        self._handles.append(handle)
        ptrs = [int(p) for p in handle.buffer_ptrs]
        # Offsets between allocation bases equal offsets between the mailboxes (same layout everywhere).
        offs = peer_offsets(ptrs[self.rank], ptrs, self.device)
        state = LamportRankState(
            rank=self.rank,
            mailbox=box,
            stage_state=torch.zeros(2, dtype=torch.int32, device=self.device),
            peer_offsets=offs,
            error=torch.zeros(1, dtype=torch.int32, device=self.device),
        )
        state.arm()
        self.barrier()
        return LamportMailbox(tp=self.tp, capacity=capacity, hidden=hidden, states={self.rank: state}, group=self)

    def agree(self, what: str, value: object) -> None:
        import torch.distributed as dist

        everyone = [None] * self.tp
        dist.all_gather_object(everyone, value, group=self.process_group)
        _check_agreement(what, everyone)

    def agree_on_m(self, m: int, mailbox: LamportMailbox | None = None, spin_limit: int = 0) -> None:
        """Every rank's M from one small all-reduce (:func:`~seam.comm.mailbox.m_row`). With a
        mailbox it goes through the mailbox, so that a rank that skips the call makes its peers
        time out in their bounded spin (RuntimeError) rather than wait in a collective for ever;
        without one (fallback) it is a ``torch.distributed`` all-reduce, as the data's is.
        Skipped where the host cannot read the result: while a CUDA graph is captured or
        ``torch.compile`` traces."""
        if not runtime.host_reads_allowed(self.device):
            return
        if mailbox is None:
            row = m_row(m, self.rank, self.tp, M_DIGITS * self.tp, self.device)
            self.all_reduce_(row)
        else:
            row = m_row(m, self.rank, self.tp, mailbox.hidden, self.device)
            row = mailbox.all_reduce_rows({self.rank: row}, spin_limit)[self.rank]
        _check_agreement("M (tokens in this call)", ms_from_row(row, self.tp))

    def all_reduce_(self, t: torch.Tensor) -> None:
        import torch.distributed as dist

        dist.all_reduce(t, group=self.process_group)

    def barrier(self) -> None:
        import torch.distributed as dist

        _sync(self.device)
        dist.barrier(group=self.process_group)
        _sync(self.device)
