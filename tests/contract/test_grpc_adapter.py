"""The gRPC v2 adapter over each gRPC server (h2 and grpc.aio) on 127.0.0.1, with our own stubs.

What the official-client tests cannot see directly: stream order, the
Telemetry stream staying open for server pushes, per-entry statuses, and the
answers of the RPCs that are not built yet.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from broker.domain import GroupInfo, QueueInfo, TopicInfo
from broker.grpc.server import SERVERS, GrpcEndpoint, Ports, build_service
from broker.services.clock import SystemClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from protocol.vocabulary import MessageType

pytestmark = pytest.mark.integration
META = (("x-mq-client-id", "adapter-test-client"),)


@dataclass
class Broker:
    endpoint: GrpcEndpoint
    stub: service_pb2_grpc.MessagingServiceStub
    port: int


@contextlib.asynccontextmanager
async def serving(metadata: MemoryMetadata, server: str) -> AsyncIterator[Broker]:
    """A broker over memory ports with ``metadata``, served by ``server`` on 127.0.0.1."""
    clock = SystemClock()
    service = build_service(
        Ports(metadata, MemoryStore(clock, metadata), clock),
        receipt_secret=b"s",
        endpoint="broker.example:8081",
    )
    endpoint = GrpcEndpoint(service, "127.0.0.1:0", server)
    port = await endpoint.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Broker(endpoint, service_pb2_grpc.MessagingServiceStub(channel), port)
    await endpoint.stop(0)


@pytest.fixture(params=SERVERS)
async def broker(request: pytest.FixtureRequest) -> AsyncIterator[Broker]:
    metadata = MemoryMetadata(
        [TopicInfo("orders", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.NORMAL}))],
        [GroupInfo("fifo-group", fifo=True)],
    )
    async with serving(metadata, request.param) as served:
        yield served


def _message(n: int, body: bytes = b"body") -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="orders"),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=f"01{n:032X}", message_type=pb.NORMAL, body_encoding=pb.IDENTITY
        ),
    )


def _receive_request(**fields: object) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="g"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
        **fields,  # type: ignore[arg-type]
    )
    request.invisible_duration.FromSeconds(30)
    return request


async def test_telemetry_handshake_and_server_push(broker: Broker) -> None:
    call = broker.stub.Telemetry(metadata=META)
    producer = pb.Settings(
        client_type=pb.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name="orders")], max_body_size=1 << 27),
    )
    await call.write(spb.TelemetryCommand(settings=producer))
    reply = await call.read()
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.backoff_policy.HasField("exponential_backoff")
    assert reply.settings.HasField("metric")
    assert not reply.settings.metric.on

    consumer = pb.Settings(
        client_type=pb.PUSH_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="fifo-group")),
    )
    await call.write(spb.TelemetryCommand(settings=consumer))
    reply = await call.read()
    assert reply.status.code == pb.OK
    assert reply.settings.subscription.fifo is True
    assert reply.settings.subscription.long_polling_timeout.seconds == 20
    assert reply.settings.subscription.receive_batch_size == 32
    assert reply.settings.backoff_policy.HasField("customized_backoff")

    # The stream stays open: the broker can push a command to this client.
    sessions = broker.endpoint.service.sessions
    assert sessions.client_ids == ["adapter-test-client"]
    pushed = spb.TelemetryCommand(
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            transaction_id="tx-1"
        )
    )
    assert sessions.maybe_push("adapter-test-client", pushed)
    assert (await call.read()).recover_orphaned_transaction_command.transaction_id == "tx-1"
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert sessions.client_ids == []


async def test_telemetry_answers_bad_settings_in_band_and_stays_open(broker: Broker) -> None:
    call = broker.stub.Telemetry(metadata=META)
    await call.write(spb.TelemetryCommand(settings=pb.Settings()))
    assert (await call.read()).status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    bad_group = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="no spaces allowed")),
    )
    await call.write(spb.TelemetryCommand(settings=bad_group))
    assert (await call.read()).status.code == pb.ILLEGAL_CONSUMER_GROUP
    await call.write(spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
    assert (await call.read()).status.code == pb.OK
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


async def test_telemetry_without_client_id(broker: Broker) -> None:
    # The broker answers at once and ends the stream (so a write may race its end).
    call = broker.stub.Telemetry()
    reply = await call.read()
    assert reply.status.code == pb.CLIENT_ID_REQUIRED
    assert await call.read() == grpc.aio.EOF


async def test_batch_send_has_one_entry_per_message(broker: Broker) -> None:
    messages = [_message(i) for i in range(3)]
    response = await broker.stub.SendMessage(
        spb.SendMessageRequest(messages=messages), metadata=META
    )
    assert response.status.code == pb.OK
    assert [e.message_id for e in response.entries] == [
        m.system_properties.message_id for m in messages
    ]
    assert all(e.status.code == pb.OK for e in response.entries)

    bad = await broker.stub.SendMessage(
        spb.SendMessageRequest(messages=[_message(7), _message(8, body=b"")]), metadata=META
    )
    assert bad.status.code == pb.MESSAGE_BODY_EMPTY
    assert [e.status.code for e in bad.entries] == [pb.MESSAGE_BODY_EMPTY] * 2


async def test_receive_stream_order_and_ack_results(broker: Broker) -> None:
    await broker.stub.SendMessage(
        spb.SendMessageRequest(messages=[_message(1), _message(2)]), metadata=META
    )
    request = _receive_request()
    request.long_polling_timeout.FromSeconds(5)
    responses = [r async for r in broker.stub.ReceiveMessage(request, metadata=META, timeout=10)]
    kinds = [r.WhichOneof("content") for r in responses]
    assert kinds == ["status", "message", "message", "delivery_timestamp"]
    assert responses[0].status.code == pb.OK
    handles = [r.message.system_properties.receipt_handle for r in responses[1:3]]

    ack = await broker.stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="g"),
            topic=pb.Resource(name="orders"),
            entries=[
                spb.AckMessageEntry(message_id="a", receipt_handle=handles[0]),
                spb.AckMessageEntry(message_id="b", receipt_handle="garbage"),
            ],
        ),
        metadata=META,
    )
    assert ack.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in ack.entries] == [pb.OK, pb.INVALID_RECEIPT_HANDLE]
    assert [e.message_id for e in ack.entries] == ["a", "b"]

    change = await broker.stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="g"),
            topic=pb.Resource(name="orders"),
            receipt_handle=handles[0],  # acked already: refused, and the old handle echoed
            invisible_duration={"seconds": 5},
        ),
        metadata=META,
    )
    assert change.status.code == pb.INVALID_RECEIPT_HANDLE
    assert change.receipt_handle == handles[0]
    renewed = await broker.stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="g"),
            topic=pb.Resource(name="orders"),
            receipt_handle=handles[1],
            invisible_duration={"seconds": 5},
        ),
        metadata=META,
    )
    assert renewed.status.code == pb.OK
    assert renewed.receipt_handle not in ("", handles[1])


async def test_empty_receive_ends_before_the_deadline(broker: Broker) -> None:
    request = _receive_request()
    request.long_polling_timeout.FromSeconds(20)
    started = time.monotonic()
    responses = [r async for r in broker.stub.ReceiveMessage(request, metadata=META, timeout=6)]
    assert time.monotonic() - started < 6
    assert [r.WhichOneof("content") for r in responses] == ["status", "delivery_timestamp"]
    assert responses[0].status.code == pb.MESSAGE_NOT_FOUND


async def test_receive_with_too_little_time_is_illegal(broker: Broker) -> None:
    responses = [
        r async for r in broker.stub.ReceiveMessage(_receive_request(), metadata=META, timeout=3)
    ]
    assert [r.status.code for r in responses] == [pb.ILLEGAL_POLLING_TIME]


async def test_route_echoes_the_client_endpoint_or_falls_back(broker: Broker) -> None:
    used = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=broker.port)])
    route = await broker.stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="orders"), endpoints=used), metadata=META
    )
    assert route.status.code == pb.OK
    assert [q.broker.endpoints for q in route.message_queues] == [used, used]
    fallback = await broker.stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="orders")), metadata=META
    )
    assert fallback.message_queues[0].broker.endpoints.addresses[0].host == "broker.example"
    missing = await broker.stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="nope")), metadata=META
    )
    assert missing.status.code == pb.TOPIC_NOT_FOUND
    assignment = await broker.stub.QueryAssignment(
        spb.QueryAssignmentRequest(
            topic=pb.Resource(name="orders"), group=pb.Resource(name="g"), endpoints=used
        ),
        metadata=META,
    )
    assert assignment.status.code == pb.OK
    assert [a.message_queue.id for a in assignment.assignments] == [-1]


async def test_unsupported_and_bookkeeping_rpcs_answer_clearly(broker: Broker) -> None:
    stub = broker.stub
    lite = await stub.SyncLiteSubscription(spb.SyncLiteSubscriptionRequest(), metadata=META)
    assert lite.status.code == pb.UNSUPPORTED
    heartbeat = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=META)
    assert heartbeat.status.code == pb.OK
    bye = await stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=META)
    assert bye.status.code == pb.OK


async def test_recall_with_a_foreign_handle_answers_clearly(broker: Broker) -> None:
    recalled = await broker.stub.RecallMessage(
        spb.RecallMessageRequest(topic=pb.Resource(name="orders"), recall_handle="junk"),
        metadata=META,
    )
    assert recalled.status.code == pb.BAD_REQUEST
    assert "not issued" in recalled.status.message
