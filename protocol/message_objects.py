"""Message objects and manifests: stored messages at rest, outside the cluster.

A *message object* is an immutable, self-describing file holding consecutive
messages of ONE queue, ``[first_offset, end_offset)``. Snapshots
(``rip5 admin snapshot``) and the tier write them; the Spark reader and a
tier read them back with nothing but this module and ``protocol.records``.
A *manifest* lists the objects of each queue; whoever publishes objects
writes the manifest LAST, so a reader that finds a manifest finds every
object it names complete.

Object layout (big-endian)::

    header   magic "R5MO" (4) | version u16 | reserved u16            (8 bytes)
    block*   count u32 | count x store_timestamp_ms i64 | record batch
    footer   msgpack map (see :class:`ObjectFooter`)
    trailer  footer length u32 | footer crc32c u32 | magic "R5MO" | version u16 |
             reserved u16                                             (16 bytes)

A block holds the messages at offsets ``first_offset .. first_offset +
count - 1``: their store times (the leader's clock when each was queued),
then the records as one ``protocol.records`` batch (which has its own CRC;
its store time field is the block's first store time). The footer is the
object's index: topic, queue, offset and time ranges, and per block its
first offset, count, byte position and length, CRC32C and store time
range, so a reader seeks to the blocks of an offset or time range from the
trailer alone. Every byte a reader uses is checked before it is decoded, once:
the footer by the trailer's CRC32C, a block's head (count and store times)
by the footer's CRC32C of it, its record batch by the batch's own CRC32C.

Evolution: readers refuse an object or manifest of a version they do not
know; footer and manifest maps only gain keys (readers ignore unknown ones).

PURE.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import crc32c
import msgpack

from protocol import errors
from protocol.errors import ErrorCode
from protocol.records import (
    MESSAGE_TYPES,
    MessageRecord,
    RecordColumns,
    RecordCorrupted,
    decode_batch,
    decode_columns,
    packed_batch_parts,
)

OBJECT_MAGIC = b"R5MO"
OBJECT_VERSION = 1
MANIFEST_VERSION = 1
MANIFEST_FORMAT = "rip5-message-objects"
OBJECT_SUFFIX = ".r5mo"
MANIFEST_NAME = "manifest.json"
"""The manifest's file name in the folder of the objects it lists."""

HEADER = struct.Struct(">4sHH")
TRAILER = struct.Struct(">II4sHH")
TRAILER_BYTES = TRAILER.size
OFFSET_MAX = 2**63 - 1
"""No queue offset reaches it: the end of an open-ended window."""
_COUNT = struct.Struct(">I")
_STORE_TIMES = ">{}q"


class ObjectCorrupted(ValueError):
    """An object or manifest that is not intact; the message names which one, and where."""

    code: ErrorCode = errors.DECODE_FAILED


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """One block of an object: ``count`` messages from ``first_offset``, ``length`` bytes
    at byte ``position``, the CRC32C of its head (count and store times: the record
    batch after it has its own) and its store time range."""

    first_offset: int
    count: int
    position: int
    length: int
    crc32c: int
    min_store_timestamp_ms: int
    max_store_timestamp_ms: int

    @property
    def end_offset(self) -> int:
        """The offset after the block's last message."""
        return self.first_offset + self.count


@dataclass(frozen=True, slots=True)
class ObjectFooter:
    """The index of an object (see the module docstring)."""

    topic: str
    queue_id: int
    first_offset: int
    end_offset: int
    min_store_timestamp_ms: int
    max_store_timestamp_ms: int
    blocks: tuple[BlockInfo, ...]

    def blocks_in(self, window: ReadWindow) -> list[BlockInfo]:
        """The blocks holding at least one offset of ``window`` and overlapping its time
        range (a block wholly outside either is left out, unread)."""
        return [
            block
            for block in self.blocks
            if block.first_offset < window.end_offset
            and block.end_offset > window.first_offset
            and window.overlaps_time(block.min_store_timestamp_ms, block.max_store_timestamp_ms)
        ]


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """One object in a manifest: its name (a path relative to the manifest's folder),
    offset and time ranges, size and the CRC32C of all its bytes."""

    name: str
    first_offset: int
    end_offset: int
    min_store_timestamp_ms: int
    max_store_timestamp_ms: int
    size_bytes: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class QueueManifest:
    """The objects of one queue, in offset order, covering ``[first_offset, end_offset)``
    without gaps; the queue's store time range (-1 when it holds no message)."""

    topic: str
    queue_id: int
    group_id: int
    first_offset: int
    end_offset: int
    min_store_timestamp_ms: int
    max_store_timestamp_ms: int
    objects: list[ObjectEntry] = field(default_factory=list)
    format_version: int = OBJECT_VERSION

    @property
    def message_count(self) -> int:
        """How many messages the queue's objects hold."""
        return self.end_offset - self.first_offset

    @property
    def size_bytes(self) -> int:
        """The bytes of the queue's objects."""
        return sum(entry.size_bytes for entry in self.objects)


@dataclass(frozen=True, slots=True)
class GroupPoint:
    """Where a snapshot read raft group ``group_id``: its applied index at the start."""

    group_id: int
    applied_index: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """A set of queues at rest: a snapshot's table of contents."""

    name: str
    created_ms: int
    queues: list[QueueManifest]
    groups: list[GroupPoint] = field(default_factory=list)
    format_version: int = MANIFEST_VERSION

    def queue(self, topic: str, queue_id: int) -> QueueManifest | None:
        """The manifest of one queue, or None."""
        for queue in self.queues:
            if queue.topic == topic and queue.queue_id == queue_id:
                return queue
        return None


# ------------------------------------------------------------------ windows
@dataclass(frozen=True, slots=True)
class ReadWindow:
    """What a reader wants of a queue: offsets ``[first_offset, end_offset)`` stored in
    ``[from_timestamp_ms, to_timestamp_ms)`` (None: unbounded)."""

    first_offset: int = 0
    end_offset: int = OFFSET_MAX
    from_timestamp_ms: int | None = None
    to_timestamp_ms: int | None = None

    def overlaps_time(self, min_store_timestamp_ms: int, max_store_timestamp_ms: int) -> bool:
        """Whether messages stored in ``[min, max]`` may fall in the time range."""
        if self.from_timestamp_ms is not None and max_store_timestamp_ms < self.from_timestamp_ms:
            return False
        return self.to_timestamp_ms is None or min_store_timestamp_ms < self.to_timestamp_ms

    def holds_time(self, store_timestamp_ms: int) -> bool:
        """Whether a message stored at ``store_timestamp_ms`` is in the time range."""
        if self.from_timestamp_ms is not None and store_timestamp_ms < self.from_timestamp_ms:
            return False
        return self.to_timestamp_ms is None or store_timestamp_ms < self.to_timestamp_ms


class ObjectRead(NamedTuple):
    """One object to read, and the offsets of it wanted: the unit of a parallel read."""

    topic: str
    queue_id: int
    entry: ObjectEntry
    first_offset: int
    end_offset: int


def select_objects(
    queues: Iterable[QueueManifest],
    window: ReadWindow,
    *,
    topics: Iterable[str] | None = None,
    queue_ids: Iterable[int] | None = None,
) -> list[ObjectRead]:
    """The objects a read of ``window`` (of ``topics`` and ``queue_ids``, None: all) must
    open, from the manifest alone: an object outside the window's offsets or time
    range, or of another topic or queue, is left out."""
    topic_set = None if topics is None else set(topics)
    queue_set = None if queue_ids is None else set(queue_ids)
    reads = []
    for queue in queues:
        if topic_set is not None and queue.topic not in topic_set:
            continue
        if queue_set is not None and queue.queue_id not in queue_set:
            continue
        for entry in queue.objects:
            first = max(entry.first_offset, window.first_offset)
            end = min(entry.end_offset, window.end_offset)
            if first >= end:
                continue
            if not window.overlaps_time(entry.min_store_timestamp_ms, entry.max_store_timestamp_ms):
                continue
            reads.append(ObjectRead(queue.topic, queue.queue_id, entry, first, end))
    return reads


# ------------------------------------------------------------------ writing
def object_name(topic: str, queue_id: int, first_offset: int) -> str:
    """Where an object of a queue lives, relative to its manifest's folder."""
    return f"objects/{topic}/{queue_id}/{first_offset:020d}{OBJECT_SUFFIX}"


TIER_GROUPS = "groups"
"""The tier's top folder: one folder per raft group below it."""


def tier_group_folder(group_id: int) -> str:
    """The folder of raft group ``group_id``'s objects and manifest in a tier, relative to
    the tier's root: ``groups/<group id, 5 digits>``."""
    return f"{TIER_GROUPS}/{group_id:05d}"


def tier_object_name(topic: str, queue_id: int, first_offset: int, term: int) -> str:
    """Where the leader of term ``term`` writes a queue's object from ``first_offset``,
    relative to its group's folder (so its group's manifest names it as it names a
    snapshot's objects). The term makes two leaders' objects of the same offsets two
    files: a deposed leader never overwrites its successor's object, and only the
    one the group's raft log recorded is the tier's (``storage_node.partition.tier``)."""
    return f"objects/{topic}/{queue_id}/{first_offset:020d}-t{term}{OBJECT_SUFFIX}"


def parse_tier_object_name(name: str) -> tuple[str, int, int, int] | None:
    """``(topic, queue id, first offset, term)`` of a :func:`tier_object_name`; None if
    ``name`` is not one."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "objects" or not parts[3].endswith(OBJECT_SUFFIX):
        return None
    first, sep, term = parts[3][: -len(OBJECT_SUFFIX)].partition("-t")
    if not sep or not first.isdigit() or not term.isdigit() or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2]), int(first), int(term)


class ObjectBuilder:
    """Builds one object of queue ``(topic, queue_id)`` from ``first_offset`` on.

    The caller writes the bytes it is given, in order: :meth:`header`, then what
    each :meth:`add_block` returns, then what :meth:`finish` returns. Memory is
    one block: the object's bytes are never held whole.
    """

    def __init__(self, topic: str, queue_id: int, first_offset: int) -> None:
        """An empty object; its first block will start at ``first_offset``."""
        self.topic = topic
        self.queue_id = queue_id
        self.first_offset = first_offset
        self.end_offset = first_offset
        self.size_bytes = 0
        self._crc = 0
        self._blocks: list[BlockInfo] = []

    def _emit(self, data: bytes) -> bytes:
        self._crc = crc32c.crc32c(data, self._crc)
        self.size_bytes += len(data)
        return data

    def header(self) -> bytes:
        """The object's first bytes."""
        if self.size_bytes:
            raise ValueError("the header was given already")
        return self._emit(HEADER.pack(OBJECT_MAGIC, OBJECT_VERSION, 0))

    def add_block(
        self, store_timestamps_ms: Sequence[int], items: Sequence[bytes | memoryview]
    ) -> bytes:
        """The bytes of a block of the next ``len(store_timestamps_ms)`` messages, stored
        at those times: ``items`` are their record arrays, in order, as parts that
        each hold one or more whole arrays (``protocol.records.pack_record`` per
        message, or runs cut from a batch at once); the caller vouches that the
        parts hold one array per store time (a reader checks the count)."""
        count = len(store_timestamps_ms)
        if not count or not items or len(items) > count:
            raise ValueError("a block needs one store time per record, and at least one record")
        if not self.size_bytes:
            raise ValueError("write the header first")
        head = _COUNT.pack(count) + struct.pack(_STORE_TIMES.format(count), *store_timestamps_ms)
        # One copy of the records: the batch's parts are joined once, after the head.
        data = b"".join((head, *packed_batch_parts(items, count, store_timestamps_ms[0])))
        self._blocks.append(
            BlockInfo(
                self.end_offset,
                count,
                self.size_bytes,
                len(data),
                crc32c.crc32c(head),
                min(store_timestamps_ms),
                max(store_timestamps_ms),
            )
        )
        self.end_offset += count
        return self._emit(data)

    @property
    def message_count(self) -> int:
        """How many messages the blocks so far hold."""
        return self.end_offset - self.first_offset

    def finish(self, name: str) -> tuple[bytes, ObjectEntry]:
        """The object's last bytes (footer and trailer), and its manifest entry as ``name``."""
        if not self._blocks:
            raise ValueError("an object holds at least one block")
        footer = ObjectFooter(
            self.topic,
            self.queue_id,
            self.first_offset,
            self.end_offset,
            min(block.min_store_timestamp_ms for block in self._blocks),
            max(block.max_store_timestamp_ms for block in self._blocks),
            tuple(self._blocks),
        )
        data = encode_footer(footer)
        tail = data + TRAILER.pack(len(data), crc32c.crc32c(data), OBJECT_MAGIC, OBJECT_VERSION, 0)
        self._emit(tail)
        entry = ObjectEntry(
            name,
            self.first_offset,
            self.end_offset,
            footer.min_store_timestamp_ms,
            footer.max_store_timestamp_ms,
            self.size_bytes,
            self._crc,
        )
        return tail, entry


def encode_footer(footer: ObjectFooter) -> bytes:
    """The msgpack map of a footer (without the trailer)."""
    packed: bytes = msgpack.packb(
        {
            "topic": footer.topic,
            "queue_id": footer.queue_id,
            "first_offset": footer.first_offset,
            "end_offset": footer.end_offset,
            "min_store_timestamp_ms": footer.min_store_timestamp_ms,
            "max_store_timestamp_ms": footer.max_store_timestamp_ms,
            "block_fields": list(BlockInfo.__dataclass_fields__),
            "blocks": [
                [
                    b.first_offset,
                    b.count,
                    b.position,
                    b.length,
                    b.crc32c,
                    b.min_store_timestamp_ms,
                    b.max_store_timestamp_ms,
                ]
                for b in footer.blocks
            ],
        },
        use_bin_type=True,
    )
    return packed


# ------------------------------------------------------------------ reading
def footer_length(trailer: bytes, name: str) -> int:
    """The footer's length from an object's last :data:`TRAILER_BYTES` bytes."""
    if len(trailer) != TRAILER_BYTES:
        raise ObjectCorrupted(f"object {name}: truncated ({len(trailer)} trailer bytes)")
    length, _crc, magic, version, _reserved = TRAILER.unpack(trailer)
    if magic != OBJECT_MAGIC:
        raise ObjectCorrupted(f"object {name}: not a message object (bad trailer magic)")
    if version != OBJECT_VERSION:
        raise ObjectCorrupted(f"object {name}: unknown object version {version}")
    return int(length)


def decode_footer(tail: bytes, name: str, size_bytes: int) -> ObjectFooter:
    """The footer of the object ``name`` of ``size_bytes`` bytes from its last bytes
    (at least footer + trailer); raises :class:`ObjectCorrupted` naming the object."""
    length = footer_length(tail[-TRAILER_BYTES:], name)
    _length, crc, _magic, _version, _reserved = TRAILER.unpack(tail[-TRAILER_BYTES:])
    if length + TRAILER_BYTES + HEADER.size > size_bytes or length + TRAILER_BYTES > len(tail):
        raise ObjectCorrupted(f"object {name}: footer length {length} exceeds the object")
    data = tail[-TRAILER_BYTES - length : -TRAILER_BYTES]
    if crc32c.crc32c(data) != crc:
        raise ObjectCorrupted(
            f"object {name}: footer checksum mismatch at byte {size_bytes - TRAILER_BYTES - length}"
        )
    try:
        footer = msgpack.unpackb(data, raw=False, strict_map_key=True)
        blocks = tuple(BlockInfo(*(int(v) for v in block)) for block in footer["blocks"])
        result = ObjectFooter(
            str(footer["topic"]),
            int(footer["queue_id"]),
            int(footer["first_offset"]),
            int(footer["end_offset"]),
            int(footer["min_store_timestamp_ms"]),
            int(footer["max_store_timestamp_ms"]),
            blocks,
        )
    except (ValueError, TypeError, KeyError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise ObjectCorrupted(f"object {name}: footer is not a valid index: {exc}") from exc
    offset = result.first_offset
    for block in blocks:
        if block.first_offset != offset or block.count < 1:
            raise ObjectCorrupted(f"object {name}: blocks do not cover offset {offset}")
        offset = block.end_offset
    if offset != result.end_offset:
        raise ObjectCorrupted(f"object {name}: blocks end at {offset}, not {result.end_offset}")
    return result


class BlockColumns(NamedTuple):
    """A decoded block: its first offset, store times and records as columns
    (``protocol.records.RecordColumns``: the message type as its wire int)."""

    first_offset: int
    store_timestamps_ms: tuple[int, ...]
    columns: RecordColumns


def decode_block(data: bytes, block: BlockInfo, name: str) -> BlockColumns:
    """The messages of ``block`` from its bytes; raises :class:`ObjectCorrupted` naming
    the object and the block's first offset if the bytes are not that block.

    The block's head (count and store times) is checked against the footer's
    CRC32C, its record batch against the batch's own CRC32C: every byte once.
    """
    where = f"object {name}, block at offset {block.first_offset}"
    head_bytes = _COUNT.size + 8 * block.count
    if len(data) != block.length or len(data) < head_bytes:
        raise ObjectCorrupted(f"{where}: {len(data)} bytes, the index says {block.length}")
    view = memoryview(data)
    if crc32c.crc32c(view[:head_bytes]) != block.crc32c:
        raise ObjectCorrupted(f"{where}: checksum mismatch")
    (count,) = _COUNT.unpack_from(view)
    if count != block.count:
        raise ObjectCorrupted(f"{where}: holds {count} messages, the index says {block.count}")
    times: tuple[int, ...] = struct.unpack_from(_STORE_TIMES.format(count), view, _COUNT.size)
    batch = view[head_bytes:]
    try:
        decoded = decode_columns(batch)
        if decoded is not None:
            columns = decoded[1]
        else:
            columns = _columns_of(decode_batch(bytes(batch)).records)
    except RecordCorrupted as exc:
        raise ObjectCorrupted(f"{where}: {exc}") from exc
    if len(columns[0]) != count:
        raise ObjectCorrupted(f"{where}: holds {len(columns[0])} records, not {count}")
    return BlockColumns(block.first_offset, times, columns)


def _columns_of(records: Sequence[MessageRecord]) -> RecordColumns:
    """Records as columns, the message type as its wire int."""
    columns: list[tuple[object, ...]] = [tuple(column) for column in zip(*records, strict=True)]
    kind = MessageRecord._fields.index("message_type")
    columns[kind] = tuple(int(v) for v in columns[kind])  # type: ignore[call-overload]
    return tuple(columns)


def block_records(block: BlockColumns) -> list[MessageRecord]:
    """The records of a decoded block, in offset order."""
    kind = MessageRecord._fields.index("message_type")
    return [
        MessageRecord._make((*row[:kind], MESSAGE_TYPES[row[kind]], *row[kind + 1 :]))
        for row in zip(*block.columns, strict=True)
    ]


# ------------------------------------------------------------------ manifests
def encode_manifest(manifest: Manifest) -> bytes:
    """The manifest as JSON (UTF-8), with a CRC32C of its content."""
    body = _manifest_body(manifest)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    document = {**body, "checksum": crc32c.crc32c(canonical)}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def _manifest_body(manifest: Manifest) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "format_version": manifest.format_version,
        "name": manifest.name,
        "created_ms": manifest.created_ms,
        "groups": [[g.group_id, g.applied_index] for g in manifest.groups],
        "queues": [
            {
                "topic": q.topic,
                "queue_id": q.queue_id,
                "group_id": q.group_id,
                "first_offset": q.first_offset,
                "end_offset": q.end_offset,
                "min_store_timestamp_ms": q.min_store_timestamp_ms,
                "max_store_timestamp_ms": q.max_store_timestamp_ms,
                "format_version": q.format_version,
                "objects": [
                    {
                        "name": o.name,
                        "first_offset": o.first_offset,
                        "end_offset": o.end_offset,
                        "min_store_timestamp_ms": o.min_store_timestamp_ms,
                        "max_store_timestamp_ms": o.max_store_timestamp_ms,
                        "size_bytes": o.size_bytes,
                        "crc32c": o.crc32c,
                    }
                    for o in q.objects
                ],
            }
            for q in manifest.queues
        ],
    }


def decode_manifest(data: bytes, where: str) -> Manifest:
    """A manifest from its bytes (read at ``where``, named in errors); raises
    :class:`ObjectCorrupted` if it is not an intact manifest of a known version."""
    try:
        document = json.loads(data)
        checksum = document.pop("checksum")
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ObjectCorrupted(f"manifest {where}: not a manifest: {exc}") from exc
    if document.get("format") != MANIFEST_FORMAT:
        raise ObjectCorrupted(f"manifest {where}: not a {MANIFEST_FORMAT} manifest")
    if document.get("format_version") != MANIFEST_VERSION:
        raise ObjectCorrupted(
            f"manifest {where}: unknown format version {document.get('format_version')}"
        )
    if crc32c.crc32c(canonical) != checksum:
        raise ObjectCorrupted(f"manifest {where}: checksum mismatch")
    try:
        queues = [
            QueueManifest(
                str(q["topic"]),
                int(q["queue_id"]),
                int(q["group_id"]),
                int(q["first_offset"]),
                int(q["end_offset"]),
                int(q["min_store_timestamp_ms"]),
                int(q["max_store_timestamp_ms"]),
                [
                    ObjectEntry(
                        str(o["name"]),
                        int(o["first_offset"]),
                        int(o["end_offset"]),
                        int(o["min_store_timestamp_ms"]),
                        int(o["max_store_timestamp_ms"]),
                        int(o["size_bytes"]),
                        int(o["crc32c"]),
                    )
                    for o in q["objects"]
                ],
                int(q["format_version"]),
            )
            for q in document["queues"]
        ]
        groups = [GroupPoint(int(g), int(i)) for g, i in document["groups"]]
        manifest = Manifest(
            str(document["name"]), int(document["created_ms"]), queues, groups, MANIFEST_VERSION
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ObjectCorrupted(f"manifest {where}: a field is missing or invalid: {exc}") from exc
    for queue in queues:
        if queue.format_version != OBJECT_VERSION:
            raise ObjectCorrupted(
                f"manifest {where}: queue {queue.topic}:{queue.queue_id} has objects of "
                f"unknown version {queue.format_version}"
            )
        check_queue(queue, where)
    return manifest


def check_queue(queue: QueueManifest, where: str) -> None:
    """Raise :class:`ObjectCorrupted` unless the queue's objects cover its offsets in order
    without gaps or overlaps."""
    offset = queue.first_offset
    for entry in queue.objects:
        if entry.first_offset != offset or entry.end_offset <= entry.first_offset:
            raise ObjectCorrupted(
                f"manifest {where}: queue {queue.topic}:{queue.queue_id}: object {entry.name} "
                f"does not start at offset {offset}"
            )
        offset = entry.end_offset
    if offset != queue.end_offset:
        raise ObjectCorrupted(
            f"manifest {where}: queue {queue.topic}:{queue.queue_id}: objects end at {offset}, "
            f"not {queue.end_offset}"
        )
