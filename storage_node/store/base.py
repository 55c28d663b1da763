"""The body store contract (see the package docstring).

Every implementation passes ``tests/contract/test_body_store.py``.

PURE.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import NamedTuple, Protocol


class EntryFileRange(NamedTuple):
    """``length`` bytes at ``offset`` of the file at ``path``."""

    path: str
    offset: int
    length: int


class BodyStore(Protocol):
    """Bodies (APPEND entries) of the groups a node hosts, by (group, log index)."""

    def keep_applied(self, group_id: int, log_index: int, data: bytes) -> None:
        """The committed APPEND entry ``log_index`` of the group was applied on this node.

        ``data`` is the entry's bytes, already in this node's log.
        """

    def adopt(self, group_id: int, bodies: Mapping[int, bytes]) -> None:
        """APPEND entries that came with a group image: this node's log never held them."""

    def read_entry(self, group_id: int, log_index: int) -> bytes:
        """The bytes of APPEND entry ``log_index``; raises ``BodyUnavailable``."""

    def entry_location(self, group_id: int, log_index: int) -> EntryFileRange | None:
        """Where the bytes of APPEND entry ``log_index`` lie in a file this node keeps,
        for a reader on another thread (``segment_files.read_file_ranges``); None: read them
        with :meth:`read_entry`.

        The range stays valid while the group's log keeps the entry; a reader
        that finds the file gone or other bytes there (a collected, recycled
        segment) falls back to :meth:`read_entry`, which then says whether the
        entry is still held.
        """

    def bodies_to_carry(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """The referenced bodies a local snapshot must carry to be restorable on this node.

        Bodies this store holds only for the snapshot's sake and that are no
        longer referenced are released.
        """

    def bodies_for_peer(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """Every referenced body: what a snapshot sent to another replica carries."""
