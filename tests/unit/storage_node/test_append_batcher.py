"""Appends to one group that arrive together go into one raft entry (storage_node.append_batcher).

Over the one-node driver of test_service: the handlers of appends started
together all join their group's open batch before the driver's next round
proposes it, so the counts below are exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from protocol.records import MessageRecord, pack_records
from protocol.storage_api import AppendRequest, AppendResponse, Message, ReadRequest, to_record
from storage_node import append_batcher
from storage_node.errors import BadCommand
from storage_node.partition.commands import encode
from storage_node.service import StorageNode
from tests.unit.storage_node.test_service import CONTEXT, one_node


def _queues_of_one_group(node: StorageNode, count: int) -> list[int]:
    first = node._group_of("t", 0)
    return [q for q in range(64) if node._group_of("t", q) == first][:count]


def _append(queue_id: int, ids: list[str]) -> AppendRequest:
    return AppendRequest(
        "t", queue_id, [Message("t", queue_id, i, b"body " + i.encode()) for i in ids]
    )


def _packed(queue_id: int, ids: list[str]) -> AppendRequest:
    """The same append as :func:`_append`, its messages packed as records."""
    records = [to_record(m) for m in _append(queue_id, ids).messages]
    return AppendRequest("t", queue_id, records=pack_records(records))


async def test_appends_of_one_group_share_an_entry_and_each_gets_its_own_outcomes(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        q1, q2 = _queues_of_one_group(node, 2)
        other = next(q for q in range(64) if node._group_of("t", q) != node._group_of("t", q1))
        batches, appends = node.batcher.batches, node.batcher.appends
        responses = await asyncio.gather(
            node.append(_append(q1, ["a1", "a2"]), CONTEXT),
            node.append(_append(q2, ["b1"]), CONTEXT),
            node.append(_append(q1, ["a3"]), CONTEXT),
            node.append(_append(other, ["c1", "c2"]), CONTEXT),
        )
        assert node.batcher.appends - appends == 4
        assert node.batcher.batches - batches == 2  # one entry per group
        assert [[(o.message_id, o.queue_offset) for o in r.outcomes] for r in responses] == [
            [("a1", 0), ("a2", 1)],
            [("b1", 0)],
            [("a3", 2)],
            [("c1", 0), ("c2", 1)],
        ]
        # One store time per entry.
        assert responses[0].store_timestamp_ms == responses[1].store_timestamp_ms


async def test_a_message_id_repeated_across_joined_appends_is_a_duplicate(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        first, again = await asyncio.gather(
            node.append(_append(q1, ["m1", "m2"]), CONTEXT),
            node.append(_append(q1, ["m2", "m3"]), CONTEXT),
        )
        assert [(o.message_id, o.queue_offset, o.duplicate) for o in first.outcomes] == [
            ("m1", 0, False),
            ("m2", 1, False),
        ]
        assert [(o.message_id, o.queue_offset, o.duplicate) for o in again.outcomes] == [
            ("m2", 1, True),
            ("m3", 2, False),
        ]


async def test_a_batch_full_of_body_bytes_leaves_the_next_append_to_another_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        monkeypatch.setattr(node.batcher, "_body_bytes_max", 12)
        batches = node.batcher.batches
        responses = await asyncio.gather(
            node.append(_append(q1, ["x1"]), CONTEXT),  # 7 body bytes
            node.append(_append(q1, ["x2"]), CONTEXT),  # 14 together: a second batch
        )
        assert node.batcher.batches - batches == 2
        assert [r.outcomes[0].queue_offset for r in responses] == [0, 1]


async def test_a_bad_append_fails_alone(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        good, bad = await asyncio.gather(
            node.append(_append(q1, ["fine"]), CONTEXT),
            node.append(_append(q1, [""]), CONTEXT),  # no message id
            return_exceptions=True,
        )
        assert isinstance(bad, BadCommand)
        assert isinstance(good, AppendResponse)
        assert [o.queue_offset for o in good.outcomes] == [0]


async def test_an_append_the_encoding_refuses_fails_alone(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        too_big = Message("t", q1, "far", b"x", delivery_timestamp_ms=2**70)
        good, bad = await asyncio.gather(
            node.append(_append(q1, ["fine"]), CONTEXT),
            node.append(AppendRequest("t", q1, [too_big]), CONTEXT),
            return_exceptions=True,
        )
        assert isinstance(bad, BadCommand)
        assert isinstance(good, AppendResponse)
        assert [o.queue_offset for o in good.outcomes] == [0]


async def test_packed_appends_join_with_message_appends_and_read_back_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[object] = []  # the batches encoded from their records

    def encode_counted(command: Any) -> bytes:
        encoded.append(command)
        return encode(command)

    monkeypatch.setattr(append_batcher, "encode", encode_counted)
    async with one_node(tmp_path) as node:
        q1, q2 = _queues_of_one_group(node, 2)
        # All packed: the entry is their bytes joined. Then packed and message
        # appends in one batch: the entry is encoded from the records.
        for appends in (
            [(_packed, q1, ["p1", "p2"]), (_packed, q2, ["p3"])],
            [(_packed, q1, ["p4"]), (_append, q2, ["m1", "m2"]), (_packed, q1, ["p5"])],
        ):
            batches = node.batcher.batches
            encoded.clear()
            responses = await asyncio.gather(
                *(node.append(build(queue, ids), CONTEXT) for build, queue, ids in appends)
            )
            assert node.batcher.batches - batches == 1
            all_packed = all(build is _packed for build, _queue, _ids in appends)
            assert len(encoded) == (0 if all_packed else 1)  # all packed: their bytes joined
            assert [[o.message_id for o in r.outcomes] for r in responses] == [
                ids for _build, _queue, ids in appends
            ]
        for queue, ids in ((q1, ["p1", "p2", "p4", "p5"]), (q2, ["p3", "m1", "m2"])):
            read = await node.read(ReadRequest("t", queue, 0), CONTEXT)
            assert [m.message for m in read.messages] == _append(queue, ids).messages
            assert [m.queue_offset for m in read.messages] == list(range(len(ids)))


async def test_packed_records_of_an_older_writer_are_stored_as_current_records(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        old = msgpack.packb([["t", q1, "old", b"body"]])
        (response,) = await asyncio.gather(
            node.append(AppendRequest("t", q1, records=old), CONTEXT)
        )
        assert [o.queue_offset for o in response.outcomes] == [0]
        read = await node.read(ReadRequest("t", q1, 0), CONTEXT)
        assert [m.message for m in read.messages] == [Message("t", q1, "old", b"body")]


@pytest.mark.parametrize(
    ("request_of", "message"),
    [
        (lambda q: AppendRequest("t", q, records=b"\xc1"), "records: the records are not"),
        (lambda q: AppendRequest("t", q, records=pack_records([])), "at least one message"),
        (
            lambda q: AppendRequest(
                "t", q, records=pack_records([MessageRecord("t", q + 1, "m", b"")])
            ),
            "not t:",
        ),
        (
            lambda q: AppendRequest(
                "t", q, [Message("t", q, "a", b"")], pack_records([MessageRecord("t", q, "b", b"")])
            ),
            "not both",
        ),
    ],
)
async def test_bad_packed_appends_are_refused_and_store_nothing(
    tmp_path: Path, request_of: Callable[[int], AppendRequest], message: str
) -> None:
    async with one_node(tmp_path) as node:
        (q1,) = _queues_of_one_group(node, 1)
        with pytest.raises(BadCommand, match=message):
            await node.append(request_of(q1), CONTEXT)
        read = await node.read(ReadRequest("t", q1, 0), CONTEXT)
        assert read.messages == []
