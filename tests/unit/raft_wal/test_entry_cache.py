"""The node's entry cache bounds the entries it keeps, not only their data: a simple
consumer's pops and acks are entries of 40-50 bytes, each costing about
``ENTRY_OVERHEAD_BYTES`` more in memory than the byte budgets count."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from raft.types import Entry
from raft.wal.entry_cache import ENTRIES_TOTAL, ENTRY_OVERHEAD_BYTES, EntryCache
from raft.wal.group_index import GroupIndex

DATA_BYTES = 50  # a Receive command's encoding


def _entry(index: int) -> Entry:
    return Entry(term=3, index=index, data=f"{index:08d}".encode().ljust(DATA_BYTES, b"r"))


def test_past_entries_total_the_oldest_runs_leave_the_cache() -> None:
    cache = EntryCache(bytes_per_group=1 << 20, bytes_total=1 << 30, entries_total=10)
    groups = [GroupIndex(1), GroupIndex(2)]
    next_index = [1, 1]
    for step in range(12):  # runs of one entry, the two groups in turn
        k = step % 2
        cache.add(groups[k], [_entry(next_index[k])])
        next_index[k] += 1
    # 12 entries cached: the two oldest runs (one of each group) went.
    assert [(g.cache_from, len(g.cache)) for g in groups] == [(2, 5), (2, 5)]
    assert [g.cache_bytes for g in groups] == [5 * DATA_BYTES, 5 * DATA_BYTES]
    # What is left is each group's log from cache_from on.
    for g in groups:
        assert [e.index for e in g.cache] == list(range(2, 7))
    # A run larger than the bound stays (the newest run always does), alone.
    cache.add(groups[0], [_entry(i) for i in range(7, 20)])
    assert (groups[0].cache_from, len(groups[0].cache)) == (7, 13)
    assert (groups[1].cache_from, groups[1].cache) == (7, [])
    with pytest.raises(ValueError, match="entries_total must be at least 1, not 0"):
        EntryCache(1, 1, entries_total=0)


def test_a_small_cached_entry_costs_at_most_its_data_and_the_overhead() -> None:
    count = 2_000
    cache = EntryCache(bytes_per_group=1 << 30, bytes_total=1 << 30)
    group = GroupIndex(1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for index in range(1, count + 1):  # one run an entry, as single pops arrive
            cache.add(group, [_entry(index)])
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    overhead = grown / count - DATA_BYTES
    assert 0 < overhead <= ENTRY_OVERHEAD_BYTES, f"{overhead:.0f} bytes beyond the data"


def test_by_default_a_node_caches_a_few_mib_beyond_the_data() -> None:
    """A node's pops and acks, small entries, fill the default cache to
    ``ENTRIES_TOTAL`` and no further: at most 4 MiB beyond their data (the overhead
    an entry is pinned above), where 131,072 entries were 30 MiB."""
    assert ENTRIES_TOTAL * ENTRY_OVERHEAD_BYTES <= 4 << 20
    cache = EntryCache(bytes_per_group=4 << 20, bytes_total=64 << 20)
    groups = [GroupIndex(group_id) for group_id in range(1, 65)]
    run = 64  # entries a raft round appends to a group
    for step in range(ENTRIES_TOTAL // run + 16):
        g = groups[step % len(groups)]
        first = g.cache_from + len(g.cache)
        cache.add(g, [_entry(index) for index in range(first, first + run)])
    assert sum(len(g.cache) for g in groups) == ENTRIES_TOTAL
    # Each group kept its newest entries.
    for g in groups:
        assert [e.index for e in g.cache] == list(range(g.cache_from, g.cache_from + len(g.cache)))
