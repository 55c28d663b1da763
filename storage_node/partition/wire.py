"""msgpack for snapshots: typed reads of decoded values, and packing in pieces.

Each ``as_*`` helper returns its argument narrowed to the expected type or
raises ``SnapshotCorrupted`` naming what was wrong, so a damaged snapshot
fails loudly instead of building a half-valid state.

The packing helpers let a snapshot be assembled from pieces encoded at
different times: ``array_header(n)`` followed by the encodings of ``n``
values is byte for byte what ``pack`` gives for the list of those values.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from storage_node.errors import SnapshotCorrupted


def pack(value: object) -> bytes:
    """The msgpack of ``value``, as every snapshot writes it (str as str, bytes as bin)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def array_header(length: int) -> bytes:
    """The msgpack header of an array of ``length`` items."""
    header: bytes = msgpack.Packer(use_bin_type=True).pack_array_header(length)
    return header


def pack_items(items: Sequence[object]) -> bytes:
    """The encodings of ``items`` back to back: ``pack(list(items))`` without its header.

    A tuple (a named tuple too) packs as an array, like the list of its fields.
    """
    return pack(items)[len(array_header(len(items))) :]


def as_int(value: object, what: str = "value") -> int:
    """``value`` if it is an int (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise SnapshotCorrupted(f"{what}: expected an int, got {type(value).__name__}")
    return value


def as_str(value: object, what: str = "value") -> str:
    """``value`` if it is a str."""
    if not isinstance(value, str):
        raise SnapshotCorrupted(f"{what}: expected a str, got {type(value).__name__}")
    return value


def as_list(value: object, what: str = "value", length: int | None = None) -> list[object]:
    """``value`` if it is a list (of ``length`` items when given)."""
    if not isinstance(value, list):
        raise SnapshotCorrupted(f"{what}: expected an array, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise SnapshotCorrupted(f"{what}: expected {length} items, got {len(value)}")
    return value
