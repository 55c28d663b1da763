"""One group's durable log as its raft core reads it (``raft.types.LogReader``).

A view over the node's :class:`raft.wal.logstore.LogStore`: it holds the group's
index and asks the store for entries, terms and the snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raft.types import ConfState, Entry, HardState, Snapshot
from raft.wal.group_index import GroupIndex

if TYPE_CHECKING:
    from raft.wal.logstore import LogStore


class GroupLog:
    """One group's durable log, read by its raft core (implements ``LogReader``)."""

    def __init__(self, store: LogStore, state: GroupIndex) -> None:
        """Obtain it from :meth:`LogStore.group`."""
        self._store = store
        self._g = state
        self.group_id = state.group_id

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The persisted hard state and the newest membership (record or snapshot)."""
        g = self._g
        if g.conf_state is not None and g.conf_index >= g.snapshot_index:
            return g.hard_state, g.conf_state
        return g.hard_state, g.snapshot_conf_state

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at least one if any, at most ``max_bytes`` of data."""
        return self._store.entries_of(self._g, lo, hi, max_bytes)

    def term(self, index: int) -> int:
        """Term of the entry at ``index`` (the snapshot's or compaction point's term there)."""
        return self._store.term_of(self._g, index)

    def first_index(self) -> int:
        """Index of the first entry still available."""
        return self._g.compact_index + 1

    def last_index(self) -> int:
        """Index of the last entry written (the compaction point if there is none)."""
        return max(self._g.last, self._g.compact_index)

    def snapshot(self) -> Snapshot:
        """The most recent snapshot (empty if none)."""
        return self._store.snapshot_of(self._g)
