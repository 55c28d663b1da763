"""FIFO receive: per message group, offset order and one message in flight."""

from __future__ import annotations

from storage_node.partition.commands import ChangeInvisibleDuration
from storage_node.partition.results import ChangeInvisibleDurationResult

from .harness import Harness, record


def grouped(*pairs: tuple[str, str]) -> Harness:
    h = Harness()
    h.append(*(record(mid, message_group=group) for mid, group in pairs))
    return h


def test_one_message_per_group_in_flight_in_offset_order() -> None:
    h = grouped(("a1", "A"), ("a2", "A"), ("b1", "B"), ("a3", "A"), ("b2", "B"))
    first = h.receive(fifo=True)
    assert h.bodies(first) == [b"a1", b"b1"]
    assert h.receive(fifo=True).deliveries == ()
    h.ack(first.deliveries[1].handle)  # b1 done: b2 may go, A still blocked
    assert h.bodies(h.receive(fifo=True)) == [b"b2"]
    h.ack(first.deliveries[0].handle)
    assert h.bodies(h.receive(fifo=True)) == [b"a2"]


def test_an_expired_head_is_redelivered_before_the_rest_of_its_group() -> None:
    h = grouped(("a1", "A"), ("a2", "A"))
    head = h.receive(fifo=True, invisible_ms=1000).deliveries[0]
    h.advance(1000)
    again = h.receive(fifo=True, invisible_ms=1000)
    assert h.bodies(again) == [b"a1"]
    assert again.deliveries[0].delivery_attempt == 2
    assert again.deliveries[0].handle.generation != head.handle.generation
    h.ack(again.deliveries[0].handle)
    assert h.bodies(h.receive(fifo=True)) == [b"a2"]


def test_a_nacked_head_still_blocks_its_group() -> None:
    h = grouped(("a1", "A"), ("a2", "A"), ("b1", "B"))
    got = h.receive(fifo=True, max_messages=1)
    assert h.bodies(got) == [b"a1"]
    result = h.apply(ChangeInvisibleDuration(h.now_ms, "g", got.deliveries[0].handle, 5000))
    assert isinstance(result, ChangeInvisibleDurationResult)
    assert h.bodies(h.receive(fifo=True)) == [b"b1"]
    h.advance(5000)
    assert h.bodies(h.receive(fifo=True)) == [b"a1"]


def test_a_dead_lettered_head_unblocks_its_group() -> None:
    h = grouped(("a1", "A"), ("a2", "A"))
    h.receive(fifo=True, invisible_ms=1000, max_attempts=1)
    h.advance(1000)
    result = h.receive(fifo=True, invisible_ms=1000, max_attempts=1)
    assert [d.queue_offset for d in result.dead_lettered] == [0]
    assert h.bodies(result) == [b"a2"]


def test_messages_without_a_group_are_not_ordered() -> None:
    h = grouped(("x", ""), ("y", ""), ("a1", "A"), ("a2", "A"))
    assert h.bodies(h.receive(fifo=True)) == [b"x", b"y", b"a1"]


def test_acks_past_a_blocked_message_are_remembered() -> None:
    h = grouped(("a1", "A"), ("a2", "A"), ("b1", "B"))
    first = h.receive(fifo=True)
    assert h.bodies(first) == [b"a1", b"b1"]
    h.ack(first.deliveries[1].handle)  # b1 acked while a2 (before it) is still fresh
    assert h.state.consumer_offset("g", "orders", 0) == 0
    h.restart_from_snapshot()
    h.ack(first.deliveries[0].handle)
    assert h.state.consumer_offset("g", "orders", 0) == 1
    second = h.receive(fifo=True)
    assert h.bodies(second) == [b"a2"]  # b1 is not handed out again
    h.ack(second.deliveries[0].handle)
    assert h.state.consumer_offset("g", "orders", 0) == 3


def test_a_retried_receive_gets_the_same_batch_instead_of_a_locked_group() -> None:
    h = grouped(("a1", "A"), ("a2", "A"), ("b1", "B"))
    lost = h.receive(fifo=True, attempt_id="try-1")  # the response never reached the client
    retried = h.receive(fifo=True, attempt_id="try-1")
    assert retried.deliveries == lost.deliveries
    assert h.ack(*(d.handle for d in retried.deliveries)).outcomes[0].error is None
    assert h.bodies(h.receive(fifo=True, attempt_id="try-2")) == [b"a2"]


def test_fifo_respects_the_batch_size() -> None:
    h = grouped(("a1", "A"), ("b1", "B"), ("c1", "C"))
    assert h.bodies(h.receive(fifo=True, max_messages=2)) == [b"a1", b"b1"]
    assert h.bodies(h.receive(fifo=True, max_messages=2)) == [b"c1"]
