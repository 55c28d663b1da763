"""Reads by store time, and group images (state plus bodies)."""

from __future__ import annotations

import pytest

from storage_node.errors import CommandCorrupted, SnapshotCorrupted
from storage_node.partition.commands import TrimQueue
from storage_node.partition.image import decode_image, encode_image
from storage_node.partition.reads import record_items_of, record_runs_of
from storage_node.partition.snapshot import take_snapshot
from tests.unit.storage_node.partition.harness import Harness, record


def test_offset_for_timestamp_finds_the_first_message_stored_at_or_after() -> None:
    h = Harness()
    start = h.now_ms
    for batch in range(4):
        h.append(*(record(f"m{batch}-{i}") for i in range(3)))  # offsets 3b .. 3b+2
        h.advance(1000)
    state = h.state
    assert state.offset_for_timestamp("orders", 0, 0) == 0
    assert state.offset_for_timestamp("orders", 0, start) == 0
    assert state.offset_for_timestamp("orders", 0, start + 1) == 3
    assert state.offset_for_timestamp("orders", 0, start + 2000) == 6
    assert state.offset_for_timestamp("orders", 0, start + 3500) == 12  # after the last: end
    assert state.offset_for_timestamp("other", 0, start) == 0
    h.apply(TrimQueue(h.now_ms, "orders", 0, 5))
    assert h.state.offset_for_timestamp("orders", 0, 0) == 5  # never below the first offset
    assert h.state.offset_for_timestamp("orders", 0, start + 1000) == 5


def test_a_group_image_carries_the_state_and_the_bodies() -> None:
    h = Harness()
    h.append(record("a"), record("b"))
    h.append(record("c"))
    referenced = h.state.referenced_log_indexes()
    assert referenced == {1, 2}
    image = encode_image(h.state, {i: h.log[i] for i in referenced})
    state, bodies = decode_image(image)
    assert take_snapshot(state) == take_snapshot(h.state)
    assert bodies == {1: h.log[1], 2: h.log[2]}
    assert decode_image(encode_image(h.state, {}))[1] == {}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:5], "truncated"),
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:4] + b"\x09" + b[5:], "version"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC mismatch"),
    ],
)
def test_a_damaged_group_image_is_refused_with_its_cause(damage: object, message: str) -> None:
    h = Harness()
    h.append(record("a"))
    image = encode_image(h.state, {1: h.log[1]})
    with pytest.raises(SnapshotCorrupted, match=message):
        decode_image(damage(image))  # type: ignore[operator]


def test_record_runs_join_to_the_record_arrays_of_any_stretch_of_a_queue() -> None:
    h = Harness()
    for batch in range(3):
        h.append(*(record(f"m{batch}-{i}") for i in range(4)))  # log entries 1..3
    entries = h.state.read("orders", 0, 0, 12)
    reader = h.log.__getitem__
    for first, end in [(0, 12), (0, 4), (1, 3), (2, 11), (4, 8), (11, 12)]:
        piece = entries[first:end]
        runs = record_runs_of(reader, 1, ("orders", 0), piece)
        assert sum(count for count, _ in runs) == len(piece)
        assert b"".join(run for _, run in runs) == b"".join(
            record_items_of(reader, 1, ("orders", 0), piece)
        )
    # A run per log entry: whole entries are cut at once, partial ones at their bounds.
    assert [count for count, _ in record_runs_of(reader, 1, ("orders", 0), entries[2:11])] == [
        2,
        4,
        3,
    ]


def test_a_record_run_of_a_damaged_entry_names_the_entry() -> None:
    h = Harness()
    h.append(record("a"), record("b"))
    entries = h.state.read("orders", 0, 0, 2)
    data = bytearray(h.log[1])
    data[-1] ^= 1
    with pytest.raises(CommandCorrupted, match="log entry 1 of group 7: batch CRC mismatch"):
        record_runs_of({1: bytes(data)}.__getitem__, 7, ("orders", 0), entries)
    beyond = [entries[1]._replace(position=1), entries[1]._replace(position=2)]
    with pytest.raises(CommandCorrupted, match="holds 2 records, not position 2"):
        record_runs_of(h.log.__getitem__, 7, ("orders", 0), beyond)
