"""Plain values <-> msgpack: the one encoding of commands, records and snapshots.

A frozen dataclass travels as a msgpack array of its fields in declaration
order (nested dataclasses as nested arrays, enums as their int value, tuples as
arrays). Decoding is driven by the dataclass's type hints and checks every
value's type, so corrupt bytes fail with :class:`DecodeFailed` instead of
building a half-valid object.

Evolution: fields are ONLY ADDED AT THE END of a dataclass, with a default;
an array shorter than the field list (written by an older version) takes the
defaults for the missing tail. An array longer than the field list (a newer
writer) is refused. No dicts are encoded, so equal values encode to equal
bytes (snapshots are deterministic).

PURE.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

import msgpack

from nameserver.errors import DecodeFailed

T = TypeVar("T")
_SCALARS: tuple[type, ...] = (bool, int, float, str, bytes)
Decoder = Callable[[object], Any]


def to_wire(value: object) -> object:
    """The msgpack-ready form of ``value`` (lists, ints, strs, bytes, floats, None)."""
    if value is None or type(value) in _SCALARS:
        return value
    if isinstance(value, tuple | list):
        return [to_wire(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    names = _field_names(type(value))
    if names is not None:
        return [to_wire(getattr(value, name)) for name in names]
    if isinstance(value, _SCALARS):  # subclasses of scalars
        return value
    raise TypeError(f"cannot encode a {type(value).__name__}: {value!r}")


def from_wire(kind: Any, data: object) -> Any:
    """Rebuild a value of type ``kind`` from its :func:`to_wire` form."""
    return _decoder(kind)(data)


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(kind: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type (None for other types), cached."""
    try:
        return _FIELD_NAMES[kind]
    except KeyError:
        names = (
            tuple(f.name for f in dataclasses.fields(kind))
            if dataclasses.is_dataclass(kind)
            else None
        )
        _FIELD_NAMES[kind] = names
        return names


@cache
def _decoder(kind: Any) -> Decoder:
    """A function decoding the wire form of ``kind`` (built once per type)."""
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:
        options = [a for a in get_args(kind) if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"only X | None unions are supported, not {kind}")
        inner = _decoder(options[0])
        return lambda data: None if data is None else inner(data)
    if origin is tuple:
        return _tuple_decoder(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass_decoder(kind)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum_decoder(kind)
    if kind is float:
        return _float
    if kind in _SCALARS:
        return _scalar_decoder(kind)
    raise TypeError(f"cannot decode into {kind!r}")


def _tuple_decoder(kind: Any) -> Decoder:
    args = get_args(kind)
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])
        return lambda data: tuple(item(x) for x in _expect_list(data, kind))
    items = [_decoder(a) for a in args]

    def decode(data: object) -> tuple[Any, ...]:
        values = _expect_list(data, kind)
        if len(values) != len(items):
            raise DecodeFailed(f"expected {len(items)} items for {kind}, got {len(values)}")
        return tuple(d(x) for d, x in zip(items, values, strict=True))

    return decode


def _dataclass_decoder(kind: type) -> Decoder:
    hints = typing.get_type_hints(kind)
    fields = [hints[f.name] for f in dataclasses.fields(kind) if f.init]
    decoders: list[Decoder] = []

    def decode(data: object) -> object:
        values = _expect_list(data, kind)
        if len(values) > len(fields):
            raise DecodeFailed(
                f"{kind.__name__} has {len(fields)} fields but {len(values)} were sent "
                "(written by a newer version?)"
            )
        if not decoders:  # built on first use: a dataclass may refer to itself
            decoders.extend(_decoder(hint) for hint in fields)
        args = [d(x) for d, x in zip(decoders, values, strict=False)]
        try:
            return kind(*args)
        except TypeError as error:
            raise DecodeFailed(f"{kind.__name__}: {error}") from None

    return decode


def _enum_decoder(kind: type[enum.Enum]) -> Decoder:
    def decode(data: object) -> enum.Enum:
        try:
            return kind(data)
        except ValueError:
            raise DecodeFailed(f"{data!r} is not a {kind.__name__}") from None

    return decode


def _scalar_decoder(kind: type) -> Decoder:
    def decode(data: object) -> object:
        if type(data) is not kind and (not isinstance(data, kind) or isinstance(data, bool)):
            raise DecodeFailed(f"expected {kind.__name__}, got {type(data).__name__}")
        return data

    return decode


def _float(data: object) -> float:
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    raise DecodeFailed(f"expected float, got {type(data).__name__}")


def pack(value: object) -> bytes:
    """msgpack bytes of ``value`` (see :func:`to_wire`)."""
    return bytes(msgpack.packb(to_wire(value), use_bin_type=True))


def unpack(kind: type[T], data: bytes) -> T:
    """The ``kind`` value encoded by :func:`pack`; :class:`DecodeFailed` on bad bytes."""
    raw = unpack_raw(data)
    value: T = from_wire(kind, raw)
    return value


def unpack_raw(data: bytes) -> object:
    """The wire form in ``data`` (lists and scalars); :class:`DecodeFailed` on bad bytes."""
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise DecodeFailed(f"not valid msgpack: {error}") from None


def _expect_list(data: object, kind: object) -> list[object]:
    if not isinstance(data, list):
        raise DecodeFailed(f"expected an array for {kind}, got {type(data).__name__}")
    return data
