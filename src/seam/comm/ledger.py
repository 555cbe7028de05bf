"""Host bookkeeping of the split publish / collect steps of one Lamport object.

Each rank driven from this process must collect every publish exactly once before it
publishes again; the M a collect uses is the M of that rank's publish. In a simulated
group every rank is driven here, so the ledger sees the whole call and can refuse, on the
host, the mistakes that would otherwise make a consumer spin forever on the device: a rank
that did not publish, ranks that published different M, or a new publish before every rank
collected the last call. Debug mode turns this whole-call check off, so that the device's
bounded spin (``spin_limit``) is what catches a missing publish there.
"""

from __future__ import annotations


class CallLedger:
    """Pending publishes per rank, and (``whole_call``) the checks above.

    Args:
        tp: ranks in the group.
        whole_call: every rank is driven by this process (a simulated group, not in debug mode).
        collect_verb: what the consumer step is called in error messages ("collect", "consume").
    """

    def __init__(self, tp: int, whole_call: bool, collect_verb: str = "collect") -> None:
        self.tp = tp
        self.whole_call = whole_call
        self.verb = collect_verb
        self.done = collect_verb + ("d" if collect_verb.endswith("e") else "ed")  # "collected", "consumed"
        self._pending: dict[int, int] = {}  # rank -> M of its publish, until collected
        self._collected: set[int] = set()  # ranks that collected the current call (whole_call)

    def check_publish(self, rank: int, m: int) -> None:
        """Raise ValueError unless ``rank`` may publish M rows now."""
        if rank in self._pending:
            raise ValueError(
                f"rank {rank} already published {self._pending[rank]} rows that were not {self.done}; "
                f"run its {self.verb} first"
            )
        if not self.whole_call:
            return
        if self._collected:
            waiting = sorted(set(range(self.tp)) - self._collected)
            raise ValueError(
                f"rank {rank} publishes a new call while ranks {waiting} have not {self.done} the last one: "
                f"publish every rank, then {self.verb} every rank"
            )
        other = next(iter(self._pending.values()), m)
        if other != m:
            raise ValueError(f"rank {rank} publishes M={m}, but this call's other ranks published M={other}")

    def published(self, rank: int, m: int) -> None:
        self._pending[rank] = m

    def pending_m(self, rank: int) -> int:
        """M of ``rank``'s pending publish; raise ValueError if there is none or (whole_call) a rank is missing."""
        if rank not in self._pending:
            raise ValueError(f"rank {rank} has no pending publish to {self.verb}")
        if self.whole_call:
            missing = sorted(set(range(self.tp)) - set(self._pending) - self._collected)
            if missing:
                raise ValueError(
                    f"ranks {missing} have not published this call: rank {rank}'s {self.verb} would wait for "
                    "them forever"
                )
        return self._pending[rank]

    def collected(self, rank: int) -> None:
        del self._pending[rank]
        if self.whole_call:
            self._collected.add(rank)
            if len(self._collected) == self.tp:
                self._collected.clear()

    def clear(self) -> None:
        self._pending.clear()
        self._collected.clear()
