"""Delayed messages: held until the log's clock reaches their delivery time."""

from __future__ import annotations

from protocol.records import MessageRecord
from protocol.vocabulary import MessageType, Placement
from storage_node.partition.commands import CancelTimer, Tick
from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import CancelTimerResult, TickResult

from .harness import Harness, record

T0 = 1_000_000


def delayed(message_id: str, due_ms: int) -> MessageRecord:
    return record(message_id, delivery_timestamp_ms=due_ms, message_type=MessageType.DELAY)


def test_a_delayed_message_waits_for_its_time() -> None:
    h = Harness()
    outcome = h.append(delayed("late", T0 + 5000)).outcomes[0]
    assert outcome.placement is Placement.DELAYED
    assert outcome.queue_offset == -1
    assert h.state.end_offset("orders", 0) == 0
    assert h.state.next_timer_due_ms() == T0 + 5000
    assert h.receive().deliveries == ()
    h.advance(4999)
    assert h.apply(Tick(h.now_ms)) == TickResult(0)
    h.advance(1)
    assert h.apply(Tick(h.now_ms)) == TickResult(1)
    assert h.state.grown_queues == {("orders", 0)}
    assert h.queue_bodies() == [b"late"]
    assert h.state.entry("orders", 0, 0).store_timestamp_ms == T0 + 5000
    assert h.state.next_timer_due_ms() is None
    assert h.bodies(h.receive()) == [b"late"]


def test_a_due_time_in_the_past_is_no_delay() -> None:
    h = Harness()
    outcome = h.append(delayed("now", T0)).outcomes[0]
    assert outcome.placement is Placement.QUEUED


def test_any_command_releases_due_timers_in_due_then_log_order() -> None:
    h = Harness()
    h.append(delayed("b", T0 + 20), delayed("a", T0 + 10))
    h.append(delayed("c", T0 + 20))
    h.advance(100)
    h.append(record("d"))
    assert h.queue_bodies() == [b"a", b"b", b"c", b"d"]


def test_a_retried_delayed_send_is_not_held_twice_and_reports_its_offset_once_queued() -> None:
    h = Harness()
    h.append(delayed("x", T0 + 10))
    again = h.append(delayed("x", T0 + 10)).outcomes[0]
    assert again.duplicate
    assert again.placement is Placement.DELAYED
    h.advance(10)
    h.apply(Tick(h.now_ms))
    after = h.append(delayed("x", T0 + 10)).outcomes[0]
    assert (after.placement, after.queue_offset, after.duplicate) == (Placement.QUEUED, 0, True)
    assert h.state.end_offset("orders", 0) == 1


def test_a_resend_after_the_dedup_window_is_not_held_twice() -> None:
    h = Harness(PartitionConfig(dedup_window_ms=1000))
    h.append(delayed("x", T0 + 60_000))
    h.advance(5000)
    again = h.append(delayed("x", T0 + 60_000)).outcomes[0]
    assert (again.placement, again.duplicate) == (Placement.DELAYED, True)
    assert [held.message_id for held in h.state.held_messages()] == ["x"]
    h.advance(60_000)
    h.apply(Tick(h.now_ms))
    assert h.queue_bodies() == [b"x"]


def test_a_held_message_can_be_cancelled() -> None:
    h = Harness()
    h.append(delayed("x", T0 + 10), delayed("y", T0 + 10))
    assert h.apply(CancelTimer(h.now_ms, "orders", "x")) == CancelTimerResult(True)
    assert h.apply(CancelTimer(h.now_ms, "orders", "x")) == CancelTimerResult(False)
    assert [held.message_id for held in h.state.held_messages()] == ["y"]
    h.advance(10)
    h.apply(Tick(h.now_ms))
    assert h.queue_bodies() == [b"y"]
    assert h.apply(CancelTimer(h.now_ms, "orders", "y")) == CancelTimerResult(False)


def test_timers_survive_a_snapshot() -> None:
    h = Harness()
    h.append(delayed("x", T0 + 10), delayed("y", T0 + 20))
    h.apply(CancelTimer(h.now_ms, "orders", "x"))
    h.restart_from_snapshot()
    assert h.state.next_timer_due_ms() == T0 + 20
    h.advance(20)
    h.apply(Tick(h.now_ms))
    assert h.queue_bodies() == [b"y"]
