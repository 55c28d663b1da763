"""Plain values <-> msgpack: the one encoding of the nameserver's commands, records
and snapshots.

A frozen dataclass travels as a msgpack array of its fields in declaration
order, in the positional form of ``protocol.positional`` (nested dataclasses
as nested arrays, enums as their int value, tuples as arrays). Decoding
checks every value's type, so corrupt bytes fail with :class:`DecodeFailed`
instead of building a half-valid object.

Evolution: fields are ONLY ADDED AT THE END of a dataclass, with a default;
an array shorter than the field list (written by an older version) takes the
defaults for the missing tail. An array longer than the field list (a newer
writer) is refused. No dicts are encoded, so equal values encode to equal
bytes (snapshots are deterministic).

PURE.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgpack

from nameserver.errors import DecodeFailed
from protocol.positional import ShapeMismatch, from_plain, to_plain

T = TypeVar("T")


def to_wire(value: object) -> object:
    """The msgpack-ready form of ``value`` (arrays, ints, strs, bytes, floats, None)."""
    return to_plain(value)


def from_wire(kind: Any, data: object) -> Any:
    """Rebuild a value of type ``kind`` from its :func:`to_wire` form."""
    try:
        return from_plain(kind, data)
    except ShapeMismatch as error:
        raise DecodeFailed(str(error)) from None


def pack(value: object) -> bytes:
    """msgpack bytes of ``value`` (see :func:`to_wire`)."""
    return bytes(msgpack.packb(to_plain(value), use_bin_type=True))


def unpack(kind: type[T], data: bytes) -> T:
    """The ``kind`` value encoded by :func:`pack`; :class:`DecodeFailed` on bad bytes."""
    value: T = from_wire(kind, unpack_raw(data))
    return value


def unpack_raw(data: bytes) -> object:
    """The wire form in ``data`` (lists and scalars); :class:`DecodeFailed` on bad bytes."""
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise DecodeFailed(f"not valid msgpack: {error}") from None
