"""Snapshots: restore + the rest of the log == the whole log, byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message_objects import ObjectEntry
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import MessageType
from storage_node.errors import SnapshotCorrupted, StorageError
from storage_node.partition import commands as c
from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import Result
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState

from .harness import Harness, record

CONFIG = PartitionConfig(group_id=2, dedup_window_ms=50_000, dedup_entries_max=8)
TOPICS = ("t1", "t1", "t2")
GROUPS = ("g1", "g2")

now_ms = st.integers(0, 200_000)
topic = st.sampled_from(TOPICS)
queue_id = st.just(0)
group = st.sampled_from(GROUPS)
handle = st.builds(ReceiptHandle, topic, queue_id, st.integers(0, 4), st.integers(1, 40))


@st.composite
def a_record(draw: st.DrawFn) -> object:
    number = draw(st.integers(0, 12))
    kind = draw(st.sampled_from([MessageType.NORMAL, MessageType.DELAY, MessageType.TRANSACTION]))
    return record(
        f"m{number}",
        topic=draw(topic),
        queue_id=draw(queue_id),
        tag=draw(st.sampled_from(["", "a", "b"])),
        message_group=draw(st.sampled_from(["", "A"])),
        message_type=kind,
        delivery_timestamp_ms=draw(now_ms) if kind is not MessageType.NORMAL else 0,
    )


append = st.builds(c.Append, now_ms, st.lists(a_record(), min_size=1, max_size=3).map(tuple))
receive_fields = (
    now_ms,
    group,
    topic,
    queue_id,
    st.integers(1, 4),
    st.sampled_from([0, 1_000, 30_000]),
    st.integers(1, 3),
    st.sampled_from(["*", "a", "a||b"]),
    st.booleans(),
    st.sampled_from(list(c.InitialPosition)),
    st.sampled_from(["", "", "x", "y"]),
)
receive = st.builds(c.Receive, *receive_fields)
tier_receive = st.builds(
    c.TierReceive,
    *receive_fields,
    st.integers(0, 8),
    st.lists(st.integers(0, 8), max_size=2).map(tuple),
    st.lists(
        st.builds(
            c.TierRow,
            st.integers(0, 8),
            now_ms,
            st.sampled_from(["", "a", "b"]),
            st.sampled_from(["", "A"]),
        ),
        max_size=4,
    ).map(tuple),
)
# Appends and receives weigh more: they build the state the other commands act on.
command = st.one_of(
    append,
    append,
    receive,
    receive,
    receive,
    st.builds(c.Ack, now_ms, group, st.lists(handle, max_size=3).map(tuple)),
    st.builds(c.ChangeInvisibleDuration, now_ms, group, handle, st.sampled_from([0, 5_000])),
    st.builds(c.DeadLetter, now_ms, group, handle),
    st.builds(c.CommitOffset, now_ms, group, topic, queue_id, st.integers(-1, 6)),
    st.builds(c.CommitConsumerOffset, now_ms, group, topic, queue_id, st.integers(-1, 6)),
    st.builds(
        c.EndTransaction,
        now_ms,
        topic,
        st.sampled_from([f"m{i}" for i in range(13)]),
        st.booleans(),
    ),
    st.builds(
        c.NoteTransactionChecks,
        now_ms,
        st.lists(st.sampled_from([f"m{i}" for i in range(13)]), max_size=3).map(tuple),
        st.integers(1, 2),
    ),
    st.builds(c.Tick, now_ms),
    st.builds(c.CancelTimer, now_ms, topic, st.sampled_from([f"m{i}" for i in range(13)])),
    st.builds(c.TrimQueue, now_ms, topic, queue_id, st.integers(-1, 8)),
    st.builds(c.Release, now_ms, group, st.lists(handle, max_size=3).map(tuple)),
    st.builds(c.DropTopic, now_ms, topic),
    st.builds(
        c.RecordUpload,
        now_ms,
        topic,
        queue_id,
        st.builds(
            ObjectEntry,
            st.sampled_from(["o1", "o2"]),
            st.integers(0, 6),
            st.integers(0, 8),
            now_ms,
            now_ms,
            st.integers(1, 9000),
            st.integers(0, 2**32 - 1),
        ),
    ),
    st.builds(c.ExpireTier, now_ms, topic, queue_id, st.integers(0, 8)),
    tier_receive,
)


def run(state: PartitionState, entries: list[bytes], first_index: int) -> list[object]:
    """Apply log entries; a rejected command's outcome is its error's class and code."""
    outcomes: list[object] = []
    for offset, data in enumerate(entries):
        try:
            result: Result | None = state.apply_entry(data, first_index + offset)
            outcomes.append(result)
        except StorageError as exc:
            outcomes.append((type(exc).__name__, exc.code.number))
        state.check_invariants()
    return outcomes


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(command, min_size=1, max_size=60), st.data())
def test_snapshot_then_the_rest_of_the_log_equals_the_whole_log(
    commands: list[c.Command], data: st.DataObject
) -> None:
    entries = [c.encode(cmd) for cmd in commands]
    whole = PartitionState(CONFIG)
    whole_outcomes = run(whole, entries, 1)

    split = data.draw(st.integers(0, len(entries)), label="split")
    first = PartitionState(CONFIG)
    head = run(first, entries[:split], 1)
    image = take_snapshot(first)
    assert take_snapshot(restore(image)) == image
    second = restore(image)
    assert second.applied_index == split
    tail = run(second, entries[split:], split + 1)

    assert head + tail == whole_outcomes
    assert take_snapshot(second) == take_snapshot(whole)


def test_leases_keep_their_attempts_and_generations_across_a_restore() -> None:
    h = Harness(PartitionConfig(group_id=4))
    h.append(record("a"), record("b", message_group="A"), record("c", message_group="A"))
    for _ in range(2):
        h.receive(fifo=True, invisible_ms=1000, max_attempts=3)
        h.advance(1000)
    third = h.receive(fifo=True, invisible_ms=1000, max_attempts=3)
    assert [(d.handle.queue_offset, d.delivery_attempt) for d in third.deliveries] == [
        (0, 3),
        (1, 3),
    ]
    h.restart_from_snapshot()
    assert h.receive(fifo=True).deliveries == ()  # still invisible, "c" still blocked
    assert h.ack(third.deliveries[1].handle).outcomes[0].error is None
    h.advance(1000)
    after = h.receive(fifo=True, invisible_ms=1000, max_attempts=3)
    assert [d.queue_offset for d in after.dead_lettered] == [0]
    assert [(d.handle.queue_offset, d.delivery_attempt) for d in after.deliveries] == [(2, 1)]


def test_snapshots_are_deterministic_and_carry_the_config() -> None:
    one = PartitionState(CONFIG)
    two = PartitionState(CONFIG)
    for state in (one, two):
        state.apply(c.Append(5, (record("a"), record("b", queue_id=1))), 1)
        state.apply(c.Receive(6, "g", "orders", 0, 1, 1000, 3), 2)
    assert take_snapshot(one) == take_snapshot(two)
    restored = restore(take_snapshot(one))
    assert restored.config == CONFIG
    assert (restored.applied_index, restored.clock_ms) == (2, 6)
    assert restored.grown_queues == set()


def test_an_empty_state_round_trips() -> None:
    image = take_snapshot(PartitionState())
    assert take_snapshot(restore(image)) == image


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:4] + b"\x09" + b[5:], "version"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC"),
        (lambda b: b[:6], "magic"),
    ],
)
def test_a_damaged_snapshot_is_refused(damage: object, message: str) -> None:
    state = PartitionState()
    state.apply(c.Append(5, (record("a"),)), 1)
    image = take_snapshot(state)
    with pytest.raises(SnapshotCorrupted, match=message):
        restore(damage(image))  # type: ignore[operator]


def test_a_snapshot_with_a_valid_crc_but_bad_contents_is_refused() -> None:
    import struct

    import crc32c
    import msgpack

    payload = msgpack.packb([[0, 1, 2, 3], "not an int", 0, [], [], [], [], []])
    image = b"R5PS\x01" + struct.pack(">I", crc32c.crc32c(payload)) + payload
    with pytest.raises(SnapshotCorrupted, match="applied index"):
        restore(image)
