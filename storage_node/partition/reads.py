"""Reading a queue entry's message back from the commit log.

A queue entry names ``(log_index, position)``; the storage node fetches the
log entry at ``log_index`` (from its log store, a peer or the tier) and
passes its bytes here. Nothing else is needed: the APPEND entry holds the
whole record batch.

PURE.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence

from protocol.records import (
    MessageRecord,
    RecordCorrupted,
    decode_batch,
    decode_record_at,
    item_bounds,
    items_span,
    pack_record,
)
from storage_node.errors import CommandCorrupted
from storage_node.partition.commands import Op
from storage_node.partition.queues import QueueEntry, QueueId, view_record


def record_at(log_entry: bytes, entry: QueueEntry, queue: QueueId) -> MessageRecord:
    """The message a reader of ``queue`` sees at ``entry``, given the bytes of its log entry.

    Raises ``CommandCorrupted`` if the bytes are not an APPEND entry holding
    that position (the caller passed the wrong entry, or the log is damaged).
    """
    records = append_records(log_entry, entry.log_index)
    _check_position(entry, len(records))
    return view_record(records[entry.position], entry, queue)


def _check_position(entry: QueueEntry, count: int, group_id: int | None = None) -> None:
    """``CommandCorrupted`` unless ``entry``'s position is one of ``count`` records."""
    if not 0 <= entry.position < count:
        of_group = "" if group_id is None else f" of group {group_id}"
        raise CommandCorrupted(
            f"log entry {entry.log_index}{of_group} holds {count} records, "
            f"not position {entry.position}"
        )


def append_records(data: bytes, log_index: int) -> tuple[MessageRecord, ...]:
    """Every record of the APPEND entry ``data`` at ``log_index``; ``CommandCorrupted``
    if the bytes are not one."""
    if not data or data[0] != Op.APPEND:
        raise CommandCorrupted(f"log entry {log_index} is not an APPEND entry")
    try:
        return decode_batch(data[1:]).records
    except RecordCorrupted as exc:
        raise CommandCorrupted(f"log entry {log_index}: {exc}") from exc


def append_record_at(data: bytes, log_index: int, position: int, group_id: int) -> MessageRecord:
    """The record at ``position`` of the APPEND entry ``data`` (of group ``group_id``),
    the others skipped; ``CommandCorrupted`` if the bytes do not hold it."""
    if not data or data[0] != Op.APPEND:
        raise CommandCorrupted(f"log entry {log_index} is not an APPEND entry")
    try:
        return decode_record_at(data[1:], position)
    except RecordCorrupted as exc:
        raise CommandCorrupted(f"log entry {log_index} of group {group_id}: {exc}") from exc


def append_item_bounds(data: bytes, log_index: int) -> list[int]:
    """Where each record array of the APPEND entry ``data`` starts and ends, as offsets
    into ``data`` (``protocol.records.item_bounds``); ``CommandCorrupted`` if the
    bytes are not an APPEND entry."""
    if not data or data[0] != Op.APPEND:
        raise CommandCorrupted(f"log entry {log_index} is not an APPEND entry")
    try:
        return [1 + bound for bound in item_bounds(data[1:])]
    except RecordCorrupted as exc:
        raise CommandCorrupted(f"log entry {log_index}: {exc}") from exc


EntryReader = Callable[[int], bytes]
"""A group's log entry bytes by log index (the node's WAL, a peer or the tier)."""

RECORD_OVERHEAD_BYTES = 256
"""What a record costs on the wire beside its body, properties and keys (an estimate)."""


def records_of(
    read_entry: EntryReader, group_id: int, queue: QueueId, entries: Sequence[QueueEntry]
) -> list[MessageRecord]:
    """The records a reader of ``queue`` sees at ``entries`` (of group ``group_id``);
    each log entry is read and decoded once.

    An entry that only one of them names gives just that record (a
    released timer names one record of a batch appended long before:
    decoding the whole batch for it multiplied the read cost by its size).
    """
    named = collections.Counter(entry.log_index for entry in entries)
    batches: dict[int, tuple[MessageRecord, ...]] = {}
    records = []
    for entry in entries:
        if named[entry.log_index] == 1:
            data = read_entry(entry.log_index)
            record = append_record_at(data, entry.log_index, entry.position, group_id)
            records.append(view_record(record, entry, queue))
            continue
        batch = batches.get(entry.log_index)
        if batch is None:
            batch = batches[entry.log_index] = append_records(
                read_entry(entry.log_index), entry.log_index
            )
        _check_position(entry, len(batch), group_id)
        records.append(view_record(batch[entry.position], entry, queue))
    return records


def record_items_of(
    read_entry: EntryReader, group_id: int, queue: QueueId, entries: Sequence[QueueEntry]
) -> list[bytes]:
    """The record arrays of :func:`records_of`, cut out of their log entries' bytes
    (each entry read and delimited once), not decoded and encoded again: a
    dead-letter copy alone is decoded, to be presented in its dead-letter
    queue (``view_record``)."""
    read: dict[int, tuple[bytes, list[int]]] = {}
    items = []
    for entry in entries:
        if entry.dead_letter:
            items.append(pack_record(records_of(read_entry, group_id, queue, [entry])[0]))
            continue
        known = read.get(entry.log_index)
        if known is None:
            data = read_entry(entry.log_index)
            known = read[entry.log_index] = (data, append_item_bounds(data, entry.log_index))
        data, bounds = known
        _check_position(entry, len(bounds) - 1, group_id)
        items.append(data[bounds[entry.position] : bounds[entry.position + 1]])
    return items


def record_runs_of(
    read_entry: EntryReader, group_id: int, queue: QueueId, entries: Sequence[QueueEntry]
) -> list[tuple[int, bytes | memoryview]]:
    """The record arrays of :func:`record_items_of`, joined into runs: (messages, their
    arrays) for each run of ``entries`` at consecutive positions of one log entry,
    a view of the entry's bytes, not a copy (a run that is its whole entry is not
    even delimited record by record; the entry's batch checksum is verified).
    Joined in order, the runs are the record arrays of ``entries``: what a block
    of a message object holds (``protocol.message_objects.ObjectBuilder.add_block``)."""
    runs: list[tuple[int, bytes | memoryview]] = []
    index, total = 0, len(entries)
    while index < total:
        entry = entries[index]
        if entry.dead_letter:
            runs.append((1, pack_record(records_of(read_entry, group_id, queue, [entry])[0])))
            index += 1
            continue
        log_index, first = entry.log_index, entry.position
        end = index + 1
        while (
            end < total
            and entries[end].log_index == log_index
            and entries[end].position == first + end - index
            and not entries[end].dead_letter
        ):
            end += 1
        count = end - index
        runs.append((count, _run_of(read_entry(log_index), log_index, group_id, first, count)))
        index = end
    return runs


def _run_of(data: bytes, log_index: int, group_id: int, first: int, count: int) -> memoryview:
    """The record arrays at positions ``[first, first + count)`` of the APPEND entry
    ``data``, as one view of it; ``CommandCorrupted`` if the entry does not hold them."""
    if not data or data[0] != Op.APPEND:
        raise CommandCorrupted(f"log entry {log_index} is not an APPEND entry")
    try:
        held, start = items_span(memoryview(data)[1:])
    except RecordCorrupted as exc:
        raise CommandCorrupted(f"log entry {log_index} of group {group_id}: {exc}") from exc
    if first == 0 and count == held:
        return memoryview(data)[1 + start :]
    bounds = append_item_bounds(data, log_index)
    if first + count > held:
        raise CommandCorrupted(
            f"log entry {log_index} of group {group_id} holds {held} records, "
            f"not position {first + count - 1}"
        )
    return memoryview(data)[bounds[first] : bounds[first + count]]


def fitting(sizes: Iterable[int], bytes_max: int) -> int:
    """How many of the messages of ``sizes`` (bytes each), from the first, fit in
    ``bytes_max`` (at least one)."""
    total = 0
    count = 0
    for size in sizes:
        total += size
        if total > bytes_max and count > 0:
            return count
        count += 1
    return count


def record_bytes(record: MessageRecord) -> int:
    """What ``record`` costs in an answer (an estimate: body, properties, keys, overhead)."""
    return (
        len(record.body)
        + sum(len(key) + len(value) for key, value in record.properties)
        + sum(len(key) for key in record.keys)
        + RECORD_OVERHEAD_BYTES
    )
