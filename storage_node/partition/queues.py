"""Queue indexes and the append dedup window of a partition state machine.

A queue's index maps each queue offset to where its record lives in the
raft log, which is the commit log: ``(log_index, position)`` names the record
at ``position`` in the batch of the APPEND entry at ``log_index``. Bodies are
never copied into the state machine. Messages that reach a queue later than
their append (a committed transaction, a released timer, a dead-letter copy)
index the original record too.

Invariant: a queue's offsets are dense, start at 0 and are never reused; an
offset, once assigned, always names the same entry.

PURE.
"""

from __future__ import annotations

import bisect
import enum
from collections import OrderedDict
from collections.abc import Container, Iterator
from typing import NamedTuple

from protocol.records import MessageRecord
from storage_node.partition.wire import as_int, as_list, as_str

DLQ_TOPIC_PREFIX = "%DLQ%"


def dead_letter_topic(group: str) -> str:
    """The name of consumer group ``group``'s dead-letter topic."""
    return DLQ_TOPIC_PREFIX + group


QueueId = tuple[str, int]
"""(topic, queue id)."""


class QueueEntry(NamedTuple):
    """One offset of a queue: where its record is, and what filtering needs.

    ``tag`` and ``message_group`` are copied from the record so receive can
    filter and order without reading the log. ``dead_letter`` marks a copy in
    a dead-letter queue, whose record still names the original topic.

    Immutable; a named tuple because one is built per appended message on
    every replica (a frozen dataclass costs a ``object.__setattr__`` per field).
    """

    log_index: int
    position: int
    store_timestamp_ms: int
    tag: str = ""
    message_group: str = ""
    dead_letter: bool = False

    def to_wire(self) -> list[object]:
        """Snapshot form."""
        return [
            self.log_index,
            self.position,
            self.store_timestamp_ms,
            self.tag,
            self.message_group,
            self.dead_letter,
        ]

    @classmethod
    def from_wire(cls, data: object) -> QueueEntry:
        """Inverse of :meth:`to_wire`."""
        log_index, position, stored, tag, group, dead = as_list(data, "queue entry", 6)
        return cls(
            as_int(log_index, "log index"),
            as_int(position, "position"),
            as_int(stored, "store timestamp"),
            as_str(tag, "tag"),
            as_str(group, "message group"),
            bool(dead),
        )


class QueueIndex:
    """One queue's entries, from ``first_offset`` (older ones trimmed) to ``end_offset``.

    Invariant: ``0 <= first_offset <= end_offset``; trimming only raises
    ``first_offset``, appending only raises ``end_offset``.
    """

    __slots__ = ("_entries", "_min_log_index", "first_offset")

    def __init__(self, first_offset: int = 0, entries: list[QueueEntry] | None = None) -> None:
        self.first_offset = first_offset
        self._entries: list[QueueEntry] = entries if entries is not None else []
        # The least log index of the entries; None: not known (computed on demand).
        # Log indexes do not grow along a queue (released timers and committed
        # transactions name older entries), so it is kept, not read off the front.
        self._min_log_index: int | None = None

    @property
    def end_offset(self) -> int:
        """The offset the next message will get."""
        return self.first_offset + len(self._entries)

    def __iter__(self) -> Iterator[QueueEntry]:
        return iter(self._entries)

    def at(self, queue_offset: int) -> QueueEntry:
        """The entry at ``queue_offset``; the caller checks the range."""
        return self._entries[queue_offset - self.first_offset]

    def holds(self, queue_offset: int) -> bool:
        """Whether ``queue_offset`` is in [first_offset, end_offset)."""
        return self.first_offset <= queue_offset < self.end_offset

    def append(self, entry: QueueEntry) -> int:
        """Add an entry at the end; returns its offset."""
        self._entries.append(entry)
        if self._min_log_index is not None and entry.log_index < self._min_log_index:
            self._min_log_index = entry.log_index
        return self.end_offset - 1

    def min_log_index(self) -> int | None:
        """The least log index an entry names (None: empty); a pass only after a trim."""
        if self._min_log_index is None and self._entries:
            self._min_log_index = min(entry.log_index for entry in self._entries)
        return self._min_log_index

    def read(self, queue_offset: int, count_max: int) -> tuple[QueueEntry, ...]:
        """Up to ``count_max`` entries from ``queue_offset`` (within the range)."""
        start = queue_offset - self.first_offset
        return tuple(self._entries[start : start + max(count_max, 0)])

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (``end_offset`` if none).

        Store timestamps never decrease along a queue (they are the state
        clock when an entry is queued, and that clock is monotonic).
        """
        position = bisect.bisect_left(
            self._entries, timestamp_ms, key=lambda entry: entry.store_timestamp_ms
        )
        return self.first_offset + position

    def trim(self, before_offset: int) -> int:
        """Drop entries below ``before_offset`` (clamped to the range); returns first_offset."""
        before = min(max(before_offset, self.first_offset), self.end_offset)
        if before > self.first_offset:
            del self._entries[: before - self.first_offset]
            self._min_log_index = None
        self.first_offset = before
        return before


def view_record(record: MessageRecord, entry: QueueEntry, queue: QueueId) -> MessageRecord:
    """The message a reader of ``queue`` sees at ``entry``, given the record it indexes.

    A dead-letter copy is presented in its dead-letter queue and names the
    original topic and message id; other entries are the record itself.
    """
    if not entry.dead_letter:
        return record
    return record._replace(
        topic=queue[0],
        queue_id=queue[1],
        dead_letter_topic=record.dead_letter_topic or record.topic,
        dead_letter_message_id=record.dead_letter_message_id or record.message_id,
        delivery_timestamp_ms=0,
    )


class Placement(enum.IntEnum):
    """Where an appended record went. Append-only."""

    QUEUED = 0  # in its queue, at queue_offset
    DELAYED = 1  # held until its delivery time, then queued
    HALF = 2  # a transaction's half message, queued on commit


class RecordOutcome(NamedTuple):
    """What an append did with one record. ``queue_offset`` is -1 unless QUEUED.

    Immutable; a named tuple for the same reason as :class:`QueueEntry`.
    """

    topic: str
    queue_id: int
    message_id: str
    placement: Placement
    queue_offset: int = -1
    duplicate: bool = False

    def to_wire(self) -> list[object]:
        """Snapshot form (``duplicate`` is not kept: it is per call)."""
        return [self.topic, self.queue_id, self.message_id, int(self.placement), self.queue_offset]

    @classmethod
    def from_wire(cls, data: object) -> RecordOutcome:
        """Inverse of :meth:`to_wire`."""
        topic, queue_id, message_id, placement, offset = as_list(data, "record outcome", 5)
        return cls(
            as_str(topic, "topic"),
            as_int(queue_id, "queue id"),
            as_str(message_id, "message id"),
            Placement(as_int(placement, "placement")),
            as_int(offset, "queue offset"),
        )


class DedupWindow:
    """Outcomes of recent appends by (topic, message id), for idempotent retries.

    An entry lives while its store time is within ``window_ms`` of the state
    clock and among the newest ``entries_max``. Entries are kept in store
    order (the clock is monotonic), so eviction is from the front.
    """

    def __init__(self, window_ms: int, entries_max: int) -> None:
        self.window_ms = window_ms
        self.entries_max = entries_max
        self._entries: OrderedDict[tuple[str, str], tuple[RecordOutcome, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def remembered(self) -> Container[tuple[str, str]]:
        """The (topic, message id) pairs remembered now: a live view, for membership tests."""
        return self._entries.keys()

    def lookup(self, topic: str, message_id: str) -> RecordOutcome | None:
        """The original outcome of a record stored in the window, if any."""
        found = self._entries.get((topic, message_id))
        return None if found is None else found[0]

    def remember(self, outcome: RecordOutcome, stored_ms: int) -> None:
        """Record the outcome of a first append (evicting the oldest when full)."""
        self._entries[(outcome.topic, outcome.message_id)] = (outcome, stored_ms)
        while len(self._entries) > self.entries_max:
            self._entries.popitem(last=False)

    def update(self, outcome: RecordOutcome) -> None:
        """Replace a remembered outcome (a timer fired, a half message committed)."""
        key = (outcome.topic, outcome.message_id)
        found = self._entries.get(key)
        if found is not None:
            self._entries[key] = (outcome, found[1])

    def maybe_evict(self, clock_ms: int) -> int:
        """Drop entries stored before ``clock_ms - window_ms``; returns how many."""
        horizon = clock_ms - self.window_ms
        evicted = 0
        while self._entries:
            key = next(iter(self._entries))
            if self._entries[key][1] >= horizon:
                break
            self._entries.popitem(last=False)
            evicted += 1
        return evicted

    def to_wire(self) -> list[object]:
        """Snapshot form, in store order."""
        return [[outcome.to_wire(), stored] for outcome, stored in self._entries.values()]

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire` (replacing any entries)."""
        self._entries.clear()
        for item in data:
            wire, stored = as_list(item, "dedup entry", 2)
            outcome = RecordOutcome.from_wire(as_list(wire, "record outcome"))
            self._entries[(outcome.topic, outcome.message_id)] = (outcome, as_int(stored))

    def __iter__(self) -> Iterator[tuple[RecordOutcome, int]]:
        return iter(self._entries.values())
