"""Records <-> their positional plain form: the one codec of records as field arrays.

A record (a frozen dataclass or a ``NamedTuple``) travels as the array of its
fields in declaration order: nested records as nested arrays, ``IntEnum`` as
its int, lists and tuples as arrays, ``dict[str, T]`` as a map; field names
never travel. This is the wire form of Angelia's msgpack codec, of the
nameserver's raft log and snapshots and of the storage groups' commands, so
it is FROZEN: changing what a value encodes to breaks logs on disk and peers
of the previous version (``tests/unit/protocol/test_wire_bytes_pinned.py``
pins it).

This module stops at the plain form (lists, tuples, dicts, scalars, None);
the callers hand it to msgpack themselves, each with its own packer options
and its own error root, so protocol needs nothing beyond what its record
batches already use.

- :func:`plain_encoder` compiles, once per type, a function giving a value's
  plain form; it is None where the value already is its plain form (a
  NamedTuple of scalars: msgpack packs any tuple as an array), the cheapest
  case for hot messages. A dataclass of scalars becomes one ``attrgetter``.
- :func:`plain_decoder` compiles the way back. It CHECKS every value's type
  (exact types: a bool is not an int; a float field takes an int), so corrupt
  or foreign bytes fail with :class:`ShapeMismatch` naming the field instead
  of building a half-valid value. A record of scalars whose array has exactly
  its field types is built in one step.

Evolution: fields are ONLY ADDED AT THE END of a record, with a default; an
array shorter than the field list (an older writer) takes the defaults of its
missing tail, a longer one (a newer writer) is refused. Enum values are
append-only.

PURE.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from protocol import errors
from protocol.errors import ErrorCode
from protocol.shapes import PRIMITIVES, Shape, ShapeUnsupported, is_record, shape_of

_Tuple = TypeVar("_Tuple", bound=tuple[object, ...])

Encode = Callable[[Any], Any]
"""A value -> its plain form."""
Decode = Callable[[Any], Any]
"""A plain form -> the value; raises :class:`ShapeMismatch`."""

_EXACT_SCALARS: dict[str, type] = {"int": int, "str": str, "bool": bool, "bytes": bytes}
"""The scalar kinds whose plain form is exactly their type (float also takes an int)."""


class ShapeMismatch(ValueError):
    """A plain form that is not a value of the type it should be (corrupt bytes, or bytes
    of another type); the message names what is wrong."""

    code: ErrorCode = errors.DECODE_FAILED


def positional(kind: type[_Tuple]) -> Callable[[tuple[object, ...]], _Tuple]:
    """The named tuple ``kind`` from a tuple of all its fields in order, without the
    named tuple's keyword handling (for hot paths that build one per message)."""
    return partial(tuple.__new__, kind)


# -- encoding -------------------------------------------------------------------------------


def plain_encoder(kind: Any) -> Encode | None:
    """A function giving the plain form of values of ``kind``, or None when a value is
    its own plain form. Raises :class:`ShapeUnsupported` for a type no codec carries."""
    try:
        return _ENCODERS[kind]
    except KeyError:
        pass
    try:
        shape = shape_of(kind)
    except ShapeUnsupported as error:
        raise ShapeUnsupported(f"cannot encode a {_name(kind)}: {error}") from None
    encode = _ENCODERS[kind] = _encoder(shape)
    return encode


_ENCODERS: dict[Any, Encode | None] = {}


def to_plain(value: object) -> object:
    """The plain form of ``value``, found from its own type: a record, an enum, a scalar,
    None, or a list or tuple of those (a list)."""
    kind = type(value)
    if value is None or kind in PRIMITIVES:
        return value
    if kind is list or kind is tuple:
        return [to_plain(item) for item in value]  # type: ignore[attr-defined]
    if isinstance(value, enum.Enum):
        return value.value
    if is_record(kind):
        encode = plain_encoder(kind)
        return value if encode is None else encode(value)
    if isinstance(value, tuple(PRIMITIVES)):  # subclasses of scalars
        return value
    raise ShapeUnsupported(f"cannot encode a {kind.__name__}: {value!r}")


def _encoder(shape: Shape) -> Encode | None:
    kind = shape.kind
    if shape.is_primitive or kind == "enum":
        return None  # msgpack packs an IntEnum as its int
    if kind == "optional":
        inner = _encoder(_item(shape))
        return None if inner is None else partial(_optional, inner)
    if kind in ("list", "tuple"):
        inner = _encoder(_item(shape))
        return None if inner is None else partial(_each, inner)
    if kind == "dict":
        inner = _encoder(_item(shape))
        return None if inner is None else partial(_each_value, inner)
    if kind == "fixed_tuple":
        items = [_encoder(item) for item in shape.items]
        if all(item is None for item in items):
            return None
        return lambda value: [x if e is None else e(x) for e, x in zip(items, value, strict=True)]
    return _record_encoder(shape)


def _record_encoder(shape: Shape) -> Encode | None:
    names = [name for name, _ in shape.fields]
    encoders = [_encoder(field) for _, field in shape.fields]
    plain = all(e is None for e in encoders)
    if shape.is_tuple and plain:
        return None  # a NamedTuple of plain fields is its own positional array
    if not names:
        return lambda _value: ()
    if plain:
        if len(names) == 1:
            get = operator.attrgetter(names[0])
            return lambda value: (get(value),)
        return operator.attrgetter(*names)
    pairs = list(zip(names, encoders, strict=True))
    return lambda value: [
        getattr(value, name) if e is None else e(getattr(value, name)) for name, e in pairs
    ]


def _optional(inner: Encode, value: Any) -> Any:
    return None if value is None else inner(value)


def _each(inner: Encode, values: Any) -> list[Any]:
    return [inner(value) for value in values]


def _each_value(inner: Encode, values: Any) -> dict[str, Any]:
    return {key: inner(value) for key, value in values.items()}


# -- decoding -------------------------------------------------------------------------------


def plain_decoder(kind: Any, *, check_scalars: bool = True) -> Decode:
    """A function rebuilding a value of ``kind`` from its plain form (as msgpack gives it
    back: arrays as lists); it raises :class:`ShapeMismatch`. Raises
    :class:`ShapeUnsupported` for a type no codec carries.

    ``check_scalars=False`` trusts the scalars (their types are not checked, a float
    field keeps an int): arrays, their lengths, enums and nested records are still
    checked, and the lists given are converted in place (give it what msgpack just
    built). For a hot path whose peer is built from the same declarations (Angelia),
    where checking every scalar would cost up to a third of a small record's decode.
    """
    key = (kind, check_scalars)
    found = _BY_TYPE.get(key)
    if found is not None:
        return found
    try:
        shape = shape_of(kind)
    except ShapeUnsupported as error:
        raise ShapeUnsupported(f"cannot decode into {kind!r}: {error}") from None
    decode = _BY_TYPE[key] = _decoder(shape, check_scalars) or _as_is
    return decode


def from_plain(kind: Any, data: object) -> Any:
    """The value of ``kind`` whose plain form is ``data`` (see :func:`plain_decoder`)."""
    return plain_decoder(kind)(data)


_BY_TYPE: dict[tuple[Any, bool], Decode] = {}
_DECODERS: dict[tuple[Shape, bool], Decode | None] = {}


def _decoder(shape: Shape, checked: bool) -> Decode | None:
    """The decoder of ``shape``, built once per shape; None: the plain form is the value
    (unchecked scalars and arrays of them)."""
    key = (shape, checked)
    try:
        return _DECODERS[key]
    except KeyError:
        decode = _DECODERS[key] = _build_decoder(shape, checked)
        return decode


def _build_decoder(shape: Shape, checked: bool) -> Decode | None:
    kind = shape.kind
    if kind in _EXACT_SCALARS:
        return partial(_exact, _EXACT_SCALARS[kind]) if checked else None
    if kind == "float":
        return _float if checked else None
    if kind == "enum":
        assert shape.cls is not None
        return partial(_enum, shape.cls)
    if kind == "optional":
        inner = _decoder(_item(shape), checked)
        return None if inner is None else partial(_optional, inner)
    if kind in ("list", "tuple"):
        return _sequence_decoder(shape, checked)
    if kind == "dict":
        return _dict_decoder(shape, checked)
    if kind == "fixed_tuple":
        return _fixed_tuple_decoder(shape, checked)
    return _record_decoder(shape, checked)


def _as_is(data: Any) -> Any:
    return data


def _exact(kind: type, data: object) -> Any:
    if type(data) is not kind:
        raise ShapeMismatch(f"expected {kind.__name__}, got {type(data).__name__}")
    return data


def _float(data: object) -> float:
    if type(data) is float:
        return data
    if type(data) is int:
        return float(data)
    raise ShapeMismatch(f"expected float, got {type(data).__name__}")


def _enum(kind: type[enum.IntEnum], data: object) -> enum.IntEnum:
    if type(data) is kind:  # an in-memory plain form keeps its enums
        return data
    try:
        return kind(_exact(int, data))
    except ValueError:
        raise ShapeMismatch(f"{data!r} is not a {kind.__name__}") from None


def _array(data: object, what: object) -> list[Any] | tuple[Any, ...]:
    """``data`` if it is an array (a list, or a tuple from an in-memory plain form)."""
    if type(data) is list or isinstance(data, tuple):
        return data
    raise ShapeMismatch(f"expected an array for {_name(what)}, got {type(data).__name__}")


def _sequence_decoder(shape: Shape, checked: bool) -> Decode | None:
    item = _item(shape)
    as_tuple = shape.kind == "tuple"
    what = f"{shape.kind}[{_shape_name(item)}{', ...' if as_tuple else ''}]"
    read = _decoder(item, checked)
    build: Callable[[Any], Any] = tuple if as_tuple else list
    if read is None:  # unchecked scalars: the array as msgpack built it
        return (lambda data: tuple(_array(data, what))) if as_tuple else None
    exact = _EXACT_SCALARS.get(item.kind) if checked else None
    if exact is None:

        def each(data: object) -> Any:
            if type(data) is not list:
                data = _array(data, what)
            return build(map(read, data))

        return each

    def scalars(data: object) -> Any:  # check them, and keep the array msgpack built
        values = _array(data, what)
        for value in values:
            if type(value) is not exact:
                _exact(exact, value)
        if as_tuple:
            return tuple(values)
        return values if type(values) is list else list(values)

    return scalars


def _dict_decoder(shape: Shape, checked: bool) -> Decode | None:
    read = _decoder(_item(shape), checked)
    if not checked:
        if read is None:
            return None
        return lambda data: {key: read(value) for key, value in data.items()}
    assert read is not None
    what = f"dict[str, {_shape_name(_item(shape))}]"

    def decode(data: object) -> dict[str, Any]:
        if type(data) is not dict:
            raise ShapeMismatch(f"expected a map for {what}, got {type(data).__name__}")
        for key in data:
            if type(key) is not str:
                raise ShapeMismatch(f"expected str keys for {what}, got {type(key).__name__}")
        return {key: read(value) for key, value in data.items()}

    return decode


def _fixed_tuple_decoder(shape: Shape, checked: bool) -> Decode:
    reads = [_decoder(item, checked) or _as_is for item in shape.items]
    what = f"tuple[{', '.join(_shape_name(item) for item in shape.items)}]"

    def decode(data: object) -> tuple[Any, ...]:
        values = _array(data, what)
        if len(values) != len(reads):
            raise ShapeMismatch(f"expected {len(reads)} items for {what}, got {len(values)}")
        return tuple(read(value) for read, value in zip(reads, values, strict=True))

    return decode


def _record_decoder(shape: Shape, checked: bool) -> Decode:
    cls = shape.cls
    assert cls is not None
    name = cls.__name__
    names = [field_name for field_name, _ in shape.fields]
    count, required = len(names), shape.required
    reads = [_decoder(field, checked) for _, field in shape.fields]

    def read(data: object) -> Any:
        values = data if type(data) is list else _array(data, name)
        if not required <= len(values) <= count:
            if len(values) > count:
                raise ShapeMismatch(
                    f"{name}: {len(values)} fields sent, this version knows fewer ({count}): "
                    "written by a newer version?"
                )
            raise ShapeMismatch(f"{name}: field {names[len(values)]} is missing")
        args = [x if r is None else r(x) for r, x in zip(reads, values, strict=False)]
        try:
            return cls(*args)
        except (TypeError, ValueError) as error:
            raise ShapeMismatch(f"{name}: {error}") from None

    if not checked:
        return _trusted_record_decoder(shape, reads, read)
    kinds = [_EXACT_SCALARS.get(field.kind) for _, field in shape.fields]
    if not kinds or None in kinds:
        return read
    is_tuple, new_tuple = shape.is_tuple, tuple.__new__

    # Every field an exact scalar: an array of exactly the field types is the value
    # as ``read`` would build it; anything else goes to ``read``, which names what is
    # wrong (or fills in the defaults of a short array).
    def read_scalars(data: object) -> Any:
        if type(data) is list and [*map(type, data)] == kinds:
            return new_tuple(cls, data) if is_tuple else cls(*data)
        return read(data)

    return read_scalars


def _trusted_record_decoder(shape: Shape, reads: list[Decode | None], read: Decode) -> Decode:
    """The unchecked decoder of a record: an array of the record's length (from msgpack:
    a fresh list, converted in place) is the record once its non-scalar fields are
    converted; anything else goes to ``read``, which checks the length."""
    cls = shape.cls
    assert cls is not None
    count = len(reads)
    converts = [(position, r) for position, r in enumerate(reads) if r is not None]
    new_tuple = tuple.__new__
    if not converts:
        if shape.is_tuple:

            def named_tuple(data: Any) -> Any:
                if type(data) is list and len(data) == count:
                    return new_tuple(cls, data)
                return read(data)

            return named_tuple

        def plain(data: Any) -> Any:
            if type(data) is list and len(data) == count:
                return cls(*data)
            return read(data)

        return plain
    if len(converts) == 1 and not shape.is_tuple:
        ((position, convert),) = converts

        def one(data: Any) -> Any:
            if type(data) is list and len(data) == count:
                data[position] = convert(data[position])
                return cls(*data)
            return read(data)

        return one
    make: Callable[[Any], Any] = positional(cls) if shape.is_tuple else lambda v: cls(*v)

    def several(data: Any) -> Any:
        if type(data) is list and len(data) == count:
            for position, convert in converts:
                data[position] = convert(data[position])
            return make(data)
        return read(data)

    return several


def _item(shape: Shape) -> Shape:
    assert shape.item is not None
    return shape.item


def _shape_name(shape: Shape) -> str:
    if shape.cls is not None:
        return shape.cls.__name__
    if shape.item is not None:
        return f"{shape.kind}[{_shape_name(shape.item)}]"
    return shape.kind


def _name(kind: object) -> str:
    return kind.__name__ if isinstance(kind, type) else str(kind)
