"""Concurrent pops of one queue share one store pop (memory store, manual clock)."""

from __future__ import annotations

import asyncio

import pytest

from broker.domain import Delivery, GroupInfo, Message, PopResult, QueueInfo, QueueRef, TopicInfo
from broker.errors import BrokerError
from broker.processor.consumer import ConsumerProcessor
from broker.processor.pop_coalescer import PopCoalescer
from broker.services.clock import ManualClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol import errors as codes
from protocol.filters import FilterKind, MessageFilter
from protocol.vocabulary import MessageType
from tests.waiting import async_wait_until

QUEUE = QueueRef("orders", 0)
GROUP = GroupInfo("g")
ALL = MessageFilter()


class HeldStore(MemoryStore):
    """Holds each pop until let through (``gate.release()`` lets one go); records the
    batch size of every pop, and its queue id."""

    def __init__(self, clock: ManualClock, metadata: MemoryMetadata | None = None) -> None:
        super().__init__(clock, metadata)
        self.gate = asyncio.Semaphore(0)
        self.pops: list[int] = []
        self.popped_queues: list[int] = []
        self.failure: BrokerError | None = None

    async def pop(
        self,
        group: GroupInfo,
        queue: QueueRef,
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> PopResult:
        self.pops.append(batch_size)
        self.popped_queues.append(queue.queue_id)
        await self.gate.acquire()
        if self.failure is not None:
            raise self.failure
        return await super().pop(
            group,
            queue,
            batch_size=batch_size,
            invisible_ms=invisible_ms,
            message_filter=message_filter,
        )


@pytest.fixture
async def store() -> HeldStore:
    held = HeldStore(ManualClock())
    await held.append(QUEUE, [Message("orders", b"x", f"id-{i}") for i in range(10)])
    return held


def _pop(
    coalescer: PopCoalescer,
    batch_size: int,
    *,
    group: GroupInfo = GROUP,
    invisible_ms: int = 10_000,
    message_filter: MessageFilter = ALL,
) -> asyncio.Task[PopResult]:
    return asyncio.create_task(
        coalescer.pop(
            group,
            QUEUE,
            batch_size=batch_size,
            invisible_ms=invisible_ms,
            message_filter=message_filter,
        )
    )


def _open(store: HeldStore) -> None:
    for _ in range(16):
        store.gate.release()


def _offsets(result: PopResult) -> list[int]:
    return [message.offset for message in result.messages]


async def test_waiting_pops_share_one_store_pop_dealt_in_arrival_order(store: HeldStore) -> None:
    coalescer = PopCoalescer(store)
    first = _pop(coalescer, 2)
    await async_wait_until(lambda: store.pops == [2], what="the first pop to reach the store")
    waiting = [_pop(coalescer, 3), _pop(coalescer, 4), _pop(coalescer, 5)]
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 3, what="pops to queue up")
    _open(store)
    results = await asyncio.gather(first, *waiting)
    assert store.pops == [2, 12]  # the three waiting pops went as one of 3 + 4 + 5
    assert [_offsets(r) for r in results] == [[0, 1], [2, 3, 4], [5, 6, 7, 8], [9]]
    assert all(r.end_offset == 10 for r in results)


async def test_a_lone_pop_goes_at_once_and_keeps_its_batch_size(store: HeldStore) -> None:
    _open(store)
    result = await PopCoalescer(store).pop(
        GROUP, QUEUE, batch_size=4, invisible_ms=10_000, message_filter=ALL
    )
    assert store.pops == [4]
    assert _offsets(result) == [0, 1, 2, 3]


async def test_pops_of_different_terms_or_fifo_groups_are_not_combined(store: HeldStore) -> None:
    coalescer = PopCoalescer(store)
    first = _pop(coalescer, 1)
    await async_wait_until(lambda: store.pops == [1], what="the first pop")
    others = [
        _pop(coalescer, 1, invisible_ms=20_000),
        _pop(coalescer, 1, message_filter=MessageFilter(FilterKind.TAG, "a||b")),
        _pop(coalescer, 1, group=GroupInfo("g", fifo=True)),
        _pop(coalescer, 1, group=GroupInfo("other")),
    ]
    await async_wait_until(lambda: len(store.pops) == 5, what="every pop to reach the store")
    _open(store)
    await asyncio.gather(first, *others)
    assert store.pops == [1] * 5


async def test_the_summed_batch_is_capped(store: HeldStore) -> None:
    coalescer = PopCoalescer(store, messages_max=5)
    first = _pop(coalescer, 1)
    await async_wait_until(lambda: store.pops == [1], what="the first pop")
    waiting = [_pop(coalescer, 3) for _ in range(3)]
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 3, what="pops to queue up")
    _open(store)
    results = await asyncio.gather(first, *waiting)
    assert store.pops == [1, 3, 3, 3]  # 3 + 3 > 5: one waiting pop per store pop
    assert [_offsets(r) for r in results] == [[0], [1, 2, 3], [4, 5, 6], [7, 8, 9]]


async def test_a_cancelled_pop_leaves_its_share_to_the_next(store: HeldStore) -> None:
    coalescer = PopCoalescer(store)
    first = _pop(coalescer, 1)
    await async_wait_until(lambda: store.pops == [1], what="the first pop")
    gone, after = _pop(coalescer, 4), _pop(coalescer, 4)
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 2, what="both to wait")
    gone.cancel()  # before its turn: it takes nothing, the store pop asks for 4
    _open(store)
    assert _offsets(await first) == [0]
    assert _offsets(await after) == [1, 2, 3, 4]
    assert store.pops == [1, 4]
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_a_store_failure_reaches_every_waiting_pop(store: HeldStore) -> None:
    store.failure = BrokerError(codes.NOT_LEADER, "moved")
    coalescer = PopCoalescer(store)
    first = _pop(coalescer, 1)
    await async_wait_until(lambda: store.pops == [1], what="the first pop")
    waiting = [_pop(coalescer, 1) for _ in range(3)]
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 3, what="pops to queue up")
    _open(store)
    outcomes = await asyncio.gather(first, *waiting, return_exceptions=True)
    assert all(isinstance(o, BrokerError) and o.code is codes.NOT_LEADER for o in outcomes)
    assert store.pops == [1, 3]


async def test_a_pop_cancelled_in_flight_leaves_its_share_to_the_next(store: HeldStore) -> None:
    coalescer = PopCoalescer(store)
    first = _pop(coalescer, 1)
    await async_wait_until(lambda: store.pops == [1], what="the first pop")
    gone, after = _pop(coalescer, 4), _pop(coalescer, 4)
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 2, what="both to wait")
    store.gate.release()  # the first pop only
    assert _offsets(await first) == [0]
    await async_wait_until(lambda: store.pops == [1, 8], what="the shared pop to start")
    gone.cancel()  # while the shared pop is in flight
    store.gate.release()
    assert _offsets(await after) == [1, 2, 3, 4]  # the cancelled pop's first share
    with pytest.raises(asyncio.CancelledError):
        await gone


def _joining_first(
    coalescer: PopCoalescer,
    batch_size: int,
    *,
    group: GroupInfo = GROUP,
    invisible_ms: int = 10_000,
    message_filter: MessageFilter = ALL,
) -> list[int]:
    return coalescer.joining_first(
        group,
        QUEUE.topic,
        [2, 0, 1],
        batch_size=batch_size,
        invisible_ms=invisible_ms,
        message_filter=message_filter,
    )


async def test_queues_a_pop_could_join_come_first_while_the_next_pop_has_room(
    store: HeldStore,
) -> None:
    coalescer = PopCoalescer(store, messages_max=6)
    assert _joining_first(coalescer, 2) == [2, 0, 1]  # nothing in flight: order kept
    first = _pop(coalescer, 2)  # queue 0
    await async_wait_until(lambda: store.pops == [2], what="the first pop")
    assert _joining_first(coalescer, 2) == [0, 2, 1]
    assert _joining_first(coalescer, 6) == [0, 2, 1]  # the next pop holds 6
    assert _joining_first(coalescer, 7) == [2, 0, 1]
    waiting = _pop(coalescer, 5)
    await async_wait_until(lambda: coalescer.waiting(QUEUE) == 1, what="a pop to wait")
    assert _joining_first(coalescer, 1) == [0, 2, 1]
    assert _joining_first(coalescer, 2) == [2, 0, 1]  # 5 + 2 > 6: no room left
    # Other terms, another group or a FIFO group would not share the pop.
    assert _joining_first(coalescer, 1, invisible_ms=20_000) == [2, 0, 1]
    assert _joining_first(coalescer, 1, message_filter=MessageFilter(FilterKind.TAG, "a||b")) == [
        2,
        0,
        1,
    ]
    assert _joining_first(coalescer, 1, group=GroupInfo("other")) == [2, 0, 1]
    assert _joining_first(coalescer, 1, group=GroupInfo("g", fifo=True)) == [2, 0, 1]
    _open(store)
    await asyncio.gather(first, waiting)
    assert _joining_first(coalescer, 1) == [2, 0, 1]  # nothing in flight again


async def test_concurrent_receives_join_one_queue_instead_of_spreading() -> None:
    clock = ManualClock()
    metadata = MemoryMetadata(
        [TopicInfo("orders", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.NORMAL}))],
        [GROUP],
    )
    store = HeldStore(clock, metadata)
    for queue_id in (0, 1):
        await store.append(
            QueueRef("orders", queue_id),
            [Message("orders", b"x", f"id-{queue_id}-{i}") for i in range(10)],
        )
    pops = PopCoalescer(store)
    consumer = ConsumerProcessor(metadata, store, clock, b"secret", pops=pops)

    def receive(batch_size: int) -> asyncio.Task[list[Delivery]]:
        return asyncio.create_task(
            consumer.receive(
                "g", "orders", ALL, batch_size=batch_size, invisible_ms=10_000, poll_ms=0
            )
        )

    first = receive(2)  # its turn starts at queue 1
    await async_wait_until(lambda: store.popped_queues == [1], what="the first pop")
    second = receive(3)  # its turn would start at queue 0: it joins queue 1 instead
    await async_wait_until(
        lambda: pops.waiting(QueueRef("orders", 1)) == 1, what="the second receive to join"
    )
    _open(store)
    got = await asyncio.gather(first, second)
    assert store.popped_queues == [1, 1]
    assert [[d.popped.offset for d in deliveries] for deliveries in got] == [[0, 1], [2, 3, 4]]
