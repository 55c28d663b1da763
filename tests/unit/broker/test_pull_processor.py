"""The pull processor against the in-memory ports (time from a manual clock)."""

from __future__ import annotations

import asyncio

import pytest

from broker.domain import (
    GroupInfo,
    Message,
    MessageType,
    QueueInfo,
    QueueRef,
    QueueSlice,
    TopicInfo,
)
from broker.errors import BrokerError, Reason
from broker.grpc.status import status_of
from broker.processor.consumer import ConsumerProcessor
from broker.processor.pull import SKIPPED_READS_MAX, PullProcessor, PullResult
from broker.services.clock import ManualClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol import errors as codes
from protocol.filters import FilterKind, MessageFilter
from protocol.rocketmq.v2 import definition_pb2 as pb
from tests.waiting import async_wait_until

QUEUE = QueueRef("orders", 1)


class World:
    """Memory ports, a pull processor and a consumer (pop) processor over them."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        topic = TopicInfo("orders", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.NORMAL}))
        self.metadata = MemoryMetadata([topic], [GroupInfo("g")])
        self.store = MemoryStore(self.clock, self.metadata)
        self.pulls = PullProcessor(self.metadata, self.store)
        self.consumer = ConsumerProcessor(self.metadata, self.store, self.clock, b"secret")

    async def append(self, *numbers: int, tag: str | None = None) -> None:
        await self.store.append(
            QUEUE,
            [Message("orders", b"body-%d" % n, f"id-{n}", tag=tag) for n in numbers],
        )

    async def pull(
        self, offset: int, expression: str = "*", poll_ms: int = 0, batch: int = 32
    ) -> PullResult:
        return await self.pulls.pull(
            "g",
            "orders",
            1,
            offset,
            MessageFilter.of(FilterKind.TAG, expression),
            batch_size=batch,
            poll_ms=poll_ms,
        )


@pytest.fixture
def world() -> World:
    return World()


async def test_a_pull_reads_from_an_offset_in_batches_and_changes_no_state(world: World) -> None:
    await world.append(0, 1, 2, 3, 4)
    first = await world.pull(0, batch=2)
    assert [m.offset for m in first.messages] == [0, 1]
    assert [m.message.message_id for m in first.messages] == ["id-0", "id-1"]
    assert (first.next_offset, first.out_of_range) == (2, None)
    rest = await world.pull(first.next_offset)
    assert [m.offset for m in rest.messages] == [2, 3, 4]
    assert rest.next_offset == 5
    again = await world.pull(0)  # pulling moves nothing: the same messages again
    assert [m.offset for m in again.messages] == [0, 1, 2, 3, 4]
    with pytest.raises(BrokerError) as none:
        await world.pulls.get_offset("g", "orders", 1)
    assert none.value.reason is Reason.OFFSET_NOT_FOUND
    assert status_of(none.value).code == pb.OFFSET_NOT_FOUND


async def test_a_pull_at_the_end_waits_for_the_next_message(world: World) -> None:
    await world.append(0)
    pending = asyncio.create_task(world.pull(1, poll_ms=10_000))
    await async_wait_until(lambda: "orders" in world.store.waiting_topics, 5, "the pull waits")
    assert not pending.done()
    await world.append(1)
    result = await asyncio.wait_for(pending, 5)
    assert [m.message.message_id for m in result.messages] == ["id-1"]
    assert result.next_offset == 2
    empty = await world.pull(2, poll_ms=0)  # no poll: answered at once, offset kept
    assert (empty.messages, empty.next_offset) == ((), 2)


async def test_a_filtered_pull_skips_what_does_not_match(world: World) -> None:
    await world.append(0, 1, tag="b")
    await world.append(2, tag="a")
    await world.append(3, tag="b")
    found = await world.pull(0, "a")
    assert [m.offset for m in found.messages] == [2]
    assert found.next_offset == 4
    skipped = await world.pull(3, "a")
    assert (skipped.messages, skipped.next_offset) == ((), 4)


async def test_an_offset_out_of_range_is_illegal_with_the_range_and_a_corrected_next_offset(
    world: World,
) -> None:
    await world.append(0, 1, 2)
    beyond = await world.pull(7)
    assert beyond.messages == ()
    assert beyond.next_offset == 3
    assert beyond.out_of_range is not None
    assert beyond.out_of_range.code is codes.OFFSET_OUT_OF_RANGE
    status = status_of(beyond.out_of_range)
    assert status.code == pb.ILLEGAL_OFFSET
    assert "[0, 3]" in status.message
    with pytest.raises(BrokerError) as negative:
        await world.pulls.update_offset("g", "orders", 1, -1)
    assert status_of(negative.value).code == pb.ILLEGAL_OFFSET


async def test_a_committed_offset_is_where_pop_resumes_and_pop_progress_is_the_offset(
    world: World,
) -> None:
    await world.append(0, 1, 2, 3, 4)
    assert await world.pulls.update_offset("g", "orders", 1, 3) == 3
    assert await world.pulls.get_offset("g", "orders", 1) == 3
    received = await world.consumer.receive(
        "g", "orders", MessageFilter(), batch_size=32, invisible_ms=30_000, poll_ms=0
    )
    assert [d.popped.offset for d in received] == [3, 4]
    outcomes = await world.consumer.ack("g", "orders", [d.receipt_handle for d in received])
    assert outcomes == [None, None]
    assert await world.pulls.get_offset("g", "orders", 1) == 5
    assert await world.pulls.update_offset("g", "orders", 1, 99) == 5  # clamped to the end


async def test_query_offset_finds_the_beginning_the_end_and_a_time(world: World) -> None:
    await world.append(0, 1)
    world.clock.advance(1_000)
    since_ms = world.clock.now_ms()
    await world.append(2, 3)
    assert await world.pulls.beginning_offset("orders", 1) == 0
    assert await world.pulls.end_offset("orders", 1) == 4
    assert await world.pulls.offset_at("orders", 1, since_ms) == 2
    assert await world.pulls.offset_at("orders", 1, since_ms + 1) == 4
    assert await world.pulls.offset_at("orders", 1, 0) == 0


async def test_unknown_queues_and_groups_are_refused(world: World) -> None:
    with pytest.raises(BrokerError) as queue:
        await world.pulls.end_offset("orders", 5)
    assert status_of(queue.value).code == pb.BAD_REQUEST
    assert "no queue 5" in queue.value.message
    world.metadata.auto_create_groups = False
    with pytest.raises(BrokerError) as group:
        await world.pulls.pull("nobody", "orders", 1, 0, MessageFilter(), batch_size=1, poll_ms=0)
    assert group.value.reason is Reason.CONSUMER_GROUP_NOT_FOUND


async def test_a_commit_while_pops_are_in_flight_keeps_their_handles_and_pop_resumes_at_it(
    world: World,
) -> None:
    await world.append(0, 1, 2, 3, 4, 5)
    held = await world.consumer.receive(
        "g", "orders", MessageFilter(), batch_size=2, invisible_ms=30_000, poll_ms=0
    )
    assert [d.popped.offset for d in held] == [0, 1]
    assert await world.pulls.get_offset("g", "orders", 1) == 2  # past the ones in flight
    assert await world.pulls.update_offset("g", "orders", 1, 4) == 4
    assert await world.pulls.get_offset("g", "orders", 1) == 4
    outcomes = await world.consumer.ack("g", "orders", [d.receipt_handle for d in held])
    assert outcomes == [None, None]
    again = await world.consumer.receive(
        "g", "orders", MessageFilter(), batch_size=32, invisible_ms=30_000, poll_ms=0
    )
    assert [(d.popped.offset, d.popped.delivery_attempt) for d in again] == [(4, 1), (5, 1)]
    assert await world.pulls.get_offset("g", "orders", 1) == 6


async def test_a_commit_back_delivers_again_what_is_not_in_flight(world: World) -> None:
    await world.append(0, 1, 2)
    first = await world.consumer.receive(
        "g", "orders", MessageFilter(), batch_size=32, invisible_ms=30_000, poll_ms=0
    )
    assert await world.consumer.ack("g", "orders", [first[0].receipt_handle]) == [None]
    assert await world.pulls.update_offset("g", "orders", 1, 0) == 0
    assert await world.pulls.get_offset("g", "orders", 1) == 0
    again = await world.consumer.receive(
        "g", "orders", MessageFilter(), batch_size=32, invisible_ms=30_000, poll_ms=0
    )
    assert [(d.popped.offset, d.popped.delivery_attempt) for d in again] == [(0, 1)]
    held = [d.receipt_handle for d in first[1:]]
    assert await world.consumer.ack("g", "orders", held) == [None, None]


class WindowedStore(MemoryStore):
    """A memory store whose reads look at no more than ``WINDOW`` offsets, as the
    storage node's reads look at no more than its scan limit."""

    WINDOW = 4

    def __init__(self, clock: ManualClock, metadata: MemoryMetadata) -> None:
        super().__init__(clock, metadata)
        self.reads = 0

    async def read(
        self, queue: QueueRef, offset: int, *, batch_size: int, message_filter: MessageFilter
    ) -> QueueSlice:
        self.reads += 1
        whole = await super().read(
            queue, offset, batch_size=batch_size, message_filter=message_filter
        )
        window_end = offset + self.WINDOW
        messages = tuple(m for m in whole.messages if m.offset < window_end)
        next_offset = messages[-1].offset + 1 if messages else min(window_end, whole.end_offset)
        return QueueSlice(messages, next_offset, whole.first_offset, whole.end_offset)


async def test_a_pull_reads_on_past_skipped_windows_a_bounded_number_of_times(
    world: World,
) -> None:
    store = WindowedStore(world.clock, world.metadata)
    pulls = PullProcessor(world.metadata, store)
    await store.append(QUEUE, [Message("orders", b"x", f"b-{n}", tag="b") for n in range(100)])
    await store.append(QUEUE, [Message("orders", b"x", "a-0", tag="a")])

    async def pull(offset: int) -> PullResult:
        return await pulls.pull(
            "g",
            "orders",
            1,
            offset,
            MessageFilter(FilterKind.TAG, "a"),
            batch_size=32,
            poll_ms=60_000,
        )

    skipped = await pull(0)  # 16 windows of 4 skipped: answered, not polled out
    assert (skipped.messages, skipped.next_offset) == ((), 16 * WindowedStore.WINDOW)
    assert store.reads == SKIPPED_READS_MAX
    found = await pull(88)  # three windows later, the match
    assert [m.message.message_id for m in found.messages] == ["a-0"]
    assert found.next_offset == 101
