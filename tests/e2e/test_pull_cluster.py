"""Offset-based consumption (PullMessage and the offset RPCs) against a real rip5 cluster.

One cluster for the module: 1 nameserver, 3 storage nodes replicating 8 raft
groups, 2 brokers; topics and groups created through the nameserver. The
official Python client (5.1.2) has no pull consumer, so the calls go through
our own gRPC v2 stubs, as any client's would. Every test uses its own topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from loadtest.client import RocketClient
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.e2e.cluster import LocalCluster

pytestmark = pytest.mark.integration

NORMAL = 1
META = (("x-mq-client-id", "e2e-pull-client"),)
POLL_S = 5  # the shortest long poll a broker plans (polling.POLL_MS_MIN)
Stub = service_pb2_grpc.MessagingServiceStub


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster, with its topics (one queue each but "spread") and groups."""
    local = LocalCluster(tmp_path_factory.mktemp("pull-cluster"), brokers=2)
    try:
        local.start()
        local.create(
            {
                "spread": (4, NORMAL),
                "tail": (1, NORMAL),
                "timed": (1, NORMAL),
                "shared": (1, NORMAL),
                "mixed": (1, NORMAL),
                "recommit": (1, NORMAL),
                "range": (1, NORMAL),
                "filtered": (1, NORMAL),
                "loadtest": (1, NORMAL),
            },
            {"puller": (False, 3), "mixed": (False, 3)},
        )
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


@pytest.fixture(scope="module")
def stubs(cluster: LocalCluster) -> Iterator[tuple[Stub, Stub]]:
    """A stub on each broker."""
    channels = [grpc.insecure_channel(f"127.0.0.1:{cluster.broker_port(i)}") for i in (0, 1)]
    try:
        yield Stub(channels[0]), Stub(channels[1])
    finally:
        for channel in channels:
            channel.close()


def _queue(topic: str, queue_id: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def _send(stub: Stub, topic: str, count: int, tag: str = "") -> list[str]:
    """Send ``count`` messages (one call each); their ids."""
    ids = []
    for _ in range(count):
        message_id = f"01{time.time_ns():030X}"
        message = pb.Message(
            topic=pb.Resource(name=topic),
            body=b"pulled " + message_id.encode(),
            system_properties=pb.SystemProperties(
                message_id=message_id, message_type=pb.NORMAL, body_encoding=pb.IDENTITY, tag=tag
            ),
        )
        sent = stub.SendMessage(
            spb.SendMessageRequest(messages=[message]), metadata=META, timeout=20
        )
        assert sent.status.code == pb.OK, sent.status
        ids.append(message_id)
    return ids


def _pull(
    stub: Stub,
    topic: str,
    offset: int,
    queue_id: int = 0,
    group: str = "puller",
    expression: str = "*",
) -> dict[str, Any]:
    """One PullMessage: its status, the messages' (offset, id), next_offset, and when it
    answered (seconds after the call)."""
    request = spb.PullMessageRequest(
        group=pb.Resource(name=group),
        message_queue=_queue(topic, queue_id),
        offset=offset,
        batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression),
    )
    request.long_polling_timeout.FromSeconds(POLL_S)
    started = time.monotonic()
    out: dict[str, Any] = {"messages": [], "next_offset": None}
    for response in stub.PullMessage(request, metadata=META, timeout=POLL_S + 15):
        kind = response.WhichOneof("content")
        if kind == "status":
            out["status"] = (response.status.code, response.status.message)
        elif kind == "message":
            system = response.message.system_properties
            out["messages"].append((system.queue_offset, system.message_id))
        else:
            out["next_offset"] = response.next_offset
    out["seconds"] = time.monotonic() - started
    return out


def _query(
    stub: Stub, topic: str, policy: pb.QueryOffsetPolicy, queue_id: int = 0, at_ms: int = -1
) -> int:
    request = spb.QueryOffsetRequest(
        message_queue=_queue(topic, queue_id), query_offset_policy=policy
    )
    if at_ms >= 0:
        request.timestamp.FromMilliseconds(at_ms)
    answer = stub.QueryOffset(request, metadata=META, timeout=20)
    assert answer.status.code == pb.OK, answer.status
    return int(answer.offset)


def _commit(stub: Stub, group: str, topic: str, offset: int) -> None:
    request = spb.UpdateOffsetRequest(
        group=pb.Resource(name=group), message_queue=_queue(topic), offset=offset
    )
    answer = stub.UpdateOffset(request, metadata=META, timeout=20)
    assert answer.status.code == pb.OK, answer.status


def _committed(stub: Stub, group: str, topic: str) -> tuple[int, int]:
    request = spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=_queue(topic))
    answer = stub.GetOffset(request, metadata=META, timeout=20)
    return answer.status.code, answer.offset


def test_pull_from_the_earliest_offset_of_every_queue_finds_every_message(
    stubs: tuple[Stub, Stub],
) -> None:
    a, b = stubs
    sent = _send(a, "spread", 12)
    found = []
    for queue_id in range(4):
        offset = _query(b, "spread", pb.BEGINNING, queue_id)
        end = _query(b, "spread", pb.END, queue_id)
        while offset < end:
            pulled = _pull(b, "spread", offset, queue_id)
            assert pulled["status"][0] == pb.OK
            assert [o for o, _ in pulled["messages"]] == list(range(offset, pulled["next_offset"]))
            found += [message_id for _, message_id in pulled["messages"]]
            offset = pulled["next_offset"]
    assert sorted(found) == sorted(sent)


def test_the_load_test_clients_pull_reads_a_queue_from_an_offset(
    cluster: LocalCluster, stubs: tuple[Stub, Stub]
) -> None:
    """``loadtest.client.RocketClient.pull`` (``rip5 bench queues --read pull``)."""
    sent = _send(stubs[0], "loadtest", 3)
    client = RocketClient(f"127.0.0.1:{cluster.broker_port(1)}")
    try:
        assert client.pull("puller", "loadtest", 0, 0) == (sent, 3)
        assert client.pull("puller", "loadtest", 0, 1, batch_size=1) == (sent[1:2], 2)
    finally:
        client.close()


def test_a_pull_at_the_latest_offset_waits_and_wakes_on_a_send(stubs: tuple[Stub, Stub]) -> None:
    a, b = stubs
    _send(a, "tail", 3)
    latest = _query(a, "tail", pb.END)
    assert latest == 3
    idle = _pull(b, "tail", latest)
    assert idle["status"][0] == pb.MESSAGE_NOT_FOUND
    assert idle["next_offset"] == latest
    assert idle["seconds"] >= POLL_S - 1  # it waited the poll out
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_pull, b, "tail", latest)
        (sent,) = _send(a, "tail", 1)
        woken = waiting.result(timeout=POLL_S + 20)
    assert woken["status"][0] == pb.OK
    assert woken["messages"] == [(latest, sent)]
    assert woken["next_offset"] == latest + 1
    assert woken["seconds"] < POLL_S  # answered by the send, not by the poll's end


def test_query_offset_by_timestamp_finds_the_first_message_stored_since(
    stubs: tuple[Stub, Stub],
) -> None:
    a, b = stubs
    _send(a, "timed", 3)
    since_ms = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= since_ms:  # a store time after the first three
        pass
    later = _send(a, "timed", 2)
    offset = _query(b, "timed", pb.TIMESTAMP, at_ms=since_ms)
    assert offset == 3
    pulled = _pull(b, "timed", offset)
    assert [message_id for _, message_id in pulled["messages"]] == later
    assert _query(b, "timed", pb.TIMESTAMP, at_ms=0) == 0
    assert _query(b, "timed", pb.TIMESTAMP, at_ms=since_ms + 3_600_000) == 5


def test_an_offset_committed_through_one_broker_reads_back_through_the_other(
    stubs: tuple[Stub, Stub],
) -> None:
    a, b = stubs
    assert _committed(b, "puller", "shared")[0] == pb.OFFSET_NOT_FOUND
    _send(a, "shared", 5)
    _commit(a, "puller", "shared", 4)
    assert _committed(b, "puller", "shared") == (pb.OK, 4)
    _commit(b, "puller", "shared", 2)
    assert _committed(a, "puller", "shared") == (pb.OK, 2)


def _pop(stub: Stub, group: str, topic: str, batch_size: int) -> list[pb.Message]:
    """One ReceiveMessage (30 s invisible): the messages it delivered."""
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch_size,
    )
    receive.invisible_duration.FromSeconds(30)
    receive.long_polling_timeout.FromSeconds(POLL_S)
    return [
        r.message
        for r in stub.ReceiveMessage(receive, metadata=META, timeout=POLL_S + 15)
        if r.WhichOneof("content") == "message"
    ]


def _ack(stub: Stub, group: str, topic: str, messages: list[pb.Message]) -> list[int]:
    """One AckMessage of ``messages`` by their receipt handles: each entry's status."""
    ack = spb.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[
            spb.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in messages
        ],
    )
    answer = stub.AckMessage(ack, metadata=META, timeout=20)
    assert answer.status.code == pb.OK, answer.status
    return [entry.status.code for entry in answer.entries]


def test_pull_and_pop_in_one_group_share_the_committed_offset(stubs: tuple[Stub, Stub]) -> None:
    """RocketMQ's behaviour: one committed offset per (group, queue); a pull commit moves
    where pop resumes and keeps pop's in-flight handles; the offset passes popped
    messages still in flight."""
    a, b = stubs
    ids = _send(a, "mixed", 6)
    _commit(a, "mixed", "mixed", 2)  # a pull consumer of the group committed 2
    popped = _pop(b, "mixed", "mixed", 2)
    # Pop resumes where the pull consumer committed.
    assert [m.system_properties.queue_offset for m in popped] == [2, 3]
    assert [m.system_properties.message_id for m in popped] == ids[2:4]
    # In flight: the committed offset passes them, as RocketMQ's does.
    assert _committed(a, "mixed", "mixed") == (pb.OK, 4)
    # A pull consumer commits past them (skipping offset 4): pop's handles stay valid.
    _commit(a, "mixed", "mixed", 5)
    assert _committed(b, "mixed", "mixed") == (pb.OK, 5)
    assert _ack(b, "mixed", "mixed", popped) == [pb.OK, pb.OK]
    # Pop goes on at the committed offset: 4 was skipped by the commit.
    rest = _pop(a, "mixed", "mixed", 32)
    assert [(m.system_properties.queue_offset, m.system_properties.message_id) for m in rest] == [
        (5, ids[5])
    ]
    assert _ack(a, "mixed", "mixed", rest) == [pb.OK]
    # Pop's progress is the offset a pull consumer reads back.
    assert _committed(a, "mixed", "mixed") == (pb.OK, 6)
    # Pulling changes nothing for pop: the pull reads from anywhere, pop goes on at 6.
    assert [o for o, _ in _pull(a, "mixed", 0, group="mixed")["messages"]] == list(range(6))
    assert _committed(a, "mixed", "mixed") == (pb.OK, 6)


def test_a_message_in_flight_below_a_pull_commit_comes_back_when_it_becomes_visible(
    stubs: tuple[Stub, Stub],
) -> None:
    a, b = stubs
    ids = _send(a, "recommit", 3)
    held = _pop(a, "mixed", "recommit", 1)
    assert [m.system_properties.message_id for m in held] == ids[:1]
    _commit(b, "mixed", "recommit", 3)  # past every message, the held one included
    assert _pop(b, "mixed", "recommit", 32) == []  # pop resumes at 3: nothing new
    # The held handle still works: invisible for 0 s more (a nack) makes it visible now.
    change = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="mixed"),
        topic=pb.Resource(name="recommit"),
        receipt_handle=held[0].system_properties.receipt_handle,
        message_id=ids[0],
    )
    change.invisible_duration.FromSeconds(0)
    changed = b.ChangeInvisibleDuration(change, metadata=META, timeout=20)
    assert changed.status.code == pb.OK, changed.status
    again = _pop(a, "mixed", "recommit", 32)
    assert [m.system_properties.message_id for m in again] == ids[:1]
    assert again[0].system_properties.delivery_attempt == 2
    assert _ack(a, "mixed", "recommit", again) == [pb.OK]
    assert _committed(a, "mixed", "recommit") == (pb.OK, 3)


def test_an_offset_out_of_range_is_illegal_and_names_the_range(stubs: tuple[Stub, Stub]) -> None:
    a, b = stubs
    _send(a, "range", 2)
    beyond = _pull(b, "range", 7)
    assert beyond["status"][0] == pb.ILLEGAL_OFFSET
    assert "[0, 2]" in beyond["status"][1]
    assert (beyond["messages"], beyond["next_offset"]) == ([], 2)
    assert beyond["seconds"] < POLL_S  # answered at once


def test_a_tag_filter_returns_only_matching_messages_and_moves_past_the_rest(
    stubs: tuple[Stub, Stub],
) -> None:
    a, b = stubs
    wanted = _send(a, "filtered", 2, tag="a")
    _send(a, "filtered", 3, tag="b")
    wanted += _send(a, "filtered", 1, tag="a")
    _send(a, "filtered", 2, tag="b")
    pulled = _pull(b, "filtered", 0, expression="a")
    assert pulled["status"][0] == pb.OK
    assert pulled["messages"] == list(zip([0, 1, 5], wanted, strict=True))
    assert pulled["next_offset"] == 8  # past every offset the read looked at
    later = _pull(b, "filtered", 2, expression="a")  # skips 2-4 in storage
    assert (later["messages"], later["next_offset"]) == ([(5, wanted[2])], 8)
