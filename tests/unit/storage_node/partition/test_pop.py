"""Pop consumption: leases, invisibility, receipt handles, attempts, DLQ, filters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import errors
from protocol.storage_api import ReceiptHandle
from storage_node.errors import BadCommand, InvalidReceiptHandle
from storage_node.partition.commands import (
    ChangeInvisibleDuration,
    CommitOffset,
    DeadLetter,
    InitialPosition,
)
from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import (
    AckOutcome,
    ChangeInvisibleDurationResult,
    CommitOffsetResult,
    DeadLetterResult,
)

from .harness import Harness, record

T0 = 1_000_000


def filled(*ids: str, **kwargs: object) -> Harness:
    h = Harness(PartitionConfig(group_id=7), **kwargs)  # type: ignore[arg-type]
    h.append(*(record(i) for i in ids))
    return h


def change(h: Harness, handle: ReceiptHandle, invisible_ms: int) -> ChangeInvisibleDurationResult:
    result = h.apply(ChangeInvisibleDuration(h.now_ms, "g", handle, invisible_ms))
    assert isinstance(result, ChangeInvisibleDurationResult)
    return result


def test_a_receive_hands_out_messages_once_until_they_expire() -> None:
    h = filled("a", "b", "c")
    first = h.receive(max_messages=2, invisible_ms=30_000)
    assert h.bodies(first) == [b"a", b"b"]
    assert [d.delivery_attempt for d in first.deliveries] == [1, 1]
    assert [d.invisible_until_ms for d in first.deliveries] == [T0 + 30_000] * 2
    assert first.deliveries[0].handle == ReceiptHandle("orders", 0, 0, 2)
    assert h.bodies(h.receive()) == [b"c"]
    h.advance(29_999)
    assert h.receive().deliveries == ()
    h.advance(1)
    again = h.receive()
    assert h.bodies(again) == [b"a", b"b", b"c"]
    assert [d.delivery_attempt for d in again.deliveries] == [2, 2, 2]
    assert {d.handle.generation for d in again.deliveries} == {h.state.applied_index}


def test_each_group_consumes_every_message() -> None:
    h = filled("a", "b")
    assert h.bodies(h.receive("g1")) == [b"a", b"b"]
    assert h.bodies(h.receive("g2")) == [b"a", b"b"]


def test_ack_finishes_a_message_for_its_group_only() -> None:
    h = filled("a", "b")
    delivered = h.receive()
    result = h.ack(delivered.deliveries[0].handle)
    assert result.outcomes == (AckOutcome(delivered.deliveries[0].handle),)
    assert h.state.consumer_offset("g", "orders", 0) == 1
    h.advance(30_000)
    assert h.bodies(h.receive()) == [b"b"]
    # The same handle cannot ack twice, nor in another group.
    assert h.ack(delivered.deliveries[0].handle).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    assert (
        h.ack(delivered.deliveries[1].handle, group="other").outcomes[0].error
        is errors.INVALID_RECEIPT_HANDLE
    )


def test_ack_at_or_after_expiry_is_rejected() -> None:
    h = filled("a")
    handle = h.receive(invisible_ms=10_000).deliveries[0].handle
    h.advance(10_000)
    assert h.ack(handle).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    # ... and the message comes back with the next attempt.
    again = h.receive()
    assert again.deliveries[0].delivery_attempt == 2
    assert h.ack(again.deliveries[0].handle).outcomes[0].error is None
    assert h.state.consumer_offset("g", "orders", 0) == 1


def test_a_redelivery_makes_the_previous_handle_stale() -> None:
    h = filled("a")
    old = h.receive(invisible_ms=10_000).deliveries[0].handle
    h.advance(10_000)
    new = h.receive(invisible_ms=10_000).deliveries[0].handle
    assert new.generation > old.generation
    assert h.ack(old).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    assert h.ack(new).outcomes[0].error is None


def test_an_ack_batch_reports_each_handle() -> None:
    h = filled("a", "b")
    handles = [d.handle for d in h.receive().deliveries]
    forged = ReceiptHandle("orders", 0, 9, handles[0].generation)
    result = h.ack(handles[0], forged, handles[1], handles[1])
    assert [o.error for o in result.outcomes] == [
        None,
        errors.INVALID_RECEIPT_HANDLE,
        None,
        errors.INVALID_RECEIPT_HANDLE,
    ]
    assert h.state.consumer_offset("g", "orders", 0) == 2


def test_change_invisible_duration_renews_with_a_new_handle() -> None:
    h = filled("a")
    old = h.receive(invisible_ms=10_000).deliveries[0].handle
    h.advance(9_000)
    renewed = change(h, old, 60_000)
    assert renewed.handle.generation == h.state.applied_index != old.generation
    assert renewed.invisible_until_ms == T0 + 69_000
    assert renewed.delivery_attempt == 1
    h.advance(30_000)
    assert h.receive().deliveries == ()  # still invisible: the renewal holds
    assert h.ack(old).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    with pytest.raises(InvalidReceiptHandle):
        change(h, old, 1000)
    assert h.ack(renewed.handle).outcomes[0].error is None


def test_change_invisible_duration_after_expiry_is_rejected() -> None:
    h = filled("a")
    handle = h.receive(invisible_ms=10_000).deliveries[0].handle
    h.advance(10_000)
    with pytest.raises(InvalidReceiptHandle):
        change(h, handle, 10_000)


def test_zero_invisible_duration_is_a_nack_that_counts_an_attempt() -> None:
    h = filled("a")
    handle = h.receive().deliveries[0].handle
    nacked = change(h, handle, 0)
    assert nacked.invisible_until_ms == h.now_ms
    with pytest.raises(InvalidReceiptHandle):
        change(h, nacked.handle, 10_000)  # visible already: the handle expired
    again = h.receive()
    assert again.deliveries[0].delivery_attempt == 2


def test_after_max_attempts_a_message_goes_to_the_dead_letter_queue() -> None:
    h = filled("a", "b")
    for attempt in (1, 2):
        got = h.receive(max_messages=1, invisible_ms=1000, max_attempts=2)
        assert [(d.handle.queue_offset, d.delivery_attempt) for d in got.deliveries] == [
            (0, attempt)
        ]
        h.advance(1000)
    result = h.receive(max_messages=1, invisible_ms=1000, max_attempts=2)
    assert [d.handle.queue_offset for d in result.deliveries] == [1]  # "a" skipped: dead
    [dead] = result.dead_lettered
    assert (dead.queue_offset, dead.attempts) == (0, 2)
    assert (dead.dead_letter_topic, dead.dead_letter_queue_id, dead.dead_letter_offset) == (
        "%DLQ%g",
        7,
        0,
    )
    assert h.state.lease("g", "orders", 0, 0) is None
    copy = h.resolve(h.state.entry("%DLQ%g", 7, 0), "%DLQ%g", 7)
    assert (copy.topic, copy.queue_id, copy.body) == ("%DLQ%g", 7, b"a")
    assert (copy.dead_letter_topic, copy.dead_letter_message_id) == ("orders", "a")
    # The dead-letter queue is an ordinary queue: it can be consumed.
    dlq = h.receive("ops", topic="%DLQ%g", queue_id=7)
    assert h.bodies(dlq) == [b"a"]
    assert dlq.deliveries[0].delivery_attempt == 1
    assert h.state.grown_queues == set()


def test_max_attempts_one_dead_letters_on_first_expiry() -> None:
    h = filled("a")
    h.receive(invisible_ms=1000, max_attempts=1)
    h.advance(1000)
    result = h.receive(invisible_ms=1000, max_attempts=1)
    assert result.deliveries == ()
    assert len(result.dead_lettered) == 1
    assert h.state.consumer_offset("g", "orders", 0) == 1
    assert h.state.grown_queues == {("%DLQ%g", 7)}


def test_a_consumer_can_dead_letter_a_message_at_once() -> None:
    h = filled("a")
    handle = h.receive().deliveries[0].handle
    result = h.apply(DeadLetter(h.now_ms, "g", handle))
    assert isinstance(result, DeadLetterResult)
    assert result.dead_lettered.attempts == 1
    assert h.state.end_offset("%DLQ%g", 7) == 1
    with pytest.raises(InvalidReceiptHandle):
        h.apply(DeadLetter(h.now_ms, "g", handle))
    h.advance(10**6)
    assert h.receive().deliveries == ()


def test_tag_filters_skip_other_messages_for_good() -> None:
    h = Harness()
    h.append(record("a", tag="red"), record("b", tag="blue"), record("c"), record("d", tag="red"))
    got = h.receive(filter_expression="red || green")
    assert h.bodies(got) == [b"a", b"d"]
    for d in got.deliveries:
        h.ack(d.handle)
    assert h.state.consumer_offset("g", "orders", 0) == 4
    assert h.bodies(h.receive("all", filter_expression="*")) == [b"a", b"b", b"c", b"d"]


def test_commit_offset_repositions_a_group_and_drops_its_leases() -> None:
    h = filled("a", "b", "c")
    handle = h.receive(max_messages=1).deliveries[0].handle
    result = h.apply(CommitOffset(h.now_ms, "g", "orders", 0, 2))
    assert result == CommitOffsetResult(2)
    assert h.state.consumer_offset("g", "orders", 0) == 2
    assert h.ack(handle).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    assert h.bodies(h.receive()) == [b"c"]
    assert h.apply(CommitOffset(h.now_ms, "g", "orders", 0, 99)) == CommitOffsetResult(3)
    assert h.apply(CommitOffset(h.now_ms, "g", "orders", 0, -5)) == CommitOffsetResult(0)
    assert h.bodies(h.receive()) == [b"a", b"b", b"c"]


def test_a_new_group_may_start_at_the_end() -> None:
    h = filled("a", "b")
    assert h.receive(initial_position=InitialPosition.LATEST).deliveries == ()
    assert h.state.consumer_offset("g", "orders", 0) == 2
    h.append(record("c"))
    assert h.bodies(h.receive(initial_position=InitialPosition.LATEST)) == [b"c"]
    assert h.state.consumer_offset("never", "orders", 0) is None


def test_a_repeated_attempt_id_replays_the_deliveries_still_in_flight() -> None:
    h = filled("a", "b", "c")
    first = h.receive(max_messages=2, invisible_ms=10_000, attempt_id="r1")
    replay = h.receive(max_messages=2, invisible_ms=10_000, attempt_id="r1")
    assert replay.deliveries == first.deliveries
    h.ack(first.deliveries[0].handle)
    renewed = change(h, first.deliveries[1].handle, 10_000)
    # Nothing of that batch is in flight under its handles any more: a normal receive.
    again = h.receive(max_messages=2, invisible_ms=10_000, attempt_id="r1")
    assert h.bodies(again) == [b"c"]
    assert h.ack(renewed.handle).outcomes[0].error is None
    # Another attempt id, or none, never replays.
    h.advance(10_000)
    assert h.receive(attempt_id="r2").deliveries[0].delivery_attempt == 2
    assert h.receive(attempt_id="r2").deliveries[0].handle.queue_offset == 2
    h.restart_from_snapshot()
    assert h.receive(attempt_id="r2").deliveries[0].handle.queue_offset == 2


def test_receive_arguments_are_checked() -> None:
    h = filled("a")
    for bad in (
        {"max_messages": 0},
        {"invisible_ms": -1},
        {"max_attempts": 0},
        {"group": ""},
    ):
        with pytest.raises(BadCommand):
            h.receive(**bad)
    assert h.state.group_queues() == []
    assert h.receive(topic="empty").deliveries == ()


def test_a_receive_looks_at_a_bounded_number_of_offsets() -> None:
    h = Harness(PartitionConfig(receive_scan_max=3))
    h.append(*(record(f"m{i}", tag="x" if i >= 4 else "") for i in range(6)))
    assert h.receive(filter_expression="x").deliveries == ()  # looked at m0..m2 only
    assert h.state.consumer_offset("g", "orders", 0) == 3
    assert h.bodies(h.receive(filter_expression="x")) == [b"m4", b"m5"]


def test_backlog_counts_what_a_group_has_left_and_has_in_flight() -> None:
    h = filled("a", "b", "c", "d")
    assert h.state.backlog("g", "orders", 0) == (4, 0)
    got = h.receive(max_messages=2, invisible_ms=1000)
    h.ack(got.deliveries[1].handle)
    assert h.state.backlog("g", "orders", 0) == (3, 1)
    h.advance(1000)
    h.apply(CommitOffset(h.now_ms, "other", "orders", 0, 3))
    assert h.state.backlog("g", "orders", 0) == (3, 0)  # "a" expired: visible again
    assert h.state.backlog("other", "orders", 0) == (1, 0)


QUEUES = (("orders", 0), ("orders", 1), ("audit", 0))


def _three_queues_received() -> tuple[Harness, list[ReceiptHandle]]:
    """Five messages in each of three queues; group g holds three of each, plus
    handles that name no current lease (forged offset, old generation, other queue)."""
    h = Harness(PartitionConfig(group_id=7))
    for topic, queue_id in QUEUES:
        h.append(
            *(record(f"{topic}{queue_id}-{i}", topic=topic, queue_id=queue_id) for i in range(5))
        )
    held = [
        d.handle
        for topic, queue_id in QUEUES
        for d in h.receive(topic=topic, queue_id=queue_id, max_messages=3).deliveries
    ]
    first = held[0]
    stale = [
        ReceiptHandle(first.topic, first.queue_id, 4, first.generation),  # never delivered
        first._replace(generation=first.generation - 1),  # not the current grant
        ReceiptHandle("nowhere", 0, 0, first.generation),  # a queue the group never read
    ]
    return h, held + stale


@given(st.data())
def test_one_ack_of_many_queues_equals_acking_each_handle_alone(data: st.DataObject) -> None:
    """However handles of several queues are ordered, mixed and repeated in one Ack,
    each gets the outcome, and the group ends in the state, of acking them one by one."""
    together, pool = _three_queues_received()
    alone, _ = _three_queues_received()
    handles = data.draw(st.lists(st.sampled_from(pool), max_size=16))
    outcomes = together.ack(*handles).outcomes
    assert list(outcomes) == [alone.ack(handle).outcomes[0] for handle in handles]
    for topic, queue_id in QUEUES:
        for h in (together, alone):
            h.advance(3_600_000)  # every lease still held has expired: redelivered now
        assert together.state.consumer_offset("g", topic, queue_id) == alone.state.consumer_offset(
            "g", topic, queue_id
        )
        again = [
            [
                (d.handle.queue_offset, d.delivery_attempt)
                for d in h.receive(topic=topic, queue_id=queue_id, max_messages=32).deliveries
            ]
            for h in (together, alone)
        ]
        assert again[0] == again[1]
