"""A group's WAL index keeps its entries' locations compactly and reads them back as
the tuples a list would hold."""

from __future__ import annotations

import bisect
import sys

from raft.types import ConfState
from raft.wal import format as fmt
from raft.wal.group_index import EntryLocations, new_group_index
from raft.wal.retention import compaction_targets, compaction_unpins


def _locations(count: int, first_seq: int = 1) -> list[tuple[int, int, int, int, int]]:
    # (term, segment seq, record offset, payload length, entry type)
    return [
        (3 + i // 50, first_seq + i // 10, 64 + 100 * i, 68 + i % 7, i % 2) for i in range(count)
    ]


def test_locations_read_back_as_tuples_by_index_and_slice() -> None:
    rows = _locations(30)
    locations = EntryLocations(rows[:10])
    locations += rows[10:20]
    for row in rows[20:]:
        locations.append(row)
    assert len(locations) == 30
    assert locations[0] == rows[0]
    assert locations[-1] == rows[-1]
    assert locations[5:9] == rows[5:9]
    assert locations[:] == rows
    assert locations == EntryLocations(rows)
    assert locations != EntryLocations(rows[:29])
    big = (2**64 - 1, 2**40, 2**63, 2**32 - 1, 255)  # the record header's widths
    locations.append(big)
    assert locations[-1] == big


def test_dropping_a_prefix_or_a_suffix_keeps_the_rest_in_order() -> None:
    rows = _locations(40)
    locations = EntryLocations(rows)
    del locations[30:]
    del locations[:5]
    assert locations[:] == rows[5:30]
    assert bool(locations)
    del locations[:]
    assert not locations


def test_the_index_compacts_truncates_and_finds_segments_over_the_columns() -> None:
    g = new_group_index(7)
    g.locs += _locations(40)
    assert g.last == 40
    g.truncate_from(36)
    assert g.last == 35
    g.compact_to(10, 3)
    assert g.first == 11
    assert g.locs[0] == _locations(40)[10]
    # Segments hold 10 entries each (seq 1..4): compacting to 20 frees seq 2.
    assert compaction_unpins(g, 20)
    assert not compaction_unpins(g, 15)
    assert compaction_targets([g], [1, 2, 3, 4], keep_segments=2) == {7: 20}
    assert bisect.bisect_left(g.locs, 3, key=lambda loc: loc[1]) == 10
    g.note_snapshot(4, 50, ConfState(voters=frozenset({1})), fmt.SNAPSHOT_INSTALL, fmt.NO_SNAPSHOT)
    assert not g.locs
    assert g.first == 51


def test_an_entry_costs_the_index_about_its_header_fields() -> None:
    """29 bytes of columns an entry (a list of 5-tuples took about 120)."""
    count = 10_000
    locations = EntryLocations(_locations(count))
    columns = (
        locations._terms,
        locations._seqs,
        locations._offsets,
        locations._lengths,
        locations._types,
    )
    per_entry = sum(sys.getsizeof(column) for column in columns) / count
    assert per_entry < 40, per_entry
