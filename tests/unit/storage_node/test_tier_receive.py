"""The leader's side of a receive of tier-only messages (storage_node.tier_receive): the
window read, the rows and verdicts put in the command, applied on a partition."""

from __future__ import annotations

import asyncio

from protocol import sql92
from protocol.message_objects import ObjectEntry
from storage_node.partition.commands import (
    CommitOffset,
    FilteredReceive,
    InitialPosition,
    Receive,
    RecordUpload,
    TierReceive,
    TrimQueue,
)
from storage_node.partition.results import ReceiveResult
from storage_node.tier_reads import TierMessage, TierReader
from storage_node.tier_receive import with_tier_rows
from storage_node.tier_store import Tier

from .partition.harness import Harness, record


class LogTier(TierReader):
    """A TierReader whose objects' messages are given (no I/O); it records the reads."""

    def __init__(self, tmp: str) -> None:
        super().__init__(Tier(f"file://{tmp}"))
        self.reads: list[tuple[int, int]] = []
        self.messages: dict[int, TierMessage] = {}

    async def read(
        self, group_id: int, objects: list[ObjectEntry], offset: int, count_max: int
    ) -> list[TierMessage]:
        self.reads.append((offset, count_max))
        end = objects[-1].end_offset if objects else offset
        return [self.messages[o] for o in range(offset, min(end, offset + count_max))]


def _setup(tmp_path: object) -> tuple[Harness, LogTier]:
    h = Harness()
    records = [record(f"m{i}", tag=f"t{i % 2}", properties=(("n", str(i)),)) for i in range(10)]
    h.append(*records)
    h.apply(RecordUpload(h.now_ms, "orders", 0, ObjectEntry("o-0", 0, 8, 1, 2, 100, 7)))
    h.apply(TrimQueue(h.now_ms, "orders", 0, 8))
    reader = LogTier(str(tmp_path))
    reader.messages = {i: TierMessage(i, h.now_ms, records[i]) for i in range(8)}
    return h, reader


def _receive(h: Harness, **fields: object) -> Receive:
    return Receive(h.now_ms, "g", "orders", 0, 3, 30_000, 3, **fields)  # type: ignore[arg-type]


def test_a_group_below_the_local_first_offset_gets_tier_rows(tmp_path: object) -> None:
    h, reader = _setup(tmp_path)
    rows = asyncio.run(with_tier_rows(reader, h.state, _receive(h), None, h.now_ms))
    command = rows.command
    assert isinstance(command, TierReceive)
    assert rows.fresh
    assert reader.reads == [(0, 8)]  # 3 asked, up to 4x read, up to the local first 8
    assert [r.queue_offset for r in command.tier_rows] == list(range(8))
    assert (command.evaluated_end, command.unmatched) == (8, ())
    result = h.apply(command)
    assert isinstance(result, ReceiveResult)
    assert [d.handle.queue_offset for d in result.deliveries] == [0, 1, 2]
    assert all(d.entry.tier_only for d in result.deliveries)


def test_a_sql_filter_is_evaluated_on_the_rows_read(tmp_path: object) -> None:
    h, reader = _setup(tmp_path)
    sql = sql92.parse("n IN ('1', '6')")
    rows = asyncio.run(with_tier_rows(reader, h.state, _receive(h), sql, h.now_ms))
    command = rows.command
    assert isinstance(command, TierReceive)
    assert command.unmatched == (0, 2, 3, 4, 5, 7)
    result = h.apply(command)
    assert isinstance(result, ReceiveResult)
    assert [d.handle.queue_offset for d in result.deliveries] == [1, 6]
    assert h.state.committed_offset("g", "orders", 0) == 8


def test_an_expired_tier_lease_is_read_again_past_the_cursor(tmp_path: object) -> None:
    h, reader = _setup(tmp_path)
    first = h.apply(
        asyncio.run(with_tier_rows(reader, h.state, _receive(h), None, h.now_ms)).command
    )
    assert isinstance(first, ReceiveResult)
    for offset in (0, 2):  # acked; 1 stays leased, behind the cursor (now at 3)
        h.ack(next(d.handle for d in first.deliveries if d.handle.queue_offset == offset))
    h.advance(30_001)
    reader.reads.clear()
    again = asyncio.run(
        with_tier_rows(
            reader,
            h.state,
            _receive(h, initial_position=InitialPosition.EARLIEST),
            None,
            h.now_ms,
        )
    )
    assert isinstance(again.command, TierReceive)
    assert 1 in {r.queue_offset for r in again.command.tier_rows}
    result = h.apply(again.command)
    assert isinstance(result, ReceiveResult)
    delivered = [(d.handle.queue_offset, d.delivery_attempt) for d in result.deliveries]
    assert delivered == [(1, 2), (3, 1), (4, 1)]


def test_a_group_past_the_local_first_offset_is_left_as_it_is(tmp_path: object) -> None:
    h, reader = _setup(tmp_path)
    h.apply(CommitOffset(h.now_ms, "late", "orders", 0, 8))
    plain = FilteredReceive(h.now_ms, "late", "orders", 0, 3, 30_000, 3, evaluated_end=10)
    rows = asyncio.run(with_tier_rows(reader, h.state, plain, None, h.now_ms))
    assert rows.command is plain
    assert not rows.fresh
    assert reader.reads == []
