"""A receive that would change nothing is recognised without applying it.

``PartitionState.idle_receive_end`` lets a leader answer such a receive empty
without a log entry; it must never say so when applying the receive would
hand out, dead-letter or finish a message, release a timer or start a
group's cursor.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import ReceiveResult
from storage_node.partition.snapshot import restore, take_snapshot

from .harness import Harness, record


def _consumption(h: Harness) -> list[object]:
    """What a receive may change: the group's cursor, leases and done offsets."""
    for group, topic, queue_id in h.state.group_queues():
        if (group, topic, queue_id) == ("g", "orders", 0):
            group_queue = h.state._groups[(group, topic, queue_id)]
            return [group_queue.cursor, sorted(group_queue.leases.items()), group_queue.done_ahead]
    return []


def _idle_end(h: Harness) -> int | None:
    return h.state.idle_receive_end("g", "orders", 0, h.now_ms)


def test_a_group_that_never_received_must_propose() -> None:
    h = Harness()
    h.append(record("a"))
    assert _idle_end(h) is None  # its first receive starts its cursor


def test_an_unknown_queue_is_idle_at_offset_zero() -> None:
    h = Harness()
    assert _idle_end(h) == 0


def test_everything_in_flight_is_idle_until_a_lease_expires() -> None:
    h = Harness()
    h.append(record("a"), record("b"))
    assert len(h.receive(invisible_ms=10_000).deliveries) == 2
    assert _idle_end(h) == 2
    h.advance(10_000)
    assert _idle_end(h) is None  # the leases expired: a redelivery is due


def test_a_fresh_message_or_a_due_timer_is_not_idle() -> None:
    h = Harness()
    h.append(record("a"))
    h.receive()
    h.append(record("b"))
    assert _idle_end(h) is None
    h.receive()
    assert _idle_end(h) == 2
    h.append(record("later", delivery_timestamp_ms=h.now_ms + 5_000))
    assert _idle_end(h) == 2
    h.advance(5_000)
    assert _idle_end(h) is None  # the receive's clock would release the timer


def test_a_retried_receive_attempt_is_not_covered_here() -> None:
    # The service never asks for a receive naming an attempt id; the state
    # answers for the queue only, whatever the attempt.
    h = Harness(PartitionConfig(group_id=3))
    h.append(record("a"))
    h.receive(attempt_id="x")
    assert _idle_end(h) == 1


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("receive"), st.integers(1, 3)),
        st.tuples(st.just("ack"), st.integers(0, 3)),
        st.tuples(st.just("advance"), st.sampled_from([0, 1_000, 5_000, 20_000])),
        st.tuples(st.just("timer"), st.sampled_from([1_000, 8_000])),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from(["*", "red"]))
def test_idle_means_applying_the_receive_would_change_nothing(
    ops: list[tuple[str, int]], tags: str
) -> None:
    h = Harness()
    handles: list[object] = []
    serial = 0
    for op, n in ops:
        if op == "append":
            h.append(*(record(f"m{serial + i}", tag="red" if i % 2 else "blue") for i in range(n)))
            serial += n
        elif op == "timer":
            h.append(record(f"t{serial}", delivery_timestamp_ms=h.now_ms + n))
            serial += 1
        elif op == "receive":
            result = h.receive(max_messages=n, invisible_ms=10_000, max_attempts=2,
                               filter_expression=tags)  # fmt: skip
            handles.extend(d.handle for d in result.deliveries)
        elif op == "ack" and handles:
            h.ack(*handles[:n])  # type: ignore[arg-type]
            del handles[:n]
        else:
            h.advance(n)
        idle_end = _idle_end(h)
        if idle_end is None:
            continue
        before = _consumption(h)
        copy = Harness(h.config, now_ms=h.now_ms, log=dict(h.log))
        copy.state = restore(take_snapshot(h.state))
        applied = copy.receive(filter_expression=tags, max_attempts=2)
        assert isinstance(applied, ReceiveResult)
        assert (applied.deliveries, applied.dead_lettered) == ((), ())
        assert applied.end_offset == idle_end
        assert _consumption(copy) == before
