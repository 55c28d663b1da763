"""RecallMessage: recall handles, and the producer's recall over the in-memory ports."""

from __future__ import annotations

import base64

import pytest

from broker.domain import QueueRef
from broker.errors import BrokerError
from broker.processor import recall_handle as recall_handles
from protocol import errors as codes
from tests.unit.broker.test_transactions_timers import World, _timed


@pytest.fixture
def world() -> World:
    return World()


def test_a_handle_names_the_queue_message_and_time_in_rocketmqs_shape() -> None:
    handle = recall_handles.encode(QueueRef("timed", 3), "m-1", 1_700_000_000_123)
    assert base64.urlsafe_b64decode(handle).decode() == "v1 timed 3 1700000000123 m-1"
    target = recall_handles.decode(handle, "timed")
    assert target == recall_handles.RecallTarget(QueueRef("timed", 3), "m-1", 1_700_000_000_123)


@pytest.mark.parametrize(
    ("handle", "topic", "says"),
    [
        ("", "timed", "blank"),
        ("not base64 !", "timed", "not issued"),
        (base64.urlsafe_b64encode(b"v2 timed 0 1 m").decode(), "timed", "not issued"),
        (base64.urlsafe_b64encode(b"v1 timed x 1 m").decode(), "timed", "not issued"),
        (recall_handles.encode(QueueRef("other", 0), "m", 1), "timed", "topic 'other'"),
    ],
)
def test_a_bad_handle_is_a_bad_request_saying_why(handle: str, topic: str, says: str) -> None:
    with pytest.raises(BrokerError) as caught:
        recall_handles.decode(handle, topic)
    assert caught.value.code is codes.BAD_REQUEST
    assert says in caught.value.message


async def test_a_recalled_timed_message_never_arrives(world: World) -> None:
    message = _timed(world, 1, 3_000)
    (result,) = await world.producer.send([message])
    assert message.delivery_timestamp_ms is not None
    handle = recall_handles.encode(result.queue, message.message_id, message.delivery_timestamp_ms)
    world.clock.advance(2_000)  # 1 s before due
    assert await world.producer.recall("timed", handle) == "timed-1"
    assert world.store.held_count == 0
    world.clock.advance(60_000)
    assert await world.received("timed") == []
    with pytest.raises(BrokerError) as again:
        await world.producer.recall("timed", handle)
    assert again.value.code is codes.NOT_FOUND


async def test_a_recall_after_delivery_says_it_was_delivered(world: World) -> None:
    message = _timed(world, 2, 1_000)
    (result,) = await world.producer.send([message])
    assert message.delivery_timestamp_ms is not None
    handle = recall_handles.encode(result.queue, message.message_id, message.delivery_timestamp_ms)
    world.clock.advance(1_000)
    assert await world.received("timed") == ["timed-2"]
    with pytest.raises(BrokerError) as caught:
        await world.producer.recall("timed", handle)
    assert caught.value.code is codes.NOT_FOUND
    assert "was due" in caught.value.message
    assert "delivered" in caught.value.message


async def test_a_handle_of_a_message_not_held_is_not_found(world: World) -> None:
    forged = recall_handles.encode(QueueRef("timed", 0), "never-sent", world.clock.now_ms() + 5_000)
    with pytest.raises(BrokerError) as caught:
        await world.producer.recall("timed", forged)
    assert caught.value.code is codes.NOT_FOUND
    assert "not held" in caught.value.message
