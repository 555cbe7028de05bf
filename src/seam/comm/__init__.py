"""TP groups and the Lamport mailbox (``docs/spec/lamport.md``).

``Group`` is what every Lamport op takes: :class:`DistGroup` (a real rank with
torch symmetric memory, unicast) or :class:`SimulatedGroup` (all ranks in one process).
``group.create_mailbox(hidden, capacity)`` returns the :class:`LamportMailbox` whose
per-rank :class:`LamportRankState` the kernels in ``seam.kernels.lamport`` read and write.
"""

from seam.comm.group import DistGroup, Group, SimulatedGroup
from seam.comm.mailbox import LamportMailbox, LamportRankState

__all__ = ["DistGroup", "Group", "LamportMailbox", "LamportRankState", "SimulatedGroup"]
