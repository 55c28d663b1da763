"""``Rip5DataSource``: stored messages as a Spark DataFrame, and DataFrames into a topic.

Register it once per session, then read a snapshot (``rip5 admin snapshot
create``) in place, without a broker::

    spark.dataSource.register(Rip5DataSource)
    df = spark.read.format("rip5").option("topic", "T").load(SNAPSHOT_URL)

``SNAPSHOT_URL`` is the snapshot's folder or fsspec URL (``file://``,
``s3://``; options ``fs.KEY`` are passed to fsspec as storage options, e.g.
``fs.endpoint_url``, ``fs.key``, ``fs.secret``). Columns: :data:`SCHEMA`.

Reading options (all optional; each prunes from the manifest, so what is
pruned is never opened):

- ``topic`` (or ``topics``, comma-separated): only these topics;
- ``queues``: comma-separated queue ids;
- ``offsetFrom`` / ``offsetTo``: queue offsets ``[from, to)``;
- ``timeFrom`` / ``timeTo``: store times ``[from, to)``, as epoch
  milliseconds or ISO-8601 (UTC unless the text names a zone);
- ``columns``: comma-separated column names, the only ones read (or give
  the schema: ``spark.read.format("rip5").schema("body binary")``). Spark
  moves every column a Python source yields into the JVM, and prunes none
  itself: a read of one column of the thirteen is several times faster.

One Spark partition per object (the part of it the options keep), so reads
spread over executors. Inside an object only the blocks the options keep
are read; each block's checksum is verified before it is decoded, and a
corrupt object fails the read with an error naming the object and the
block's first offset, never with wrong rows.

Streaming (``spark_batch.stream``)::

    spark.readStream.format("rip5").option("endpoints", "host:port,...")
      .option("topic", "T").load()

Writing (``spark_batch.writer``)::

    df.write.format("rip5").option("endpoints", "host:port,...").option("topic", "T")
      .mode("append").save()

SHELL (file and network I/O through fsspec).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from protocol.message_objects import (
    MANIFEST_NAME,
    OFFSET_MAX,
    TRAILER_BYTES,
    BlockColumns,
    Manifest,
    ObjectCorrupted,
    ObjectEntry,
    ObjectRead,
    ReadWindow,
    decode_block,
    decode_footer,
    decode_manifest,
    footer_length,
    select_objects,
)
from protocol.object_store import open_location
from protocol.records import MESSAGE_TYPES

SCHEMA = (
    "topic string, queue_id int, queue_offset bigint, message_id string, tag string, "
    "keys array<string>, properties map<string,string>, body binary, message_group string, "
    "message_type string, born_timestamp timestamp, store_timestamp timestamp, "
    "delivery_timestamp timestamp"
)
"""The columns of a read. ``tag`` and ``message_group`` are null when the message has
none, ``delivery_timestamp`` when it was not a timed message; ``message_type`` is
RocketMQ's name (NORMAL, FIFO, DELAY, TRANSACTION)."""

FS_OPTION_PREFIX = "fs."
TAIL_BYTES = 64 << 10
"""Bytes read from an object's end to find its footer (more if the footer is longer)."""

_TYPE_NAMES_ARRAY = pa.array(
    [MESSAGE_TYPES[code].name if code in MESSAGE_TYPES else None for code in range(128)],
    pa.string(),
)
"""RocketMQ's name of each message type code, by code (a record's code is a known one)."""
_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("message_id", pa.string()),
        ("tag", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("message_group", pa.string()),
        ("message_type", pa.string()),
        ("born_timestamp", _TIMESTAMP),
        ("store_timestamp", _TIMESTAMP),
        ("delivery_timestamp", _TIMESTAMP),
    ]
)
_COLUMN_NAMES = ", ".join(ARROW_SCHEMA.names)


class ReadOptionError(ValueError):
    """A read or write option that is missing or malformed (the message names it)."""


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``fs.*`` options without their prefix: fsspec storage options."""
    return {
        key[len(FS_OPTION_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(FS_OPTION_PREFIX)
    }


def parse_time_ms(name: str, text: str) -> int:
    """Epoch milliseconds from an integer or an ISO-8601 text (UTC unless it says)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ReadOptionError(f"option {name}={text!r}: not epoch ms nor ISO-8601") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _int_option(options: Mapping[str, str], name: str) -> int | None:
    value = option_value(options, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ReadOptionError(f"option {name}={value!r} is not an integer") from exc


def option_value(options: Mapping[str, str], name: str) -> str | None:
    """An option by case-insensitive name (Spark hands them lower-cased or as given)."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return str(value)
    return None


@dataclass(frozen=True)
class ReadPlan:
    """What a read keeps, from its options."""

    topics: list[str] | None
    queue_ids: list[int] | None
    window: ReadWindow

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadPlan:
        """The plan the options ask for; :class:`ReadOptionError` names a bad option."""
        topics_text = option_value(options, "topics") or option_value(options, "topic")
        topics = [t.strip() for t in topics_text.split(",") if t.strip()] if topics_text else None
        queues_text = option_value(options, "queues") or option_value(options, "queue")
        queue_ids = None
        if queues_text:
            try:
                queue_ids = [int(q) for q in queues_text.split(",") if q.strip()]
            except ValueError as exc:
                raise ReadOptionError(f"option queues={queues_text!r}: not queue ids") from exc
        offset_from = _int_option(options, "offsetFrom")
        offset_to = _int_option(options, "offsetTo")
        time_from = option_value(options, "timeFrom")
        time_to = option_value(options, "timeTo")
        window = ReadWindow(
            0 if offset_from is None else offset_from,
            OFFSET_MAX if offset_to is None else offset_to,
            None if time_from is None else parse_time_ms("timeFrom", time_from),
            None if time_to is None else parse_time_ms("timeTo", time_to),
        )
        return cls(topics, queue_ids, window)

    def select(self, manifest: Manifest) -> list[ObjectRead]:
        """The object ranges of ``manifest`` this plan reads."""
        return select_objects(
            manifest.queues, self.window, topics=self.topics, queue_ids=self.queue_ids
        )


def read_manifest(url: str, options: Mapping[str, str]) -> Manifest:
    """The manifest of the snapshot at ``url``."""
    fs, root = open_location(url, storage_options(options))
    path = f"{root}/{MANIFEST_NAME}"
    try:
        data = fs.cat_file(path)
    except FileNotFoundError as exc:
        raise ReadOptionError(f"{url} is not a snapshot: it has no {MANIFEST_NAME}") from exc
    return decode_manifest(data, url)


class ObjectPartition(InputPartition):
    """One object of a snapshot, and the offsets and times of it to read."""

    def __init__(self, url: str, read: ObjectRead, window: ReadWindow) -> None:
        """What :meth:`Rip5Reader.read` needs, picklable (no open file or client)."""
        super().__init__(read.entry.name)
        self.url = url
        self.topic = read.topic
        self.queue_id = read.queue_id
        self.entry: ObjectEntry = read.entry
        self.window = ReadWindow(
            read.first_offset, read.end_offset, window.from_timestamp_ms, window.to_timestamp_ms
        )


def read_object(
    fs: Any, root: str, partition: ObjectPartition
) -> Iterator[tuple[BlockColumns, int, int]]:
    """The blocks of a partition's object its window keeps: each decoded block and the
    index range ``[lo, hi)`` of its messages inside the window's offsets."""
    entry = partition.entry
    name = entry.name
    with fs.open(f"{root}/{name}", "rb") as file:
        size = entry.size_bytes
        tail_size = min(size, TAIL_BYTES)
        file.seek(size - tail_size)
        tail = file.read(tail_size)
        if len(tail) != tail_size:
            raise ObjectCorrupted(f"object {name}: shorter than the {size} bytes listed")
        needed = footer_length(tail[-TRAILER_BYTES:], name) + TRAILER_BYTES
        if needed > tail_size and needed <= size:
            file.seek(size - needed)
            tail = file.read(needed)
        footer = decode_footer(tail, name, size)
        if (footer.topic, footer.queue_id, footer.first_offset, footer.end_offset) != (
            partition.topic,
            partition.queue_id,
            entry.first_offset,
            entry.end_offset,
        ):
            raise ObjectCorrupted(f"object {name}: its footer does not match the manifest")
        window = partition.window
        for block in footer.blocks_in(window):
            file.seek(block.position)
            decoded = decode_block(file.read(block.length), block, name)
            lo = max(window.first_offset - block.first_offset, 0)
            hi = min(window.end_offset - block.first_offset, block.count)
            yield decoded, lo, hi


def read_columns(schema: StructType | None, options: Mapping[str, str]) -> list[str]:
    """The columns a read yields, in order: those of ``schema`` (the user's
    ``.schema(...)``, or :meth:`Rip5DataSource.schema`'s), else of the ``columns``
    option (comma-separated names), else all of :data:`SCHEMA`.

    Each must be a column of :data:`SCHEMA` with its type; :class:`ReadOptionError`
    names the first that is not. Only the columns kept are built and sent to Spark
    (Spark gives a Python data source no column pruning of its own).
    """
    if schema is None:
        text = option_value(options, "columns")
        if text is None:
            return list(ARROW_SCHEMA.names)
        names = [name.strip() for name in text.split(",") if name.strip()]
        if not names:
            raise ReadOptionError(f"option columns={text!r} names no column")
        for name in names:
            if name not in ARROW_SCHEMA.names:
                raise ReadOptionError(
                    f"option columns: {name!r} is not a rip5 column ({_COLUMN_NAMES})"
                )
        if len(set(names)) != len(names):
            raise ReadOptionError(f"option columns={text!r} names a column twice")
        return names
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415 - Spark's own mapping

    names = []
    for field in to_arrow_schema(schema, timezone="UTC"):
        if field.name not in ARROW_SCHEMA.names:
            raise ReadOptionError(
                f"schema column {field.name!r} is not a rip5 column ({_COLUMN_NAMES})"
            )
        ours = ARROW_SCHEMA.field(field.name).type
        if field.type != ours:
            raise ReadOptionError(
                f"schema column {field.name!r} is {field.type}; the rip5 column is {ours}"
            )
        names.append(field.name)
    if len(set(names)) != len(names):
        raise ReadOptionError("the schema names a column twice")
    return names


def columns_ddl(names: Sequence[str]) -> str:
    """The DDL schema of ``names``, columns of :data:`SCHEMA` (as it spells them)."""
    ddl = {column.split(" ", 1)[0]: column for column in _SCHEMA_COLUMNS}
    return ", ".join(ddl[name] for name in names)


_SCHEMA_COLUMNS = [column.strip() for column in re.split(r",(?![^<]*>)", SCHEMA)]
"""The column definitions of :data:`SCHEMA` (commas inside ``<...>`` kept)."""


def _column_builders() -> dict[str, Callable[[_BlockSlice], pa.Array]]:
    """Per column of :data:`ARROW_SCHEMA`: its Arrow array from a block's slice."""
    return {
        "topic": lambda s: pa.array([s.topic] * s.count, pa.string()),
        "queue_id": lambda s: pa.array([s.queue_id] * s.count, pa.int32()),
        "queue_offset": lambda s: pa.array(
            range(s.block.first_offset + s.lo, s.block.first_offset + s.hi), pa.int64()
        ),
        "message_id": lambda s: pa.array(s.column(2), pa.string()),
        "tag": lambda s: _empty_as_null(pa.array(s.column(4), pa.string())),
        "keys": lambda s: pa.array(s.column(5), pa.list_(pa.string())),
        "properties": lambda s: pa.array(s.column(7), pa.map_(pa.string(), pa.string())),
        "body": lambda s: pa.array(s.column(3), pa.binary()),
        "message_group": lambda s: _empty_as_null(pa.array(s.column(6), pa.string())),
        "message_type": lambda s: pc.take(_TYPE_NAMES_ARRAY, pa.array(s.column(10), pa.int8())),
        "born_timestamp": lambda s: _timestamps(pa.array(s.column(8), pa.int64())),
        "store_timestamp": lambda s: _timestamps(s.store_times()),
        "delivery_timestamp": lambda s: _timestamps(
            pc.if_else(
                pc.equal(delivery := pa.array(s.column(9), pa.int64()), 0),
                pa.scalar(None, pa.int64()),
                delivery,
            )
        ),
    }


@dataclass(frozen=True)
class _BlockSlice:
    """Messages ``[lo, hi)`` of a decoded block of one queue."""

    topic: str
    queue_id: int
    block: BlockColumns
    lo: int
    hi: int

    @property
    def count(self) -> int:
        return self.hi - self.lo

    def column(self, index: int) -> Sequence[Any]:
        return self.block.columns[index][self.lo : self.hi]

    def store_times(self) -> pa.Array:
        return pa.array(self.block.store_timestamps_ms[self.lo : self.hi], pa.int64())


_COLUMN_BUILDERS = _column_builders()


def to_arrow(
    topic: str,
    queue_id: int,
    block: BlockColumns,
    lo: int,
    hi: int,
    window: ReadWindow,
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """Messages ``[lo, hi)`` of a decoded block stored within the window's times, as a
    record batch of ``columns`` (names of :data:`ARROW_SCHEMA`, in that order; all
    of them by default). Only the columns asked for are built.

    Built column by column in pyarrow (slices of the decoded columns, no loop per
    message in Python): empty tags and groups become null, a delivery time of 0
    null, millisecond times microseconds.
    """
    names = ARROW_SCHEMA.names if columns is None else columns
    part = _BlockSlice(topic, queue_id, block, lo, hi)
    schema = ARROW_SCHEMA if columns is None else pa.schema([ARROW_SCHEMA.field(n) for n in names])
    batch = pa.RecordBatch.from_arrays([_COLUMN_BUILDERS[n](part) for n in names], schema=schema)
    if window.from_timestamp_ms is None and window.to_timestamp_ms is None:
        return batch
    times = part.store_times()
    keep = pa.array([True] * part.count)
    if window.from_timestamp_ms is not None:
        keep = pc.and_(keep, pc.greater_equal(times, window.from_timestamp_ms))
    if window.to_timestamp_ms is not None:
        keep = pc.and_(keep, pc.less(times, window.to_timestamp_ms))
    return batch.filter(keep)


def _empty_as_null(strings: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def _timestamps(milliseconds: pa.Array) -> pa.Array:
    return pc.multiply(milliseconds, 1000).cast(_TIMESTAMP)


class Rip5Reader(DataSourceReader):
    """Plans one partition per object (from the manifest) and reads them."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        """Options as :class:`Rip5DataSource` got them (``path`` is the snapshot);
        ``schema``: the columns to yield (:func:`read_columns`; all by default)."""
        self.options = dict(options)
        url = option_value(self.options, "path")
        if not url:
            raise ReadOptionError('give the snapshot to read: load("URL")')
        self.url = url
        self.plan = ReadPlan.from_options(self.options)
        self.columns = read_columns(schema, self.options)

    def partitions(self) -> list[ObjectPartition]:
        """One partition per object the options keep (none opened to decide)."""
        manifest = read_manifest(self.url, self.options)
        held = sorted({queue.topic for queue in manifest.queues})
        missing = sorted(set(self.plan.topics or ()) - set(held))
        if missing:
            raise ReadOptionError(
                f"{self.url} holds no topic {', '.join(missing)} (it holds {', '.join(held)})"
            )
        return [
            ObjectPartition(self.url, read, self.plan.window) for read in self.plan.select(manifest)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The messages of one partition, a record batch per block (none for the
        placeholder partition Spark reads when the options kept no object)."""
        if not isinstance(partition, ObjectPartition):
            return
        fs, root = open_location(self.url, storage_options(self.options))
        for block, lo, hi in read_object(fs, root, partition):
            batch = to_arrow(
                partition.topic, partition.queue_id, block, lo, hi, partition.window, self.columns
            )
            if batch.num_rows:
                yield batch


class Rip5DataSource(DataSource):
    """The ``rip5`` format: reads snapshots, streams a live topic, writes to a topic."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("rip5")``."""
        return "rip5"

    def schema(self) -> str:
        """The columns of a read when the user gave no schema: those of the ``columns``
        option, else all of :data:`SCHEMA` (Spark asks only then)."""
        if option_value(self.options, "columns") is None:
            return SCHEMA
        return columns_ddl(read_columns(None, self.options))

    def reader(self, schema: StructType) -> Rip5Reader:
        """A batch reader of the snapshot given to ``load``, yielding only the columns
        of ``schema`` (the user's ``.schema(...)`` or :meth:`schema`'s)."""
        return Rip5Reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A stream of the live topic named by the options (``spark_batch.stream``),
        all columns (a pruned schema is refused: the stream yields every column)."""
        from spark_batch.stream import Rip5StreamReader  # noqa: PLC0415 - grpc only when streaming

        if read_columns(schema, self.options) != ARROW_SCHEMA.names:
            raise ReadOptionError("a stream reads every column: give no schema nor columns option")
        return Rip5StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer into the topic named by the options (``spark_batch.writer``)."""
        from spark_batch.writer import Rip5Writer  # noqa: PLC0415 - grpc only when writing

        if overwrite:
            raise ReadOptionError("a topic cannot be overwritten: use mode('append')")
        return Rip5Writer(self.options, schema)
