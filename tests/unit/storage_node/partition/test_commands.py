"""The command codec: every command survives the log byte for byte."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings

from protocol.records import decode_batch
from storage_node.errors import CommandCorrupted
from storage_node.partition import commands as c

from .harness import record
from .test_snapshot import command


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(command)
def test_every_command_round_trips(cmd: c.Command) -> None:
    data = c.encode(cmd)
    assert data[0] == cmd.op
    assert c.decode(data) == cmd
    assert c.encode(c.decode(data)) == data


def test_an_append_entry_is_a_record_batch_after_its_op_byte() -> None:
    append = c.Append(1234, (record("a"), record("b", tag="t")))
    data = c.encode(append)
    batch = decode_batch(data[1:])
    assert batch.store_timestamp_ms == 1234
    assert batch.records == append.records


def test_op_codes_are_append_only() -> None:
    # A number, once used, names its command forever (the log outlives the code).
    assert [(op.name, op.value) for op in c.Op] == [
        ("APPEND", 1),
        ("RECEIVE", 2),
        ("ACK", 3),
        ("CHANGE_INVISIBLE_DURATION", 4),
        ("DEAD_LETTER", 5),
        ("COMMIT_OFFSET", 6),
        ("END_TRANSACTION", 7),
        ("NOTE_TRANSACTION_CHECKS", 8),
        ("TICK", 9),
        ("CANCEL_TIMER", 10),
        ("TRIM_QUEUE", 11),
        ("RELEASE", 12),
        ("FILTERED_RECEIVE", 13),
        ("COMMIT_CONSUMER_OFFSET", 14),
        ("DROP_TOPIC", 15),
        ("RECORD_UPLOAD", 16),
        ("EXPIRE_TIER", 17),
        ("TIER_RECEIVE", 18),
    ]


def test_an_older_writer_missing_defaulted_fields_is_read_with_defaults() -> None:
    old = bytes([c.Op.RECEIVE]) + msgpack.packb([5, "g", "t", 0, 1, 1000, 3])
    assert c.decode(old) == c.Receive(5, "g", "t", 0, 1, 1000, 3)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"\x00", "unknown op"),
        (bytes([c.Op.TICK]) + b"\xc1", "not msgpack"),
        (bytes([c.Op.TICK]) + msgpack.packb({"now": 1}), "expected an array"),
        (bytes([c.Op.TICK]) + msgpack.packb([]), "now_ms is missing"),
        (bytes([c.Op.TICK]) + msgpack.packb([1, 2]), "this version knows fewer"),
        (bytes([c.Op.TICK]) + msgpack.packb(["1"]), "expected int, got str"),
        (bytes([c.Op.TICK]) + msgpack.packb([True]), "expected int, got bool"),
        (bytes([c.Op.END_TRANSACTION]) + msgpack.packb([1, "t", "x", 1]), "expected bool, got int"),
        (bytes([c.Op.RECEIVE]) + msgpack.packb([1, "g", "t", 0, 1, 1, 1, "*", False, 7]), "not a"),
        (bytes([c.Op.ACK]) + msgpack.packb([1, "g", "h"]), "expected an array"),
        (bytes([c.Op.ACK]) + msgpack.packb([1, "g", [["t", 0, 0]]]), "missing"),
        (bytes([c.Op.APPEND]) + b"R5MB", "append batch"),
    ],
)
def test_corrupt_entries_are_refused_with_the_cause(data: bytes, message: str) -> None:
    with pytest.raises(CommandCorrupted, match=message):
        c.decode(data)
