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

from seam.kernels.lamport import SENTINEL_BITS


@dataclasses.dataclass(frozen=True)
class LamportRankState:
    """One rank's Lamport state (device tensors; see ``seam.kernels.lamport``).

    Attributes:
        rank: index in the TP group.
        mailbox: BF16 ``[3, TP, capacity, hidden]``, peer-addressable.
        stage_state: int32 ``[2]`` = ``[NEXT, ACTIVE]``.
        peer_offsets: int64 ``[TP]``: element offset of rank p's mailbox from ``mailbox``.
        error: int32 ``[1]``: 1 after a bounded spin timed out.
    """

    rank: int
    mailbox: torch.Tensor
    stage_state: torch.Tensor
    peer_offsets: torch.Tensor
    error: torch.Tensor

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

    def reset(self) -> None:
        """Re-arm every slot and zero stage_state on every driven rank (collective).

        The first barrier lets a rank that timed out finish before a peer re-arms the slots
        its publish may still be writing.
        """
        self.group.barrier()
        for state in self.states.values():
            state.arm()
        self.group.barrier()
