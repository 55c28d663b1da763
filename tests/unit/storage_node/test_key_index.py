"""The key index over a partition state machine (pure: the harness's in-memory log)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from protocol.message_objects import ObjectEntry
from protocol.records import MessageRecord
from protocol.storage_api import TIME_MAX_MS
from storage_node.key_index import (
    CHUNK_OFFSETS,
    Hit,
    KeyIndex,
    Query,
    RecordReader,
    TieredRecord,
    TierScan,
    run_to_end,
)
from storage_node.partition.commands import RecordUpload, TrimQueue
from storage_node.partition.queues import QueueEntry, QueueId
from storage_node.partition.reads import records_of
from tests.unit.storage_node.partition.harness import Harness, record

GROUP_ID = 1


def _reader(harness: Harness) -> RecordReader:
    def read(queue: QueueId, entries: Sequence[QueueEntry]) -> list[MessageRecord]:
        return records_of(harness.log.__getitem__, GROUP_ID, queue, entries)

    return read


def _query(**fields: object) -> Query:
    values: dict[str, object] = {
        "topic": "orders",
        "message_id": "",
        "key": "",
        "begin_ms": 0,
        "end_ms": TIME_MAX_MS,
        "limit": 10_000,
    }
    values.update(fields)
    return Query(**values)  # type: ignore[arg-type]


def _fill(harness: Harness, first: int, count: int, queue_id: int = 0) -> None:
    harness.append(
        *(
            record(f"m{i}", queue_id=queue_id, keys=(f"k{i % 5}",))
            for i in range(first, first + count)
        )
    )


def test_store_times_bound_the_search() -> None:
    harness = Harness()
    _fill(harness, 0, 10)  # stored at 1_000_000
    harness.advance(5_000)
    _fill(harness, 10, 10)  # stored at 1_005_000
    index = KeyIndex()
    read = _reader(harness)
    late = index.search(GROUP_ID, harness.state, read, _query(key="k0", begin_ms=1_005_000))
    assert late.hits == [Hit(("orders", 0), 10), Hit(("orders", 0), 15)]
    early = index.search(GROUP_ID, harness.state, read, _query(key="k0", end_ms=1_004_999))
    assert early.hits == [Hit(("orders", 0), 0), Hit(("orders", 0), 5)]


def test_a_trim_between_steps_skips_the_offsets_it_removed() -> None:
    harness = Harness()
    for first in range(0, 3 * CHUNK_OFFSETS, 512):
        _fill(harness, first, 512)
    index = KeyIndex()
    steps = index.steps(GROUP_ID, harness.state, _reader(harness), _query(key="k2"))
    next(steps)  # the first chunk is searched
    harness.apply(TrimQueue(harness.now_ms, "orders", 0, CHUNK_OFFSETS + 100))
    offsets = [hit.queue_offset for hit in run_to_end(steps).hits]
    expected_first = [o for o in range(CHUNK_OFFSETS) if o % 5 == 2]
    expected_rest = [o for o in range(CHUNK_OFFSETS + 100, 3 * CHUNK_OFFSETS) if o % 5 == 2]
    assert offsets == expected_first + expected_rest


def test_a_dead_letter_copy_is_found_by_its_original_id() -> None:
    harness = Harness()
    harness.append(record("poison", keys=("p",)))
    delivered = harness.receive(max_attempts=1, invisible_ms=10)
    assert len(delivered.deliveries) == 1
    harness.advance(20)
    moved = harness.receive(max_attempts=1)
    assert len(moved.dead_lettered) == 1
    result = KeyIndex().search(
        GROUP_ID,
        harness.state,
        _reader(harness),
        _query(topic="", message_id="poison"),
    )
    assert sorted(hit.queue[0] for hit in result.hits) == ["%DLQ%g", "orders"]


def _tiered(harness: Harness, count: int) -> dict[int, TieredRecord]:
    """``count`` messages (keys k0..k4) of which the first 1.5 chunks are recorded in the
    tier (two objects) and trimmed locally; the tier's records by offset."""
    for first in range(0, count, 512):
        _fill(harness, first, min(512, count - first))
    stored_ms = harness.now_ms
    cut = CHUNK_OFFSETS + CHUNK_OFFSETS // 2
    for low, high in ((0, CHUNK_OFFSETS), (CHUNK_OFFSETS, cut)):
        entry = ObjectEntry(f"o-{low}", low, high, stored_ms, stored_ms, 100, 7)
        harness.apply(RecordUpload(harness.now_ms, "orders", 0, entry))
    read = _reader(harness)
    records = read(("orders", 0), harness.state.read("orders", 0, 0, cut))
    harness.apply(TrimQueue(harness.now_ms, "orders", 0, cut))
    return {o: TieredRecord(o, stored_ms, r) for o, r in enumerate(records)}


def test_offsets_only_the_tier_holds_are_searched_through_tier_scans() -> None:
    harness = Harness()
    count = 2 * CHUNK_OFFSETS + 100
    in_tier = _tiered(harness, count)
    scans: list[TierScan] = []

    def tier_read(scan: TierScan) -> list[TieredRecord]:
        scans.append(scan)
        return [in_tier[o] for o in range(scan.low, scan.high)]

    index = KeyIndex()
    result = index.search(GROUP_ID, harness.state, _reader(harness), _query(key="k3"), tier_read)
    expected = [o for o in range(count) if o % 5 == 3]
    assert [hit.queue_offset for hit in result.hits] == expected
    cut = len(in_tier)
    assert {hit.queue_offset for hit in result.tiered} == {o for o in expected if o < cut}
    assert all(
        result.tiered[hit].record.message_id == f"m{hit.queue_offset}" for hit in result.tiered
    )
    # A chunk per scan, up to the local first offset; every record read once.
    queue = ("orders", 0)
    assert scans == [TierScan(queue, 0, CHUNK_OFFSETS), TierScan(queue, CHUNK_OFFSETS, cut)]
    assert result.complete
    assert result.scanned == count
    # Without a tier reader the tier is not searched (the local window only).
    local = index.search(GROUP_ID, harness.state, _reader(harness), _query(key="k3"))
    assert [hit.queue_offset for hit in local.hits] == [o for o in expected if o >= cut]


def test_a_tiered_search_keeps_its_limit_budget_and_time_range() -> None:
    harness = Harness()
    in_tier = _tiered(harness, 2 * CHUNK_OFFSETS)
    stored_ms = in_tier[0].store_timestamp_ms

    def tier_read(scan: TierScan) -> list[TieredRecord]:
        return [in_tier[o] for o in range(scan.low, scan.high)]

    read = _reader(harness)
    limited = KeyIndex().search(GROUP_ID, harness.state, read, _query(key="k1", limit=3), tier_read)
    assert [hit.queue_offset for hit in limited.hits] == [1, 6, 11]
    short = KeyIndex(scan_max=10).search(GROUP_ID, harness.state, read, _query(key="k1"), tier_read)
    assert not short.complete  # one scan, then spent
    assert short.scanned == CHUNK_OFFSETS
    # The objects' store time ranges select them: none overlaps a range before them.
    early = _query(key="k1", begin_ms=0, end_ms=stored_ms - 1)
    assert KeyIndex().search(GROUP_ID, harness.state, read, early, tier_read).hits == []
    # A tier scan needs a tier reader to answer it.
    steps = KeyIndex().steps(GROUP_ID, harness.state, read, _query(key="k1"), tiered=True)
    with pytest.raises(ValueError, match="tier reader"):
        run_to_end(steps)
