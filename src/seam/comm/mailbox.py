"""The Lamport mailbox: per-rank buffers and state of ``docs/spec/lamport.md``.

A :class:`LamportMailbox` holds, for every rank this process drives, a
:class:`LamportRankState`: the BF16 mailbox ``[3, TP, capacity, hidden]`` (every lane
the sentinel 0x8000), ``stage_state`` int32 ``[NEXT, ACTIVE]``, the int64 element
offsets of every rank's mailbox from this one (what the kernels add to their own
pointer to reach a peer) and the int32 timeout flag of the debug spin. The contract
the kernels rely on is in ``seam.kernels.lamport``.
"""

from __future__ import annotations

import dataclasses

import torch

from seam.kernels.lamport import (
    EPILOGUE_ALL_REDUCE,
    SENTINEL_BITS,
    launch_lamport_consumer,
    launch_lamport_publish,
)


@dataclasses.dataclass(frozen=True)
class LamportRankState:
    """One rank's Lamport state (device tensors; see ``seam.kernels.lamport``).

    Attributes:
        rank: index in the TP group.
        mailbox: BF16 ``[3, TP, capacity, hidden]``, peer-addressable.
        stage_state: int32 ``[2]`` = ``[NEXT, ACTIVE]``.
        peer_offsets: int64 ``[TP]``: element offset of rank p's mailbox from ``mailbox``.
        error: int32 ``[1]``: 1 after a bounded spin timed out.
        address: ``mailbox.data_ptr()`` when made (not an argument): the address ``peer_offsets`` count from,
            which every launch checks (``seam.kernels.lamport.check_mailbox``).
    """

    rank: int
    mailbox: torch.Tensor
    stage_state: torch.Tensor
    peer_offsets: torch.Tensor
    error: torch.Tensor
    address: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", self.mailbox.data_ptr())

    def arm(self) -> None:
        """Sentinel in every slot, stage_state ``[0, 0]``, error flag clear (all ranks together)."""
        self.mailbox.view(torch.int16).fill_(SENTINEL_BITS)
        self.stage_state.zero_()
        self.error.zero_()


def peer_offsets(own: int, peers: list[int], device: torch.device) -> torch.Tensor:
    """int64 element offsets (BF16 elements) of ``peers`` base addresses from ``own``."""
    offs = []
    for ptr in peers:
        delta = ptr - own
        if delta % 2:
            raise RuntimeError(f"peer mailbox at {ptr:#x} is not BF16-aligned relative to {own:#x}")
        offs.append(delta // 2)
    return torch.tensor(offs, dtype=torch.int64, device=device)


#: Columns that hold one rank's M in :func:`m_row`: base-256 digits, exact in BF16 (every integer
#: up to 256 is); the top one takes the rest, at most 256 for M up to 2**24 (the largest capacity).
M_DIGITS = 3


def m_row(m: int, rank: int, tp: int, width: int, device: torch.device) -> torch.Tensor:
    """BF16 ``[1, width]``: ``rank``'s M as :data:`M_DIGITS` digits in its own columns, zeros
    elsewhere. Every column is nonzero on one rank at most, so any sum of the ranks' rows (NCCL's
    or gloo's BF16 sum, the Lamport fp32 one) is exact and :func:`ms_from_row` reads every rank's M."""
    if M_DIGITS * tp > width:
        raise ValueError(f"the debug-mode M check needs {M_DIGITS * tp} columns for {tp} ranks; rows have {width}")
    digits = [(m >> 8 * d) & 0xFF for d in range(M_DIGITS - 1)] + [m >> 8 * (M_DIGITS - 1)]
    row = torch.zeros((1, width), dtype=torch.bfloat16)
    row[0, M_DIGITS * rank : M_DIGITS * (rank + 1)] = torch.tensor(digits, dtype=torch.bfloat16)
    return row.to(device)


def ms_from_row(row: torch.Tensor, tp: int) -> list[int]:
    """Every rank's M from the sum of the ranks' :func:`m_row` rows."""
    digits = row[0, : M_DIGITS * tp].float().int().view(tp, M_DIGITS).tolist()
    return [sum(d << 8 * i for i, d in enumerate(ds)) for ds in digits]


@dataclasses.dataclass
class LamportMailbox:
    """The mailboxes of the ranks one process drives (one rank for a real group, all when simulated).

    Made by ``Group.create_mailbox`` (collective). ``states[i]`` belongs to ``ranks[i]``.
    """

    tp: int
    capacity: int
    hidden: int
    states: dict[int, LamportRankState]
    group: object  #: the Group that made it (keeps symmetric memory alive, runs barriers)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(self.states)

    def state(self, rank: int) -> LamportRankState:
        """The state of ``rank``; ValueError if this process does not drive it."""
        if rank not in self.states:
            raise ValueError(f"rank={rank} is not driven by this process (ranks {self.ranks})")
        return self.states[rank]

    def check_error(self, rank: int) -> None:
        """Raise RuntimeError if ``rank``'s bounded spin timed out (a host sync)."""
        if int(self.state(rank).error.item()):
            raise RuntimeError(
                f"Lamport all-reduce on rank {rank}: a peer's fragment did not arrive within the "
                "debug spin limit (a rank skipped its publish or is out of step); call reset() "
                "on every rank before the next call"
            )

    def all_reduce_rows(self, rows: dict[int, torch.Tensor], spin_limit: int) -> dict[int, torch.Tensor]:
        """``bf16(sum over ranks)`` of one BF16 ``[1, hidden]`` row per rank, as one whole Lamport
        call: publish the row of every driven rank in ``rows``, then the plain consumer of each.
        Waits as the ops' consumers do, for at most ``spin_limit`` re-loads per fragment (> 0).

        Raises:
            RuntimeError: a peer's row did not arrive within the spin limit (:meth:`check_error`;
                call :meth:`reset` on every rank).
        """
        for rank, row in rows.items():
            s = self.state(rank)
            launch_lamport_publish(1, row, s.mailbox, s.address, s.peer_offsets, s.stage_state, rank)
        sums = {}
        for rank, row in rows.items():
            s = self.state(rank)
            sums[rank] = torch.empty_like(row)
            launch_lamport_consumer(1, EPILOGUE_ALL_REDUCE, s.mailbox, s.address, s.stage_state, s.error,
                                    out=sums[rank], spin_limit=spin_limit)
            self.check_error(rank)
        return sums

    def reset(self) -> None:
        """Re-arm every slot and zero stage_state on every driven rank (collective).

        The first barrier lets a rank that timed out finish before a peer re-arms the slots
        its publish may still be writing.
        """
        self.group.barrier()
        for state in self.states.values():
            state.arm()
        self.group.barrier()
