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
  milliseconds or ISO-8601 (UTC unless the text names a zone).

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
from collections.abc import Iterator, Mapping
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


def to_arrow(
    topic: str, queue_id: int, block: BlockColumns, lo: int, hi: int, window: ReadWindow
) -> pa.RecordBatch:
    """Messages ``[lo, hi)`` of a decoded block stored within the window's times, as a
    record batch of :data:`ARROW_SCHEMA`.

    Built column by column in pyarrow (slices of the decoded columns, no loop per
    message in Python): empty tags and groups become null, a delivery time of 0
    null, millisecond times microseconds.
    """
    columns = block.columns
    count = hi - lo
    times = pa.array(block.store_timestamps_ms[lo:hi], pa.int64())
    arrays = [
        pa.array([topic] * count, pa.string()),
        pa.array([queue_id] * count, pa.int32()),
        pa.array(range(block.first_offset + lo, block.first_offset + hi), pa.int64()),
        pa.array(columns[2][lo:hi], pa.string()),
        _empty_as_null(pa.array(columns[4][lo:hi], pa.string())),
        pa.array(columns[5][lo:hi], pa.list_(pa.string())),
        pa.array(columns[7][lo:hi], pa.map_(pa.string(), pa.string())),
        pa.array(columns[3][lo:hi], pa.binary()),
        _empty_as_null(pa.array(columns[6][lo:hi], pa.string())),
        pc.take(_TYPE_NAMES_ARRAY, pa.array(columns[10][lo:hi], pa.int8())),
        _timestamps(pa.array(columns[8][lo:hi], pa.int64())),
        _timestamps(times),
        _timestamps(
            pc.if_else(
                pc.equal(delivery := pa.array(columns[9][lo:hi], pa.int64()), 0),
                pa.scalar(None, pa.int64()),
                delivery,
            )
        ),
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    if window.from_timestamp_ms is None and window.to_timestamp_ms is None:
        return batch
    keep = pa.array([True] * count)
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

    def __init__(self, options: Mapping[str, str]) -> None:
        """Options as :class:`Rip5DataSource` got them (``path`` is the snapshot)."""
        self.options = dict(options)
        url = option_value(self.options, "path")
        if not url:
            raise ReadOptionError('give the snapshot to read: load("URL")')
        self.url = url
        self.plan = ReadPlan.from_options(self.options)

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
            batch = to_arrow(partition.topic, partition.queue_id, block, lo, hi, partition.window)
            if batch.num_rows:
                yield batch


class Rip5DataSource(DataSource):
    """The ``rip5`` format: reads snapshots, streams a live topic, writes to a topic."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("rip5")``."""
        return "rip5"

    def schema(self) -> str:
        """The columns of a read (:data:`SCHEMA`)."""
        return SCHEMA

    def reader(self, schema: StructType) -> Rip5Reader:
        """A batch reader of the snapshot given to ``load``."""
        return Rip5Reader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A stream of the live topic named by the options (``spark_batch.stream``)."""
        from spark_batch.stream import Rip5StreamReader  # noqa: PLC0415 - grpc only when streaming

        return Rip5StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer into the topic named by the options (``spark_batch.writer``)."""
        from spark_batch.writer import Rip5Writer  # noqa: PLC0415 - grpc only when writing

        if overwrite:
            raise ReadOptionError("a topic cannot be overwritten: use mode('append')")
        return Rip5Writer(self.options, schema)
