"""The tier's metadata of a raft group, replicated through its log: which objects hold
which offsets of each queue.

A group's leader uploads committed messages of its queues as message objects
(``protocol.message_objects``) and then proposes ``RecordUpload`` naming the
object; only what this state records is the tier's content. So every replica
knows the tier's layout (a new leader resumes at :meth:`TierObjects.end_offset`),
and an object no record names (a deposed leader's, an upload whose record
failed) is garbage: no reader trusts it.

The fence (:func:`upload_refusal`): a record is taken only if its object starts
exactly where the queue's recorded objects end (or, for a queue's first object,
at or after the queue's first offset when nothing is recorded yet), holds at least
one message, and ends at or below the queue's end offset as applied. Two leaders
uploading the same offsets therefore cannot both be recorded: the second record
starts below the recorded end and is refused on every replica alike. Object
names carry the uploader's term, so a deposed leader never overwrites the
object of its successor either.

Invariant: a queue's recorded objects are contiguous, in offset order, and
each is non-empty.

Every raft snapshot of the group holds these records, and they accumulate
(until the topic's retention expires them): each object keeps its snapshot
encoding from when it is recorded, so a snapshot joins bytes per object.

PURE.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from protocol.message_objects import ObjectEntry
from storage_node.partition.queues import QueueId
from storage_node.partition.wire import array_header, as_int, as_list, as_str, pack, pack_items


def upload_refusal(
    recorded_end: int | None, queue_first: int, queue_end: int, first_offset: int, end_offset: int
) -> str:
    """Why an object of ``[first_offset, end_offset)`` may not be recorded ("" if it may):
    ``recorded_end`` is where the queue's recorded objects end (None: no object yet),
    ``[queue_first, queue_end)`` the queue's offsets as applied."""
    if end_offset <= first_offset:
        return f"an object holds at least one message, not [{first_offset}, {end_offset})"
    if end_offset > queue_end:
        return f"the object ends at {end_offset}, past the queue's end {queue_end}"
    if recorded_end is None:
        if first_offset < queue_first:
            return f"the object starts at {first_offset}, below the queue's first {queue_first}"
        return ""
    if first_offset != recorded_end:
        return f"the object starts at {first_offset}, not where the tier ends ({recorded_end})"
    return ""


class TierObjects:
    """Recorded tier objects by queue (see the module docstring)."""

    def __init__(self) -> None:
        self._by_queue: dict[QueueId, list[ObjectEntry]] = {}
        # The msgpack of each object's snapshot fields, as _by_queue.
        self._packed: dict[QueueId, list[bytes]] = {}
        # The upload point of every queue that ever had an object recorded: it outlives
        # its objects' expiry (the next object must still start there).
        self._ends: dict[QueueId, int] = {}

    def __bool__(self) -> bool:
        return bool(self._ends)

    def queues(self) -> Iterator[QueueId]:
        """The queues with an upload point, sorted."""
        return iter(sorted(self._ends))

    def objects(self, queue: QueueId) -> list[ObjectEntry]:
        """The queue's recorded objects, in offset order (a copy)."""
        return list(self._by_queue.get(queue, ()))

    def end_offset(self, queue: QueueId) -> int | None:
        """Where the queue's recorded objects end: the upload point (None: none yet)."""
        return self._ends.get(queue)

    def first_offset(self, queue: QueueId) -> int | None:
        """The first offset the tier holds of the queue (None: nothing)."""
        objects = self._by_queue.get(queue)
        return objects[0].first_offset if objects else None

    def record(self, queue: QueueId, entry: ObjectEntry) -> None:
        """Add ``entry`` after the queue's objects (the caller checked
        :func:`upload_refusal`)."""
        self._by_queue.setdefault(queue, []).append(entry)
        self._packed.setdefault(queue, []).append(pack(_fields(entry)))
        self._ends[queue] = entry.end_offset

    def expire(self, queue: QueueId, before_offset: int) -> list[ObjectEntry]:
        """Forget the queue's objects that end at or below ``before_offset``; them. The
        upload point stays where it is."""
        objects = self._by_queue.get(queue, [])
        gone = [entry for entry in objects if entry.end_offset <= before_offset]
        if gone:
            kept = objects[len(gone) :]
            if kept:
                self._by_queue[queue] = kept
                del self._packed[queue][: len(gone)]
            else:
                del self._by_queue[queue]
                del self._packed[queue]
        return gone

    def drop_topic(self, topic: str) -> list[ObjectEntry]:
        """Forget every object and upload point of ``topic``; the objects (their bytes are
        the caller's to delete)."""
        gone: list[ObjectEntry] = []
        for queue in [queue for queue in self._ends if queue[0] == topic]:
            gone += self._by_queue.pop(queue, [])
            self._packed.pop(queue, None)
            del self._ends[queue]
        return gone

    def to_wire(self) -> list[object]:
        """Snapshot form: per queue, sorted, its upload point and its objects' fields."""
        return [
            [topic, queue_id, end, [_fields(entry) for entry in self._by_queue.get(queue, ())]]
            for queue, end in sorted(self._ends.items())
            for topic, queue_id in [queue]
        ]

    def packed_parts(self) -> list[bytes]:
        """The msgpack of :meth:`to_wire`, in pieces (the objects' kept encodings)."""
        parts = [array_header(len(self._ends))]
        for queue, end in sorted(self._ends.items()):
            packed = self._packed.get(queue, [])
            parts += (array_header(4), pack_items([*queue, end]), array_header(len(packed)))
            parts += packed
        return parts

    def load_wire(self, data: list[object]) -> None:
        """Inverse of :meth:`to_wire` (into an empty instance)."""
        for item in data:
            topic, queue_id, end, objects = as_list(item, "tier queue", 4)
            queue = (as_str(topic, "topic"), as_int(queue_id, "queue id"))
            self._ends[queue] = as_int(end, "upload point")
            entries = [
                _entry(as_list(fields, "tier object", 7)) for fields in as_list(objects, "objects")
            ]
            if entries:
                self._by_queue[queue] = entries
                self._packed[queue] = [pack(_fields(entry)) for entry in entries]

    def check_invariants(self) -> None:
        """Raise AssertionError unless every queue's objects are contiguous and non-empty."""
        for queue, objects in self._by_queue.items():
            if not objects or objects[-1].end_offset != self._ends.get(queue):
                raise AssertionError(f"{queue}: tier objects do not end at the upload point")
            for before, after in pairwise(objects):
                if after.first_offset != before.end_offset:
                    raise AssertionError(f"{queue}: tier objects not contiguous at {after.name}")
            for entry in objects:
                if entry.end_offset <= entry.first_offset:
                    raise AssertionError(f"{queue}: tier object {entry.name} is empty")
            if self._packed.get(queue) != [pack(_fields(entry)) for entry in objects]:
                raise AssertionError(f"{queue}: tier objects' kept encodings differ from them")
        if self._packed.keys() != self._by_queue.keys():
            raise AssertionError("tier objects' kept encodings are not by the same queues")


def _fields(entry: ObjectEntry) -> list[object]:
    """An object's snapshot form (its fields in declaration order)."""
    return [
        entry.name,
        entry.first_offset,
        entry.end_offset,
        entry.min_store_timestamp_ms,
        entry.max_store_timestamp_ms,
        entry.size_bytes,
        entry.crc32c,
    ]


def _entry(fields: list[object]) -> ObjectEntry:
    name, first, end, min_ms, max_ms, size, crc = fields
    return ObjectEntry(
        as_str(name, "object name"),
        as_int(first, "first offset"),
        as_int(end, "end offset"),
        as_int(min_ms, "min store time"),
        as_int(max_ms, "max store time"),
        as_int(size, "size"),
        as_int(crc, "crc32c"),
    )
