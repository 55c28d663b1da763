"""Recent entries of a node's groups kept in memory, under three budgets.

The raft core reads back mostly what was just written (to send it, to apply
it), so each group keeps its newest entries in ``GroupIndex.cache``
(invariant: the entries from ``cache_from`` on, as far as the cache reaches,
are exactly the group's log; anything before ``cache_from`` is read from
disk). Three budgets bound it:

- per group, ``bytes_per_group`` of entry data (trimmed in steps of a quarter
  of it, not on every append);
- per node, ``bytes_total``: with the per-group budget alone a node caches
  ``groups x bytes_per_group`` (512 MiB at 1024 groups x 512 KiB), so every
  entry written stayed in memory for minutes and the heap grew by the write
  rate (page faults, cyclic GC over millions of entries);
- per node, ``entries_total`` entries: the byte budgets count entry data only,
  and a cached entry costs about ``ENTRY_OVERHEAD_BYTES`` more (its ``Entry``,
  the bytes object's header, its index, a list slot and its share of a run
  record). A simple consumer's pop and ack are entries of 40-50 bytes of data,
  one each per queue read: 64 MiB of them would take about 340 MiB, so without
  this bound a node with many queues read that way kept every receive and ack
  in memory (about 530 bytes a queue read).

Eviction only ever drops a prefix of a group's cache, so the invariant holds.

PURE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from raft.types import Entry
from raft.wal.group_index import GroupIndex

ENTRY_OVERHEAD_BYTES = 240
"""The most a cached entry of a few dozen bytes costs beyond its data (214 bytes
traced on CPython 3.11: see tests/unit/raft_wal/test_entry_cache.py)."""

ENTRIES_TOTAL = 1 << 14
"""The most entries a node caches by default: at most 3.75 MiB beyond their data
(``ENTRY_OVERHEAD_BYTES`` each). Followers and the apply loop read what was just
written, a round trip's worth of entries, far fewer than this; one further behind
reads from disk, as past the byte budgets. It was 131,072 (30 MiB beyond the data):
on each storage node of ``rip5 bench queues --queues 100000`` the cache then held
131,072 pops and acks, about 38 MiB for entries nobody read again (docs/scale.md, "Per-queue
memory on a storage node")."""


class EntryCache:
    """The node's entry cache policy over the groups' caches (see the module)."""

    def __init__(
        self, bytes_per_group: int, bytes_total: int, entries_total: int = ENTRIES_TOTAL
    ) -> None:
        """Budgets in bytes of entry data, and in entries for the node."""
        if entries_total < 1:
            raise ValueError(f"entries_total must be at least 1, not {entries_total}")
        self.bytes_per_group = bytes_per_group
        self.bytes_total = bytes_total
        self.entries_total = entries_total
        # Every run of entries cached, oldest first: (group, last index of the run,
        # its bytes, its entries). ``_bytes`` and ``_entries`` are their sums; they
        # may count entries already gone (truncated, compacted, trimmed by the group's
        # budget), which only makes eviction come a little early.
        self._runs: deque[tuple[GroupIndex, int, int, int]] = deque()
        self._bytes = 0
        self._entries = 0

    def add(self, g: GroupIndex, entries: Sequence[Entry]) -> None:
        """``entries`` (consecutive, non-empty) were just appended to ``g``'s log: cache
        them if they continue its cache, then keep both budgets."""
        if g.cache_from + len(g.cache) == entries[0].index:
            g.cache.extend(entries)
            added = sum(len(entry.data) for entry in entries)
            g.cache_bytes += added
            self._note_run(g, entries[-1].index, added, len(entries))
        self._trim(g)

    def _note_run(self, g: GroupIndex, last: int, added: int, count: int) -> None:
        """Queue a run just cached; evict the oldest runs while over ``bytes_total``
        or ``entries_total``."""
        runs = self._runs
        runs.append((g, last, added, count))
        self._bytes += added
        self._entries += count
        while len(runs) > 1 and (
            self._bytes > self.bytes_total or self._entries > self.entries_total
        ):
            old, old_last, old_bytes, old_count = runs.popleft()
            self._bytes -= old_bytes
            self._entries -= old_count
            drop = min(len(old.cache), old_last + 1 - old.cache_from)
            if drop > 0:
                cache = old.cache
                old.cache_bytes -= sum([len(e.data) for e in cache[:drop]])
                del cache[:drop]
                old.cache_from += drop

    def _trim(self, g: GroupIndex) -> None:
        budget = self.bytes_per_group
        if g.cache_bytes <= budget + (budget >> 2):
            return  # trim in steps of a quarter of the budget, not on every append
        drop = 0
        cache = g.cache
        while g.cache_bytes > budget and drop < len(cache):
            g.cache_bytes -= len(cache[drop].data)
            drop += 1
        del cache[:drop]
        g.cache_from += drop
