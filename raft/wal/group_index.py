"""One group's in-memory index of the shared WAL (data only; no I/O).

Kept by :class:`raft.wal.logstore.LogStore` per group: where each live entry's
record lies (segment, offset), the recent entries cached for the core's
reads, and the group's durable metadata (hard state, membership, snapshot
and compaction points). Invariant: entry i is at ``locs[i - first]``.

PURE.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import overload

from raft.types import ConfState, Entry, HardState
from raft.wal import format as fmt

Location = tuple[int, int, int, int, int]
"""Where one entry's record lies: (term, segment seq, record offset, payload length,
entry type)."""


class EntryLocations:
    """The :data:`Location` of each live entry of a group, in index order.

    Kept as five typed columns (the record header's widths: 8 + 8 + 8 + 4 + 1
    bytes an entry) instead of a list of tuples (about 120 bytes an entry):
    the index holds every live entry of every group, and a group's log is
    pinned by the oldest message its queues still hold, so on a node with
    many queues the entries stay. Reads give tuples back, as a list would.
    """

    __slots__ = ("_lengths", "_offsets", "_seqs", "_terms", "_types")

    def __init__(self, locations: Iterable[Location] = ()) -> None:
        """An index of ``locations``."""
        self._terms = array("Q")
        self._seqs = array("Q")
        self._offsets = array("Q")
        self._lengths = array("I")
        self._types = array("B")
        self.extend(locations)

    def __len__(self) -> int:
        return len(self._terms)

    @overload
    def __getitem__(self, key: int) -> Location: ...

    @overload
    def __getitem__(self, key: slice) -> list[Location]: ...

    def __getitem__(self, key: int | slice) -> Location | list[Location]:
        if isinstance(key, slice):
            return list(
                zip(
                    self._terms[key],
                    self._seqs[key],
                    self._offsets[key],
                    self._lengths[key],
                    self._types[key],
                    strict=True,
                )
            )
        return (
            self._terms[key],
            self._seqs[key],
            self._offsets[key],
            self._lengths[key],
            self._types[key],
        )

    def __delitem__(self, key: slice) -> None:
        for column in self._columns():
            del column[key]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EntryLocations):
            return self[:] == other[:]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"EntryLocations({self[:]!r})"

    def append(self, location: Location) -> None:
        """Add the next entry's location."""
        term, seq, offset, length, entry_type = location
        self._terms.append(term)
        self._seqs.append(seq)
        self._offsets.append(offset)
        self._lengths.append(length)
        self._types.append(entry_type)

    def extend(self, locations: Iterable[Location]) -> None:
        """Add the next entries' locations."""
        rows = list(locations)
        if rows:
            for column, values in zip(self._columns(), zip(*rows, strict=True), strict=True):
                column.extend(values)

    def __iadd__(self, locations: Iterable[Location]) -> EntryLocations:
        self.extend(locations)
        return self

    def _columns(self) -> tuple[array[int], ...]:
        return (self._terms, self._seqs, self._offsets, self._lengths, self._types)


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
    locs: EntryLocations = field(default_factory=EntryLocations)
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
            self.locs = EntryLocations()
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
            self.locs = EntryLocations()
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
