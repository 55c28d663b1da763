"""Offset reads for pull consumers on one storage node: the filter, next_offset, the range."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import errors
from protocol.filters import TagFilter
from protocol.records import pack_record, unpack_records
from protocol.storage_api import (
    AppendRequest,
    CommitOffsetRequest,
    GetOffsetRequest,
    Message,
    ReadRequest,
    ReceiveRequest,
    StoredAt,
    from_record,
)
from storage_node.errors import StorageError
from storage_node.partition.pull import matching
from storage_node.partition.queues import QueueEntry
from tests.unit.storage_node.test_service import CONTEXT, one_node


def _tagged(count: int, tag_of: dict[int, str]) -> list[Message]:
    return [Message("t", 0, f"m{i}", b"body %d" % i, tag=tag_of.get(i, "")) for i in range(count)]


def test_matching_returns_the_matches_and_where_the_next_read_goes_on() -> None:
    entries = [QueueEntry(1, i, 0, tag) for i, tag in enumerate(["a", "b", "a", "", "a"])]
    assert matching(entries, 10, TagFilter.parse("a"), 2) == (
        [10, 12],
        [entries[0], entries[2]],
        13,
    )
    assert matching(entries, 10, TagFilter.parse("a"), 5) == (
        [10, 12, 14],
        [entries[0], entries[2], entries[4]],
        15,
    )
    assert matching(entries, 10, TagFilter.parse("zz"), 5) == ([], [], 15)
    assert matching(entries, 10, TagFilter(), 3) == ([10, 11, 12], entries[:3], 13)
    assert matching([], 7, TagFilter.parse("a"), 3) == ([], [], 7)


async def test_a_filtered_read_skips_what_does_not_match_and_says_where_to_go_on(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _tagged(10, {2: "x", 5: "x", 9: "x"})), CONTEXT)
        read = await node.read(ReadRequest("t", 0, 0, 2, filter_expression="x"), CONTEXT)
        assert [m.queue_offset for m in read.messages] == [2, 5]
        assert [m.message.tag for m in read.messages] == ["x", "x"]
        assert (read.next_offset, read.first_offset, read.end_offset) == (6, 0, 10)
        rest = await node.read(ReadRequest("t", 0, 6, 32, filter_expression="x"), CONTEXT)
        assert [m.queue_offset for m in rest.messages] == [9]
        assert rest.next_offset == 10
        none = await node.read(ReadRequest("t", 0, 0, 32, filter_expression="nope"), CONTEXT)
        assert (none.messages, none.next_offset) == ([], 10)
        at_end = await node.read(ReadRequest("t", 0, 10, 32), CONTEXT)
        assert (at_end.messages, at_end.next_offset) == ([], 10)
        # bytes_max cuts the answer: the next read starts at the first message left out.
        cut = await node.read(ReadRequest("t", 0, 0, 32, bytes_max=14), CONTEXT)
        assert [m.queue_offset for m in cut.messages] == [0, 1]
        assert cut.next_offset == 2
        with pytest.raises(StorageError) as beyond:
            await node.read(ReadRequest("t", 0, 11, 32), CONTEXT)
        assert beyond.value.code == errors.OFFSET_OUT_OF_RANGE


async def test_a_read_changes_no_consumer_state_and_a_commit_moves_pop(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _tagged(6, {})), CONTEXT)
        await node.read(ReadRequest("t", 0, 0, 32), CONTEXT)
        assert (await node.get_offset(GetOffsetRequest("g", "t", 0), CONTEXT)).offset is None
        committed = await node.commit_offset(CommitOffsetRequest("g", "t", 0, 4), CONTEXT)
        assert committed.offset == 4
        popped = await node.receive(ReceiveRequest("g", "t", 0, 32, 30_000), CONTEXT)
        assert [m.message.queue_offset for m in popped.messages] == [4, 5]


async def test_a_packed_read_answers_the_same_messages_as_records(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _tagged(8, {1: "x", 4: "x", 6: "x"})), CONTEXT)
        plain = await node.read(ReadRequest("t", 0, 0, 2, filter_expression="x"), CONTEXT)
        packed = await node.read(
            ReadRequest("t", 0, 0, 2, filter_expression="x", packed=True), CONTEXT
        )
        assert packed.messages == []
        records = unpack_records(packed.records).records
        assert [from_record(r) for r in records] == [m.message for m in plain.messages]
        assert packed.stored_at == [
            StoredAt(m.queue_offset, m.store_timestamp_ms) for m in plain.messages
        ]
        assert (packed.next_offset, packed.first_offset, packed.end_offset) == (5, 0, 8)
        # bytes_max bounds the packed records: one record fits, the next read starts at 4.
        one = len(pack_record(records[0]))
        cut = await node.read(
            ReadRequest("t", 0, 0, 2, bytes_max=one, filter_expression="x", packed=True),
            CONTEXT,
        )
        assert [s.queue_offset for s in cut.stored_at] == [1]
        assert cut.next_offset == 4
