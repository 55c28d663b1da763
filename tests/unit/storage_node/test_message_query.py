"""Message query by id and key, and consumer progress, over a one-node storage service
(real WAL in tmp_path, no network): ``storage.query_messages`` through the key index
(sealed chunks cached and bounded, the open chunk read directly, time ranges, the scan
budget) and ``storage.group_progress`` for pop and committed-offset consumers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from protocol.storage_api import (
    AckRequest,
    AppendRequest,
    CommitOffsetRequest,
    GroupProgressRequest,
    Message,
    QueryMessagesRequest,
    ReadRequest,
    ReceiveRequest,
)
from storage_node import key_index
from storage_node.errors import BadCommand
from storage_node.key_index import CHUNK_OFFSETS, KeyIndex
from tests.unit.storage_node.test_service import CONTEXT, one_node
from tests.waiting import wait_until

TOPIC = "t"


def _keyed(queue_id: int, first: int, count: int) -> list[Message]:
    """Messages ``first..first+count-1``; message i has keys ``k<i % 7>`` and ``all``."""
    return [
        Message(TOPIC, queue_id, f"id-{queue_id}-{i}", b"b%d" % i, keys=[f"k{i % 7}", "all"])
        for i in range(first, first + count)
    ]


async def _fill(node: Any, queue_id: int, count: int, batch: int = 500) -> None:
    for first in range(0, count, batch):
        request = AppendRequest(TOPIC, queue_id, _keyed(queue_id, first, min(batch, count - first)))
        await node.append(request, CONTEXT)


def _group(node: Any, queue_id: int) -> int:
    return int(node._group_of(TOPIC, queue_id))


async def test_a_key_is_found_in_sealed_chunks_and_the_open_one(tmp_path: Path) -> None:
    count = 2 * CHUNK_OFFSETS + 300  # two sealed chunks and an open one
    async with one_node(tmp_path) as node:
        await _fill(node, 0, count)
        request = QueryMessagesRequest(_group(node, 0), TOPIC, key="k3", limit=10_000)
        response = await node.query_messages(request, CONTEXT)
        assert response.complete
        expected = [i for i in range(count) if i % 7 == 3]
        assert [m.queue_offset for m in response.messages] == expected
        assert [m.message.message_id for m in response.messages] == [f"id-0-{i}" for i in expected]
        assert all("k3" in m.message.keys for m in response.messages)
        assert response.scanned == count  # every record read once: two chunks indexed, the rest
        assert len(node.key_index) == 2  # the sealed chunks are cached, the open one is not

        again = await node.query_messages(request, CONTEXT)
        assert again.messages == response.messages
        assert again.scanned == 300  # only the open chunk is read again


async def test_a_message_id_is_found_without_its_topic(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await _fill(node, 0, 40)
        await _fill(node, 1, 40)
        group_id = _group(node, 1)
        response = await node.query_messages(
            QueryMessagesRequest(group_id, message_id="id-1-17"), CONTEXT
        )
        assert [
            (m.message.topic, m.message.queue_id, m.queue_offset) for m in response.messages
        ] == [(TOPIC, 1, 17)]
        missing = await node.query_messages(
            QueryMessagesRequest(group_id, message_id="nowhere"), CONTEXT
        )
        assert missing.messages == []
        assert missing.complete


async def test_the_time_range_selects_by_store_time(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await _fill(node, 0, 50)
        before_ms = int(time.time() * 1000)
        wait_until(lambda: int(time.time() * 1000) > before_ms, 5, "the clock to move")
        middle_ms = int(time.time() * 1000)
        await node.append(AppendRequest(TOPIC, 0, _keyed(0, 50, 50)), CONTEXT)
        group_id = _group(node, 0)
        late = await node.query_messages(
            QueryMessagesRequest(group_id, TOPIC, key="all", begin_ms=middle_ms, limit=1000),
            CONTEXT,
        )
        assert [m.queue_offset for m in late.messages] == list(range(50, 100))
        early = await node.query_messages(
            QueryMessagesRequest(group_id, TOPIC, key="all", end_ms=before_ms, limit=1000),
            CONTEXT,
        )
        assert [m.queue_offset for m in early.messages] == list(range(50))
        assert all(m.store_timestamp_ms <= before_ms for m in early.messages)


async def test_the_limit_and_the_scan_budget_bound_a_query(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await _fill(node, 0, 3 * CHUNK_OFFSETS)
        group_id = _group(node, 0)
        limited = await node.query_messages(
            QueryMessagesRequest(group_id, TOPIC, key="all", limit=5), CONTEXT
        )
        assert [m.queue_offset for m in limited.messages] == [0, 1, 2, 3, 4]
        node.key_index = KeyIndex(chunks_max=1, scan_max=CHUNK_OFFSETS)
        budgeted = await node.query_messages(
            QueryMessagesRequest(group_id, TOPIC, key="k1", limit=10_000), CONTEXT
        )
        assert not budgeted.complete  # stopped after one chunk: narrow the range
        assert budgeted.scanned == CHUNK_OFFSETS
        assert [m.queue_offset for m in budgeted.messages] == [
            i for i in range(CHUNK_OFFSETS) if i % 7 == 1
        ]
        node.key_index = KeyIndex(chunks_max=1)
        await node.query_messages(QueryMessagesRequest(group_id, TOPIC, key="k1"), CONTEXT)
        assert len(node.key_index) == 1  # the cache never holds more than chunks_max


@pytest.mark.parametrize(
    ("fields", "cause"),
    [
        ({"message_id": "a", "key": "b"}, "exactly one"),
        ({}, "exactly one"),
        ({"key": "b", "limit": 0}, "limit"),
        ({"key": "b", "begin_ms": 10, "end_ms": 5}, "before it begins"),
    ],
)
async def test_a_bad_query_is_refused_naming_its_cause(
    tmp_path: Path, fields: dict[str, Any], cause: str
) -> None:
    async with one_node(tmp_path) as node:
        with pytest.raises(BadCommand, match=cause):
            await node.query_messages(
                QueryMessagesRequest(_group(node, 0), TOPIC, **fields), CONTEXT
            )


def test_a_key_index_needs_room() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        key_index.KeyIndex(chunks_max=0)


async def test_group_progress_reads_pop_and_committed_offsets_alike(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await _fill(node, 0, 10)
        group_id = _group(node, 0)
        received = await node.receive(ReceiveRequest("pop", TOPIC, 0, 4, 60_000), CONTEXT)
        handles = [m.handle for m in received.messages]
        await node.ack(AckRequest("pop", TOPIC, 0, handles[:2]), CONTEXT)
        await node.commit_offset(CommitOffsetRequest("pull", TOPIC, 0, 7), CONTEXT)

        responses = {}
        for group in ("pop", "pull", "never"):
            response = await node.group_progress(
                GroupProgressRequest(group_id, group, TOPIC), CONTEXT
            )
            responses[group] = response.queues

        def progress(group: str) -> list[tuple[str, int, int, int, int, int]]:
            return [
                (p.topic, p.queue_id, p.end_offset, p.consumer_offset, p.in_flight, p.lag)
                for p in responses[group]
            ]

        # pop: offsets 0 and 1 acked, 2 and 3 in flight: done up to 2, 8 not yet done.
        assert progress("pop") == [(TOPIC, 0, 10, 2, 2, 8)]
        # pull: the committed offset.
        assert progress("pull") == [(TOPIC, 0, 10, 7, 0, 3)]
        assert progress("never") == [(TOPIC, 0, 10, -1, 0, 10)]
        stored = await node.read(ReadRequest(TOPIC, 0, 0, 10), CONTEXT)
        times = [m.store_timestamp_ms for m in stored.messages]
        assert responses["pop"][0].last_consumed_ms == times[1]
        assert responses["pull"][0].last_consumed_ms == times[6]
        assert responses["never"][0].last_consumed_ms == -1

        # Without a topic: only the queues the group has state in.
        consumed = await node.group_progress(GroupProgressRequest(group_id, "pop"), CONTEXT)
        assert [(p.topic, p.queue_id) for p in consumed.queues] == [(TOPIC, 0)]
        nothing = await node.group_progress(GroupProgressRequest(group_id, "never"), CONTEXT)
        assert nothing.queues == []
        with pytest.raises(BadCommand, match="consumer group"):
            await node.group_progress(GroupProgressRequest(group_id, ""), CONTEXT)
