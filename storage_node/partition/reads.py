"""Reading a queue entry's message back from the commit log.

A queue entry names ``(log_index, position)``; the storage node fetches the
log entry at ``log_index`` (from its log store, a peer or the tier) and
passes its bytes here. Nothing else is needed: the APPEND entry holds the
whole record batch.

PURE.
"""

from __future__ import annotations

from protocol.records import (
    MessageRecord,
    RecordCorrupted,
    decode_batch,
    decode_record_at,
    item_bounds,
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
    if not 0 <= entry.position < len(records):
        raise CommandCorrupted(
            f"log entry {entry.log_index} holds {len(records)} records, "
            f"not position {entry.position}"
        )
    return view_record(records[entry.position], entry, queue)


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
