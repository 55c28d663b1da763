"""``rip5 admin`` for consumers: how times are read and shown, body previews, and which
queues ``group lag`` reads (over a real one-node storage service)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from angelia_rpc import AngeliaError, errors
from protocol import errors as codes
from protocol import nameserver_api as ns
from protocol import storage_api as st
from rip5 import admin_consumers, cli
from rip5.admin_storage import ClusterAdmin, Progress
from storage_node.service import StorageNode
from tests.unit.storage_node.test_service import CONTEXT, one_node

NOW_MS = 1_800_000_000_000


def test_iso_times_are_utc_unless_they_name_a_zone() -> None:
    assert admin_consumers.parse_time_ms("1970-01-01T00:00:01", "--begin", 0) == 1000
    assert admin_consumers.parse_time_ms("1970-01-01T01:00:01+01:00", "--begin", 0) == 1000
    assert admin_consumers.parse_time_ms(None, "--begin", 7) == 7


def test_a_body_preview_is_text_or_hex_and_says_what_it_left_out() -> None:
    assert admin_consumers.body_preview(b"hello") == "hello"
    assert admin_consumers.body_preview(b"\xff\x00") == "ff 00"
    long = admin_consumers.body_preview(b"a" * 300)
    assert long == "a" * 256 + " ... (44 more bytes)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["message", "query", "--topic", "t", "--key", "k", "--begin", "soon"], "--begin: 'soon'"),
        (["group", "reset-offset", "g", "--topic", "t"], "give one of --to"),
        (
            ["group", "reset-offset", "g", "--topic", "t", "--to", "latest", "--to-time", "x"],
            "give one of --to",
        ),
        (["group", "lag", "bad name!"], "bad name!"),
        (["message", "query", "--topic", "bad topic!", "--key", "k"], "bad topic!"),
    ],
)
def test_bad_options_are_refused_before_anything_is_sent(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.main, ["admin", *argv, "--nameserver", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert message in result.output


class _Groups:
    """Raft groups answering a query: each its messages, or a failure."""

    def __init__(self, answers: dict[int, st.QueryMessagesResponse | AngeliaError]) -> None:
        self.answers = answers

    async def group_ids(self) -> list[int]:
        return sorted(self.answers)

    async def call_group(self, group_id: int, method: object) -> st.QueryMessagesResponse:
        answer = self.answers[group_id]
        if isinstance(answer, AngeliaError):
            raise answer
        return answer


def _admin(answers: dict[int, st.QueryMessagesResponse | AngeliaError]) -> ClusterAdmin:
    admin_api = ClusterAdmin(None, None, "c")  # type: ignore[arg-type]
    groups = _Groups(answers)
    admin_api.group_ids = groups.group_ids  # type: ignore[method-assign]
    admin_api.call_group = groups.call_group  # type: ignore[method-assign,assignment]
    return admin_api


def _stored(message_id: str, store_ms: int) -> st.StoredMessage:
    return st.StoredMessage(0, store_ms, st.Message("t", 0, message_id, b""))


def test_a_query_shows_what_the_groups_that_answered_found_and_names_the_others() -> None:
    admin_api = _admin(
        {
            1: st.QueryMessagesResponse([_stored("b", 20)], 5, True),
            2: errors.unavailable("node 3 is down"),
            3: st.QueryMessagesResponse([_stored("a", 10)], 5, False),
        }
    )
    outcome = asyncio.run(admin_api.query_messages(message_id="x"))
    assert [(f.group_id, f.stored.message.message_id) for f in outcome.found] == [
        (3, "a"),
        (1, "b"),
    ]
    assert not outcome.complete  # group 3 ran out of budget
    assert outcome.unanswered == {2: "UNAVAILABLE: node 3 is down"}
    document = admin_consumers.outcome_json(outcome)
    assert document["unanswered_groups"] == {"2": "UNAVAILABLE: node 3 is down"}


def test_a_query_no_group_answered_is_the_first_failure() -> None:
    admin_api = _admin({1: errors.unavailable("down"), 2: errors.unavailable("down too")})
    with pytest.raises(AngeliaError, match="down"):
        asyncio.run(admin_api.query_messages(message_id="x"))


class _Storage:
    """A storage node's raft groups behind ``ClusterAdmin.call_group``."""

    def __init__(self, node: StorageNode) -> None:
        self.node = node

    async def group_progress(
        self, request: st.GroupProgressRequest, timeout_ms: int
    ) -> st.GroupProgressResponse:
        return await self.node.group_progress(request, CONTEXT)


def _on_storage(node: StorageNode, routed: dict[str, int]) -> ClusterAdmin:
    """An admin of a cluster whose raft groups ``node`` serves, whose nameserver knows
    the topics ``routed`` (name -> queue count) and every consumer group."""
    admin_api = ClusterAdmin(None, None, "c")  # type: ignore[arg-type]
    storage = _Storage(node)

    async def route(topic: str) -> ns.RouteResponse:
        if topic not in routed:
            raise AngeliaError(codes.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        queues = [
            ns.QueueRouteInfo(q, node._group_of(topic, q), 1, None, [])
            for q in range(routed[topic])
        ]
        return ns.RouteResponse(ns.TopicInfo(topic, "c", routed[topic], 1, 0, 6), queues, 1)

    async def require_group(consumer_group: str) -> None:
        return None

    async def group_ids() -> list[int]:
        return sorted(node.replicas)

    async def call_group(group_id: int, method: Any) -> Any:
        return await method(storage, 1_000)

    admin_api.route = route  # type: ignore[method-assign]
    admin_api.require_group = require_group  # type: ignore[method-assign]
    admin_api.group_ids = group_ids  # type: ignore[method-assign]
    admin_api.call_group = call_group  # type: ignore[method-assign]
    return admin_api


async def test_lag_without_a_topic_counts_every_queue_of_the_topics_consumed(
    tmp_path: Path,
) -> None:
    """A receive takes its batch from the first queue holding messages, so a group can
    consume one queue of a topic before it touches the others: those count in full."""
    async with one_node(tmp_path) as node:
        for queue_id, count in ((0, 5), (1, 3)):
            messages = [st.Message("t", queue_id, f"t{queue_id}-{i}", b"") for i in range(count)]
            await node.append(st.AppendRequest("t", queue_id, messages), CONTEXT)
        received = await node.receive(st.ReceiveRequest("pop", "t", 0, 2, 60_000), CONTEXT)
        await node.ack(st.AckRequest("pop", "t", 0, [received.messages[0].handle]), CONTEXT)
        # A topic deleted since the group consumed it: its queues the group has state in.
        await node.append(st.AppendRequest("gone", 0, [st.Message("gone", 0, "g", b"")]), CONTEXT)
        await node.commit_offset(st.CommitOffsetRequest("pop", "gone", 0, 1), CONTEXT)
        admin_api = _on_storage(node, {"t": 2})

        def lag(rows: list[Progress]) -> list[tuple[str, int, int, int, int, int]]:
            """Per queue: topic, queue id, end offset, consumer offset, in flight, lag."""
            queues = [r.queue for r in rows]
            return [
                (q.topic, q.queue_id, q.end_offset, q.consumer_offset, q.in_flight, q.lag)
                for q in queues
            ]

        topic_t = [("t", 0, 5, 1, 1, 4), ("t", 1, 3, -1, 0, 3)]  # queue 1 never popped
        assert lag(await admin_api.group_lag("pop", "t")) == topic_t
        assert lag(await admin_api.group_lag("pop")) == [("gone", 0, 1, 1, 0, 0), *topic_t]
        assert [r.group_id for r in await admin_api.group_lag("pop")] == [
            node._group_of("gone", 0),
            node._group_of("t", 0),
            node._group_of("t", 1),
        ]
        assert await admin_api.group_lag("never") == []
