"""Transaction half messages of a partition state machine.

A record of type TRANSACTION is stored in the log like any other but is
not put in its queue: it waits here, keyed by its transaction id (the
message id, as RocketMQ does), until EndTransaction commits it (it then
enters its queue, or the timer index if it has a future delivery time) or
rolls it back (it is forgotten; the log keeps the bytes until retention).

Check-back: the broker that owns the check lease scans for half messages
stored long enough ago and not checked recently (:meth:`HalfMessages.due`),
asks the producer, and proposes NoteTransactionChecks; a half message checked
more than the allowed number of times is rolled back.

PURE.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from storage_node.partition.wire import as_int, as_list, as_str


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """A stored, unresolved transactional message."""

    transaction_id: str
    topic: str
    queue_id: int
    log_index: int
    position: int
    stored_ms: int
    tag: str = ""
    message_group: str = ""
    delivery_timestamp_ms: int = 0
    check_count: int = 0
    last_check_ms: int = 0

    def to_wire(self) -> list[object]:
        """Snapshot form."""
        return [
            self.transaction_id,
            self.topic,
            self.queue_id,
            self.log_index,
            self.position,
            self.stored_ms,
            self.tag,
            self.message_group,
            self.delivery_timestamp_ms,
            self.check_count,
            self.last_check_ms,
        ]

    @classmethod
    def from_wire(cls, data: object) -> HalfMessage:
        """Inverse of :meth:`to_wire`."""
        (txid, topic, queue_id, log_index, position, stored, tag, group, due, count, last) = (
            as_list(data, "half message", 11)
        )
        return cls(
            as_str(txid, "transaction id"),
            as_str(topic, "topic"),
            as_int(queue_id, "queue id"),
            as_int(log_index, "log index"),
            as_int(position, "position"),
            as_int(stored, "store time"),
            as_str(tag, "tag"),
            as_str(group, "message group"),
            as_int(due, "delivery time"),
            as_int(count, "check count"),
            as_int(last, "last check"),
        )


class HalfMessages:
    """Unresolved half messages, in store order."""

    def __init__(self) -> None:
        self._by_id: dict[str, HalfMessage] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[HalfMessage]:
        return iter(self._by_id.values())

    def add(self, half: HalfMessage) -> None:
        """Hold a new half message (its transaction id must be new)."""
        self._by_id[half.transaction_id] = half

    def get(self, transaction_id: str) -> HalfMessage | None:
        """The unresolved half message with this id, if any."""
        return self._by_id.get(transaction_id)

    def resolve(self, transaction_id: str) -> HalfMessage | None:
        """Remove and return the half message (commit or rollback), if any."""
        return self._by_id.pop(transaction_id, None)

    def note_check(self, transaction_id: str, clock_ms: int) -> HalfMessage | None:
        """Count one more check-back of a half message; returns its new state."""
        half = self._by_id.get(transaction_id)
        if half is None:
            return None
        half = replace(half, check_count=half.check_count + 1, last_check_ms=clock_ms)
        self._by_id[transaction_id] = half
        return half

    def due(self, stored_before_ms: int, checked_before_ms: int, limit: int) -> list[HalfMessage]:
        """Up to ``limit`` half messages stored before ``stored_before_ms`` whose last
        check (if any) was before ``checked_before_ms``, oldest first."""
        found: list[HalfMessage] = []
        for half in self._by_id.values():
            if len(found) >= limit:
                break
            if half.stored_ms >= stored_before_ms:
                break  # store order: every later one is younger
            if half.check_count == 0 or half.last_check_ms < checked_before_ms:
                found.append(half)
        return found

    def to_wire(self) -> list[object]:
        """Snapshot form, in store order."""
        return [half.to_wire() for half in self._by_id.values()]

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire`."""
        self._by_id.clear()
        for item in data:
            half = HalfMessage.from_wire(as_list(item, "half message"))
            self._by_id[half.transaction_id] = half
