"""Varints and field keys written directly read back as protobuf's own."""

from __future__ import annotations

from google.protobuf import timestamp_pb2, wrappers_pb2
from hypothesis import example, given
from hypothesis import strategies as st

from protocol.protowire import LENGTH_DELIMITED, VARINT, field_key, varint


@given(st.integers(-(1 << 63), (1 << 63) - 1).filter(bool))
@example(0x7F)
@example(0x80)
@example(0x3FFF)  # the last two-byte varint
@example(0x4000)
@example(-1)
def test_an_int64_field_is_written_as_protobuf_writes_it(value: int) -> None:
    expected = timestamp_pb2.Timestamp(seconds=value).SerializeToString()
    assert field_key(1, VARINT) + varint(value) == expected


@given(st.text(min_size=1, max_size=300))
def test_a_string_field_is_written_as_protobuf_writes_it(value: str) -> None:
    data = value.encode()
    expected = wrappers_pb2.StringValue(value=value).SerializeToString()
    assert field_key(1, LENGTH_DELIMITED) + varint(len(data)) + data == expected
