"""A message store in memory: every applied APPEND entry is kept as bytes.

A snapshot must carry every body its state references (nothing else holds
them once the log is truncated), and releases the rest.

PURE.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from storage_node.errors import BodyUnavailable
from storage_node.store.base import EntryFileRange


class MemoryBodyStore:
    """Implements :class:`storage_node.store.base.BodyStore` in memory."""

    def __init__(self) -> None:
        self._bodies: dict[int, dict[int, bytes]] = {}

    def keep_applied(self, group_id: int, log_index: int, data: bytes) -> None:
        """Keep a copy of an applied APPEND entry."""
        self._bodies.setdefault(group_id, {})[log_index] = data

    def adopt(self, group_id: int, bodies: Mapping[int, bytes]) -> None:
        """Keep bodies that came with a group image."""
        self._bodies.setdefault(group_id, {}).update(bodies)

    def read_entry(self, group_id: int, log_index: int) -> bytes:
        """The kept bytes of an APPEND entry."""
        data = self._bodies.get(group_id, {}).get(log_index)
        if data is None:
            raise BodyUnavailable(f"group {group_id} holds no body for log entry {log_index}")
        return data

    def entry_location(self, group_id: int, log_index: int) -> EntryFileRange | None:
        """None: every body is in memory (read it with :meth:`read_entry`)."""
        return None

    def bodies_to_carry(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """Every referenced body (memory is all there is); the others are released."""
        group = self._bodies.get(group_id, {})
        kept = {i: group[i] for i in referenced if i in group}
        self._bodies[group_id] = dict(kept)
        return kept

    def bodies_for_peer(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """Every referenced body."""
        return {i: self.read_entry(group_id, i) for i in sorted(referenced)}
