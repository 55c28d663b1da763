"""The key index over a partition state machine (pure: the harness's in-memory log)."""

from __future__ import annotations

from collections.abc import Sequence

from protocol.records import MessageRecord
from protocol.storage_api import TIME_MAX_MS
from storage_node.key_index import CHUNK_OFFSETS, Hit, KeyIndex, Query, RecordReader, run_to_end
from storage_node.partition.commands import TrimQueue
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
