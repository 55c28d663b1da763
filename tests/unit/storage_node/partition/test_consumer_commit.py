"""A consumer's offset commit (CommitConsumerOffset) beside pop consumption of one group.

RocketMQ keeps pop's checkpoints across a pull consumer's commit: the commit
moves where pop resumes, in-flight handles still ack, and an unacked message
comes back when its invisibility ends. The committed offset a consumer reads
back passes messages in flight. An operator's reset (CommitOffset) is the one
commit that drops the leases (test_pop.py).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import errors
from storage_node.partition.commands import CommitConsumerOffset, CommitOffset
from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import CommitOffsetResult

from .harness import Harness, record


def filled(*ids: str) -> Harness:
    h = Harness(PartitionConfig(group_id=7))
    h.append(*(record(i) for i in ids))
    return h


def commit(h: Harness, offset: int, group: str = "g") -> CommitOffsetResult:
    result = h.apply(CommitConsumerOffset(h.now_ms, group, "orders", 0, offset))
    assert isinstance(result, CommitOffsetResult)
    h.state.check_invariants()
    return result


def test_a_commit_past_an_in_flight_message_keeps_its_handle_valid() -> None:
    h = filled("a", "b", "c")
    held = h.receive(max_messages=1).deliveries[0].handle  # "a" in flight
    assert commit(h, 2) == CommitOffsetResult(2)
    assert h.state.committed_offset("g", "orders", 0) == 2
    assert h.state.consumer_offset("g", "orders", 0) == 0  # "a" is not done yet
    # Pop resumes at the committed offset: "b" counts as consumed.
    assert h.bodies(h.receive()) == [b"c"]  # "c" is in flight now
    outcome = h.ack(held).outcomes[0]
    assert outcome.error is None
    assert h.state.consumer_offset("g", "orders", 0) == 2
    assert h.state.committed_offset("g", "orders", 0) == 3


def test_an_unacked_message_below_the_commit_comes_back_when_its_invisibility_ends() -> None:
    h = filled("a", "b", "c")
    held = h.receive(max_messages=2, invisible_ms=10_000).deliveries
    commit(h, 3)
    assert h.receive().deliveries == ()
    h.advance(10_000)
    again = h.receive()
    assert h.bodies(again) == [b"a", b"b"]
    assert [d.delivery_attempt for d in again.deliveries] == [2, 2]
    # The old handles expired with their invisibility; the new ones ack.
    assert h.ack(held[0].handle).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
    assert all(o.error is None for o in h.ack(*(d.handle for d in again.deliveries)).outcomes)
    assert h.state.consumer_offset("g", "orders", 0) == 3


def test_a_commit_back_delivers_again_what_is_not_in_flight() -> None:
    h = filled("a", "b", "c", "d")
    first = h.receive(max_messages=4).deliveries
    h.ack(first[0].handle, first[2].handle)  # "b" and "d" stay in flight
    assert h.state.committed_offset("g", "orders", 0) == 4
    commit(h, 0)
    # "a" and "c" are fresh again; "b" and "d" are still leased under their handles.
    assert h.state.committed_offset("g", "orders", 0) == 0
    assert h.bodies(h.receive()) == [b"a", b"c"]
    assert all(o.error is None for o in h.ack(first[1].handle, first[3].handle).outcomes)


def test_a_forward_commit_skips_fresh_messages_and_keeps_those_done_ahead_done() -> None:
    h = Harness()
    groups = (("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B"))
    h.append(*(record(mid, message_group=group) for mid, group in groups))
    first = h.receive(fifo=True).deliveries  # a1 and b1; a2 waits behind a1
    h.ack(first[1].handle)
    h.ack(h.receive(fifo=True).deliveries[0].handle)  # b2: B is done ahead of a2
    assert h.state.committed_offset("g", "orders", 0) == 1  # a2 is the first fresh one
    commit(h, 2)
    assert h.state.committed_offset("g", "orders", 0) == 4
    assert h.ack(first[0].handle).outcomes[0].error is None
    h.advance(60_000)
    assert h.receive(fifo=True).deliveries == ()  # a2 skipped by the commit, b1/b2 acked
    assert h.state.consumer_offset("g", "orders", 0) == 4


def test_a_first_commit_creates_the_group_and_clamps_like_a_reset() -> None:
    h = filled("a", "b")
    assert h.state.committed_offset("g", "orders", 0) is None
    assert commit(h, 99) == CommitOffsetResult(2)
    assert commit(h, -3) == CommitOffsetResult(0)
    assert h.state.committed_offset("g", "orders", 0) == 0
    assert h.bodies(h.receive()) == [b"a", b"b"]


def test_an_operators_reset_still_drops_the_leases() -> None:
    h = filled("a", "b")
    held = h.receive(max_messages=1).deliveries[0].handle
    h.apply(CommitOffset(h.now_ms, "g", "orders", 0, 2))
    assert h.ack(held).outcomes[0].error is errors.INVALID_RECEIPT_HANDLE


def test_a_commit_survives_a_snapshot() -> None:
    h = filled("a", "b", "c")
    held = h.receive(max_messages=2).deliveries
    commit(h, 1)
    h.restart_from_snapshot()
    assert h.state.committed_offset("g", "orders", 0) == 2  # "b" is in flight: settled past
    assert all(o.error is None for o in h.ack(*(d.handle for d in held)).outcomes)
    assert h.bodies(h.receive()) == [b"c"]


_STEP = st.one_of(
    st.tuples(st.just("receive"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.integers(0, 7)),
    st.tuples(st.just("commit"), st.integers(-1, 9)),
    st.tuples(st.just("advance"), st.sampled_from([1_000, 30_000])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEP, max_size=24))
def test_commits_between_pops_keep_the_invariants_and_every_handle_in_flight(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever receives, acks, commits and time steps interleave, the state keeps its
    invariants, and a handle whose invisibility has not ended acks (a commit never
    invalidates one)."""
    h = filled(*"abcdefgh")
    handles = {}
    for kind, value in steps:
        if kind == "receive":
            for d in h.receive(max_messages=value, invisible_ms=20_000).deliveries:
                handles[d.handle.queue_offset] = (d.handle, d.invisible_until_ms)
        elif kind == "ack" and value in handles:
            handle, until_ms = handles.pop(value)
            error = h.ack(handle).outcomes[0].error
            assert (error is None) == (h.now_ms < until_ms)
        elif kind == "commit":
            assert commit(h, value).offset == min(max(value, 0), 8)
            committed = h.state.committed_offset("g", "orders", 0)
            assert committed is not None
            assert committed >= min(max(value, 0), 8)
        elif kind == "advance":
            h.advance(value)
        h.state.check_invariants()
