"""nameserver.commands and nameserver.codec: log entries round-trip, and bad
bytes fail with DecodeFailed rather than a half-built command."""

from __future__ import annotations

import dataclasses
import enum
import types
from typing import Any, Union, get_args, get_origin, get_type_hints

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver import commands as c
from nameserver.errors import DecodeFailed
from nameserver.records import RetryPolicy, StorageLoad


def values_of(kind: Any) -> st.SearchStrategy[Any]:
    """Any value of ``kind`` that msgpack can carry (ints within 64 bits)."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is types.UnionType or origin is Union:
        (inner,) = (a for a in args if a is not type(None))
        return st.none() | values_of(inner)
    if origin is tuple:
        return st.lists(values_of(args[0]), max_size=4).map(tuple)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = get_type_hints(kind)
        fields = {f.name: values_of(hints[f.name]) for f in dataclasses.fields(kind)}
        return st.builds(kind, **fields)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return st.sampled_from(list(kind))
    simple: dict[Any, st.SearchStrategy[Any]] = {
        int: st.integers(-(2**63), 2**63 - 1),
        float: st.floats(allow_nan=False),
        str: st.text(max_size=20),
        bool: st.booleans(),
    }
    return simple[kind]


COMMANDS = list(c.COMMAND_OF_OP.values())


def test_op_codes_are_append_only_and_complete() -> None:
    assert [int(op) for op in c.OpCode] == list(range(1, len(c.OpCode) + 1))
    assert set(c.COMMAND_OF_OP) == set(c.OpCode)
    assert all(command.op is op for op, command in c.COMMAND_OF_OP.items())


@pytest.mark.parametrize("kind", COMMANDS, ids=[k.__name__ for k in COMMANDS])
@settings(deadline=None)
@given(data=st.data())
def test_every_command_round_trips(kind: type[c.Command], data: st.DataObject) -> None:
    command = data.draw(values_of(kind))
    encoded = c.encode(command)
    assert encoded[1] == int(kind.op)  # [op, fields]: fixarray header, then the op byte
    assert c.decode(encoded) == command
    assert c.encode(c.decode(encoded)) == encoded


def test_an_older_writer_gets_defaults_for_fields_added_since() -> None:
    # A heartbeat written before "load" existed: four fields only.
    old = msgpack.packb([int(c.OpCode.STORAGE_HEARTBEAT), [3, "c1", "h:1", 10]])
    assert c.decode(old) == c.StorageHeartbeat(3, "c1", "h:1", 10, StorageLoad())


def test_nested_values_round_trip() -> None:
    command = c.CreateConsumerGroup("g", "c", True, 3, RetryPolicy(5, 50, 1.5, (1, 2, 3)))
    assert c.decode(c.encode(command)) == command
    report = c.ReportLeaders(1, (c.LeaderReport(1, 2, 3), c.LeaderReport(4, 0, 6)))
    assert c.decode(c.encode(report)) == report


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xc1", "not valid msgpack"),
        (b"\x92\x01", "not valid msgpack"),
        (msgpack.packb([1, ["c1", 4, 3]]) + b"\x00", "not valid msgpack"),
        (msgpack.packb({"op": 1}), "array"),
        (msgpack.packb([200, []]), "unknown op code 200"),
        (msgpack.packb([1, ["c1", 4, 3, "extra"]]), "newer version"),
        (msgpack.packb([1, ["c1", "four"]]), "expected int"),
        (msgpack.packb([1, ["c1", True]]), "expected int"),
        (msgpack.packb([1, "c1"]), "expected an array"),
        (msgpack.packb([1, []]), "CreateCluster"),
        (msgpack.packb([4, ["t", "c", 1, 9]]), "not a MessageType"),
        (msgpack.packb([11, [1, [[1, 2]]]]), "LeaderReport"),
    ],
)
def test_bad_bytes_fail_clearly(raw: bytes, message: str) -> None:
    with pytest.raises(DecodeFailed, match=message):
        c.decode(raw)


def test_decode_failed_carries_its_code() -> None:
    with pytest.raises(DecodeFailed) as caught:
        c.decode(b"\xc1")
    assert caught.value.code.name == "DECODE_FAILED"
    assert not caught.value.retriable
    assert not caught.value.refresh_route
