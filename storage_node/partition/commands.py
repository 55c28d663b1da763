"""The commands of a partition (queue group) state machine: what a group's raft log holds.

Each command is a frozen dataclass named by an :class:`Op`; :func:`encode`
gives the bytes of a log entry and :func:`decode` reads them back. Every
command carries ``now_ms``, the leader's clock when it proposed the command:
time enters the state machine only this way, so every replica decides
expiry, timer release and dedup eviction alike. The state machine keeps its
clock monotonic (``max`` of all ``now_ms`` seen), so a new leader with a
clock behind the old one cannot move time backwards.

One log entry holds exactly one command: receipt handle generations are log
indexes, so two commands sharing an entry would share a generation.

Wire form: one op byte, then

- ``APPEND``: a record batch (``protocol.records``) whose store timestamp is
  ``now_ms``; the log is the commit log, so this is where message bodies live
  and readers (the storage node, Spark) decode them from here;
- every other op: a msgpack array of the command's fields in declaration
  order (nested handles as arrays, enums as ints, tuples as arrays): the
  positional form of ``protocol.positional``, whose decoder checks every
  value's type.

Evolution: op codes are ONLY ADDED AT THE END of :class:`Op`, never reused;
a command's fields are only added at the end, with a default (an older
array takes the defaults for its missing tail).

PURE.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

import msgpack

from protocol.message_objects import ObjectEntry
from protocol.positional import Encode, ShapeMismatch, plain_decoder, plain_encoder
from protocol.records import (
    FilterColumns,
    MessageRecord,
    RecordColumns,
    RecordCorrupted,
    decode_batch,
    decode_columns,
    decode_filter_columns,
    encode_batch,
    encode_packed_batch,
)
from protocol.storage_api import ReceiptHandle
from protocol.value_types import value_type
from storage_node.errors import BadCommand, CommandCorrupted


class Op(enum.IntEnum):
    """One byte naming a command in the log. ONLY ADD TO THE END; never reuse a number."""

    APPEND = 1
    RECEIVE = 2
    ACK = 3
    CHANGE_INVISIBLE_DURATION = 4
    DEAD_LETTER = 5
    COMMIT_OFFSET = 6
    END_TRANSACTION = 7
    NOTE_TRANSACTION_CHECKS = 8
    TICK = 9
    CANCEL_TIMER = 10
    TRIM_QUEUE = 11
    RELEASE = 12
    FILTERED_RECEIVE = 13
    COMMIT_CONSUMER_OFFSET = 14
    DROP_TOPIC = 15
    RECORD_UPLOAD = 16
    EXPIRE_TIER = 17
    TIER_RECEIVE = 18


class InitialPosition(enum.IntEnum):
    """Where a consumer group that never consumed a queue starts. Append-only."""

    EARLIEST = 0  # the queue's first offset
    LATEST = 1  # the queue's end offset: only messages stored from now on


@value_type
class Append:
    """Store ``records`` (each names its own topic and queue) at ``now_ms``.

    A record already stored with the same (topic, message id) inside the
    dedup window is not stored again; its original outcome is returned.
    """

    op: ClassVar[Op] = Op.APPEND
    now_ms: int
    records: tuple[MessageRecord, ...]


def check_record(record: MessageRecord) -> None:
    """Raise BadCommand if an Append may not store ``record`` (every Append checks
    all its records first, and stores none if one fails)."""
    # The messages are formatted only on failure: this runs for every appended record.
    if record.topic == "":
        raise BadCommand(f"message {record.message_id!r} has no topic")
    if record.message_id == "":
        raise BadCommand(f"a message to {record.topic!r} has no message id")
    if record.queue_id < 0:
        raise BadCommand(f"message {record.message_id!r} has queue id {record.queue_id}")


@dataclass(frozen=True, slots=True)
class Receive:
    """Hand out up to ``max_messages`` of one queue to ``group``, invisible for a while.

    Expired leases are redelivered (attempt + 1) before fresh messages, in
    offset order; one whose next attempt would exceed
    ``max_delivery_attempts`` is dead-lettered instead. A message whose tag
    does not match ``filter_expression`` is skipped for the group for good.
    With ``fifo``, at most one message per message group is in flight and
    nothing after an unacked message of a message group is handed out.

    ``attempt_id`` (optional, chosen by the client per receive and reused when
    it retries a failed call): a receive repeating the group's latest
    attempt id on the queue gets that receive's deliveries again, same
    handles, as long as any of them is still in flight, instead of new
    messages; so a lost response does not leave messages (and, for FIFO, their
    message groups) locked until the invisible time runs out.
    """

    op: ClassVar[Op] = Op.RECEIVE
    now_ms: int
    group: str
    topic: str
    queue_id: int
    max_messages: int
    invisible_duration_ms: int
    max_delivery_attempts: int
    filter_expression: str = "*"
    fifo: bool = False
    initial_position: InitialPosition = InitialPosition.EARLIEST
    attempt_id: str = ""


@dataclass(frozen=True, slots=True)
class FilteredReceive(Receive):
    """A :class:`Receive` with a SQL92 filter's verdicts, decided by the leader before it
    proposed (``partition.property_filter``): only fresh offsets below
    ``evaluated_end`` are handed out, and those in ``unmatched`` are skipped for
    the group for good. The verdicts travel in the log, so no replica reads a
    body to apply. Its own op, so a plain Receive encodes as it always did."""

    op: ClassVar[Op] = Op.FILTERED_RECEIVE
    evaluated_end: int = 0
    unmatched: tuple[int, ...] = ()


class TierRow(NamedTuple):
    """What receive needs of a message only the tier holds (its local entry was trimmed):
    its offset, store time, tag and message group, read from the recorded object."""

    queue_offset: int
    store_timestamp_ms: int
    tag: str = ""
    message_group: str = ""


@dataclass(frozen=True, slots=True)
class TierReceive(FilteredReceive):
    """A :class:`FilteredReceive` of a group whose position is below the queue's local
    first offset: the leader read the messages of ``tier_rows`` (contiguous, in offset
    order, from the group's cursor) from the recorded tier objects before it proposed,
    so every replica grants the same offsets without reading the tier. Its verdicts
    cover exactly those rows (``evaluated_end`` is where they end; ``unmatched`` the
    rows a SQL filter refused). An offset below the local first offset and outside the
    rows stays as it is."""

    op: ClassVar[Op] = Op.TIER_RECEIVE
    tier_rows: tuple[TierRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge deliveries to ``group``; each handle succeeds or fails on its own."""

    op: ClassVar[Op] = Op.ACK
    now_ms: int
    group: str
    handles: tuple[ReceiptHandle, ...]


@dataclass(frozen=True, slots=True)
class Release:
    """Hand deliveries back undelivered: each becomes visible at once, and its attempt
    is not counted (the leader granted it but could not send it, e.g. past the byte
    budget of one answer). A handle no longer current is skipped."""

    op: ClassVar[Op] = Op.RELEASE
    now_ms: int
    group: str
    handles: tuple[ReceiptHandle, ...]


@dataclass(frozen=True, slots=True)
class ChangeInvisibleDuration:
    """Make a delivered message invisible until ``now_ms + invisible_duration_ms``.

    Grants a new generation (the old handle goes stale); the attempt count is
    unchanged. 0 makes it visible at once (a negative acknowledgement).
    """

    op: ClassVar[Op] = Op.CHANGE_INVISIBLE_DURATION
    now_ms: int
    group: str
    handle: ReceiptHandle
    invisible_duration_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Move a delivered (in-flight) message to the group's dead-letter queue now."""

    op: ClassVar[Op] = Op.DEAD_LETTER
    now_ms: int
    group: str
    handle: ReceiptHandle


@dataclass(frozen=True, slots=True)
class CommitOffset:
    """An operator's reset of ``group``'s position in a queue (``group reset-offset``).

    Every offset below ``offset`` counts as consumed and none at or above it
    does; leases of the group on the queue are dropped (their handles turn
    invalid). The offset is clamped to the queue's [first, end]. A consumer's
    own commit is :class:`CommitConsumerOffset`, which keeps the leases.
    """

    op: ClassVar[Op] = Op.COMMIT_OFFSET
    now_ms: int
    group: str
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class CommitConsumerOffset:
    """A consumer's commit of ``group``'s position in a queue (RocketMQ's commitOffset:
    gRPC UpdateOffset, remoting UPDATE_CONSUMER_OFFSET, a pull's commit flag).

    Pop consumption of the group resumes at ``offset`` (clamped to the queue's
    [first, end]): offsets below it that are not in flight count as consumed,
    offsets from it up to where pop had got count as not, offsets past that
    keep their state. Unlike :class:`CommitOffset` (an operator's reset), the
    group's leases are KEPT: an in-flight handle still acks, and an unacked
    message comes back when its invisibility ends.
    """

    op: ClassVar[Op] = Op.COMMIT_CONSUMER_OFFSET
    now_ms: int
    group: str
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class EndTransaction:
    """Commit (the half message becomes visible in its queue) or roll back (dropped)."""

    op: ClassVar[Op] = Op.END_TRANSACTION
    now_ms: int
    topic: str
    transaction_id: str
    commit: bool


@dataclass(frozen=True, slots=True)
class NoteTransactionChecks:
    """Record that a check-back was sent for these half messages.

    Each named half message's check count goes up by one and its last check
    time becomes ``now_ms``; one whose count then exceeds ``check_max`` is
    rolled back (RocketMQ discards a transaction that never resolves).
    """

    op: ClassVar[Op] = Op.NOTE_TRANSACTION_CHECKS
    now_ms: int
    transaction_ids: tuple[str, ...]
    check_max: int


@dataclass(frozen=True, slots=True)
class Tick:
    """Only let time pass: releases due timers (and evicts old dedup entries).

    The leader proposes one when ``next_timer_due_ms()`` has passed and no other
    command carried the time forward.
    """

    op: ClassVar[Op] = Op.TICK
    now_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Cancel a held delayed message (RocketMQ RecallMessage) before it is due."""

    op: ClassVar[Op] = Op.CANCEL_TIMER
    now_ms: int
    topic: str
    message_id: str


@dataclass(frozen=True, slots=True)
class TrimQueue:
    """Retention: drop a queue's messages below ``before_offset`` (clamped to the queue).

    Their offsets are never reused and reads of them fail; consumer groups
    positioned below move up, and their leases there are dropped. The leader
    picks the offset (e.g. from store timestamps and the topic's retention).
    """

    op: ClassVar[Op] = Op.TRIM_QUEUE
    now_ms: int
    topic: str
    queue_id: int
    before_offset: int


@dataclass(frozen=True, slots=True)
class DropTopic:
    """Topic deletion: forget everything this group keeps of ``topic``.

    Its queues (messages and offsets), every consumer group's position and
    leases in them, its held timers and its unresolved half messages go; the
    log entries they named are no longer referenced, so the truncate floor
    passes them. A topic created again with the same name starts empty, at
    offset 0 (the old receipt handles stay invalid: a new lease's generation
    is a later log index). The leader proposes it once the topic is gone from
    the nameserver.
    """

    op: ClassVar[Op] = Op.DROP_TOPIC
    now_ms: int
    topic: str


@dataclass(frozen=True, slots=True)
class RecordUpload:
    """The tier holds a queue's offsets ``[object.first_offset, object.end_offset)`` in
    ``object`` (``protocol.message_objects``: its name, size, CRC32C of all its bytes
    and store time range): the upload point moves to its end. Refused (changing
    nothing) unless it starts where the queue's recorded objects end
    (``partition.tier``)."""

    op: ClassVar[Op] = Op.RECORD_UPLOAD
    now_ms: int
    topic: str
    queue_id: int
    object: ObjectEntry


@dataclass(frozen=True, slots=True)
class ExpireTier:
    """Tier retention: forget a queue's recorded objects that end at or below
    ``before_offset`` (the leader then deletes their bytes). The upload point stays."""

    op: ClassVar[Op] = Op.EXPIRE_TIER
    now_ms: int
    topic: str
    queue_id: int
    before_offset: int


Command = (
    Append
    | Receive
    | Ack
    | ChangeInvisibleDuration
    | DeadLetter
    | CommitOffset
    | EndTransaction
    | NoteTransactionChecks
    | Tick
    | CancelTimer
    | TrimQueue
    | Release
    | FilteredReceive
    | CommitConsumerOffset
    | DropTopic
    | RecordUpload
    | ExpireTier
    | TierReceive
)

_BY_OP: dict[Op, type[Any]] = {
    cls.op: cls
    for cls in (
        Append,
        Receive,
        Ack,
        ChangeInvisibleDuration,
        DeadLetter,
        CommitOffset,
        EndTransaction,
        NoteTransactionChecks,
        Tick,
        CancelTimer,
        TrimQueue,
        Release,
        FilteredReceive,
        CommitConsumerOffset,
        DropTopic,
        RecordUpload,
        ExpireTier,
        TierReceive,
    )
}


COMMAND_TYPES: tuple[type[Any], ...] = tuple(_BY_OP.values())
"""Every command class, for isinstance checks."""


def encode(command: Command) -> bytes:
    """The log entry bytes of ``command``; equal commands give equal bytes."""
    if isinstance(command, Append):
        return _APPEND_BYTE + encode_batch(command.records, command.now_ms)
    # The positional form: msgpack packs tuples (the ReceiptHandle named tuple too)
    # as arrays and an IntEnum as its int.
    to_plain = _ENCODERS.get(type(command))
    if to_plain is None:  # a subclass of a command
        to_plain = _encoder_of(type(command))
    payload: bytes = msgpack.packb(to_plain(command), use_bin_type=True)
    return _OP_BYTES[command.op] + payload


def encode_packed(command: Append, items: Sequence[bytes]) -> bytes:
    """The log entry of ``command`` whose records' arrays are already packed: ``items``
    joined (each the ``items`` of a ``protocol.records.unpack_records`` of some of
    the records, in order). Decodes to ``command`` as :func:`encode` would."""
    return _APPEND_BYTE + encode_packed_batch(items, len(command.records), command.now_ms)


_APPEND_BYTE = bytes([Op.APPEND])
_OP_BYTES = {op: bytes([op]) for op in Op}


def _encoder_of(cls: type[Any]) -> Encode:
    """The positional encoder of a command class (every command has a field: ``now_ms``)."""
    to_plain = plain_encoder(cls)
    assert to_plain is not None, "a command is a dataclass: never its own plain form"
    return to_plain


# Append has a wire form of its own (a record batch).
_ENCODERS = {cls: _encoder_of(cls) for cls in COMMAND_TYPES if cls is not Append}
_DECODERS = {op: plain_decoder(cls) for op, cls in _BY_OP.items() if cls is not Append}


def decode(data: bytes) -> Command:
    """The command in a log entry; raises :class:`CommandCorrupted` for bad bytes."""
    if not data:
        raise CommandCorrupted("an empty entry is not a command")
    try:
        op = Op(data[0])
    except ValueError as exc:
        raise CommandCorrupted(f"unknown op code {data[0]}") from exc
    if op is Op.APPEND:
        try:
            batch = decode_batch(data[1:])
        except RecordCorrupted as exc:
            raise CommandCorrupted(f"append batch: {exc}") from exc
        return Append(batch.store_timestamp_ms, batch.records)
    try:
        raw = msgpack.unpackb(data[1:], raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CommandCorrupted(f"{op.name}: payload is not msgpack: {exc}") from exc
    try:
        command: Command = _DECODERS[op](raw)
    except ShapeMismatch as exc:
        raise CommandCorrupted(f"{op.name}: {exc}") from None
    return command


def append_columns(data: bytes) -> tuple[int, RecordColumns] | None:
    """For an APPEND entry whose records decode on the fast path
    (``protocol.records.decode_columns``): its ``now_ms`` and its records as
    columns. None for any other entry, or a corrupt one (:func:`decode` it)."""
    return _append_decoded(data, decode_columns)


def append_filter_columns(data: bytes) -> FilterColumns | None:
    """For an APPEND entry whose records' tags, keys and properties decode on the
    fast path (``protocol.records.decode_filter_columns``): those columns. None
    for any other entry, or a corrupt one (read its records one by one)."""
    return _append_decoded(data, decode_filter_columns)


_Decoded = TypeVar("_Decoded")


def _append_decoded(
    data: bytes, decoder: Callable[[memoryview], _Decoded | None]
) -> _Decoded | None:
    """``decoder`` applied to the record batch of an APPEND entry; None for any other
    entry or a corrupt batch."""
    if not data or data[0] != Op.APPEND:
        return None
    try:
        return decoder(memoryview(data)[1:])
    except RecordCorrupted:
        return None
