"""Typed reads of decoded msgpack values, for snapshot restore.

Each helper returns its argument narrowed to the expected type or raises
``SnapshotCorrupted`` naming what was wrong, so a damaged snapshot fails
loudly instead of building a half-valid state.

PURE.
"""

from __future__ import annotations

from storage_node.errors import SnapshotCorrupted


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
