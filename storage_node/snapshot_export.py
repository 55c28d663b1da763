"""Exporting a raft group's queues as message objects: the storage side of a snapshot.

``rip5 admin snapshot create`` asks the leader of every group for
``storage.export_snapshot``; :func:`export_group` answers it. The point of
the export is fixed first: after the read barrier, every chosen queue's
``[first_offset, end_offset)`` is taken at once, at one applied index, so
the group's queues are exported as of one moment whatever is appended
meanwhile.

Work is split so the node keeps serving:

- on the event loop, a slice at a time (at most :data:`SLICE_MESSAGES`
  messages naming about :data:`SLICE_BYTES` of log entries): the queue
  entries of the slice and where their log entries lie in the WAL segment
  files (the ``LogStore`` is not thread-safe: only its index is read here);
- in a worker thread: reading those ranges of the segment files (its own
  file descriptors), cutting the records out of the entries, building
  blocks and objects (``protocol.message_objects``) and writing them
  through fsspec. The loop awaits the thread and so runs other work
  meanwhile; one slice is in flight per export, so memory is a slice plus
  a block, and at most :data:`EXPORTS_MAX` exports run on a node at once.

Objects are written under the request's URL at
``protocol.message_objects.object_name``; the caller writes the manifest
once every group answered. A failed export leaves objects no manifest
names (``rip5 admin snapshot delete`` removes them).

SHELL (file and network I/O, threads).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from protocol.message_objects import ObjectBuilder, ObjectEntry, QueueManifest, object_name
from protocol.object_store import LocationUnavailable, open_location
from protocol.records import RecordCorrupted, array_bounds
from protocol.storage_api import ExportSnapshotRequest, ExportSnapshotResponse
from storage_node.errors import BadCommand, CommandCorrupted, ExportFailed
from storage_node.partition.queues import QueueEntry, QueueId
from storage_node.partition.reads import EntryReader, record_runs_of
from storage_node.replica import GroupReplica
from storage_node.store.base import EntryFileRange
from storage_node.store.segment_files import read_file_ranges

_log = logging.getLogger(__name__)

SLICE_MESSAGES = 4096
"""The most messages of one slice."""

SLICE_BYTES = 4 << 20
"""About the most log entry bytes read for one slice (at least one entry)."""

EXPORTS_MAX = 2
"""Exports a node runs at once (each holds a slice and a block in memory)."""

_STORE_TIME = operator.attrgetter("store_timestamp_ms")
"""A queue entry's store time (at C speed, over a run)."""

OBJECT_BYTES_MIN = 4096
BLOCK_BYTES_MIN = 1024


def open_filesystem(url: str, storage_options: dict[str, str]) -> tuple[Any, str]:
    """The fsspec filesystem and root path of ``url`` (``protocol.object_store``).

    Raises BadCommand if fsspec cannot open such a URL (an unknown protocol, a
    missing driver such as s3fs) or is not installed here.
    """
    try:
        return open_location(url, storage_options)
    except LocationUnavailable as exc:
        raise BadCommand(str(exc)) from exc


class QueueObjectSink:
    """The objects of one queue, written as its messages arrive (worker-thread side).

    :meth:`add` takes the messages of consecutive queue entries; :meth:`close`
    writes what is pending and gives the objects written; :meth:`abort` closes
    an open object and leaves it unnamed.
    """

    def __init__(
        self,
        fs: Any,
        root: str,
        group_id: int,
        queue: QueueId,
        first_offset: int,
        object_bytes_max: int,
        block_bytes_max: int,
        name_of: Callable[[int], str] | None = None,
    ) -> None:
        """A sink for ``queue`` of ``group_id`` from ``first_offset``, under ``root`` of ``fs``;
        an object from offset ``o`` is named ``name_of(o)`` (default
        ``protocol.message_objects.object_name``)."""
        self.fs = fs
        self.root = root
        self.group_id = group_id
        self.queue = queue
        self.next_offset = first_offset
        self.object_bytes_max = object_bytes_max
        self.block_bytes_max = block_bytes_max
        self.objects: list[ObjectEntry] = []
        self._name_of = name_of or functools.partial(object_name, queue[0], queue[1])
        self.bytes_written = 0
        self._builder: ObjectBuilder | None = None
        self._file: Any = None
        self._name = ""
        self._items: list[bytes | memoryview] = []
        self._times: list[int] = []
        self._pending_bytes = 0

    def add(self, entries: list[QueueEntry], log_entries: dict[int, bytes]) -> None:
        """The messages at ``entries`` (the next offsets), read from ``log_entries``."""
        reader: EntryReader = log_entries.__getitem__
        # The records come as runs (a log entry's consecutive messages, one view of its
        # bytes); a block is cut after the message that fills it, as if they came one
        # by one, but a run is delimited message by message only where a cut falls.
        start = 0
        for count, run in record_runs_of(reader, self.group_id, self.queue, entries):
            self._add_run(entries[start : start + count], memoryview(run))
            start += count

    def _add_run(self, entries: list[QueueEntry], run: memoryview) -> None:
        count = len(entries)
        bounds: list[int] | None = None
        taken = taken_bytes = 0
        while taken < count:
            room = self.block_bytes_max - self._pending_bytes
            if len(run) - taken_bytes < room:
                take, end_byte = count - taken, len(run)
            else:  # the block fills inside the run: at the message reaching its size
                if bounds is None:
                    bounds = _array_bounds(run, count, self.group_id, self.queue)
                take = bisect.bisect_left(bounds, taken_bytes + room, taken + 1) - taken
                end_byte = bounds[taken + take]
            self._items.append(run[taken_bytes:end_byte])
            self._times.extend(map(_STORE_TIME, entries[taken : taken + take]))
            self._pending_bytes += end_byte - taken_bytes
            taken, taken_bytes = taken + take, end_byte
            if self._pending_bytes >= self.block_bytes_max:
                self._write_block()

    def close(self) -> list[ObjectEntry]:
        """Write the pending messages and finish the open object; the objects written."""
        if self._items:
            self._write_block()
        self._finish_object()
        return self.objects

    def abort(self) -> None:
        """Close the open object unfinished (it stays where it is, unnamed by any manifest)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write_block(self) -> None:
        if self._builder is None:
            self._builder = ObjectBuilder(self.queue[0], self.queue[1], self.next_offset)
            self._name = self._name_of(self.next_offset)
            path = f"{self.root}/{self._name}"
            self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
            self._file = self.fs.open(path, "wb")
            self._write(self._builder.header())
        self._write(self._builder.add_block(self._times, self._items))
        self.next_offset += len(self._times)
        self._items, self._times, self._pending_bytes = [], [], 0
        if self._builder.size_bytes >= self.object_bytes_max:
            self._finish_object()

    def _finish_object(self) -> None:
        if self._builder is None:
            return
        tail, entry = self._builder.finish(self._name)
        self._write(tail)
        self._file.close()
        self._file = None
        self._builder = None
        self.objects.append(entry)

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self.bytes_written += len(data)


def _array_bounds(run: memoryview, count: int, group_id: int, queue: QueueId) -> list[int]:
    """``protocol.records.array_bounds`` of a run of ``queue``'s records; CommandCorrupted
    naming the group and queue if the run does not hold ``count`` arrays."""
    try:
        return array_bounds(run, count)
    except RecordCorrupted as exc:
        raise CommandCorrupted(f"group {group_id}, queue {queue[0]}:{queue[1]}: {exc}") from exc


async def export_group(
    replica: GroupReplica, request: ExportSnapshotRequest
) -> ExportSnapshotResponse:
    """Export the group's queues (see the module docstring); ``replica`` is the led
    replica after its read barrier."""
    if request.object_bytes_max < OBJECT_BYTES_MIN or request.block_bytes_max < BLOCK_BYTES_MIN:
        raise BadCommand(
            f"object_bytes_max must be at least {OBJECT_BYTES_MIN} and block_bytes_max "
            f"at least {BLOCK_BYTES_MIN}"
        )
    fs, root = await asyncio.to_thread(open_filesystem, request.url, request.storage_options)
    state = replica.state
    topics = set(request.topics)
    # The export's point: every queue's range at one applied index (no await in between).
    applied_index = replica.applied_index
    ranges = [
        (queue, state.first_offset(*queue), state.end_offset(*queue))
        for queue in state.queue_ids()
        if not topics or queue[0] in topics
    ]
    queues = []
    for queue, first, end in ranges:
        sink = QueueObjectSink(
            fs,
            root,
            replica.group_id,
            queue,
            first,
            request.object_bytes_max,
            request.block_bytes_max,
        )
        try:
            offset = first
            while offset < end:
                count = min(end - offset, SLICE_MESSAGES)
                piece = slice_of(replica, state.read(*queue, offset, count))
                await add_slice(replica, sink, piece)
                offset += len(piece.entries)
            objects = await asyncio.to_thread(sink.close)
        except OSError as exc:
            await asyncio.to_thread(sink.abort)
            raise ExportFailed(
                f"group {replica.group_id}: writing queue {queue[0]}:{queue[1]} to "
                f"{request.url}: {exc}"
            ) from exc
        except BaseException:
            await asyncio.to_thread(sink.abort)
            raise
        queues.append(
            QueueManifest(
                queue[0],
                queue[1],
                replica.group_id,
                first,
                end,
                min((o.min_store_timestamp_ms for o in objects), default=-1),
                max((o.max_store_timestamp_ms for o in objects), default=-1),
                objects,
            )
        )
    return ExportSnapshotResponse(replica.group_id, applied_index, queues)


class Slice(NamedTuple):
    """The entries of one slice, and their log entries: bytes held in memory, or where
    they lie in segment files."""

    entries: list[QueueEntry]
    held: dict[int, bytes]
    located: dict[int, EntryFileRange]


def slice_of(replica: GroupReplica, entries: Sequence[QueueEntry]) -> Slice:
    """The first entries of ``entries`` whose log entries hold about :data:`SLICE_BYTES`
    (at least one entry), and where those log entries are (nothing read from disk)."""
    bodies = replica.bodies
    group_id = replica.group_id
    held: dict[int, bytes] = {}
    located: dict[int, EntryFileRange] = {}
    size = 0
    taken = 0
    for entry in entries:
        log_index = entry.log_index
        if log_index not in held and log_index not in located:
            if size >= SLICE_BYTES:
                break
            place = bodies.entry_location(group_id, log_index)
            if place is None:
                held[log_index] = data = bodies.read_entry(group_id, log_index)
                size += len(data)
            else:
                located[log_index] = place
                size += place.length
        taken += 1
    return Slice(list(entries[:taken]), held, located)


def _read_and_add(sink: QueueObjectSink, piece: Slice, close: bool) -> list[ObjectEntry] | None:
    """In the worker thread: read the slice's log entries from their files, give its
    messages to ``sink`` and, if ``close``, close it (its objects; [] if not). None if a
    segment moved meanwhile (its file is gone or holds other bytes)."""
    try:
        read = read_file_ranges(piece.located.items())
        sink.add(piece.entries, {**piece.held, **read})
    except (OSError, ValueError, CommandCorrupted):
        return None
    return sink.close() if close else []


def _add_and_close(
    sink: QueueObjectSink, entries: list[QueueEntry], log_entries: dict[int, bytes], close: bool
) -> list[ObjectEntry]:
    """In the worker thread: ``sink.add`` and, if ``close``, ``sink.close``."""
    sink.add(entries, log_entries)
    return sink.close() if close else []


async def add_slice(
    replica: GroupReplica, sink: QueueObjectSink, piece: Slice, close: bool = False
) -> list[ObjectEntry]:
    """Read the slice's log entries in the worker thread and give its messages to
    ``sink``, then (``close``) close it, in one hop to the thread: the sink's objects
    if closed, else []. If a segment was collected meanwhile (file gone, other bytes
    there), those entries are read through the body store instead, which says whether
    the log still holds them."""
    done = await asyncio.to_thread(_read_and_add, sink, piece, close)
    if done is not None:
        return done
    _log.info("group %d: a segment moved during an export; reading on", replica.group_id)
    bodies = replica.bodies
    again = {i: bodies.read_entry(replica.group_id, i) for i in piece.located}
    return await asyncio.to_thread(
        _add_and_close, sink, piece.entries, {**piece.held, **again}, close
    )
