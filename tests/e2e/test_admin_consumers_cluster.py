"""``rip5 admin message show|query``, ``group lag|reset-offset`` and ``dlq resend``
against a real cluster.

One cluster for the module: 1 nameserver, 3 storage nodes (8 raft groups), 1 broker;
topics and groups created through the nameserver. Messages are sent and consumed
by the official client (``tests/e2e/admin_client.py``, in its own interpreter)
through the broker; the admin commands run as an operator types them (the
``rip5`` click command, ``--json``) against the nameserver and storage nodes.
Every topic and group belongs to one test.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner

from protocol import storage_api as st
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from rip5 import cli
from rip5.admin_storage import RESEND_CURSOR_GROUP, ClusterAdmin
from tests.e2e.cluster import CLUSTER, LocalCluster, official_client_step, running_cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.alone]

NORMAL = 1
CALL: dict[str, Any] = {"metadata": (("x-mq-client-id", "e2e-admin-client"),), "timeout": 20}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster (see the module docstring)."""
    with running_cluster(
        tmp_path_factory.mktemp("admin-cluster"),
        {
            "orders": (4, NORMAL),
            "progress": (2, NORMAL),
            "rewind": (2, NORMAL),
            "poison": (2, NORMAL),
            "pulled": (1, NORMAL),
        },
        {
            "lag-pop": (False, 16),
            "lag-pull": (False, 16),
            "rewinder": (False, 16),
            "dlq-src": (False, 2),
        },
    ) as local:
        yield local


def client(cluster: LocalCluster, scenario: str, *args: object) -> dict[str, Any]:
    """One step of the official client against the broker."""
    return official_client_step(cluster, "tests.e2e.admin_client", scenario, *args)


def admin(cluster: LocalCluster, *argv: str, code: int = 0) -> Any:
    """``rip5 admin ARGV --nameserver ... --json``: its JSON document (exit ``code``)."""
    result = CliRunner().invoke(
        cli.main, ["admin", *argv, "--nameserver", cluster.nameserver_address, "--json"]
    )
    assert result.exit_code == code, f"{argv}: exit {result.exit_code}\n{result.output}"
    return json.loads(result.stdout) if result.stdout.strip() else None


def admin_text(cluster: LocalCluster, *argv: str, code: int = 0) -> str:
    """``rip5 admin ARGV --nameserver ...`` for people: its output (exit ``code``)."""
    result = CliRunner().invoke(
        cli.main, ["admin", *argv, "--nameserver", cluster.nameserver_address]
    )
    assert result.exit_code == code, f"{argv}: exit {result.exit_code}\n{result.output}"
    return result.output


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()


def test_show_and_query_find_messages_sent_through_the_broker(cluster: LocalCluster) -> None:
    ids = client(cluster, "send_keyed", "orders", 12)["ids"]

    found = admin(cluster, "message", "query", "--topic", "orders", "--key", "key-1")
    assert found["complete"]
    assert sorted(m["message_id"] for m in found["messages"]) == sorted(ids[1::3])
    assert all("key-1" in m["keys"] for m in found["messages"])

    # By id alone: every raft group is asked; the message names where it is stored.
    shown = admin(cluster, "message", "show", ids[4])
    (message,) = shown["messages"]
    assert message["message_id"] == ids[4]
    assert message["topic"] == "orders"
    assert 0 <= message["queue_id"] < 4
    assert message["queue_offset"] >= 0
    assert message["body_preview"] == "body-4"
    assert message["tag"] == "admin"
    assert sorted(message["keys"]) == ["all", "key-1"]
    assert message["properties"]["origin"] == "admin-test"
    assert message["store_timestamp_ms"] > 0
    assert admin(cluster, "message", "show", ids[4], "--topic", "orders") == shown

    # The time range: nothing stored after the last message; all of them up to it.
    everything = admin(cluster, "message", "query", "--topic", "orders", "--key", "all")
    last_ms = max(m["store_timestamp_ms"] for m in everything["messages"])
    assert sorted(m["message_id"] for m in everything["messages"]) == sorted(ids)
    later = _iso(last_ms + 1)
    none = admin(cluster, "message", "query", "--topic", "orders", "--key", "all", "--begin", later)
    assert none["messages"] == []
    upto = admin(cluster, "message", "query", "--topic", "orders", "--key", "all", "--end", later)
    assert len(upto["messages"]) == 12

    text = admin_text(cluster, "message", "show", ids[4])
    assert f"message {ids[4]}" in text
    assert "property origin" in text
    assert "NORMAL" in text
    assert "body-4" in text
    assert " s ago" in text or " min ago" in text
    assert "orders key key-1: 4" in admin_text(
        cluster, "message", "query", "--topic", "orders", "--key", "key-1"
    )

    missing = admin(cluster, "message", "show", "no-such-id", code=1)
    assert missing["messages"] == []
    refused = admin_text(cluster, "message", "query", "--topic", "nosuch", "--key", "k", code=1)
    assert "NOT_FOUND" in refused
    assert "nosuch" in refused


def _lag(cluster: LocalCluster, group: str, topic: str) -> list[dict[str, Any]]:
    queues: list[dict[str, Any]] = admin(cluster, "group", "lag", group, "--topic", topic)["queues"]
    assert [q["queue_id"] for q in queues] == [0, 1]
    return queues


def _total(queues: list[dict[str, Any]], field: str) -> int:
    return sum(q[field] for q in queues)


def test_lag_is_right_for_pop_consumers(cluster: LocalCluster) -> None:
    client(cluster, "send_keyed", "progress", 10)
    seen = client(cluster, "consume", "lag-pop", "progress", 6, 4)
    assert len(seen["received"]) == 6

    queues = _lag(cluster, "lag-pop", "progress")
    assert _total(queues, "broker_offset") == 10
    assert _total(queues, "lag") == 6  # 4 acked
    assert _total(queues, "in_flight") == 2  # received, not acked, invisible for a minute
    for q in queues:
        # Done below the consumer offset; the last consumed time is of the message below.
        assert q["consumer_offset"] <= q["broker_offset"]
        assert (q["last_consumed_ms"] > 0) == (q["consumer_offset"] > 0)
    # Without --topic: every queue of the topics the group consumed, a queue it never
    # popped from too (a receive takes its batch from the first queue holding
    # messages, and the client's sends need not split evenly between the queues).
    consumed = admin(cluster, "group", "lag", "lag-pop")["queues"]
    assert {q["topic"] for q in consumed} == {"progress"}
    assert _total(consumed, "lag") == 6
    assert "consumer group lag-pop: lag 6" in admin_text(cluster, "group", "lag", "lag-pop")

    refused = admin_text(cluster, "group", "lag", "nobody", code=1)
    assert "NOT_FOUND" in refused
    assert "nobody" in refused


def test_lag_is_right_for_pull_consumers(cluster: LocalCluster) -> None:
    """A pull consumer (PullMessage, UpdateOffset through the broker: our own gRPC v2
    stub, as the official Python client has no pull consumer) commits into the
    consumption state pop consumers use: lag reads it."""
    channel = grpc.insecure_channel(f"127.0.0.1:{cluster.broker_port()}")
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(6):
            message = pb.Message(
                topic=pb.Resource(name="pulled"),
                body=b"pulled %d" % i,
                system_properties=pb.SystemProperties(
                    message_id=f"01{time.time_ns():030X}",
                    message_type=pb.NORMAL,
                    body_encoding=pb.IDENTITY,
                ),
            )
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]), **CALL)
            assert sent.status.code == pb.OK, sent.status
        queue = pb.MessageQueue(topic=pb.Resource(name="pulled"), id=0)
        pull = spb.PullMessageRequest(
            group=pb.Resource(name="lag-pull"), message_queue=queue, offset=0, batch_size=4
        )
        pull.long_polling_timeout.FromSeconds(5)
        answers = list(stub.PullMessage(pull, **CALL))
        offsets = [
            a.message.system_properties.queue_offset for a in answers if a.message.topic.name
        ]
        (next_offset,) = [
            a.next_offset for a in answers if a.WhichOneof("content") == "next_offset"
        ]
        assert (offsets, next_offset) == ([0, 1, 2, 3], 4)
        commit = spb.UpdateOffsetRequest(
            group=pb.Resource(name="lag-pull"), message_queue=queue, offset=next_offset
        )
        assert stub.UpdateOffset(commit, **CALL).status.code == pb.OK

    (q,) = admin(cluster, "group", "lag", "lag-pull", "--topic", "pulled")["queues"]
    assert (q["broker_offset"], q["consumer_offset"], q["in_flight"], q["lag"]) == (6, 4, 0, 2)
    assert q["last_consumed_ms"] > 0  # the store time of offset 3


async def _commit(
    admin_api: ClusterAdmin, group_id: int, group: str, topic: str, queue_id: int, offset: int
) -> None:
    request = st.CommitOffsetRequest(group, topic, queue_id, offset)
    await admin_api.call_group(
        group_id, lambda stub, ms: stub.commit_offset(request, timeout_ms=ms)
    )


def test_reset_offset_makes_the_group_receive_again(cluster: LocalCluster) -> None:
    ids = client(cluster, "send_keyed", "rewind", 8)["ids"]
    first = client(cluster, "consume", "rewinder", "rewind", 8, 5)  # 3 left in flight
    assert sorted(first["received"]) == sorted(ids)
    assert _total(_lag(cluster, "rewinder", "rewind"), "in_flight") == 3

    reset = admin(
        cluster, "group", "reset-offset", "rewinder", "--topic", "rewind", "--to", "earliest"
    )
    assert [q["after"] for q in reset["queues"]] == [0, 0]
    queues = _lag(cluster, "rewinder", "rewind")
    assert _total(queues, "lag") == 8
    assert _total(queues, "in_flight") == 0  # leases dropped: in flight messages come again
    again = client(cluster, "consume", "rewinder", "rewind", 8, 8)
    assert sorted(again["received"]) == sorted(ids)  # well before their minute was over
    assert _total(_lag(cluster, "rewinder", "rewind"), "lag") == 0

    # To a time: every message stored at or after it is fresh again.
    stored = admin(cluster, "message", "query", "--topic", "rewind", "--key", "all")["messages"]
    times = sorted(m["store_timestamp_ms"] for m in stored)
    middle = times[len(times) // 2]
    text = admin_text(
        cluster, "group", "reset-offset", "rewinder", "--topic", "rewind", "--to-time", _iso(middle)
    )
    assert "consumer group rewinder reset on rewind" in text
    assert "those at or after the new offsets come again" in text
    assert _total(_lag(cluster, "rewinder", "rewind"), "lag") == sum(t >= middle for t in times)

    latest = admin(
        cluster, "group", "reset-offset", "rewinder", "--topic", "rewind", "--to", "latest"
    )
    assert [q["after"] for q in latest["queues"]] == [q["broker_offset"] for q in queues]
    assert _total(_lag(cluster, "rewinder", "rewind"), "lag") == 0

    bad = CliRunner().invoke(
        cli.main,
        ["admin", "group", "reset-offset", "rewinder", "--topic", "rewind", "--to-time", "noon"],
    )
    assert bad.exit_code == 2
    assert "--to-time: 'noon' is not an ISO 8601 time" in bad.output


def test_dlq_resend_brings_dead_letters_back_to_their_topic(cluster: LocalCluster) -> None:
    seen = client(cluster, "dead_letter", "dlq-src", "poison", 3)
    ids = seen["ids"]
    assert all(attempts == [1, 2] for attempts in seen["attempts"].values())

    # Moved to the dead-letter queue by the receives after the last attempt.
    def all_dead() -> bool:
        return all(
            admin_show_topics(cluster, message_id) == ["%DLQ%dlq-src", "poison"]
            for message_id in ids
        )

    wait_until(all_dead, 30, "the dead letters")

    resent = admin(cluster, "dlq", "resend", "dlq-src")
    assert resent["resent"] == 3
    assert resent["by_topic"] == {"poison": 3}
    assert resent["duplicates"] == 0
    assert admin(cluster, "dlq", "resend", "dlq-src")["resent"] == 0  # a rerun resends nothing
    assert "resent 0 dead letters of dlq-src" in admin_text(cluster, "dlq", "resend", "dlq-src")

    # Back in their topic with their keys and properties, under new ids naming the
    # originals: the group receives them anew.
    found = admin(cluster, "message", "query", "--topic", "poison", "--key", "poison-key")
    back = [m for m in found["messages"] if m["message_id"] not in ids]
    assert sorted(m["properties"]["ORIGIN_MESSAGE_ID"] for m in back) == sorted(ids)
    for message in back:
        origin = ids.index(message["properties"]["ORIGIN_MESSAGE_ID"])
        assert message["properties"]["origin"] == "admin-test"
        assert message["body_preview"] == f"poison-{origin}"
        assert message["tag"] == "poison"
        assert message["dead_letter_topic"] == ""

    # A run interrupted between its appends and its cursor commit: the rerun appends the
    # same dead letters under the same ids, and the storage's dedup window drops them.
    async def rewind_cursor(admin_api: ClusterAdmin) -> None:
        for group_id in await admin_api.group_ids():
            await _commit(admin_api, group_id, RESEND_CURSOR_GROUP, "%DLQ%dlq-src", group_id, 0)

    asyncio.run(ClusterAdmin.using([cluster.nameserver_address], CLUSTER, rewind_cursor))
    rerun = admin(cluster, "dlq", "resend", "dlq-src")
    assert (rerun["resent"], rerun["duplicates"]) == (3, 3)
    again = admin(cluster, "message", "query", "--topic", "poison", "--key", "poison-key")
    assert len(again["messages"]) == 6  # the 3 originals and the 3 resent, nothing more

    got = client(cluster, "consume", "dlq-src", "poison", 3, 3)
    assert sorted(got["received"]) == sorted(m["message_id"] for m in back)
    assert got["attempts"] == [1, 1, 1]


def admin_show_topics(cluster: LocalCluster, message_id: str) -> list[str]:
    """The topics where ``message show`` finds ``message_id`` (none: [])."""
    argv = ["admin", "message", "show", message_id, "--nameserver", cluster.nameserver_address]
    result = CliRunner().invoke(cli.main, [*argv, "--json"])
    return sorted(m["topic"] for m in json.loads(result.stdout)["messages"])
