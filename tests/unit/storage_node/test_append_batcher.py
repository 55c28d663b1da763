"""Appends to one group that arrive together go into one raft entry (storage_node.append_batcher).

Over the one-node driver of test_service: the handlers of appends started
together all join their group's open batch before the driver's next round
proposes it, so the counts below are exact.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from protocol.storage_api import AppendRequest, AppendResponse, Message
from storage_node.errors import BadCommand
from storage_node.service import StorageNode
from tests.unit.storage_node.test_service import CONTEXT, one_node


def _queues_of_one_group(node: StorageNode, count: int) -> list[int]:
    first = node._group_of("t", 0)
    return [q for q in range(64) if node._group_of("t", q) == first][:count]


def _append(queue_id: int, ids: list[str]) -> AppendRequest:
    return AppendRequest(
        "t", queue_id, [Message("t", queue_id, i, b"body " + i.encode()) for i in ids]
    )


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
