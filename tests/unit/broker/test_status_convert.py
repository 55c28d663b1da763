"""status.py (errors -> v2 codes) and convert.py (pb <-> domain)."""

from __future__ import annotations

import gzip
import hashlib
import logging
import zlib

import pytest

from broker.domain import (
    Delivery,
    GroupInfo,
    Message,
    PoppedMessage,
    QueueInfo,
    QueueRef,
    RetryPolicy,
    TopicInfo,
)
from broker.errors import BrokerError, Reason, not_implemented, unsupported
from broker.grpc import convert
from broker.grpc.status import REASON_CODES, code_of, status_of
from protocol import errors as codes
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.vocabulary import MessageType, Permission


def test_every_reason_has_a_wire_code() -> None:
    assert set(REASON_CODES) == set(Reason)
    for reason in Reason:
        assert code_of(BrokerError.of(reason, "x")) == REASON_CODES[reason]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BrokerError.of(Reason.TOPIC_NOT_FOUND, "t"), pb.TOPIC_NOT_FOUND),
        (BrokerError.of(Reason.MESSAGE_TYPE_CONFLICT, "t"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (BrokerError.of(Reason.NO_READABLE_QUEUE, "t"), pb.FORBIDDEN),
        (BrokerError(codes.NOT_LEADER, "moved"), pb.HA_NOT_AVAILABLE),
        (BrokerError(codes.OVERLOADED, "busy"), pb.TOO_MANY_REQUESTS),
        (BrokerError(codes.INVALID_RECEIPT_HANDLE, "stale"), pb.INVALID_RECEIPT_HANDLE),
        (BrokerError(codes.DEADLINE_EXCEEDED, "slow"), pb.PROXY_TIMEOUT),
        (not_implemented("X"), pb.NOT_IMPLEMENTED),
        (unsupported("Y"), pb.UNSUPPORTED),
        (BrokerError(codes.INTERNAL, "boom"), pb.INTERNAL_SERVER_ERROR),
        (BrokerError(codes.TOPIC_NOT_FOUND, "nameserver says"), pb.TOPIC_NOT_FOUND),
        (BrokerError(codes.CONSUMER_GROUP_NOT_FOUND, "x"), pb.CONSUMER_GROUP_NOT_FOUND),
        (BrokerError(codes.INVALID_NAME, "x"), pb.BAD_REQUEST),
        (BrokerError(codes.LEASE_HELD, "x"), pb.HA_NOT_AVAILABLE),
    ],
)
def test_shared_codes(error: BrokerError, code: int) -> None:
    status = status_of(error)
    assert status.code == code
    assert status.message == error.message


def test_flags_come_from_the_shared_code() -> None:
    assert BrokerError(codes.NOT_LEADER, "x").refresh_route
    assert BrokerError(codes.OVERLOADED, "x").retriable
    assert not BrokerError.of(Reason.ILLEGAL_TOPIC, "x").retriable
    assert BrokerError.of(Reason.TOPIC_NOT_FOUND, "x").refresh_route


def test_unknown_exceptions_are_internal_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="broker.grpc"):
        status = status_of(KeyError("oops"))
    assert status.code == pb.INTERNAL_SERVER_ERROR
    assert "KeyError" in status.message
    assert any(record.exc_info for record in caplog.records)


def _wire_message(**system: object) -> pb.Message:
    fields: dict[str, object] = {
        "message_id": "01ABC",
        "message_type": pb.NORMAL,
        "body_encoding": pb.IDENTITY,
        "born_host": "10.0.0.1",
    }
    fields.update(system)
    properties = pb.SystemProperties(**fields)  # type: ignore[arg-type]
    properties.born_timestamp.FromMilliseconds(1_700_000_000_123)
    return pb.Message(
        topic=pb.Resource(name="orders"),
        user_properties={"k": "v"},
        system_properties=properties,
        body=b"payload",
    )


def test_message_from_pb() -> None:
    wire = _wire_message(tag="t", keys=["k1"], message_group="g", message_type=pb.FIFO)
    message = convert.message_from_pb(wire)
    assert message == Message(
        topic="orders",
        body=b"payload",
        message_id="01ABC",
        message_type=MessageType.FIFO,
        tag="t",
        keys=("k1",),
        user_properties={"k": "v"},
        message_group="g",
        born_timestamp_ms=1_700_000_000_123,
        born_host="10.0.0.1",
    )


def test_absent_optionals_stay_absent() -> None:
    message = convert.message_from_pb(_wire_message())
    assert message.tag is None
    assert convert.message_from_pb(_wire_message(tag="")).tag is None
    assert message.message_group is None
    assert message.delivery_timestamp_ms is None
    assert message.queue_id is None


def test_gzip_body_and_digests() -> None:
    wire = _wire_message(body_encoding=pb.GZIP)
    wire.body = gzip.compress(b"payload")
    assert convert.message_from_pb(wire).body == b"payload"
    good = _wire_message(
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(b"payload").hexdigest().upper())
    )
    assert convert.message_from_pb(good).body == b"payload"
    bad = _wire_message(body_digest=pb.Digest(type=pb.SHA1, checksum="00"))
    with pytest.raises(BrokerError) as caught:
        convert.message_from_pb(bad)
    assert caught.value.reason is Reason.MESSAGE_CORRUPTED


def test_crc32_digests_in_the_forms_clients_write() -> None:
    crc = zlib.crc32(b"payload")
    for checksum in (f"{crc:08X}", f"{crc:08x}", str(crc)):  # Python, any case, Node
        wire = _wire_message(body_digest=pb.Digest(type=pb.CRC32, checksum=checksum))
        assert convert.message_from_pb(wire).body == b"payload"
    bad = _wire_message(body_digest=pb.Digest(type=pb.CRC32, checksum=f"{crc ^ 1:08X}"))
    with pytest.raises(BrokerError) as caught:
        convert.message_from_pb(bad)
    assert caught.value.reason is Reason.MESSAGE_CORRUPTED
    assert "CRC32" in caught.value.message


def test_a_gzip_body_is_checked_as_sent() -> None:
    packed = gzip.compress(b"payload")
    wire = _wire_message(
        body_encoding=pb.GZIP,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(packed):08X}"),
    )
    wire.body = packed
    assert convert.message_from_pb(wire).body == b"payload"


def test_delivered_message_has_what_clients_need() -> None:
    message = Message(
        "orders", b"payload", "01ABC", tag="t", born_timestamp_ms=5_123, born_host="h1"
    )
    popped = PoppedMessage(message, QueueRef("orders", 2), 9, 6_007, 3, 11, 70_000)
    wire = pb.Message()
    convert.fill_delivered(wire, Delivery(popped, "handle-1"), "ns", "127.0.0.1:8081")
    system = wire.system_properties
    assert system.body_digest.type == pb.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert system.body_encoding == pb.IDENTITY
    assert system.receipt_handle == "handle-1"
    assert system.delivery_attempt == 3
    assert system.message_id == "01ABC"
    assert (system.queue_id, system.queue_offset) == (2, 9)
    assert system.tag == "t"
    assert not system.HasField("message_group")
    assert wire.topic.resource_namespace == "ns"
    assert system.message_type == pb.NORMAL
    assert (system.born_timestamp.seconds, system.born_timestamp.nanos) == (5, 123_000_000)
    assert system.born_host == "h1"
    assert system.HasField("store_timestamp")
    assert system.store_timestamp.ToMilliseconds() == 6_007


def test_route_echoes_the_endpoint_and_types() -> None:
    topic = TopicInfo(
        "orders",
        (QueueInfo(0), QueueInfo(1, Permission.READ)),
        frozenset({MessageType.FIFO, MessageType.NORMAL}),
    )
    endpoints = convert.endpoints_from_address("127.0.0.1:9999")
    assert endpoints.scheme == pb.IPv4
    queues = convert.route_pb(topic, "", endpoints)
    assert [q.id for q in queues] == [0, 1]
    assert queues[1].permission == pb.READ
    assert all(q.broker.id == 0 and q.broker.endpoints == endpoints for q in queues)
    assert list(queues[0].accept_message_types) == [pb.NORMAL, pb.FIFO]
    assert convert.endpoints_from_address("broker.local:80").scheme == pb.DOMAIN_NAME
    assert convert.endpoints_or(pb.Endpoints(), endpoints) == endpoints


def test_producer_settings_reply() -> None:
    client = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(max_body_size=1))
    reply = convert.producer_settings_pb(client)
    assert reply.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert reply.backoff_policy.max_attempts == 3
    assert reply.metric.on is False
    assert reply.HasField("metric")


def test_consumer_settings_reply() -> None:
    client = pb.Settings(
        client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="g"))
    )
    group = GroupInfo("g", fifo=True, retry=RetryPolicy(5, (1_000, 5_500)))
    reply = convert.consumer_settings_pb(client, group)
    assert reply.subscription.fifo is True
    assert reply.subscription.receive_batch_size == 32
    assert reply.subscription.long_polling_timeout.seconds == 20
    assert reply.backoff_policy.max_attempts == 5
    assert [d.seconds for d in reply.backoff_policy.customized_backoff.next] == [1, 5]
    assert reply.HasField("metric")
    assert not reply.metric.on
