"""protocol.positional: records <-> positional plain forms, checked and trusted decoding."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack
import pytest

from protocol.positional import (
    ShapeMismatch,
    from_plain,
    plain_decoder,
    plain_encoder,
    positional,
    to_plain,
)
from protocol.shapes import ShapeUnsupported


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


class Point(NamedTuple):
    x: int
    y: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    points: tuple[Point, ...]
    color: Color = Color.RED
    scale: float = 1.0
    pair: tuple[int, str] | None = None
    tags: list[str] = field(default_factory=list)
    attributes: dict[str, int] = field(default_factory=dict)


SHAPE = Shape("s", (Point(1, 2, "a"), Point(3, 4)), Color.GREEN, 2.5, (7, "x"), ["t"], {"k": 1})


def _wire(value: object) -> object:
    """What a peer decodes: the plain form through msgpack and back."""
    encode = plain_encoder(type(value))
    plain = value if encode is None else encode(value)
    return msgpack.unpackb(msgpack.packb(plain, use_bin_type=True), raw=False)


@pytest.mark.parametrize("check_scalars", [True, False])
def test_records_round_trip_through_msgpack(check_scalars: bool) -> None:
    decode = plain_decoder(Shape, check_scalars=check_scalars)
    decoded = decode(_wire(SHAPE))
    assert decoded == SHAPE
    assert type(decoded.points[0]) is Point
    assert type(decoded.color) is Color


def test_the_positional_form_is_the_fields_in_order() -> None:
    assert _wire(SHAPE) == [
        "s",
        [[1, 2, "a"], [3, 4, ""]],
        2,
        2.5,
        [7, "x"],
        ["t"],
        {"k": 1},
    ]
    assert plain_encoder(Point) is None  # a named tuple of scalars is its own plain form


def test_to_plain_follows_the_value_and_from_plain_reads_it_back() -> None:
    plain = to_plain([1, SHAPE, None])
    assert isinstance(plain, list)
    assert from_plain(Shape, plain[1]) == SHAPE  # in-memory forms keep tuples and enums
    with pytest.raises(ShapeUnsupported, match="cannot encode a set"):
        to_plain({1})


def test_an_older_writer_gets_defaults_and_a_newer_one_is_refused() -> None:
    assert from_plain(Point, [1, 2]) == Point(1, 2, "")
    assert plain_decoder(Point, check_scalars=False)([1, 2]) == Point(1, 2, "")
    for check_scalars in (True, False):
        with pytest.raises(ShapeMismatch, match="newer version"):
            plain_decoder(Point, check_scalars=check_scalars)([1, 2, "a", 4])
        with pytest.raises(ShapeMismatch, match="field y is missing"):
            plain_decoder(Point, check_scalars=check_scalars)([1])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (["s", [[1, "2"]]], "expected int, got str"),
        (["s", [[True, 2]]], "expected int, got bool"),
        (["s", [], 3], "3 is not a Color"),
        (["s", [], 1, "1.0"], "expected float, got str"),
        (["s", [], 1, 1.0, [1]], "expected 2 items"),
        (["s", [], 1, 1.0, None, [1]], "expected str, got int"),
        (["s", [], 1, 1.0, None, [], {"k": "v"}], "expected int, got str"),
        (["s", [], 1, 1.0, None, [], {1: 1}], "expected str keys"),
        (["s", "points"], "expected an array"),
        ({"name": "s"}, "expected an array for Shape"),
    ],
)
def test_checked_decoding_names_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(ShapeMismatch, match=message) as caught:
        from_plain(Shape, data)
    assert caught.value.code.name == "DECODE_FAILED"


def test_a_float_field_takes_an_int_and_trusted_decoding_keeps_the_scalars() -> None:
    assert from_plain(Shape, ["s", [], 1, 2]).scale == 2.0
    trusted = plain_decoder(Shape, check_scalars=False)
    assert trusted(["s", [[1, "2"]]]).points == (Point(1, "2"),)  # type: ignore[arg-type]
    with pytest.raises(ShapeMismatch, match="is not a Color"):
        trusted(["s", [], 3])  # enums are still checked


def test_positional_builds_a_named_tuple_from_its_fields() -> None:
    new_point = positional(Point)
    point = new_point((1, 2, "a"))
    assert point == Point(1, 2, "a")
    assert type(point) is Point


def test_unsupported_types_are_programming_errors() -> None:
    with pytest.raises(ShapeUnsupported, match="cannot decode into"):
        plain_decoder(set[int])
    with pytest.raises(ShapeUnsupported, match=r"only X \| None unions"):
        plain_decoder(int | str)
    with pytest.raises(ShapeUnsupported, match="dict keys must be str"):
        plain_encoder(dict[int, int])
