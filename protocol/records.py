"""The message record and the batch format shared by storage and the Spark reader.

A producer's message becomes one :class:`MessageRecord`. Records travel and
rest in batches: the storage node's leader stamps a batch with the store time
and proposes it to the queue's raft group, whose log is the commit log, so a
batch's bytes are written once (in the log) and read back from there.

Batch layout (big-endian)::

    magic   4 bytes  b"R5MB"
    version 1 byte   1
    crc32c  4 bytes  over everything after this field
    store_timestamp_ms 8 bytes (signed)
    count   4 bytes  number of records
    payload          msgpack array of ``count`` record arrays

A record array holds the fields of :class:`MessageRecord` in declaration
order. Evolution: fields are ONLY ADDED AT THE END, with a default; a reader
takes defaults for a missing tail and ignores extra trailing fields written by
a newer version.

PURE.
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import crc32c
import msgpack

from protocol import errors
from protocol.errors import ErrorCode
from protocol.positional import positional
from protocol.vocabulary import MessageType

BATCH_MAGIC = b"R5MB"
BATCH_VERSION = 1
_HEADER = struct.Struct(">4sBIqI")
_CRC_END = 9  # magic + version + crc: the CRC covers every byte after it


class RecordCorrupted(ValueError):
    """Bytes that are not a valid batch: bad magic, version, CRC or field types."""

    code: ErrorCode = errors.DECODE_FAILED


class MessageRecord(NamedTuple):
    """One message as stored.

    ``properties`` are the user properties, kept as sorted (key, value) pairs
    so equal records encode to equal bytes. ``delivery_timestamp_ms`` 0 means
    "deliver at once". ``dead_letter_topic`` / ``dead_letter_message_id`` are
    set only on dead-letter copies and name the original message.

    Immutable. A named tuple rather than a frozen dataclass: records are built
    once per message on every replica's apply and on every read, and a tuple
    is built in one step (a frozen dataclass sets each of its 14 fields through
    ``object.__setattr__``, 8x slower). Its field order IS the wire order of a
    record (see the module docstring): msgpack packs the tuple as the record
    array as it is. Copies with changed fields: ``record._replace(...)``.
    """

    topic: str
    queue_id: int
    message_id: str
    body: bytes
    tag: str = ""
    keys: tuple[str, ...] = ()
    message_group: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    born_timestamp_ms: int = 0
    delivery_timestamp_ms: int = 0
    message_type: MessageType = MessageType.NORMAL
    born_host: str = ""
    dead_letter_topic: str = ""
    dead_letter_message_id: str = ""

    @staticmethod
    def sorted_properties(properties: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The canonical form of a property mapping for the ``properties`` field."""
        return tuple(sorted(properties.items()))

    def property(self, key: str) -> str | None:
        """The user property ``key``, or None when absent."""
        for name, value in self.properties:
            if name == key:
                return value
        return None


_FIELDS = (
    "topic",
    "queue_id",
    "message_id",
    "body",
    "tag",
    "keys",
    "message_group",
    "properties",
    "born_timestamp_ms",
    "delivery_timestamp_ms",
    "message_type",
    "born_host",
    "dead_letter_topic",
    "dead_letter_message_id",
)
_KINDS: tuple[type, ...] = (
    str,
    int,
    str,
    bytes,
    str,
    list,
    str,
    list,
    int,
    int,
    int,
    str,
    str,
    str,
)
_DEFAULT_TAIL: tuple[object, ...] = ("", [], "", [], 0, 0, int(MessageType.NORMAL), "", "", "")
# The fast path's view of a record: the same kinds, with arrays unpacked as tuples.
_TUPLE_KINDS: tuple[type, ...] = tuple(tuple if kind is list else kind for kind in _KINDS)
MESSAGE_TYPES: Mapping[object, MessageType] = {int(kind): kind for kind in MessageType}
"""The message type of a record's wire int (a lookup: several times cheaper than
``MessageType(kind)`` and None instead of an error for an unknown one)."""
_COUNT = struct.Struct(">qI")
_CRC = struct.Struct(">I")
_VERSION_BYTE = bytes([BATCH_VERSION])
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ARRAY_HEADER = msgpack.Packer(use_bin_type=True)


_RECORD_KINDS: tuple[type, ...] = tuple(
    MessageType if name == "message_type" else kind
    for name, kind in zip(_FIELDS, _TUPLE_KINDS, strict=True)
)


def is_canonical(record: MessageRecord) -> bool:
    """Whether ``record`` is exactly what decoding its encoding gives back.

    True when every field has its exact declared type (a bool is not an int,
    a ``str`` subclass is not a ``str``), keys are strings and properties are
    (key, value) string pairs: then ``decode_batch(encode_batch(records, t))``
    equals ``RecordBatch(t, tuple(records))`` field for field, type for type
    (an int msgpack cannot hold fails in ``encode_batch``). A writer that
    encoded such records may use them instead of decoding its own bytes.
    """
    if type(record) is not MessageRecord or tuple(map(type, record)) != _RECORD_KINDS:
        return False
    if not all(type(key) is str for key in record.keys):
        return False
    return all(
        type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is str
        for pair in record.properties
    )


def _unpack_tuples(payload: bytes | memoryview) -> object:
    return msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=False)


def _record_from_wire(data: object) -> MessageRecord:
    if type(data) is not list or len(data) < 4:
        raise RecordCorrupted("a record is not an array of at least 4 fields")
    if len(data) < len(_FIELDS):
        data = data + list(_DEFAULT_TAIL[len(data) - 4 :])
    values = data[: len(_FIELDS)]
    # Exact type checks (a bool is not an int here); the slow path names the culprit.
    if any(type(v) is not k for v, k in zip(values, _KINDS, strict=True)):
        for name, value, kind in zip(_FIELDS, values, _KINDS, strict=True):
            if type(value) is not kind:
                raise RecordCorrupted(f"record field {name} has type {type(value).__name__}")
    (
        topic,
        queue_id,
        message_id,
        body,
        tag,
        keys,
        group,
        props,
        born,
        due,
        kind,
        host,
        dlt,
        dlm,
    ) = values
    if any(type(k) is not str for k in keys):
        raise RecordCorrupted("record keys or properties are not arrays of strings")
    pairs: list[tuple[str, str]] = []
    for pair in props:
        if type(pair) is not list or len(pair) != 2:
            raise RecordCorrupted("a record property is not a [key, value] pair")
        if type(pair[0]) is not str or type(pair[1]) is not str:
            raise RecordCorrupted("a record property pair holds a non-string")
        pairs.append((pair[0], pair[1]))
    message_type = MESSAGE_TYPES.get(kind)
    if message_type is None:
        raise RecordCorrupted(f"unknown message type {kind!r}")
    return MessageRecord(
        topic,
        queue_id,
        message_id,
        body,
        tag,
        tuple(keys),
        group,
        tuple(pairs),
        born,
        due,
        message_type,
        host,
        dlt,
        dlm,
    )


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Records stored together at ``store_timestamp_ms`` (the leader's clock)."""

    store_timestamp_ms: int
    records: tuple[MessageRecord, ...] = field(default_factory=tuple)


def encode_batch(records: Sequence[MessageRecord], store_timestamp_ms: int) -> bytes:
    """The batch bytes of ``records``; deterministic for equal inputs.

    A record is packed as the tuple it is (msgpack packs tuples as arrays and a
    ``MessageType`` as its int): the record array of the module docstring.
    """
    payload: bytes = msgpack.packb(records, use_bin_type=True)
    rest = _COUNT.pack(store_timestamp_ms, len(records)) + payload
    return BATCH_MAGIC + _VERSION_BYTE + _CRC.pack(crc32c.crc32c(rest)) + rest


def pack_records(records: Sequence[MessageRecord]) -> bytes:
    """The msgpack array of ``records``: the payload of a batch, and how an append
    request carries its messages (``protocol.storage_api.AppendRequest.records``)."""
    packed: bytes = msgpack.packb(records, use_bin_type=True)
    return packed


class PackedRecords(NamedTuple):
    """What :func:`unpack_records` read: the records, and the bytes of their arrays
    back to back (``items``) when those may go into a batch as they are, else None."""

    records: tuple[MessageRecord, ...]
    items: bytes | None


def unpack_records(payload: bytes) -> PackedRecords:
    """The records of a record array (:func:`pack_records`); raises :class:`RecordCorrupted`.

    ``items`` is given when every record is a current-version array whose fields
    all have their exact wire types: a batch whose payload is an array header
    followed by such items decodes (:func:`decode_batch`) to exactly these
    records. Any other valid array (an older record version, say) gives its
    records and no items: its writer re-encodes them.
    """
    count = start = -1
    try:
        count, start = _array_start(payload)
        items = _unpack_tuples(payload)
    except Exception:  # noqa: BLE001 - the exact path below names the error
        items = None
    if type(items) is tuple and len(items) == count:
        records = _records_fast(items)
        if records is not None:
            return PackedRecords(records, payload[start:])
    try:
        exact = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise RecordCorrupted(f"the records are not msgpack: {exc}") from exc
    if not isinstance(exact, list):
        raise RecordCorrupted(f"the records are not an array but a {type(exact).__name__}")
    return PackedRecords(tuple(_record_from_wire(item) for item in exact), None)


def _array_start(payload: bytes | memoryview) -> tuple[int, int]:
    """(item count, offset of the first item) of a msgpack array; ValueError if the
    payload does not start with an array header."""
    first = payload[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, 1
    if first == 0xDC:
        return _U16.unpack_from(payload, 1)[0], 3
    if first == 0xDD:
        return _U32.unpack_from(payload, 1)[0], 5
    raise ValueError("not an array")


def pack_items(items: Sequence[bytes]) -> bytes:
    """The record array whose items are ``items`` (each one record array, as
    :func:`item_bounds` or :func:`pack_record` give them): what
    :func:`pack_records` gives for their records, without encoding them again."""
    header: bytes = _ARRAY_HEADER.pack_array_header(len(items))
    return header + b"".join(items)


def pack_record(record: MessageRecord) -> bytes:
    """One record's array: an item for :func:`pack_items`."""
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    return packed


def item_bounds(data: bytes) -> list[int]:
    """Where each record array of a batch starts and ends, without decoding them.

    ``data[bounds[i]:bounds[i + 1]]`` is the msgpack array of record ``i``
    (``count + 1`` offsets into ``data``). The batch's checksum is verified
    as by :func:`decode_batch`; the items themselves are only delimited, not
    checked: whoever decodes one checks it. Raises :class:`RecordCorrupted`.
    """
    _store_timestamp_ms, count = _check_batch(data)
    unpacker = msgpack.Unpacker()
    unpacker.feed(memoryview(data)[_HEADER.size :])
    try:
        if unpacker.read_array_header() != count:
            raise RecordCorrupted(f"batch header says {count} records, payload disagrees")
        bounds = [_HEADER.size + unpacker.tell()]
        for _ in range(count):
            unpacker.skip()
            bounds.append(_HEADER.size + unpacker.tell())
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise RecordCorrupted(f"batch payload is not msgpack: {exc}") from exc
    if bounds[-1] != len(data):
        raise RecordCorrupted("batch payload has bytes after its records")
    return bounds


def items_span(data: bytes | memoryview) -> tuple[int, int]:
    """(record count, where the first record array starts) of a batch: its arrays are
    ``data[start:]``, in order, not delimited one by one. The batch's checksum is
    verified as by :func:`decode_batch`; raises :class:`RecordCorrupted`."""
    _store_timestamp_ms, count = _check_batch(data)
    try:
        header_count, header_bytes = _array_start(memoryview(data)[_HEADER.size :])
    except (ValueError, IndexError, struct.error) as exc:
        raise RecordCorrupted(f"batch payload is not a msgpack array: {exc}") from exc
    if header_count != count:
        raise RecordCorrupted(f"batch header says {count} records, payload disagrees")
    return count, _HEADER.size + header_bytes


def encode_packed_batch(items: Sequence[bytes], count: int, store_timestamp_ms: int) -> bytes:
    """The batch of ``count`` records whose arrays are ``items`` joined (each part the
    ``items`` of an :func:`unpack_records`): what :func:`encode_batch` gives for
    the records, up to how msgpack chose to write each value."""
    header: bytes = _ARRAY_HEADER.pack_array_header(count)
    rest = b"".join((_COUNT.pack(store_timestamp_ms, count), header, *items))
    return BATCH_MAGIC + _VERSION_BYTE + _CRC.pack(crc32c.crc32c(rest)) + rest


def array_bounds(data: bytes | memoryview, count: int) -> list[int]:
    """Where each of the ``count`` record arrays joined in ``data`` (a run cut out of a
    batch: :func:`items_span`) starts and ends: ``count + 1`` offsets from 0 to
    ``len(data)``, the arrays only delimited, not checked. Raises
    :class:`RecordCorrupted` unless ``data`` is exactly ``count`` msgpack values."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(data)
    bounds = [0]
    try:
        for _ in range(count):
            unpacker.skip()
            bounds.append(unpacker.tell())
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise RecordCorrupted(f"the records are not {count} msgpack arrays: {exc}") from exc
    if bounds[-1] != len(data):
        raise RecordCorrupted(f"the records hold bytes after their {count} arrays")
    return bounds


def packed_batch_parts(
    items: Sequence[bytes | memoryview], count: int, store_timestamp_ms: int
) -> list[bytes | memoryview]:
    """:func:`encode_packed_batch`'s bytes as parts (its header, then ``items`` as given),
    the checksum taken part by part: nothing is copied, for batches too large to join
    twice (a message object's blocks). Joined, they are exactly those bytes."""
    rest_head = _COUNT.pack(store_timestamp_ms, count) + _ARRAY_HEADER.pack_array_header(count)
    crc = crc32c.crc32c(rest_head)
    for item in items:
        crc = crc32c.crc32c(item, crc)
    return [BATCH_MAGIC + _VERSION_BYTE + _CRC.pack(crc) + rest_head, *items]


def decode_batch(data: bytes) -> RecordBatch:
    """Read a batch written by :func:`encode_batch`; raises :class:`RecordCorrupted`."""
    store_timestamp_ms, count = _check_batch(data)
    try:
        items = _unpack_tuples(data[_HEADER.size :])
    except Exception:  # noqa: BLE001 - the exact path below names the error
        items = None
    if type(items) is tuple and len(items) == count:
        records = _records_fast(items)
        if records is not None:
            return RecordBatch(store_timestamp_ms, records)
    return RecordBatch(store_timestamp_ms, _records_exact(data, count))


def _records_exact(data: bytes, count: int) -> tuple[MessageRecord, ...]:
    """The records of a checked batch, every field checked one by one: the path that
    names what is wrong (the fast path gives up on anything unusual and leaves it here)."""
    try:
        items = msgpack.unpackb(data[_HEADER.size :], raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise RecordCorrupted(f"batch payload is not msgpack: {exc}") from exc
    if not isinstance(items, list) or len(items) != count:
        raise RecordCorrupted(f"batch header says {count} records, payload disagrees")
    return tuple(_record_from_wire(item) for item in items)


def _arrays_ok(keys: object, props: object) -> bool:
    """Whether a record's keys (a tuple) are strings and its properties (a tuple) are
    pairs of strings, as the fast paths unpack them (arrays as tuples)."""
    if keys and not _STR_ONLY.issuperset(map(type, keys)):  # type: ignore[call-overload]
        return False
    for pair in props:  # type: ignore[attr-defined]
        if type(pair) is not tuple or len(pair) != 2:
            return False
        if type(pair[0]) is not str or type(pair[1]) is not str:
            return False
    return True


def _records_fast(items: tuple[object, ...]) -> tuple[MessageRecord, ...] | None:
    """The records of a payload unpacked with arrays as tuples, if every record is a
    current-version array whose fields all have their exact wire types; else None.

    Accepts exactly what :func:`_record_from_wire` accepts with 14 fields and
    builds equal records (keys and property pairs arrive as the tuples the
    record holds); None sends the batch to that exact path. Checked column by
    column (:func:`_columns_fast`).
    """
    if not items:
        return ()
    columns = _columns_fast(items)
    if columns is None:
        return None
    kinds = map(MESSAGE_TYPES.__getitem__, columns[10])
    return tuple(map(_new_record, zip(*columns[:10], kinds, *columns[11:], strict=True)))


_new_record = positional(MessageRecord)


RecordColumns = tuple[tuple[object, ...], ...]
"""A batch's records field by field: column ``i`` holds field ``i`` of every record, in
record order (``_FIELDS`` order, arrays as tuples, the message type as its wire int)."""

_COLUMN_KINDS: tuple[frozenset[type], ...] = tuple(frozenset([kind]) for kind in _TUPLE_KINDS)
# Columns usually of one value across a batch (not ids, bodies or times), whose type an
# equality with a value of that type proves (str and arrays: not ints, as True == 1).
_UNIFORM_COLUMNS: tuple[bool, ...] = tuple(
    kind in (str, tuple) and name != "message_id"
    for name, kind in zip(_FIELDS, _TUPLE_KINDS, strict=True)
)
_TUPLE_ONLY = frozenset([tuple])
_STR_ONLY = frozenset([str])
_CURRENT_WIDTH = frozenset([len(_FIELDS)])


def decode_columns(data: bytes | memoryview) -> tuple[int, RecordColumns] | None:
    """A batch's store time and its records as columns (:data:`RecordColumns`), if
    :func:`decode_batch` takes its fast path for every record; else None (decode it).

    The checksum is verified as by :func:`decode_batch` (RecordCorrupted). The
    values are exactly the fields of the records :func:`decode_batch` gives,
    but for the message type, left as its wire int. The checks run column by
    column, so a batch costs a few passes in C rather than a loop per record.
    """
    store_timestamp_ms, items = _checked_items(data)
    columns = None if items is None else _columns_fast(items)
    return None if columns is None else (store_timestamp_ms, columns)


def _checked_items(data: bytes | memoryview) -> tuple[int, tuple[Any, ...] | None]:
    """A batch's store time (its checksum verified, else RecordCorrupted) and its
    record arrays unpacked with arrays as tuples; None for the arrays when they do
    not unpack as ``count`` (at least one) items (decode_batch names the error)."""
    store_timestamp_ms, count = _check_batch(data)
    try:
        items = _unpack_tuples(data[_HEADER.size :])
    except Exception:  # noqa: BLE001 - decode_batch names the error
        return store_timestamp_ms, None
    if type(items) is not tuple or len(items) != count or not count:
        return store_timestamp_ms, None
    return store_timestamp_ms, items


def _columns_fast(items: tuple[Any, ...]) -> RecordColumns | None:
    """The columns of records unpacked with arrays as tuples (at least one), if every
    record is a current-version array whose fields all have their exact wire
    types and a known message type; else None."""
    if len(items) == 1:  # one record (an append to one of many queues): its row at once
        item = items[0]
        if type(item) is not tuple or tuple(map(type, item)) != _TUPLE_KINDS:
            return None
        if (item[5] or item[7]) and not _arrays_ok(item[5], item[7]):
            return None
        if item[10] not in MESSAGE_TYPES:
            return None
        return tuple(zip(item))
    if not _TUPLE_ONLY.issuperset(map(type, items)) or set(map(len, items)) != _CURRENT_WIDTH:
        return None
    columns = tuple(zip(*items, strict=True))
    count = len(items)
    for column, kinds, uniform in zip(columns, _COLUMN_KINDS, _UNIFORM_COLUMNS, strict=True):
        # A str equals only a str; a tuple of strings or pairs (checked below) only such
        # a tuple, or a tuple subclass (msgpack's ExtType, whose int code no string or
        # pair equals). So a column all equal to a first value of its type is of its
        # type: mostly one pass of identity checks (an empty tag, group or tuple is one
        # object).
        if uniform and type(column[0]) in kinds and column.count(column[0]) == count:
            continue
        if not kinds.issuperset(map(type, column)):
            return None
    for keys, props in zip(columns[5], columns[7], strict=True):
        if (keys or props) and not _arrays_ok(keys, props):
            return None
    if not MESSAGE_TYPES.keys() >= set(columns[10]):
        return None
    return columns


FilterColumns = tuple[
    tuple[str, ...], tuple[tuple[str, ...], ...], tuple[tuple[tuple[str, str], ...], ...]
]
"""What a property filter sees of a batch's records: their tags, keys and properties
(three columns, in record order)."""

_TAG = _FIELDS.index("tag")
_KEYS = _FIELDS.index("keys")
_PROPERTIES = _FIELDS.index("properties")
_PAIR_WIDTH = frozenset([2])


def decode_filter_columns(data: bytes | memoryview) -> FilterColumns | None:
    """A batch's tags, keys and properties (:data:`FilterColumns`), if every record is
    a current-version array whose tag, keys and properties have their exact wire
    types; else None (decode the records one by one, which names a fault).

    The checksum is verified as by :func:`decode_batch` (RecordCorrupted). Only
    these three fields are taken and checked, in a few passes in C (no record
    built, no per-record Python loop): a property filter's input, read for
    every message a filter looks at, most of which it never delivers.
    """
    _store_timestamp_ms, items = _checked_items(data)
    if items is None:
        return None
    if not _TUPLE_ONLY.issuperset(map(type, items)) or set(map(len, items)) != _CURRENT_WIDTH:
        return None
    tags = tuple(map(operator.itemgetter(_TAG), items))
    keys = tuple(map(operator.itemgetter(_KEYS), items))
    properties = tuple(map(operator.itemgetter(_PROPERTIES), items))
    if not _STR_ONLY.issuperset(map(type, tags)):
        return None
    if not _TUPLE_ONLY.issuperset(map(type, keys)) or not _TUPLE_ONLY.issuperset(
        map(type, properties)
    ):
        return None
    if not _STR_ONLY.issuperset(map(type, itertools.chain.from_iterable(keys))):
        return None
    pairs = tuple(itertools.chain.from_iterable(properties))
    if pairs and (
        not _TUPLE_ONLY.issuperset(map(type, pairs))
        or set(map(len, pairs)) != _PAIR_WIDTH
        or not _STR_ONLY.issuperset(map(type, itertools.chain.from_iterable(pairs)))
    ):
        return None
    return tags, keys, properties


def decode_record_at(data: bytes, position: int) -> MessageRecord:
    """The record at ``position`` of a batch, without decoding the others.

    The batch's checksum is verified as by :func:`decode_batch`; the records
    before ``position`` are skipped, not built. Raises :class:`RecordCorrupted`
    (also for a position outside the batch).
    """
    _store_timestamp_ms, count = _check_batch(data)
    if not 0 <= position < count:
        raise RecordCorrupted(f"the batch holds {count} records, not position {position}")
    try:
        item = _item_at(data, count, position, use_list=False)
    except Exception:  # noqa: BLE001 - the exact path below names the error
        item = None
    if item is not None:
        records = _records_fast((item,))
        if records is not None:
            return records[0]
    try:
        item = _item_at(data, count, position, use_list=True)
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise RecordCorrupted(f"batch payload is not msgpack: {exc}") from exc
    return _record_from_wire(item)


def _item_at(data: bytes, count: int, position: int, *, use_list: bool) -> object:
    """The unpacked record array at ``position`` of a checked batch."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=use_list)
    unpacker.feed(data[_HEADER.size :])
    if unpacker.read_array_header() != count:
        raise RecordCorrupted(f"batch header says {count} records, payload disagrees")
    for _ in range(position):
        unpacker.skip()
    return unpacker.unpack()


def _check_batch(data: bytes | memoryview) -> tuple[int, int]:
    """A batch's store time and record count, after its header and checksum are checked."""
    if len(data) < _HEADER.size:
        raise RecordCorrupted(f"a batch needs {_HEADER.size} header bytes, got {len(data)}")
    magic, version, crc, store_timestamp_ms, count = _HEADER.unpack_from(data)
    if magic != BATCH_MAGIC:
        raise RecordCorrupted(f"bad batch magic {magic!r}")
    if version != BATCH_VERSION:
        raise RecordCorrupted(f"unknown batch version {version}")
    rest = memoryview(data)[_CRC_END:]
    if crc32c.crc32c(rest) != crc:
        raise RecordCorrupted("batch CRC mismatch")
    return store_timestamp_ms, count
