"""Subscription filters at the broker: Telemetry settings, receive requests, pulls, and
the status a refused expression gets (also when storage refuses it)."""

from __future__ import annotations

from broker.domain import GroupInfo, Message, QueueInfo, QueueRef, TopicInfo
from broker.errors import BrokerError
from broker.grpc import convert
from broker.grpc.status import status_of
from broker.grpc.telemetry import settings_reply
from broker.processor.consumer import ConsumerProcessor
from broker.processor.pull import PullProcessor
from broker.services.clock import ManualClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol import errors as codes
from protocol.filters import FilterKind, MessageFilter
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.vocabulary import MessageType


def _consumer() -> ConsumerProcessor:
    clock = ManualClock()
    metadata = MemoryMetadata([], [GroupInfo("g")])
    return ConsumerProcessor(metadata, MemoryStore(clock, metadata), clock, b"secret")


def _settings(expression: str, kind: int = pb.SQL) -> pb.Settings:
    return pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name="g"),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=pb.Resource(name="orders"),
                    expression=pb.FilterExpression(type=kind, expression=expression),  # type: ignore[arg-type]
                )
            ],
        ),
    )


async def test_settings_with_a_bad_sql92_expression_are_refused_with_its_position() -> None:
    reply = await settings_reply(_consumer(), _settings("a = 1 OR"))
    assert reply.status.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert "line 1, column 9" in reply.status.message
    assert not reply.HasField("settings")


async def test_settings_with_good_expressions_are_answered() -> None:
    consumer = _consumer()
    assert (await settings_reply(consumer, _settings("a BETWEEN 1 AND 3"))).status.code == pb.OK
    assert (await settings_reply(consumer, _settings("x || y", pb.TAG))).status.code == pb.OK


def test_a_receive_filter_becomes_one_value() -> None:
    sql = convert.filter_from_pb(pb.FilterExpression(type=pb.SQL, expression="a IS NULL"))
    assert sql == MessageFilter(FilterKind.SQL, "a IS NULL")
    tag = convert.filter_from_pb(pb.FilterExpression(expression="b||a"))
    assert tag == MessageFilter(FilterKind.TAG, "a||b")


def test_storage_refusing_an_expression_maps_to_the_same_status() -> None:
    refused = BrokerError(codes.ILLEGAL_FILTER_EXPRESSION, "invalid SQL92 expression at ...")
    assert status_of(refused).code == pb.ILLEGAL_FILTER_EXPRESSION


async def test_a_pull_with_a_sql92_filter_returns_only_matches() -> None:
    clock = ManualClock()
    topic = TopicInfo("orders", (QueueInfo(0),), frozenset({MessageType.NORMAL}))
    metadata = MemoryMetadata([topic], [GroupInfo("g")])
    store = MemoryStore(clock, metadata)
    await store.append(
        QueueRef("orders", 0),
        [
            Message("orders", b"x", f"id-{i}", user_properties={"n": str(i)}, tag="t")
            for i in range(6)
        ],
    )
    sql = MessageFilter.of(FilterKind.SQL, "n > 2 AND TAGS = 't'")
    pulled = await PullProcessor(metadata, store).pull(
        "g", "orders", 0, 0, sql, batch_size=32, poll_ms=0
    )
    assert [m.offset for m in pulled.messages] == [3, 4, 5]
    assert pulled.next_offset == 6
