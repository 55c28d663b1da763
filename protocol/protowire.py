"""Protobuf wire primitives for bytes written directly: varints and field keys.

Writers that build the bytes of hot messages themselves (the broker's answer
entries, the load generator's requests) share these; the generated classes
read what they write.

PURE.
"""

from __future__ import annotations

import functools

VARINT = 0
"""Wire type of int32, int64, uint32, uint64, bool and enum fields."""
LENGTH_DELIMITED = 2
"""Wire type of string, bytes, message and packed repeated fields."""


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def varint(value: int) -> bytes:
    """``value`` as a protobuf varint; negative values as their 64-bit two's complement."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 < value < 0x4000:  # two bytes: most lengths of a message's fields
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.cache
def field_key(number: int, wire_type: int) -> bytes:
    """The key that starts field ``number`` of ``wire_type`` (computed once per pair)."""
    return varint(number << 3 | wire_type)
