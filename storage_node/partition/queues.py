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
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from functools import partial
from itertools import islice, repeat
from operator import itemgetter
from typing import NamedTuple, cast

from protocol.records import MessageRecord
from storage_node.partition.chunks import PackedChunks, Piece
from storage_node.partition.wire import array_header, as_int, as_list, as_str, pack_items

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
        """Snapshot form: the fields in order, so an entry packs as this list does
        (``QueueIndex.packed`` packs entries themselves)."""
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


QueueRow = tuple[int, int, int, str, str, bool]
"""A :class:`QueueEntry`'s fields as a plain tuple (a QueueEntry is one too)."""

_as_entry: Callable[[QueueRow], QueueEntry] = partial(tuple.__new__, QueueEntry)


class QueueIndex:
    """One queue's entries, from ``first_offset`` (older ones trimmed) to ``end_offset``.

    Invariant: ``0 <= first_offset <= end_offset``; trimming only raises
    ``first_offset``, appending only raises ``end_offset``; an entry is never
    replaced. So the snapshot encoding of the entries is kept by chunk of
    offsets (``chunks.PackedChunks``, built when a snapshot asks): a snapshot
    packs only the entries appended since the last one, and a chunk a trim cut.

    Entries are held as plain tuples (:data:`QueueRow`) and handed out as
    QueueEntry: the cyclic garbage collector stops tracking a plain tuple of
    numbers and strings the first time it sees one, never a named tuple's. A
    queue holds an entry per message for as long as the message is kept, so
    held as QueueEntry they made every full collection walk every message of
    the node (181 ms per million messages, a pause of the whole node).
    """

    __slots__ = ("_entries", "_memo", "_min_log_index", "first_offset")

    def __init__(self, first_offset: int = 0, entries: Iterable[QueueRow] = ()) -> None:
        self.first_offset = first_offset
        self._entries: list[QueueRow] = [cast(QueueRow, tuple(entry)) for entry in entries]
        # The least log index of the entries; None: not known (computed on demand).
        # Log indexes do not grow along a queue (released timers and committed
        # transactions name older entries), so it is kept, not read off the front.
        self._min_log_index: int | None = None
        # Per chunk: the entries' msgpack and the set of log indexes they name.
        self._memo: PackedChunks[frozenset[int]] = PackedChunks(_union)

    @property
    def end_offset(self) -> int:
        """The offset the next message will get."""
        return self.first_offset + len(self._entries)

    def __iter__(self) -> Iterator[QueueEntry]:
        return map(_as_entry, self._entries)

    def at(self, queue_offset: int) -> QueueEntry:
        """The entry at ``queue_offset``; the caller checks the range."""
        return _as_entry(self._entries[queue_offset - self.first_offset])

    def holds(self, queue_offset: int) -> bool:
        """Whether ``queue_offset`` is in [first_offset, end_offset)."""
        return self.first_offset <= queue_offset < self.end_offset

    def append(self, entry: QueueRow) -> int:
        """Add an entry (a QueueEntry, or its fields as a plain tuple) at the end; returns
        its offset."""
        row = entry if type(entry) is tuple else cast(QueueRow, tuple(entry))
        self._entries.append(row)
        if self._min_log_index is not None and row[0] < self._min_log_index:
            self._min_log_index = row[0]
        return self.end_offset - 1

    def append_run(
        self,
        log_index: int,
        positions: range,
        store_timestamp_ms: int,
        tags: Sequence[str],
        message_groups: Sequence[str],
    ) -> int:
        """Add the entries of records ``positions`` of the entry at ``log_index`` (their
        tags and message groups in order), as :meth:`append` one by one would;
        returns the first one's offset."""
        first = self.end_offset
        self._entries.extend(
            zip(
                repeat(log_index),
                positions,
                repeat(store_timestamp_ms),
                tags,
                message_groups,
                repeat(False),
                strict=False,  # the repeats are endless: positions, tags, groups are equal
            )
        )
        if self._min_log_index is not None and log_index < self._min_log_index:
            self._min_log_index = log_index
        return first

    def min_log_index(self) -> int | None:
        """The least log index an entry names (None: empty); a pass only after a trim."""
        if self._min_log_index is None and self._entries:
            self._min_log_index = min(row[0] for row in self._entries)
        return self._min_log_index

    def read(self, queue_offset: int, count_max: int) -> tuple[QueueEntry, ...]:
        """Up to ``count_max`` entries from ``queue_offset`` (within the range)."""
        start = queue_offset - self.first_offset
        return tuple(map(_as_entry, self._entries[start : start + max(count_max, 0)]))

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (``end_offset`` if none).

        Store timestamps never decrease along a queue (they are the state
        clock when an entry is queued, and that clock is monotonic).
        """
        position = bisect.bisect_left(self._entries, timestamp_ms, key=itemgetter(2))
        return self.first_offset + position

    def trim(self, before_offset: int) -> int:
        """Drop entries below ``before_offset`` (clamped to the range); returns first_offset.

        The memo's chunks below the new first offset, and the one it cuts into,
        are dropped at the next :meth:`packed` or :meth:`log_index_sets`.
        """
        before = min(max(before_offset, self.first_offset), self.end_offset)
        if before > self.first_offset:
            del self._entries[: before - self.first_offset]
            self._min_log_index = None
        self.first_offset = before
        return before

    def packed(self) -> bytes:
        """The msgpack of ``[entry.to_wire() for entry in self]``.

        Packs only the entries no earlier call packed (and a chunk a trim cut).
        """
        parts = [piece.packed for piece in self._refreshed()]
        return b"".join([array_header(len(self._entries)), *parts])

    def log_index_sets(self) -> list[frozenset[int]]:
        """Sets whose union is every log index the entries name (one per chunk)."""
        return [piece.meta for piece in self._refreshed()]

    def _refreshed(self) -> list[Piece[frozenset[int]]]:
        """The memo's pieces, brought up to date: they cover every entry, in order."""
        first = self.first_offset
        memo = self._memo
        for chunk, lo, hi in memo.missing(first, self.end_offset):
            entries = self._entries[lo - first : hi - first]
            memo.add(chunk, lo, hi, pack_items(entries), frozenset([row[0] for row in entries]))
        return memo.pieces()


def _union(one: frozenset[int], other: frozenset[int]) -> frozenset[int]:
    return one | other


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


_Remembered = tuple[int, int, int, int]
"""What the window holds per (topic, message id): (queue id, placement as an int,
queue offset, store time). Plain numbers in a plain tuple, for the reason given at
:class:`QueueIndex`: the window holds up to ``entries_max`` of them per group."""


class DedupWindow:
    """Outcomes of recent appends by (topic, message id), for idempotent retries.

    An entry lives while its store time is within ``window_ms`` of the state
    clock and among the newest ``entries_max``. Entries are kept in store
    order (the clock is monotonic), so eviction is from the front.

    Invariant: store times never decrease from the front to the back (entries
    are added at the back with the state clock; :meth:`update` keeps an
    entry's place and store time). Outcomes are kept as :data:`_Remembered`
    and rebuilt when asked for (only a retried append asks).

    The snapshot encoding is kept by chunk of sequence numbers (the entry at
    the front has number ``_dropped``, the next ones count up), with each
    chunk's first and last store time: :meth:`update` finds the chunk of the
    entry it replaces by store time (the invariant above) and forgets it.
    """

    def __init__(self, window_ms: int, entries_max: int) -> None:
        self.window_ms = window_ms
        self.entries_max = entries_max
        # A dict keeps insertion order, and the keys in that order are kept again in a
        # deque: the front is reached at once however many entries left it before
        # (a dict's first key is found by scanning past its removed ones).
        self._entries: dict[tuple[str, str], _Remembered] = {}
        self._order: deque[tuple[str, str]] = deque()
        # How many entries ever left the front: the front entry's sequence number.
        self._dropped = 0
        self._memo: PackedChunks[tuple[int, int]] = PackedChunks(_span)
        # (first store time, last store time, chunk) of each piece of the memo,
        # ascending, as of the last packed() (pieces only go in between).
        self._spans: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def remembered(self) -> Container[tuple[str, str]]:
        """The (topic, message id) pairs remembered now: a live view, for membership tests."""
        return self._entries.keys()

    def lookup(self, topic: str, message_id: str) -> RecordOutcome | None:
        """The original outcome of a record stored in the window, if any."""
        found = self._entries.get((topic, message_id))
        return None if found is None else _outcome((topic, message_id), found)

    def remember(self, outcome: RecordOutcome, stored_ms: int) -> None:
        """Record the outcome of a first append (evicting the oldest when full).

        The message id is not remembered already (the caller looked it up), and
        ``stored_ms`` is the state clock.
        """
        key = (outcome.topic, outcome.message_id)
        if key not in self._entries:  # (kept in place if it were, as a map keeps it)
            self._order.append(key)
        self._entries[key] = _remembered(outcome, stored_ms)
        self._evict_over_max()

    def _evict_over_max(self) -> None:
        """Drop the oldest entries beyond ``entries_max``."""
        excess = len(self._entries) - self.entries_max
        if excess > 0:
            entries = self._entries
            oldest = self._order.popleft
            for _ in range(excess):
                del entries[oldest()]
            self._dropped += excess

    def knows_any(self, keys: Iterable[tuple[str, str]]) -> bool:
        """Whether any of the (topic, message id) ``keys`` is remembered now."""
        return not self._entries.keys().isdisjoint(keys)

    def remember_queued(
        self,
        topic: str,
        queue_id: int,
        message_ids: Sequence[str],
        first_offset: int,
        stored_ms: int,
    ) -> None:
        """:meth:`remember` the outcomes of ``message_ids`` queued in order at consecutive
        offsets from ``first_offset``, as one call per id would (none is remembered)."""
        queued = int(Placement.QUEUED)
        keys = list(zip(repeat(topic), message_ids, strict=False))
        before = len(self._entries)
        self._entries.update(
            zip(
                keys,
                zip(
                    repeat(queue_id),
                    repeat(queued),
                    range(first_offset, first_offset + len(message_ids)),
                    repeat(stored_ms),
                    strict=False,
                ),
                strict=False,  # the second runs as long as message_ids
            )
        )
        if len(self._entries) - before == len(keys):
            self._order.extend(keys)
        else:  # an id was remembered already (callers exclude it): the map's order holds
            self._order = deque(self._entries)
        self._evict_over_max()

    def update(self, outcome: RecordOutcome) -> None:
        """Replace a remembered outcome (a timer fired, a half message committed)."""
        key = (outcome.topic, outcome.message_id)
        found = self._entries.get(key)
        if found is not None:
            self._entries[key] = _remembered(outcome, found[3])
            self._forget_stored_at(found[3])

    def _forget_stored_at(self, stored_ms: int) -> None:
        """Forget the memo's pieces whose store times span ``stored_ms``.

        By the store order invariant, they include the piece of any entry
        stored then. Spans ascend at both ends, so they are the ones just
        before the first span that starts later.
        """
        spans = self._spans
        later = bisect.bisect_left(spans, (stored_ms + 1,))
        while later > 0 and spans[later - 1][1] >= stored_ms:
            later -= 1
            self._memo.forget(spans[later][2])

    def maybe_evict(self, clock_ms: int) -> int:
        """Drop entries stored before ``clock_ms - window_ms``; returns how many."""
        horizon = clock_ms - self.window_ms
        entries = self._entries
        order = self._order
        evicted = 0
        while order and entries[order[0]][3] < horizon:
            del entries[order.popleft()]
            evicted += 1
        self._dropped += evicted
        return evicted

    def to_wire(self) -> list[object]:
        """Snapshot form, in store order."""
        return [_dedup_wire(item) for item in self._entries.items()]

    def packed(self) -> bytes:
        """The msgpack of :meth:`to_wire`.

        Packs only the entries no earlier call packed, those of a chunk an
        update touched, and those of the chunk eviction cut into.
        """
        memo = self._memo
        first = self._dropped
        wanted = memo.missing(first, first + len(self._entries))
        for (chunk, lo, hi), items in zip(wanted, self._items_at(wanted), strict=True):
            wire = [_dedup_wire(item) for item in items]
            memo.add(chunk, lo, hi, pack_items(wire), (items[0][1][3], items[-1][1][3]))
        pieces = memo.pieces()
        self._spans = [(*piece.meta, piece.lo // memo.size) for piece in pieces]
        return b"".join([array_header(len(self._entries)), *(piece.packed for piece in pieces)])

    def _items_at(self, ranges: list[tuple[int, int, int]]) -> list[list[_Item]]:
        """The items at each ``(chunk, lo, hi)`` of ``ranges`` (ascending sequence numbers).

        Reads each from the nearer end of the window, walking only up to the
        ranges farthest in: what changes is mostly at the ends (the newest
        entries, the chunk eviction cut).
        """
        first = self._dropped
        count = len(self._entries)
        middle = first + count // 2
        front = [item for item in ranges if item[1] < middle]
        back = ranges[len(front) :]
        found: list[list[_Item]] = []
        if front:
            head = list(islice(self._entries.items(), front[-1][2] - first))
            found += [head[lo - first : hi - first] for _chunk, lo, hi in front]
        if back:
            start = back[0][1]
            tail = list(islice(reversed(self._entries.items()), first + count - start))
            tail.reverse()
            found += [tail[lo - start : hi - start] for _chunk, lo, hi in back]
        return found

    def check_invariants(self) -> None:
        """Raise AssertionError if store times decrease along the window, or the keys'
        order is not the map's (tests)."""
        stored = [remembered[3] for remembered in self._entries.values()]
        if stored != sorted(stored):
            raise AssertionError("dedup window entries out of store order")
        if list(self._order) != list(self._entries):
            raise AssertionError("dedup window keys out of the map's order")

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire` (replacing any entries)."""
        self._entries.clear()
        self._order.clear()
        self._dropped = 0
        self._memo = PackedChunks(_span)
        self._spans = []
        for item in data:
            wire, stored = as_list(item, "dedup entry", 2)
            outcome = RecordOutcome.from_wire(as_list(wire, "record outcome"))
            key = (outcome.topic, outcome.message_id)
            if key not in self._entries:
                self._order.append(key)
            self._entries[key] = _remembered(outcome, as_int(stored))


_Item = tuple[tuple[str, str], _Remembered]
"""One (key, value) of the window's map."""


def _remembered(outcome: RecordOutcome, stored_ms: int) -> _Remembered:
    """What the window keeps of ``outcome`` stored at ``stored_ms`` (its key aside)."""
    return (outcome.queue_id, int(outcome.placement), outcome.queue_offset, stored_ms)


def _outcome(key: tuple[str, str], found: _Remembered) -> RecordOutcome:
    """The outcome remembered as ``found`` under ``key``."""
    return RecordOutcome(key[0], found[0], key[1], Placement(found[1]), found[2])


def _dedup_wire(item: _Item) -> list[object]:
    """Snapshot form of one item: ``[RecordOutcome.to_wire(), store time]``."""
    (topic, message_id), (queue_id, placement, offset, stored) = item
    return [[topic, queue_id, message_id, placement, offset], stored]


def _span(one: tuple[int, int], other: tuple[int, int]) -> tuple[int, int]:
    """The store times of two adjacent runs of entries, as one run's."""
    return one[0], other[1]
