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
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

import msgpack

from nameserver.errors import DecodeFailed

T = TypeVar("T")
_SCALARS: tuple[type, ...] = (bool, int, float, str, bytes)


def to_wire(value: object) -> object:
    """The msgpack-ready form of ``value`` (lists, ints, strs, bytes, floats, None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_wire(item) for item in value]
    if value is None or isinstance(value, _SCALARS):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__}: {value!r}")


def from_wire(kind: Any, data: object) -> Any:
    """Rebuild a value of type ``kind`` from its :func:`to_wire` form."""
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:
        options = [a for a in get_args(kind) if a is not type(None)]
        if data is None:
            return None
        if len(options) != 1:
            raise TypeError(f"only X | None unions are supported, not {kind}")
        return from_wire(options[0], data)
    if origin is tuple:
        args = get_args(kind)
        items = _expect_list(data, kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_wire(args[0], item) for item in items)
        if len(items) != len(args):
            raise DecodeFailed(f"expected {len(args)} items for {kind}, got {len(items)}")
        return tuple(from_wire(a, item) for a, item in zip(args, items, strict=True))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass_from_wire(kind, data)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(data)
        except ValueError:
            raise DecodeFailed(f"{data!r} is not a {kind.__name__}") from None
    if kind is float and isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if kind in _SCALARS:
        if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
            raise DecodeFailed(f"expected {kind.__name__}, got {type(data).__name__}")
        return data
    raise TypeError(f"cannot decode into {kind!r}")


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


@cache
def _hints(kind: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(kind) if f.init)


def _dataclass_from_wire(kind: type, data: object) -> object:
    items = _expect_list(data, kind)
    fields = _hints(kind)
    if len(items) > len(fields):
        raise DecodeFailed(
            f"{kind.__name__} has {len(fields)} fields but {len(items)} were sent "
            "(written by a newer version?)"
        )
    values = [from_wire(hint, item) for (_, hint), item in zip(fields, items, strict=False)]
    try:
        return kind(*values)
    except TypeError as error:
        raise DecodeFailed(f"{kind.__name__}: {error}") from None


def _expect_list(data: object, kind: object) -> list[object]:
    if not isinstance(data, list):
        raise DecodeFailed(f"expected an array for {kind}, got {type(data).__name__}")
    return data
