"""Angelia codecs: every supported field type round-trips through every codec."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from angelia_rpc.codec import CODEC_NAMES, avro_schema, codec_named
from angelia_rpc.errors import AngeliaError, LocalUsageError
from angelia_rpc.service import Service, Unary
from protocol import errors


class Color(IntEnum):
    RED = 1
    GREEN = 2


@dataclass(frozen=True, slots=True)
class Inner:
    id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Everything:
    number: int
    ratio: float
    flag: bool
    name: str
    blob: bytes
    maybe: int | None
    inners: list[Inner]
    counts: dict[str, int]
    color: Color
    nested: Inner | None = None
    tags: list[str] = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Empty:
    pass


class InnerTuple(NamedTuple):
    id: int
    data: bytes


class EverythingTuple(NamedTuple):
    """``Everything`` as a NamedTuple, with a NamedTuple and a dataclass nested."""

    number: int
    ratio: float
    flag: bool
    name: str
    blob: bytes
    maybe: int | None
    inners: list[InnerTuple]
    counts: dict[str, int]
    color: Color
    nested: Inner | None = None
    tags: list[str] = []  # noqa: RUF012 - never mutated
    by_name: dict[str, InnerTuple] = {}  # noqa: RUF012 - never mutated


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
inners = st.builds(Inner, INT64, st.binary(max_size=64))
everything = st.builds(
    Everything,
    number=INT64,
    ratio=st.floats(allow_nan=False),
    flag=st.booleans(),
    name=st.text(max_size=40),
    blob=st.binary(max_size=200),
    maybe=st.none() | INT64,
    inners=st.lists(inners, max_size=4),
    counts=st.dictionaries(st.text(max_size=8), INT64, max_size=4),
    color=st.sampled_from(Color),
    nested=st.none() | inners,
    tags=st.lists(st.text(max_size=8), max_size=3),
    by_name=st.dictionaries(st.text(max_size=8), inners, max_size=3),
)


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
@settings(max_examples=60, deadline=None)
@given(value=everything)
def test_round_trip(codec_name: str, value: Everything) -> None:
    codec = codec_named(codec_name)
    decoded = codec.decoder(Everything)(codec.encoder(Everything)(value))
    assert decoded == value
    assert type(decoded.color) is Color
    assert all(type(i) is Inner for i in decoded.inners)


def _as_tuples(value: Everything) -> EverythingTuple:
    return EverythingTuple(
        value.number,
        value.ratio,
        value.flag,
        value.name,
        value.blob,
        value.maybe,
        [InnerTuple(i.id, i.data) for i in value.inners],
        value.counts,
        value.color,
        value.nested,
        value.tags,
        {k: InnerTuple(i.id, i.data) for k, i in value.by_name.items()},
    )


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
@settings(max_examples=60, deadline=None)
@given(value=everything)
def test_named_tuples_round_trip(codec_name: str, value: Everything) -> None:
    codec = codec_named(codec_name)
    expected = _as_tuples(value)
    decoded = codec.decoder(EverythingTuple)(codec.encoder(EverythingTuple)(expected))
    assert decoded == expected
    assert type(decoded) is EverythingTuple
    assert type(decoded.color) is Color
    assert all(type(i) is InnerTuple for i in decoded.inners)
    assert decoded.nested is None or type(decoded.nested) is Inner


@settings(max_examples=60, deadline=None)
@given(value=everything)
def test_msgpack_named_tuples_and_dataclasses_share_the_wire(value: Everything) -> None:
    codec = codec_named("msgpack")
    as_tuple = codec.encoder(EverythingTuple)(_as_tuples(value))
    assert as_tuple == codec.encoder(Everything)(value)
    assert codec.decoder(Everything)(as_tuple) == value


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
def test_a_wrong_value_in_a_named_tuple_is_refused_locally(codec_name: str) -> None:
    encode = codec_named(codec_name).encoder(InnerTuple)
    with pytest.raises(LocalUsageError) as caught:
        encode(InnerTuple(object(), b""))  # type: ignore[arg-type]
    assert caught.value.code is errors.BAD_REQUEST


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
def test_empty_message(codec_name: str) -> None:
    codec = codec_named(codec_name)
    assert codec.decoder(Empty)(codec.encoder(Empty)(Empty())) == Empty()


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=64))
def test_garbage_fails_with_decode_failed_only(codec_name: str, data: bytes) -> None:
    decode = codec_named(codec_name).decoder(Everything)
    error: AngeliaError | None = None
    try:
        decode(data)
    except AngeliaError as exc:
        error = exc
    if error is not None:
        assert error.code is errors.DECODE_FAILED
        assert "Everything" in error.message


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
def test_a_value_of_the_wrong_type_is_refused_locally(codec_name: str) -> None:
    encode = codec_named(codec_name).encoder(Inner)
    with pytest.raises(LocalUsageError) as caught:
        encode(Inner(object(), b""))  # type: ignore[arg-type]
    assert caught.value.code is errors.BAD_REQUEST


def test_msgpack_encodes_records_as_positional_arrays() -> None:
    encoded = codec_named("msgpack").encoder(Inner)(Inner(5, b"x"))
    assert encoded == b"\x92\x05\xc4\x01x"  # [5, b"x"]: no field names on the wire


def test_derived_avro_schema_is_valid_and_named() -> None:
    schema = avro_schema(Everything)
    fastavro.parse_schema(schema)
    assert schema["type"] == "record"
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert fields["maybe"] == ["null", "long"]
    assert fields["counts"] == {"type": "map", "values": "long"}
    assert fields["color"] == "long"
    assert fields["inners"]["items"]["type"] == "record"
    assert isinstance(fields["nested"][1], str)  # a named type is referenced, not repeated


def test_an_avro_schema_written_beside_the_type_is_used() -> None:
    @dataclass(frozen=True)
    class Written:
        AVRO_SCHEMA = {  # noqa: RUF012 - a class-level constant
            "type": "record",
            "name": "Written",
            "fields": [{"name": "x", "type": "int"}],
        }
        x: int

    codec = codec_named("avro")
    assert avro_schema(Written)["fields"][0]["type"] == "int"
    assert codec.decoder(Written)(codec.encoder(Written)(Written(7))) == Written(7)


def test_unsupported_types_are_refused_at_declaration() -> None:
    @dataclass(frozen=True)
    class Bad:
        when: set[int]

    with pytest.raises(LocalUsageError, match="cannot cross the wire"):

        class _Broken(Service, name="broken"):
            call = Unary(Bad, Bad)

    with pytest.raises(LocalUsageError, match="must be dataclasses"):
        Unary(int, Inner)


def test_unknown_codec_is_a_clear_error() -> None:
    with pytest.raises(LocalUsageError, match="unknown codec 'protobuf'"):
        codec_named("protobuf")


def test_dataclass_fields_in_declaration_order() -> None:
    assert [f.name for f in dataclasses.fields(Inner)] == ["id", "data"]
