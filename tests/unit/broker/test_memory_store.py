"""The in-memory store's pop state machine, driven by a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from broker.domain import GroupInfo, Message, QueueRef
from broker.errors import BrokerError, Reason
from broker.services.clock import ManualClock
from broker.services.memory import MemoryMetadata, MemoryStore
from protocol.filters import FilterKind, MessageFilter
from protocol.vocabulary import MessageType

Q = QueueRef("orders", 0)
GROUP = GroupInfo("g")
ALL = MessageFilter()


def _messages(count: int, **fields: object) -> list[Message]:
    return [Message("orders", f"m{i}".encode(), f"id-{i}", **fields) for i in range(count)]  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock, MemoryMetadata())


async def test_append_is_one_call_per_batch(store: MemoryStore) -> None:
    results = await store.append(Q, _messages(3))
    assert [r.offset for r in results] == [0, 1, 2]
    assert store.append_calls == 1


async def test_pop_hides_until_invisible_time_then_redelivers(
    store: MemoryStore, clock: ManualClock
) -> None:
    await store.append(Q, _messages(2))
    first = await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    assert [p.offset for p in first.messages] == [0, 1]
    assert {p.delivery_attempt for p in first.messages} == {1}
    assert first.next_visible_ms == clock.now_ms() + 10_000
    empty = await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    assert empty.messages == ()
    assert empty.end_offset == 2
    clock.advance(10_000)
    again = await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    assert [(p.offset, p.delivery_attempt) for p in again.messages] == [(0, 2), (1, 2)]
    assert {p.generation for p in again.messages}.isdisjoint(p.generation for p in first.messages)


async def test_groups_are_independent(store: MemoryStore) -> None:
    await store.append(Q, _messages(1))
    a = await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    b = await store.pop(
        GroupInfo("other"), Q, batch_size=10, invisible_ms=10_000, message_filter=ALL
    )
    assert len(a.messages) == len(b.messages) == 1


async def test_ack_finishes_and_stale_generations_are_refused(
    store: MemoryStore, clock: ManualClock
) -> None:
    await store.append(Q, _messages(2))
    popped = (
        await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    ).messages
    clock.advance(10_000)
    (redelivered, _) = (
        await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    ).messages
    with pytest.raises(BrokerError) as caught:
        await store.ack("g", Q, 0, popped[0].generation)
    assert caught.value.reason is Reason.INVALID_RECEIPT_HANDLE
    await store.ack("g", Q, 0, redelivered.generation)
    # The committed offset passes offset 1, still in flight (RocketMQ's); below the
    # lowest offset not finished, 1, everything is done.
    assert await store.get_consumer_offset("g", Q) == 2
    assert store.consumer_states()[("g", Q)] == (1, 1)
    with pytest.raises(BrokerError):
        await store.ack("g", Q, 0, redelivered.generation)  # finished already


async def test_ack_all_gives_one_outcome_per_delivery_in_order(store: MemoryStore) -> None:
    await store.append(Q, _messages(3))
    popped = (
        await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    ).messages
    deliveries = [(Q, p.offset, p.generation) for p in popped]
    deliveries.insert(1, (Q, 0, popped[0].generation + 1000))  # never issued
    outcomes = await store.ack_all("g", deliveries)
    assert [outcome is None for outcome in outcomes] == [True, False, True, True]
    stale = outcomes[1]
    assert isinstance(stale, BrokerError)
    assert stale.reason is Reason.INVALID_RECEIPT_HANDLE
    assert await store.get_consumer_offset("g", Q) == 3


async def test_change_invisible_renews_with_a_new_generation(
    store: MemoryStore, clock: ManualClock
) -> None:
    await store.append(Q, _messages(1))
    (popped,) = (
        await store.pop(GROUP, Q, batch_size=1, invisible_ms=10_000, message_filter=ALL)
    ).messages
    generation, until = await store.change_invisible("g", Q, 0, popped.generation, 1_000)
    assert generation != popped.generation
    assert until == clock.now_ms() + 1_000
    with pytest.raises(BrokerError):
        await store.ack("g", Q, 0, popped.generation)
    clock.advance(1_000)
    (again,) = (
        await store.pop(GROUP, Q, batch_size=1, invisible_ms=10_000, message_filter=ALL)
    ).messages
    assert again.delivery_attempt == 2


async def test_filter_consumes_non_matching_messages(store: MemoryStore) -> None:
    await store.append(Q, [*_messages(1, tag="a"), *_messages(1, tag="b")])
    popped = await store.pop(
        GROUP,
        Q,
        batch_size=10,
        invisible_ms=10_000,
        message_filter=MessageFilter(FilterKind.TAG, "b"),
    )
    assert [p.message.tag for p in popped.messages] == ["b"]
    await store.ack("g", Q, popped.messages[0].offset, popped.messages[0].generation)
    assert await store.get_consumer_offset("g", Q) == 2


async def test_a_sql92_filter_sees_properties_tags_and_keys(store: MemoryStore) -> None:
    await store.append(
        Q,
        [
            Message("orders", b"0", "id-0", user_properties={"n": "1"}),
            Message("orders", b"1", "id-1", user_properties={"n": "7"}, tag="x"),
            Message("orders", b"2", "id-2", tag="x", keys=("k",)),
            Message("orders", b"3", "id-3"),
        ],
    )
    sql = MessageFilter.of(FilterKind.SQL, "n > 5 OR (TAGS = 'x' AND KEYS = 'k')")
    popped = await store.pop(GROUP, Q, batch_size=10, invisible_ms=10_000, message_filter=sql)
    assert [p.message.message_id for p in popped.messages] == ["id-1", "id-2"]
    for message in popped.messages:
        await store.ack("g", Q, message.offset, message.generation)
    assert await store.get_consumer_offset("g", Q) == 4  # the others were consumed


async def test_fifo_blocks_a_message_group_until_its_head_is_acked(
    store: MemoryStore, clock: ManualClock
) -> None:
    fifo = GroupInfo("g", fifo=True)
    kinds = {"message_type": MessageType.FIFO}
    await store.append(
        Q,
        [
            Message("orders", b"a1", "a1", message_group="a", **kinds),  # type: ignore[arg-type]
            Message("orders", b"b1", "b1", message_group="b", **kinds),  # type: ignore[arg-type]
            Message("orders", b"a2", "a2", message_group="a", **kinds),  # type: ignore[arg-type]
        ],
    )
    first = await store.pop(fifo, Q, batch_size=1, invisible_ms=10_000, message_filter=ALL)
    assert [p.message.message_id for p in first.messages] == ["a1"]
    second = await store.pop(fifo, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    assert [p.message.message_id for p in second.messages] == ["b1"]  # a2 waits for a1
    clock.advance(10_000)
    third = await store.pop(fifo, Q, batch_size=10, invisible_ms=10_000, message_filter=ALL)
    assert [(p.message.message_id, p.delivery_attempt) for p in third.messages] == [
        ("a1", 2), ("b1", 2), ("a2", 1)
    ]  # fmt: skip


async def test_dead_letter_copy(store: MemoryStore) -> None:
    await store.append(Q, _messages(1))
    (popped,) = (
        await store.pop(GROUP, Q, batch_size=1, invisible_ms=10_000, message_filter=ALL)
    ).messages
    result = await store.forward_to_dead_letter(GROUP, Q, 0, popped.generation)
    assert result.queue == QueueRef("%DLQ%g", 0)
    (copy,) = store.messages(QueueRef("%DLQ%g", 0))
    assert copy.dead_letter_of == ("orders", "id-0")
    assert copy.topic == "%DLQ%g"
    assert await store.get_consumer_offset("g", Q) == 1


async def test_wait_for_append_wakes_on_growth(store: MemoryStore) -> None:
    assert not await store.wait_for_append("orders", {0: 0}, 1)
    waiter = asyncio.create_task(store.wait_for_append("orders", {0: 0}, 10_000))
    await store.append(Q, _messages(1))
    assert await asyncio.wait_for(waiter, 5)
    assert await store.wait_for_append("orders", {0: 0}, 0)  # already past: no wait


async def test_metadata_lookups() -> None:
    metadata = MemoryMetadata(auto_create_groups=False)
    with pytest.raises(BrokerError) as caught:
        await metadata.get_topic("nope")
    assert caught.value.reason is Reason.TOPIC_NOT_FOUND
    with pytest.raises(BrokerError) as caught:
        await metadata.get_group("nope")
    assert caught.value.reason is Reason.CONSUMER_GROUP_NOT_FOUND
    metadata.auto_create_topics = True
    assert (await metadata.get_topic("new")).queue_count == 4
