"""Retention: trimming a queue's oldest messages, and what the log must keep."""

from __future__ import annotations

import pytest

from protocol import errors
from protocol.vocabulary import MessageType
from storage_node.errors import OffsetOutOfRange
from storage_node.partition.commands import CommitOffset, DropTopic, Tick, TrimQueue
from storage_node.partition.results import CommitOffsetResult, DropTopicResult, TrimQueueResult

from .harness import Harness, record


def test_trimmed_offsets_are_gone_and_never_reused() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"))
    assert h.apply(TrimQueue(h.now_ms, "orders", 0, 2)) == TrimQueueResult(2)
    assert h.state.first_offset("orders", 0) == 2
    assert h.state.end_offset("orders", 0) == 3
    with pytest.raises(OffsetOutOfRange):
        h.state.entry("orders", 0, 1)
    with pytest.raises(OffsetOutOfRange):
        h.state.read("orders", 0, 0, 10)
    assert [h.resolve(e, "orders", 0).body for e in h.state.read("orders", 0, 2, 10)] == [b"c"]
    assert h.append(record("d")).outcomes[0].queue_offset == 3
    # Trimming never moves backwards nor past the end.
    assert h.apply(TrimQueue(h.now_ms, "orders", 0, 1)) == TrimQueueResult(2)
    assert h.apply(TrimQueue(h.now_ms, "orders", 0, 99)) == TrimQueueResult(4)
    assert h.apply(TrimQueue(h.now_ms, "nowhere", 0, 5)) == TrimQueueResult(0)
    h.restart_from_snapshot()
    assert (h.state.first_offset("orders", 0), h.state.end_offset("orders", 0)) == (4, 4)


def test_groups_move_past_trimmed_messages_and_lose_their_leases() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"), record("d"))
    first = h.receive(max_messages=2)
    h.apply(TrimQueue(h.now_ms, "orders", 0, 1))
    assert h.ack(first.deliveries[0].handle).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    assert h.ack(first.deliveries[1].handle).outcomes[0].error is None
    assert h.state.consumer_offset("g", "orders", 0) == 2
    assert h.bodies(h.receive("late")) == [b"b", b"c", b"d"]  # a new group starts at the first
    assert h.apply(CommitOffset(h.now_ms, "g", "orders", 0, 0)) == CommitOffsetResult(1)
    h.state.check_invariants()


def test_the_log_must_keep_what_queues_half_messages_and_timers_name() -> None:
    h = Harness()
    assert h.state.min_log_index_referenced() is None
    h.append(record("a"))  # log index 1
    h.append(record("tx", message_type=MessageType.TRANSACTION))  # 2
    h.append(record("late", delivery_timestamp_ms=h.now_ms + 10_000))  # 3
    h.append(record("b"))  # 4
    assert h.state.min_log_index_referenced() == 1
    h.apply(TrimQueue(h.now_ms, "orders", 0, 1))
    assert h.state.min_log_index_referenced() == 2  # the half message


def test_the_oldest_reference_follows_a_released_timer_through_trims() -> None:
    # A released timer is queued behind newer entries: log indexes do not grow
    # along a queue, so the oldest one is not the queue's front.
    h = Harness()
    h.append(record("a"))  # log index 1, offset 0
    h.append(record("late", delivery_timestamp_ms=h.now_ms + 10_000))  # 2, held
    h.append(record("b"))  # 3, offset 1
    h.apply(TrimQueue(h.now_ms, "orders", 0, 1))
    assert h.state.min_log_index_referenced() == 2  # the held message
    h.advance(10_000)
    h.apply(Tick(h.now_ms))  # "late" is queued at offset 2, after "b"
    entries = h.state.read("orders", 0, 1, 10)
    assert [h.resolve(e, "orders", 0).body for e in entries] == [b"b", b"late"]
    assert h.state.min_log_index_referenced() == 2
    h.apply(TrimQueue(h.now_ms, "orders", 0, 2))  # "b" goes; "late" still names entry 2
    assert h.state.min_log_index_referenced() == 2
    h.restart_from_snapshot()
    assert h.state.min_log_index_referenced() == 2
    h.apply(TrimQueue(h.now_ms, "orders", 0, 3))
    assert h.state.min_log_index_referenced() is None


def test_a_dropped_topic_leaves_nothing_and_starts_again_at_offset_zero() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"))
    h.append(record("x", topic="other"))
    h.append(record("tx", message_type=MessageType.TRANSACTION))
    h.append(record("late", delivery_timestamp_ms=h.now_ms + 10_000))
    delivered = h.receive(max_messages=2)
    dropped = h.apply(DropTopic(h.now_ms, "orders"))
    assert dropped == DropTopicResult(queues=1, messages=3, consumer_queues=1, timers=1, halves=1)
    assert h.state.queue_ids() == [("other", 0)]
    assert (h.state.first_offset("orders", 0), h.state.end_offset("orders", 0)) == (0, 0)
    assert h.state.consumer_offset("g", "orders", 0) is None
    assert h.ack(delivered.deliveries[0].handle).outcomes[0].error is (
        errors.INVALID_RECEIPT_HANDLE
    )
    # Only the other topic's entry is still referenced by the state.
    assert h.state.min_log_index_referenced() == 2
    h.advance(10_000)
    h.apply(Tick(h.now_ms))  # the cancelled timer is not released
    assert h.state.end_offset("orders", 0) == 0
    # Created again: a fresh queue from offset 0, a group starting at its first message.
    assert h.append(record("d")).outcomes[0].queue_offset == 0
    assert h.bodies(h.receive()) == [b"d"]
    h.restart_from_snapshot()
    assert (h.state.first_offset("orders", 0), h.state.end_offset("orders", 0)) == (0, 1)
    assert h.apply(DropTopic(h.now_ms, "nowhere")) == DropTopicResult(0, 0, 0, 0, 0)
    h.state.check_invariants()
