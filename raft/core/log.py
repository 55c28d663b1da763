"""The raft log: durable entries (read through a LogReader) plus unstable ones.

Layout by index::

    [ snapshot ... | storage entries ... | unstable entries ... ]
                   ^ first_index()                            ^ last_index()

Unstable entries (and an unstable snapshot) are those handed to the host in
a Ready and not yet acknowledged by ``advance``; they shadow the storage at
the same indexes. ``committed`` is known durable on a quorum; ``applying``
is the last entry handed to the host to apply, ``applied`` the last one the
host reported applied.

Invariant: applied <= applying <= committed <= last_index().

PURE.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from raft.errors import LogCompacted, LogUnavailable, RaftError
from raft.types import Entry, LogReader, Snapshot


def payload_bytes(entries: Sequence[Entry]) -> int:
    """The data bytes of ``entries`` (what size limits count)."""
    return sum([len(entry.data) for entry in entries])


def limit_size(entries: list[Entry], bytes_max: int | None) -> list[Entry]:
    """The longest prefix of ``entries`` within ``bytes_max`` data bytes (at least one)."""
    if bytes_max is None or len(entries) <= 1:
        return entries
    sizes = [len(entry.data) for entry in entries]
    if sum(sizes) <= bytes_max:
        return entries
    # The first prefix whose size exceeds the limit ends just before it.
    cut = bisect.bisect_right(list(itertools.accumulate(sizes)), bytes_max)
    return entries[: max(cut, 1)]


class Unstable:
    """Entries and a snapshot not yet durable in the host's storage.

    ``offset`` is the index of ``entries[0]``; entries from
    ``offset_in_progress`` on have not been handed out in a Ready yet.
    Invariant: offset <= offset_in_progress <= offset + len(entries).
    """

    __slots__ = ("entries", "offset", "offset_in_progress", "snapshot", "snapshot_in_progress")

    def __init__(self, offset: int) -> None:
        self.entries: list[Entry] = []
        self.offset = offset
        self.offset_in_progress = offset
        self.snapshot: Snapshot | None = None
        self.snapshot_in_progress = False

    def maybe_first_index(self) -> int | None:
        """The first log index if the unstable snapshot fixes it."""
        if self.snapshot is not None:
            return self.snapshot.metadata.index + 1
        return None

    def next_entries(self) -> list[Entry]:
        """Entries not yet handed out."""
        start = self.offset_in_progress - self.offset
        if start >= len(self.entries):
            return []
        return self.entries[start:]

    def next_snapshot(self) -> Snapshot | None:
        """The snapshot if it was not handed out yet."""
        if self.snapshot is None or self.snapshot_in_progress:
            return None
        return self.snapshot

    def accept_in_progress(self) -> None:
        """Everything currently unstable was handed out in a Ready."""
        if self.entries:
            self.offset_in_progress = self.offset + len(self.entries)
        if self.snapshot is not None:
            self.snapshot_in_progress = True

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to ``index`` (if still of ``term``) are durable."""
        position = index - self.offset
        if position < 0 or position >= len(self.entries) or self.entries[position].term != term:
            # Already stable, or replaced by a later append.
            return
        drop = index + 1 - self.offset
        self.entries = self.entries[drop:]
        self.offset = index + 1
        self.offset_in_progress = max(self.offset_in_progress, self.offset)

    def stable_snapshot_to(self, index: int) -> None:
        """The snapshot at ``index`` is durable."""
        if self.snapshot is not None and self.snapshot.metadata.index == index:
            self.snapshot = None
            self.snapshot_in_progress = False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything with ``snapshot``."""
        self.offset = snapshot.metadata.index + 1
        self.offset_in_progress = self.offset
        self.entries = []
        self.snapshot = snapshot
        self.snapshot_in_progress = False

    def truncate_and_append(self, entries: Sequence[Entry]) -> None:
        """Append ``entries``, first dropping anything at or after their first index."""
        first = entries[0].index
        end = self.offset + len(self.entries)
        if first == end:
            self.entries.extend(entries)
        elif first <= self.offset:
            # Replaces every unstable entry (and stable ones, which the host
            # overwrites when it persists these).
            self.entries = list(entries)
            self.offset = first
            self.offset_in_progress = first
        else:
            kept = self.entries[: first - self.offset]
            kept.extend(entries)
            self.entries = kept
            self.offset_in_progress = min(self.offset_in_progress, first)

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Unstable entries [lo, hi); the caller keeps within bounds."""
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    """The replica's view of its log (see the module docstring)."""

    __slots__ = ("applied", "applying", "committed", "storage", "unstable")

    def __init__(self, storage: LogReader) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        self.committed = first - 1
        self.applying = first - 1
        self.applied = first - 1

    # -- reading -------------------------------------------------------------

    def first_index(self) -> int:
        """The first index still available (after any snapshot)."""
        index = self.unstable.maybe_first_index()
        if index is not None:
            return index
        return self.storage.first_index()

    def last_index(self) -> int:
        """The index of the last entry (durable or not).

        Unstable entries (or the unstable snapshot) always end the log, and
        with none the unstable offset is one past the durable last index.
        """
        unstable = self.unstable
        return unstable.offset + len(unstable.entries) - 1

    def term(self, index: int) -> int:
        """The term at ``index``; raises LogCompacted / LogUnavailable outside the log."""
        unstable = self.unstable
        offset = unstable.offset
        if index >= offset:
            position = index - offset
            if position < len(unstable.entries):
                return unstable.entries[position].term
            raise LogUnavailable(f"index {index} is past the last index {self.last_index()}")
        snapshot = unstable.snapshot
        if snapshot is not None:
            if index == snapshot.metadata.index:
                return snapshot.metadata.term
            raise LogCompacted(f"index {index} is compacted")
        if index < self.storage.first_index() - 1:
            raise LogCompacted(f"index {index} is compacted")
        return self.storage.term(index)

    def last_term(self) -> int:
        """The term of the last entry (or of the snapshot)."""
        return self.term(self.last_index())

    def term_or_zero(self, index: int) -> int:
        """The term at ``index``, or 0 where the log does not know it."""
        try:
            return self.term(index)
        except (LogCompacted, LogUnavailable):
            return 0

    def match_term(self, index: int, term: int) -> bool:
        """True if the entry at ``index`` has ``term``."""
        return self.term_or_zero(index) == term

    def is_up_to_date(self, last_index: int, term: int) -> bool:
        """True if a log ending at (``term``, ``last_index``) is at least as recent."""
        our_term = self.last_term()
        return term > our_term or (term == our_term and last_index >= self.last_index())

    def entries(self, lo: int, bytes_max: int | None = None) -> list[Entry]:
        """Entries from ``lo`` to the end, at most ``bytes_max`` data bytes (at least one)."""
        last = self.last_index()
        if lo > last:
            return []
        return self.slice(lo, last + 1, bytes_max)

    def slice(self, lo: int, hi: int, bytes_max: int | None = None) -> list[Entry]:
        """Entries [lo, hi) within ``bytes_max`` data bytes (at least one).

        Raises LogCompacted if ``lo`` is compacted.
        """
        if lo < self.first_index():
            raise LogCompacted(f"index {lo} is compacted")
        if lo >= hi:
            return []
        unstable = self.unstable
        result: list[Entry] = []
        if lo < unstable.offset:
            stored = self.storage.entries(lo, min(hi, unstable.offset), bytes_max)
            if len(stored) < min(hi, unstable.offset) - lo:
                # The storage hit the size limit: stop here.
                return stored
            result = stored
        if hi > unstable.offset:
            more = unstable.slice(max(lo, unstable.offset), hi)
            if result:
                result.extend(more)
            else:
                result = more
        return limit_size(result, bytes_max)

    def snapshot(self) -> Snapshot:
        """The latest snapshot (unstable, else the durable one)."""
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """The index of the first of ``entries`` not already in the log with its term.

        0 if every entry is present.
        """
        last = self.last_index()
        for entry in entries:
            if entry.index > last or not self.match_term(entry.index, entry.term):
                return entry.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (index, term) at or before ``index`` whose term is <= ``term``.

        Used for the fast rejection hint: entries after it cannot match a log
        whose entry at ``index`` has ``term``. Stops at the first unknown term.
        """
        while index > 0:
            try:
                our_term = self.term(index)
            except (LogCompacted, LogUnavailable):
                return index, 0
            if our_term <= term:
                return index, our_term
            index -= 1
        return 0, 0

    # -- applying ------------------------------------------------------------

    def has_next_committed_entries(self) -> bool:
        """True if committed entries wait to be handed out for applying."""
        if self.unstable.snapshot is not None:
            return False
        return self.committed > self.applying

    def next_committed_entries(self, bytes_max: int | None) -> list[Entry]:
        """Committed entries not yet handed out, within ``bytes_max`` (at least one)."""
        if not self.has_next_committed_entries():
            return []
        lo = self.applying + 1
        return self.slice(lo, self.committed + 1, bytes_max)

    def accept_applying(self, index: int) -> None:
        """Entries up to ``index`` were handed out for applying."""
        self.applying = max(self.applying, index)

    def applied_to(self, index: int) -> None:
        """The host applied entries up to ``index``."""
        if index > self.committed or index < self.applied:
            raise RaftError(f"applied index {index} outside [{self.applied}, {self.committed}]")
        self.applied = index
        self.applying = max(self.applying, index)

    # -- writing -------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> int:
        """Append ``entries`` (replacing any suffix from their first index)."""
        if not entries:
            return self.last_index()
        after = entries[0].index - 1
        if after < self.committed:
            raise RaftError(f"append after {after} would overwrite committed {self.committed}")
        self.unstable.truncate_and_append(entries)
        return self.last_index()

    def maybe_append(
        self, index: int, log_term: int, committed: int, entries: Sequence[Entry]
    ) -> int | None:
        """Append a leader's ``entries`` that follow (``log_term``, ``index``).

        Returns the new last index the leader's message vouches for, or None
        if our log does not hold (``log_term``, ``index``).
        """
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict:
            if conflict <= self.committed:
                raise RaftError(f"entry {conflict} conflicts with committed {self.committed}")
            self.append(entries[conflict - index - 1 :])
        self.commit_to(min(committed, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        """Raise the commit index to ``index`` (never lowers it)."""
        if index > self.committed:
            last = self.last_index()
            if index > last:
                raise RaftError(f"commit {index} is past the last index {last}")
            self.committed = index

    def maybe_commit(self, index: int, term: int) -> bool:
        """Commit up to ``index`` if it is new and of ``term`` (the leader's rule)."""
        if index > self.committed and self.term_or_zero(index) == term:
            self.commit_to(index)
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the log with ``snapshot`` (everything up to it is committed)."""
        self.committed = snapshot.metadata.index
        self.unstable.restore(snapshot)

    def stable_to(self, index: int, term: int) -> None:
        """The host persisted entries up to ``index`` of ``term``."""
        self.unstable.stable_to(index, term)

    def stable_snapshot_to(self, index: int) -> None:
        """The host persisted the snapshot at ``index``."""
        self.unstable.stable_snapshot_to(index)
