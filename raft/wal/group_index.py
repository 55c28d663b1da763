"""One group's in-memory index of the shared WAL (data only; no I/O).

Kept by :class:`raft.wal.logstore.LogStore` per group: where each live entry's
record lies (segment, offset), the recent entries cached for the core's
reads, and the group's durable metadata (hard state, membership, snapshot
and compaction points). Invariant: entry i is at ``locs[i - first]``.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raft.types import ConfState, Entry, HardState
from raft.wal import format as fmt


@dataclass(slots=True)
class GroupIndex:
    """One group's view of the WAL. Invariant: entry i is at ``locs[i - first]``."""

    group_id: int
    hard_state: HardState = field(default_factory=HardState)
    conf_index: int = 0
    conf_state: ConfState | None = None
    snapshot_term: int = 0
    snapshot_index: int = 0
    snapshot_conf_state: ConfState = field(default_factory=ConfState)
    compact_index: int = 0
    compact_term: int = 0
    snapshot_location: fmt.SnapshotLocation = fmt.NO_SNAPSHOT  # where the snapshot's bytes lie
    first: int = 1
    # (term, segment seq, record offset, payload length, entry type) per live entry
    locs: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    cache_from: int = 1  # entries >= cache_from are in ``cache`` (within the live range)
    cache: list[Entry] = field(default_factory=list)
    cache_bytes: int = 0

    @property
    def last(self) -> int:
        return self.first + len(self.locs) - 1

    def truncate_from(self, index: int) -> None:
        """Drop entries >= index."""
        keep = max(0, index - self.first)
        del self.locs[keep:]
        if index < self.cache_from:
            self.cache = []
            self.cache_bytes = 0
            self.cache_from = index
        else:
            drop = self.cache[index - self.cache_from :]
            self.cache_bytes -= sum(len(e.data) for e in drop)
            del self.cache[index - self.cache_from :]

    def compact_to(self, index: int, term: int) -> None:
        """Discard entries <= index; the log then starts at index + 1."""
        if index >= self.last:
            self.locs = []
        else:
            del self.locs[: max(0, index + 1 - self.first)]
        self.first = index + 1
        if self.cache_from <= index:
            drop = min(len(self.cache), index + 1 - self.cache_from)
            self.cache_bytes -= sum(len(e.data) for e in self.cache[:drop])
            del self.cache[:drop]
            self.cache_from = index + 1
        self.compact_index = index
        self.compact_term = term

    def note_snapshot(
        self, term: int, index: int, conf: ConfState, flag: int, location: fmt.SnapshotLocation
    ) -> None:
        """The group's snapshot is now at (term, index) in ``location``; an installed
        one (``flag`` SNAPSHOT_INSTALL) replaces the whole log."""
        self.snapshot_term = term
        self.snapshot_index = index
        self.snapshot_conf_state = conf
        self.snapshot_location = location
        if flag == fmt.SNAPSHOT_INSTALL:
            self.locs = []
            self.cache = []
            self.cache_bytes = 0
            self.first = index + 1
            self.cache_from = index + 1
            self.compact_index = index
            self.compact_term = term

    def restore(self, cp: fmt.GroupCheckpoint) -> None:
        """Replay a CHECKPOINT record: the group's metadata as of a segment's start."""
        self.hard_state = cp.hard_state
        self.conf_index = cp.conf_index
        self.conf_state = cp.conf_state
        self.snapshot_term = cp.snapshot_term
        self.snapshot_index = cp.snapshot_index
        self.snapshot_conf_state = cp.snapshot_conf_state
        self.snapshot_location = cp.snapshot_location
        if cp.compact_index >= self.first - 1 or not self.locs:
            self.compact_to(cp.compact_index, cp.compact_term)
        else:
            self.compact_index, self.compact_term = cp.compact_index, cp.compact_term

    def checkpoint(self) -> fmt.GroupCheckpoint:
        return fmt.GroupCheckpoint(
            hard_state=self.hard_state,
            conf_index=self.conf_index,
            conf_state=self.conf_state,
            snapshot_term=self.snapshot_term,
            snapshot_index=self.snapshot_index,
            snapshot_conf_state=self.snapshot_conf_state,
            compact_index=self.compact_index,
            compact_term=self.compact_term,
            snapshot_location=self.snapshot_location,
        )


def new_group_index(group_id: int) -> GroupIndex:
    """An empty index for a group new to the WAL (ValueError: the id does not fit a record)."""
    if not 0 < group_id <= fmt.GROUP_ID_MAX:
        raise ValueError(f"group id must be in 1..{fmt.GROUP_ID_MAX}, got {group_id}")
    return GroupIndex(group_id)


def dropped_group_index(group_id: int, hard_state: HardState) -> GroupIndex:
    """What is left of a dropped group: its term and vote (commit 0, no log)."""
    g = GroupIndex(group_id)
    g.hard_state = HardState(term=hard_state.term, vote=hard_state.vote, commit=0)
    return g
