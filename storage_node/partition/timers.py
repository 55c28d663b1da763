"""Delayed (timed) messages held by a partition state machine until due.

A record with a delivery time after the state clock is stored in the log
but held here; when the clock reaches its delivery time (time enters through
the log: any command's ``now_ms``, or a Tick the leader proposes at
:meth:`TimerIndex.next_due_ms`) it is appended to its queue. Due timers are
released in (delivery time, log index, position) order, so every replica
assigns the same offsets. A held message can be cancelled (RecallMessage).

PURE.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from storage_node.partition.wire import as_int, as_list, as_str


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A stored message waiting for ``due_ms``."""

    due_ms: int
    log_index: int
    position: int
    topic: str
    queue_id: int
    message_id: str
    tag: str = ""
    message_group: str = ""

    @property
    def key(self) -> tuple[int, int, int]:
        """The release order: (due, log index, position); unique per message."""
        return (self.due_ms, self.log_index, self.position)

    def to_wire(self) -> list[object]:
        """Snapshot form."""
        return [
            self.due_ms,
            self.log_index,
            self.position,
            self.topic,
            self.queue_id,
            self.message_id,
            self.tag,
            self.message_group,
        ]

    @classmethod
    def from_wire(cls, data: object) -> HeldMessage:
        """Inverse of :meth:`to_wire`."""
        due, log_index, position, topic, queue_id, message_id, tag, group = as_list(
            data, "held message", 8
        )
        return cls(
            as_int(due, "delivery time"),
            as_int(log_index, "log index"),
            as_int(position, "position"),
            as_str(topic, "topic"),
            as_int(queue_id, "queue id"),
            as_str(message_id, "message id"),
            as_str(tag, "tag"),
            as_str(group, "message group"),
        )


class TimerIndex:
    """Held messages by release order, findable by (topic, message id) to cancel."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int, int], HeldMessage] = {}
        self._by_message: dict[tuple[str, str], tuple[int, int, int]] = {}
        # Keys in release order; cancelled keys stay until they surface (lazy deletion).
        self._heap: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[HeldMessage]:
        return iter(sorted(self._held.values(), key=lambda held: held.key))

    def unordered(self) -> Iterable[HeldMessage]:
        """The held messages in no particular order (cheaper than iterating in release order)."""
        return self._held.values()

    def hold(self, held: HeldMessage) -> None:
        """Keep ``held`` until it is due."""
        self._held[held.key] = held
        self._by_message[(held.topic, held.message_id)] = held.key
        heapq.heappush(self._heap, held.key)

    def is_held(self, topic: str, message_id: str) -> bool:
        """Whether a message with this id waits here."""
        return (topic, message_id) in self._by_message

    def holds_any(self, keys: Iterable[tuple[str, str]]) -> bool:
        """Whether a message with any of these (topic, message id) ``keys`` waits here."""
        return bool(self._by_message) and not self._by_message.keys().isdisjoint(keys)

    def cancel(self, topic: str, message_id: str) -> HeldMessage | None:
        """Forget a held message; returns it, or None if none is held."""
        key = self._by_message.pop((topic, message_id), None)
        if key is None:
            return None
        return self._held.pop(key)

    def next_due_ms(self) -> int | None:
        """The earliest delivery time held, or None."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, clock_ms: int) -> list[HeldMessage]:
        """Remove and return every message due at ``clock_ms``, in release order."""
        released: list[HeldMessage] = []
        while True:
            self._drop_cancelled()
            if not self._heap or self._heap[0][0] > clock_ms:
                return released
            key = heapq.heappop(self._heap)
            held = self._held.pop(key)
            if self._by_message.get((held.topic, held.message_id)) == key:
                del self._by_message[(held.topic, held.message_id)]
            released.append(held)

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0] not in self._held:
            heapq.heappop(self._heap)

    def to_wire(self) -> list[object]:
        """Snapshot form, in release order."""
        return [held.to_wire() for held in self]

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire`."""
        self._held.clear()
        self._by_message.clear()
        self._heap.clear()
        for item in data:
            self.hold(HeldMessage.from_wire(as_list(item, "held message")))
