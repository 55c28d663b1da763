"""Processors against the in-memory ports (time from a manual clock)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from broker.domain import (
    Delivery,
    GroupInfo,
    Message,
    PopResult,
    QueueInfo,
    QueueRef,
    RetryPolicy,
    SendResult,
    TopicInfo,
)
from broker.errors import BrokerError, Reason
from broker.processor import receipt
from broker.processor.coalescer import AppendCoalescer
from broker.processor.consumer import ConsumerProcessor
from broker.processor.producer import ProducerProcessor
from broker.processor.route import RouteProcessor
from broker.processor.selector import group_queue_index
from broker.services.clock import ManualClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol import errors as codes
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType, Permission
from tests.waiting import async_wait_until

SECRET = b"secret"


def _topic(name: str, count: int, *types: MessageType) -> TopicInfo:
    return TopicInfo(name, tuple(QueueInfo(i) for i in range(count)), frozenset(types))


class World:
    """Ports and processors wired together."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.metadata = MemoryMetadata(
            [
                _topic("orders", 2, MessageType.NORMAL),
                _topic("fifo", 2, MessageType.FIFO),
                _topic("one", 1, MessageType.NORMAL),
                TopicInfo("ro", (QueueInfo(0, Permission.READ),), frozenset({MessageType.NORMAL})),
            ],
            [GroupInfo("g", retry=RetryPolicy(max_delivery_attempts=2))],
        )
        self.store = MemoryStore(self.clock, self.metadata)
        self.producer = ProducerProcessor(self.metadata, self.store, self.clock)
        self.consumer = ConsumerProcessor(self.metadata, self.store, self.clock, SECRET)
        self.route = RouteProcessor(self.metadata)


@pytest.fixture
def world() -> World:
    return World()


def _msg(topic: str = "orders", n: int = 0, **fields: object) -> Message:
    return Message(topic, f"body-{n}".encode(), f"id-{n}", **fields)  # type: ignore[arg-type]


async def _receive(
    world: World, topic: str = "orders", group: str = "g", **kw: object
) -> list[Delivery]:
    options: dict[str, object] = {"batch_size": 32, "invisible_ms": 10_000, "poll_ms": 0}
    options.update(kw)
    return await world.consumer.receive(group, topic, MessageFilter(), **options)  # type: ignore[arg-type]


async def test_send_validates_before_storing(world: World) -> None:
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([_msg(), _msg()._replace(body=b"")])
    assert caught.value.reason is Reason.MESSAGE_BODY_EMPTY
    assert world.store.append_calls == 0
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([_msg("nope")])
    assert caught.value.reason is Reason.TOPIC_NOT_FOUND
    with pytest.raises(BrokerError) as caught:
        await world.producer.send(
            [_msg("orders", message_type=MessageType.FIFO, message_group="x")]
        )
    assert caught.value.reason is Reason.MESSAGE_TYPE_CONFLICT
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([])
    assert caught.value.reason is Reason.MESSAGE_CORRUPTED
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([_msg("ro")])
    assert caught.value.reason is Reason.NO_WRITABLE_QUEUE


async def test_batch_results_are_in_request_order(world: World) -> None:
    # Messages naming their queues spread over both; results follow the request.
    results = await world.producer.send([_msg(n=i, queue_id=i % 2) for i in range(5)])
    assert [r.queue.queue_id for r in results] == [0, 1, 0, 1, 0]
    stored = world.store.messages(QueueRef("orders", 0)) + world.store.messages(
        QueueRef("orders", 1)
    )
    assert sorted(m.message_id for m in stored) == [f"id-{i}" for i in range(5)]


async def test_a_batch_naming_one_queue_is_one_append_to_it(world: World) -> None:
    # A 4.x client's batch names the queue it chose for every message.
    store = SlowStore(world.clock)
    store.release.set()
    producer = ProducerProcessor(world.metadata, store, world.clock)
    results = await producer.send([_msg(n=i, queue_id=1) for i in range(3)])
    assert (store.batches, store.queues) == ([3], [1])
    assert [(r.queue.queue_id, r.offset) for r in results] == [(1, 0), (1, 1), (1, 2)]
    assert [m.message_id for m in store.messages(QueueRef("orders", 1))] == [
        "id-0",
        "id-1",
        "id-2",
    ]


def _queue_of_id(message_id: str, queues: int = 2) -> int:
    """The queue a request naming no queue goes to: its first message id's hash."""
    return group_queue_index(message_id, queues)


async def test_a_batch_goes_to_one_queue_chosen_by_its_first_message_id(world: World) -> None:
    assert (_queue_of_id("id-0"), _queue_of_id("id-1")) == (1, 0)  # the ids used below
    first = await world.producer.send([_msg(n=0), _msg(n=1), _msg(n=3)])
    second = await world.producer.send([_msg(n=1), _msg(n=2), _msg(n=4)])
    assert {r.queue.queue_id for r in first} == {1}
    assert {r.queue.queue_id for r in second} == {0}
    assert [r.offset for r in first] == [0, 1, 2]
    assert [m.message_id for m in world.store.messages(QueueRef("orders", 0))] == [
        "id-1",
        "id-2",
        "id-4",
    ]


async def test_a_retried_send_goes_to_the_queue_of_its_first_attempt_on_any_broker(
    world: World,
) -> None:
    """A retry resends the same ids: through this broker, another one sharing the store,
    or much later, it lands where its first attempt did, where the dedup window sees it."""
    first = await world.producer.send([_msg(n=0), _msg(n=1)])
    other = await world.producer.send([_msg(n=1)])
    assert other[0].queue != first[0].queue
    retry = await world.producer.send([_msg(n=0), _msg(n=1)])
    assert {r.queue for r in retry} == {first[0].queue}
    another_broker = ProducerProcessor(world.metadata, world.store, world.clock)
    world.clock.advance(10 * 60_000)
    late = await another_broker.send([_msg(n=0), _msg(n=1)])
    assert {r.queue for r in late} == {first[0].queue}


async def test_fifo_group_lands_in_one_queue(world: World) -> None:
    results = await world.producer.send(
        [_msg("fifo", i, message_type=MessageType.FIFO, message_group="order-7") for i in range(4)]
    )
    assert len({r.queue for r in results}) == 1
    assert [r.offset for r in results] == [0, 1, 2, 3]


class SlowStore(MemoryStore):
    """Holds each append until released, to let sends pile up."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.release = asyncio.Event()
        self.batches: list[int] = []
        self.queues: list[int] = []  # the queue id of each append

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        self.batches.append(len(messages))
        self.queues.append(queue.queue_id)
        await self.release.wait()
        return await super().append(queue, messages)


async def test_concurrent_sends_to_one_queue_coalesce(world: World) -> None:
    store = SlowStore(world.clock)
    coalescer = AppendCoalescer(store)
    producer = ProducerProcessor(world.metadata, store, world.clock, coalescer=coalescer)
    first = asyncio.create_task(producer.send([_msg("one", 0)]))
    await async_wait_until(lambda: store.batches == [1], what="the first append")
    rest = [asyncio.create_task(producer.send([_msg("one", i)])) for i in range(1, 6)]
    queue = QueueRef("one", 0)
    await async_wait_until(lambda: coalescer.pending_messages(queue) == 5, what="sends to pile up")
    store.release.set()
    results = await asyncio.gather(first, *rest)
    assert store.batches == [1, 5]  # the five waiting sends went in one append call
    assert [r[0].offset for r in results] == [0, 1, 2, 3, 4, 5]


async def test_a_sender_that_gives_up_mid_append_strands_no_one(world: World) -> None:
    store = SlowStore(world.clock)
    coalescer = AppendCoalescer(store)
    producer = ProducerProcessor(world.metadata, store, world.clock, coalescer=coalescer)
    queue = QueueRef("one", 0)
    first = asyncio.create_task(producer.send([_msg("one", 0)]))
    await async_wait_until(lambda: store.batches == [1], what="the first append")
    rest = [asyncio.create_task(producer.send([_msg("one", i)])) for i in (1, 2)]
    await async_wait_until(lambda: coalescer.pending_messages(queue) == 2, what="sends waiting")
    first.cancel()  # its append was its own task's: the waiting ones go on without it
    with pytest.raises(asyncio.CancelledError):
        await first
    store.release.set()
    results = await asyncio.gather(*rest)
    assert store.batches == [1, 2]
    assert [r[0].offset for r in results] == [0, 1]  # the given-up append never stored
    assert coalescer.pending_messages(queue) == 0
    (again,) = await producer.send([_msg("one", 3)])  # idle again: appended at once
    assert (store.batches[-1], again.offset) == (1, 2)


async def test_under_load_sends_to_one_queue_join_its_forming_append(world: World) -> None:
    store = SlowStore(world.clock)
    coalescer = AppendCoalescer(store)
    producer = ProducerProcessor(world.metadata, store, world.clock, coalescer=coalescer)
    queue_0, queue_1 = QueueRef("orders", 0), QueueRef("orders", 1)
    sends: list[asyncio.Task[list[SendResult]]] = []

    async def send(n: int, arrived: Callable[[], bool], what: str) -> None:
        sends.append(asyncio.create_task(producer.send([_msg(n=n)])))
        await async_wait_until(arrived, what=what)

    # Idle queues: each request goes at once, to the queue of its first id.
    await send(1, lambda: store.queues == [0], "an append to queue 0")
    await send(0, lambda: store.queues == [0, 1], "an append to queue 1")
    # Both busy: a request starts an append behind its queue's, the next ones join it.
    await send(3, lambda: coalescer.pending_messages(queue_0) == 1, "a forming append")
    await send(2, lambda: coalescer.pending_messages(queue_1) == 1, "another forming append")
    await send(4, lambda: coalescer.pending_messages(queue_1) == 2, "a joining send")
    store.release.set()
    results = await asyncio.gather(*sends)
    assert store.queues == [0, 1, 0, 1]
    assert store.batches == [1, 1, 1, 2]
    assert [r.queue for (r,) in results] == [queue_0, queue_1, queue_0, queue_1, queue_1]


async def test_append_failure_reaches_every_coalesced_sender(world: World) -> None:
    class Broken(MemoryStore):
        async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
            raise BrokerError(codes.NOT_LEADER, "moved")

    producer = ProducerProcessor(world.metadata, Broken(world.clock), world.clock)
    outcomes = await asyncio.gather(
        *(producer.send([_msg("one", i)]) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, BrokerError) and o.refresh_route for o in outcomes)


async def test_receive_ack_and_offsets(world: World) -> None:
    await world.producer.send([_msg(n=i) for i in range(3)])
    deliveries = await _receive(world)
    assert sorted(d.popped.message.message_id for d in deliveries) == ["id-0", "id-1", "id-2"]
    outcomes = await world.consumer.ack("g", "orders", [d.receipt_handle for d in deliveries])
    assert outcomes == [None, None, None]
    assert await _receive(world) == []
    again = await world.consumer.ack("g", "orders", [deliveries[0].receipt_handle])
    assert again[0] is not None
    assert again[0].reason is Reason.INVALID_RECEIPT_HANDLE


async def test_handles_are_bound_to_group_and_topic_and_expire(world: World) -> None:
    await world.producer.send([_msg()])
    (delivery,) = await _receive(world)
    (wrong_group,) = await world.consumer.ack("other", "orders", [delivery.receipt_handle])
    (wrong_topic,) = await world.consumer.ack("g", "one", [delivery.receipt_handle])
    assert wrong_group is not None
    assert wrong_group.reason is Reason.INVALID_RECEIPT_HANDLE
    assert wrong_topic is not None
    assert wrong_topic.reason is Reason.INVALID_RECEIPT_HANDLE
    world.clock.advance(10_000)
    (expired,) = await world.consumer.ack("g", "orders", [delivery.receipt_handle])
    assert expired is not None
    assert "expired" in expired.message


async def test_change_invisible_gives_a_new_handle_and_redelivery(world: World) -> None:
    await world.producer.send([_msg()])
    (delivery,) = await _receive(world)
    handle = await world.consumer.change_invisible("g", "orders", delivery.receipt_handle, 1_000)
    decoded = receipt.decode(handle, SECRET, world.clock.now_ms())
    assert decoded.invisible_until_ms == world.clock.now_ms() + 1_000
    with pytest.raises(BrokerError):
        await world.consumer.change_invisible("g", "orders", delivery.receipt_handle, 1_000)
    with pytest.raises(BrokerError) as caught:
        await world.consumer.change_invisible("g", "orders", handle, -5)
    assert caught.value.reason is Reason.ILLEGAL_INVISIBLE_TIME
    world.clock.advance(1_000)
    (again,) = await _receive(world)
    assert again.popped.delivery_attempt == 2


async def test_past_max_attempts_goes_to_the_dead_letter_topic(world: World) -> None:
    await world.producer.send([_msg("one")])
    for attempt in (1, 2):
        (delivery,) = await _receive(world, "one")
        assert delivery.popped.delivery_attempt == attempt
        world.clock.advance(10_000)
    assert await _receive(world, "one") == []  # attempt 3 > max 2: dead-lettered instead
    (dead,) = await _receive(world, "%DLQ%g", group="dlq-reader")
    assert dead.popped.message.dead_letter_of == ("one", "id-0")


async def test_forward_to_dead_letter_on_request(world: World) -> None:
    await world.producer.send([_msg("one")])
    (delivery,) = await _receive(world, "one")
    await world.consumer.forward_to_dead_letter("g", "one", delivery.receipt_handle)
    assert len(world.store.messages(QueueRef("%DLQ%g", 0))) == 1
    world.clock.advance(10_000)
    assert await _receive(world, "one") == []


async def test_long_poll_wakes_on_append(world: World) -> None:
    receiving = asyncio.create_task(_receive(world, poll_ms=30_000))
    await async_wait_until(lambda: world.store.waiting_topics, what="the receive to wait")
    await world.producer.send([_msg()])
    (delivery,) = await asyncio.wait_for(receiving, 5)
    assert delivery.popped.message.message_id == "id-0"


async def test_receive_input_checks(world: World) -> None:
    with pytest.raises(BrokerError) as caught:
        await _receive(world, invisible_ms=5_000)
    assert caught.value.reason is Reason.ILLEGAL_INVISIBLE_TIME
    with pytest.raises(BrokerError) as caught:
        await _receive(world, group="bad group")
    assert caught.value.reason is Reason.ILLEGAL_CONSUMER_GROUP
    with pytest.raises(BrokerError) as caught:
        await _receive(world, topic="nope")
    assert caught.value.reason is Reason.TOPIC_NOT_FOUND
    await world.producer.send([_msg()])
    (auto,) = await _receive(world, invisible_ms=None)
    assert auto.popped.invisible_until_ms == world.clock.now_ms() + 60_000


async def test_route_and_assignment(world: World) -> None:
    topic = await world.route.route("orders")
    assert topic.queue_count == 2
    _, queue = await world.route.assignment("orders", "g")
    assert queue.queue_id == -1
    with pytest.raises(BrokerError) as caught:
        await world.route.route("bad topic")
    assert caught.value.reason is Reason.ILLEGAL_TOPIC


class LeaseReportingStore(MemoryStore):
    """Reports ``leased`` for every pop, as storage does; records how long polls wait."""

    def __init__(self, clock: ManualClock, metadata: MemoryMetadata, leased: dict[int, int]):
        super().__init__(clock, metadata)
        self.leased = leased  # queue id -> the group's leases there
        self.waits: list[bool] = []  # the quiet flag of each wait

    async def pop(self, group: GroupInfo, queue: QueueRef, **options: Any) -> PopResult:
        result = await super().pop(group, queue, **options)
        return dataclasses.replace(result, leased=self.leased[queue.queue_id])

    async def wait_for_append(
        self,
        topic: str,
        known_end_offsets: Mapping[int, int],
        timeout_ms: int,
        *,
        quiet: bool = False,
    ) -> bool:
        self.waits.append(quiet)
        return await super().wait_for_append(topic, known_end_offsets, timeout_ms, quiet=quiet)


@pytest.mark.parametrize(("leased", "quiet"), [({0: 0, 1: 0}, True), ({0: 0, 1: 3}, False)])
async def test_a_long_poll_is_quiet_only_when_no_queue_holds_a_lease_of_the_group(
    world: World, leased: dict[int, int], quiet: bool
) -> None:
    store = LeaseReportingStore(world.clock, world.metadata, leased)
    consumer = ConsumerProcessor(world.metadata, store, world.clock, SECRET)
    got = await consumer.receive(
        "g", "orders", MessageFilter(), batch_size=32, invisible_ms=10_000, poll_ms=20
    )
    assert got == []
    assert store.waits
    assert set(store.waits) == {quiet}
