"""PullMessage, UpdateOffset, GetOffset and QueryOffset over each gRPC server, with our
own stubs (the official Python client has no pull consumer): the stream's order
(status, messages, next_offset), the offset answers and the refusals."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator

import pytest

from broker.domain import GroupInfo, MessageType, QueueInfo, TopicInfo
from broker.grpc.server import SERVERS
from broker.services.memory import MemoryMetadata
from protocol.rocketmq.pull import BATCH_SIZE_MAX, REPLICATOR_HEADER
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.contract.test_grpc_adapter import serving

pytestmark = pytest.mark.integration
META = (("x-mq-client-id", "pull-test-client"),)
QUEUE = pb.MessageQueue(topic=pb.Resource(name="single"), id=0)
Stub = service_pb2_grpc.MessagingServiceStub


@pytest.fixture(params=SERVERS)
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[Stub]:
    metadata = MemoryMetadata(
        [TopicInfo("single", (QueueInfo(0),), frozenset({MessageType.NORMAL}))],
        [GroupInfo("puller")],
        auto_create_groups=False,
    )
    async with serving(metadata, request.param) as served:
        yield served.stub


async def _send(stub: Stub, *tags: str) -> None:
    messages = [
        pb.Message(
            topic=pb.Resource(name="single"),
            body=f"body-{tag}".encode(),
            system_properties=pb.SystemProperties(
                message_id=f"01{time.time_ns():022X}{n:010X}",
                message_type=pb.NORMAL,
                body_encoding=pb.IDENTITY,
                tag=tag,
            ),
        )
        for n, tag in enumerate(tags)
    ]
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=messages), metadata=META)
    assert sent.status.code == pb.OK


async def _pull(
    stub: Stub, offset: int, expression: str = "*", group: str = "puller", poll_s: int = 5
) -> list[object]:
    """The answer as [status code, (offset, tag, has handle)..., ("next", offset)]."""
    request = spb.PullMessageRequest(
        group=pb.Resource(name=group),
        message_queue=QUEUE,
        offset=offset,
        batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression),
    )
    request.long_polling_timeout.FromSeconds(poll_s)
    seen: list[object] = []
    async for response in stub.PullMessage(request, metadata=META, timeout=poll_s + 10):
        kind = response.WhichOneof("content")
        if kind == "status":
            seen.append(response.status.code)
        elif kind == "message":
            system = response.message.system_properties
            seen.append((system.queue_offset, system.tag, bool(system.receipt_handle)))
        else:
            seen.append(("next", response.next_offset))
    return seen


async def test_pull_streams_status_messages_then_next_offset(stub: Stub) -> None:
    await _send(stub, "a", "b", "a")
    assert await _pull(stub, 0) == [
        pb.OK,
        (0, "a", False),
        (1, "b", False),
        (2, "a", False),
        ("next", 3),
    ]
    assert await _pull(stub, 1, "a") == [pb.OK, (2, "a", False), ("next", 3)]
    beyond = await _pull(stub, 9)
    assert beyond == [pb.ILLEGAL_OFFSET, ("next", 3)]


async def test_a_replicators_pull_is_larger_and_carries_no_digest(stub: Stub) -> None:
    """RocketMQ's cap (32) and MD5 digest for every caller but a replicator, whose pull
    (the header) gets up to its own cap and no digest (its copies keep none)."""
    await _send(stub, *(f"t{n}" for n in range(40)))
    request = spb.PullMessageRequest(
        group=pb.Resource(name="puller"), message_queue=QUEUE, offset=0, batch_size=1000
    )
    ordinary = [r async for r in stub.PullMessage(request, metadata=META, timeout=30)]
    replicator_meta = (*META, (REPLICATOR_HEADER, "connector"))
    replicated = [r async for r in stub.PullMessage(request, metadata=replicator_meta, timeout=30)]
    for answers, count in ((ordinary, BATCH_SIZE_MAX), (replicated, 40)):
        assert answers[0].status.code == pb.OK
        assert answers[-1].next_offset == count
        messages = [a.message for a in answers[1:-1]]
        assert [m.system_properties.queue_offset for m in messages] == list(range(count))
    digest = ordinary[1].message.system_properties.body_digest
    assert (digest.type, digest.checksum) == (pb.MD5, hashlib.md5(b"body-t0").hexdigest().upper())
    assert not replicated[1].message.system_properties.HasField("body_digest")


async def test_an_illegal_offset_names_the_valid_range(stub: Stub) -> None:
    await _send(stub, "a")
    request = spb.PullMessageRequest(
        group=pb.Resource(name="puller"), message_queue=QUEUE, offset=5, batch_size=1
    )
    answers = [r async for r in stub.PullMessage(request, metadata=META, timeout=30)]
    assert answers[0].status.code == pb.ILLEGAL_OFFSET
    assert "[0, 1]" in answers[0].status.message
    assert answers[1].next_offset == 1


async def test_offsets_commit_read_back_and_query(stub: Stub) -> None:
    group = pb.Resource(name="puller")
    missing = await stub.GetOffset(
        spb.GetOffsetRequest(group=group, message_queue=QUEUE), metadata=META
    )
    assert missing.status.code == pb.OFFSET_NOT_FOUND
    await _send(stub, "a", "b")
    before_ms = int(time.time() * 1000) + 1
    query = spb.QueryOffsetRequest(message_queue=QUEUE, query_offset_policy=pb.TIMESTAMP)
    query.timestamp.FromMilliseconds(before_ms + 60_000)
    assert (await stub.QueryOffset(query, metadata=META)).offset == 2
    query.timestamp.FromMilliseconds(0)
    assert (await stub.QueryOffset(query, metadata=META)).offset == 0
    for policy, offset in [(pb.BEGINNING, 0), (pb.END, 2)]:
        answer = await stub.QueryOffset(
            spb.QueryOffsetRequest(message_queue=QUEUE, query_offset_policy=policy),
            metadata=META,
        )
        assert (answer.status.code, answer.offset) == (pb.OK, offset)
    no_time = await stub.QueryOffset(
        spb.QueryOffsetRequest(message_queue=QUEUE, query_offset_policy=pb.TIMESTAMP),
        metadata=META,
    )
    assert no_time.status.code == pb.BAD_REQUEST
    updated = await stub.UpdateOffset(
        spb.UpdateOffsetRequest(group=group, message_queue=QUEUE, offset=1), metadata=META
    )
    assert updated.status.code == pb.OK
    read = await stub.GetOffset(
        spb.GetOffsetRequest(group=group, message_queue=QUEUE), metadata=META
    )
    assert (read.status.code, read.offset) == (pb.OK, 1)


async def test_bad_pulls_are_refused_with_their_status_and_a_next_offset(stub: Stub) -> None:
    assert await _pull(stub, 4, group="") == [pb.ILLEGAL_CONSUMER_GROUP, ("next", 4)]
    assert await _pull(stub, 0, group="stranger") == [pb.CONSUMER_GROUP_NOT_FOUND, ("next", 0)]
    other_queue = spb.UpdateOffsetRequest(
        group=pb.Resource(name="puller"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="single"), id=3),
        offset=0,
    )
    refused = await stub.UpdateOffset(other_queue, metadata=META)
    assert refused.status.code == pb.BAD_REQUEST
    assert "no queue 3" in refused.status.message
    empty = await stub.QueryOffset(spb.QueryOffsetRequest(), metadata=META)
    assert empty.status.code == pb.ILLEGAL_TOPIC
