"""Queue indexes and append outcomes of a partition state machine.

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
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, cast

from protocol.positional import positional
from protocol.records import MessageRecord
from protocol.vocabulary import Placement
from storage_node.partition.chunks import PackedChunks, Piece
from storage_node.partition.wire import array_header, as_int, as_list, as_str, pack_items

DLQ_TOPIC_PREFIX = "%DLQ%"


def dead_letter_topic(group: str) -> str:
    """The name of consumer group ``group``'s dead-letter topic."""
    return DLQ_TOPIC_PREFIX + group


QueueId = tuple[str, int]
"""(topic, queue id)."""


def queue_key(topic: str, queue_id: int) -> QueueId:
    """The key a new queue is kept under, its topic name interned: a topic's queues
    and its groups' keys then share one string instead of one decoded copy each
    (each append and receive decodes its own copy of the name)."""
    return (sys.intern(topic), queue_id)


TIER_ONLY = -1
"""The log index of an entry receive built from a tier row (``QueueEntry.tier_only``)."""


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

    @property
    def tier_only(self) -> bool:
        """Whether only the tier holds the message (its local entry was trimmed): its
        body is read from the recorded tier object at its queue offset, not the log."""
        return self.log_index == TIER_ONLY

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

_as_entry: Callable[[QueueRow], QueueEntry] = positional(QueueEntry)


MEMO_ENTRIES_MIN = 64
"""A queue keeps the snapshot encoding of its entries and its least log index
(``QueueIndex._memo``) only from this many entries on. Most queues of a node with
many of them hold a few entries; packing those again at each snapshot, or finding
their least log index again, costs microseconds, a memo 650 bytes each (its chunk
table, piece, bytes and set of log indexes)."""


class _Memo:
    """What a long queue (:data:`MEMO_ENTRIES_MIN`) keeps to save work: the snapshot
    encoding of its entries by chunk (None until a snapshot asks) and the least log
    index they name (None: not known, found again on demand)."""

    __slots__ = ("chunks", "min_log_index")

    def __init__(self) -> None:
        self.chunks: PackedChunks[frozenset[int]] | None = None
        self.min_log_index: int | None = None


ENTRY_FIELDS = 6
"""Values a queue entry takes in :attr:`QueueIndex._entries`: a :data:`QueueRow`'s."""


def _rows(flat: list[Any]) -> Iterator[QueueRow]:
    """The entries of a flat run of entry fields (``QueueIndex._entries``), as tuples."""
    fields = iter(flat)
    return cast(Iterator[QueueRow], zip(*([fields] * ENTRY_FIELDS), strict=True))


class QueueIndex:
    """One queue's entries, from ``first_offset`` (older ones trimmed) to ``end_offset``.

    Invariant: ``0 <= first_offset <= end_offset``; trimming only raises
    ``first_offset``, appending only raises ``end_offset``; an entry is never
    replaced. So the snapshot encoding of the entries is kept by chunk of
    offsets (``chunks.PackedChunks``, built when a snapshot asks): a snapshot
    packs only the entries appended since the last one, and a chunk a trim cut.

    Entries are held packed: the fields of each in order (:data:`QueueRow`), one
    after the other in one flat list, :data:`ENTRY_FIELDS` values an entry, and
    handed out as QueueEntry. No object is made per entry: an entry's ints and
    strings are those its append gave (shared by the entries of one append), so
    an entry costs its list 48 bytes. Held as a tuple each (88 bytes, a block of
    96), a queue's one entry was one more small long-lived object among the
    short-lived ones of the same size (a dedup run's tuple), whose freed blocks
    it kept in the allocator's pools; held as QueueEntry (a named tuple, which
    the cyclic garbage collector keeps tracking), every full collection walked
    every message of the node (181 ms per million messages).
    """

    # Four slots: the object is a block of 64 bytes, as the queue's key tuple and its
    # entries' list are; with five it was one of 80, the size of a message id's
    # string, so the queue pinned the blocks of the ids its dedup window let go.
    __slots__ = ("_entries", "_memo", "first_offset", "key")

    def __init__(
        self, first_offset: int = 0, entries: Iterable[QueueRow] = (), key: QueueId | None = None
    ) -> None:
        self.first_offset = first_offset
        # The key the queue is kept under (``queue_key``), so that the group queues of
        # the queue share that tuple instead of one each (``partition.group_queues``).
        self.key = key
        # Entry i's fields are [i * ENTRY_FIELDS, (i + 1) * ENTRY_FIELDS); the
        # length is always a multiple of ENTRY_FIELDS.
        self._entries: list[Any] = []
        for entry in entries:
            row = tuple(entry)
            if len(row) != ENTRY_FIELDS:
                raise ValueError(f"a queue entry has {ENTRY_FIELDS} fields, got {len(row)}")
            self._entries += row
        # Per chunk: the entries' msgpack and the set of log indexes they name, and
        # the least log index. None while the queue is short (MEMO_ENTRIES_MIN) or
        # neither a snapshot nor the floor asked yet. Log indexes do not grow along
        # a queue (released timers and committed transactions name older entries),
        # so the least is kept, not read off the front.
        self._memo: _Memo | None = None

    def entry_count(self) -> int:
        """How many entries the queue holds: ``end_offset - first_offset``."""
        return len(self._entries) // ENTRY_FIELDS

    @property
    def end_offset(self) -> int:
        """The offset the next message will get."""
        return self.first_offset + len(self._entries) // ENTRY_FIELDS

    def __iter__(self) -> Iterator[QueueEntry]:
        return map(_as_entry, _rows(self._entries))

    def at(self, queue_offset: int) -> QueueEntry:
        """The entry at ``queue_offset``; the caller checks the range."""
        start = (queue_offset - self.first_offset) * ENTRY_FIELDS
        if start < 0:
            raise IndexError(f"queue offset {queue_offset} is below the queue's first")
        entry = _as_entry(self._entries[start : start + ENTRY_FIELDS])  # type: ignore[arg-type]
        if not entry:  # past the end: the slice is empty
            raise IndexError(f"queue offset {queue_offset} is past the queue's end")
        return entry

    def first_timestamp_ms(self) -> int | None:
        """The store timestamp of the entry at ``first_offset`` (None: empty)."""
        entries = self._entries
        return entries[2] if entries else None

    def holds(self, queue_offset: int) -> bool:
        """Whether ``queue_offset`` is in [first_offset, end_offset)."""
        return self.first_offset <= queue_offset < self.end_offset

    def append(self, entry: QueueRow) -> int:
        """Add an entry (a QueueEntry, or its fields as a plain tuple) at the end; returns
        its offset."""
        self._entries += entry
        memo = self._memo
        if memo is not None and memo.min_log_index is not None and entry[0] < memo.min_log_index:
            memo.min_log_index = entry[0]
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
        entries = self._entries
        if len(positions) == 1:
            entries += (
                log_index,
                positions[0],
                store_timestamp_ms,
                tags[0],
                message_groups[0],
                False,
            )
        else:
            for position, tag, message_group in zip(positions, tags, message_groups, strict=True):
                entries += (log_index, position, store_timestamp_ms, tag, message_group, False)
        memo = self._memo
        if memo is not None and memo.min_log_index is not None and log_index < memo.min_log_index:
            memo.min_log_index = log_index
        return first

    def min_log_index(self) -> int | None:
        """The least log index an entry names (None: empty); a pass over a short
        queue's entries, over a long one's only after a trim."""
        memo = self._memo
        if memo is not None and memo.min_log_index is not None:
            return memo.min_log_index
        if not self._entries:
            return None
        least: int = min(self._entries[0::ENTRY_FIELDS])
        if memo is None and self.entry_count() >= MEMO_ENTRIES_MIN:
            memo = self._memo = _Memo()
        if memo is not None:
            memo.min_log_index = least
        return least

    def read(self, queue_offset: int, count_max: int) -> tuple[QueueEntry, ...]:
        """Up to ``count_max`` entries from ``queue_offset`` (within the range)."""
        start = (queue_offset - self.first_offset) * ENTRY_FIELDS
        stop = start + max(count_max, 0) * ENTRY_FIELDS
        return tuple(map(_as_entry, _rows(self._entries[start:stop])))

    def log_indexes(self, queue_offset: int, count_max: int) -> list[int]:
        """The log indexes of up to ``count_max`` entries from ``queue_offset`` (within the
        range): :meth:`read`'s ``log_index`` fields, without building the entries."""
        start = (queue_offset - self.first_offset) * ENTRY_FIELDS
        stop = start + max(count_max, 0) * ENTRY_FIELDS
        return self._entries[start:stop:ENTRY_FIELDS]

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (``end_offset`` if none).

        Store timestamps never decrease along a queue (they are the state
        clock when an entry is queued, and that clock is monotonic).
        """
        entries = self._entries
        position = bisect.bisect_left(
            range(self.entry_count()),
            timestamp_ms,
            key=lambda i: entries[i * ENTRY_FIELDS + 2],
        )
        return self.first_offset + position

    def trim(self, before_offset: int) -> int:
        """Drop entries below ``before_offset`` (clamped to the range); returns first_offset.

        The memo's chunks below the new first offset, and the one it cuts into,
        are dropped at the next :meth:`packed` or :meth:`log_index_sets`.
        """
        before = min(max(before_offset, self.first_offset), self.end_offset)
        if before > self.first_offset:
            del self._entries[: (before - self.first_offset) * ENTRY_FIELDS]
            if self._memo is not None:
                self._memo.min_log_index = None
        self.first_offset = before
        return before

    def packed(self) -> bytes:
        """The msgpack of ``[entry.to_wire() for entry in self]``."""
        return b"".join(self.packed_parts())

    def packed_parts(self) -> list[bytes]:
        """:meth:`packed` in pieces (for a snapshot to join once with the rest).

        Packs only the entries no earlier call packed (and a chunk a trim cut).
        """
        return [array_header(self.entry_count()), *(piece.packed for piece in self._refreshed())]

    def log_index_sets(self) -> list[frozenset[int]]:
        """Sets whose union is every log index the entries name (one per chunk)."""
        return [piece.meta for piece in self._refreshed()]

    def _refreshed(self) -> list[Piece[frozenset[int]]]:
        """The memo's pieces, brought up to date: they cover every entry, in order.

        A queue holding fewer than :data:`MEMO_ENTRIES_MIN` entries keeps no memo:
        its one piece is packed afresh at each call (cheap for so few entries),
        since a memo would cost it about 650 bytes for as long as it lives."""
        first = self.first_offset
        entries = self._entries
        if self.entry_count() < MEMO_ENTRIES_MIN:
            self._memo = None
            if not entries:
                return []
            log_indexes = frozenset(entries[0::ENTRY_FIELDS])
            return [Piece(first, self.end_offset, pack_items(list(_rows(entries))), log_indexes)]
        if self._memo is None:
            self._memo = _Memo()
        memo = self._memo.chunks
        if memo is None:
            memo = self._memo.chunks = PackedChunks(_union)
        for chunk, lo, hi in memo.missing(first, self.end_offset):
            run = entries[(lo - first) * ENTRY_FIELDS : (hi - first) * ENTRY_FIELDS]
            log_indexes = frozenset(run[0::ENTRY_FIELDS])
            memo.add(chunk, lo, hi, pack_items(list(_rows(run))), log_indexes)
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
