"""MemoryLog: a LogReader held in memory, for tests and the simulation.

The host (a test or the simulated node) writes it by following each Ready:
``apply_snapshot``, ``append`` and ``set_hard_state``; it compacts it with
``create_snapshot`` + ``compact``. Nothing here is durable.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from raft.core.log import limit_size
from raft.errors import LogCompacted, LogUnavailable, RaftError
from raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata


class MemoryLog:
    """An in-memory log: a snapshot followed by entries.

    ``_entries[0]`` has index ``_snapshot_index + 1``. The term at the
    snapshot index is remembered so that ``term(first_index() - 1)`` works.
    """

    def __init__(self, conf_state: ConfState | None = None) -> None:
        self._hard_state = HardState()
        self._conf_state = conf_state if conf_state is not None else ConfState()
        self._snapshot = Snapshot(SnapshotMetadata(conf_state=self._conf_state))
        self._snapshot_index = 0
        self._snapshot_term = 0
        self._entries: list[Entry] = []

    # -- LogReader -----------------------------------------------------------

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The hard state and the membership last recorded."""
        return self._hard_state, self._conf_state

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi) within ``max_bytes`` data bytes (at least one)."""
        if lo <= self._snapshot_index:
            raise LogCompacted(f"index {lo} is compacted (first is {self.first_index()})")
        if hi > self.last_index() + 1:
            raise LogUnavailable(f"index {hi - 1} is past the last index {self.last_index()}")
        offset = self._snapshot_index + 1
        return limit_size(self._entries[lo - offset : hi - offset], max_bytes)

    def term(self, index: int) -> int:
        """Term of the entry at ``index`` (the snapshot's term at its index)."""
        if index == self._snapshot_index:
            return self._snapshot_term
        if index < self._snapshot_index:
            raise LogCompacted(f"index {index} is compacted (first is {self.first_index()})")
        if index > self.last_index():
            raise LogUnavailable(f"index {index} is past the last index {self.last_index()}")
        return self._entries[index - self._snapshot_index - 1].term

    def first_index(self) -> int:
        """The first index still held."""
        return self._snapshot_index + 1

    def last_index(self) -> int:
        """The index of the last entry held."""
        return self._snapshot_index + len(self._entries)

    def snapshot(self) -> Snapshot:
        """The most recent snapshot."""
        return self._snapshot

    # -- writing (the host's side) ---------------------------------------------

    def set_hard_state(self, hard_state: HardState) -> None:
        """Record the hard state of a Ready."""
        self._hard_state = hard_state

    def set_conf_state(self, conf_state: ConfState) -> None:
        """Record the membership after applying a configuration change."""
        self._conf_state = conf_state

    def append(self, entries: Sequence[Entry]) -> None:
        """Persist ``entries``, replacing any held at the same or higher index.

        Entries at or before the snapshot index are ignored (already compacted).
        """
        if not entries:
            return
        first = self._snapshot_index + 1
        if entries[-1].index < first:
            return
        if entries[0].index < first:
            entries = entries[first - entries[0].index :]
        start = entries[0].index
        if start > self.last_index() + 1:
            raise RaftError(
                f"append at {start} leaves a gap after the last index {self.last_index()}"
            )
        del self._entries[start - first :]
        self._entries.extend(entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace everything with ``snapshot`` (received from the leader)."""
        index = snapshot.metadata.index
        if index < self._snapshot_index:
            raise RaftError(f"snapshot {index} is older than the held {self._snapshot_index}")
        self._snapshot = snapshot
        self._snapshot_index = index
        self._snapshot_term = snapshot.metadata.term
        self._conf_state = snapshot.metadata.conf_state
        self._entries = []

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        """Record a snapshot of the state machine at applied ``index``."""
        if index <= self._snapshot_index:
            raise RaftError(f"snapshot {index} is not newer than {self._snapshot_index}")
        term = self.term(index)
        self._snapshot = Snapshot(SnapshotMetadata(index, term, conf_state), data)
        return self._snapshot

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` (a snapshot must cover them)."""
        if index <= self._snapshot_index:
            return
        if index > self._snapshot.metadata.index:
            raise RaftError(
                f"compact to {index} past the snapshot at {self._snapshot.metadata.index}"
            )
        term = self.term(index)
        del self._entries[: index - self._snapshot_index]
        self._snapshot_index = index
        self._snapshot_term = term
