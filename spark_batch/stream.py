"""The ``rip5`` streaming reader: a live topic as a Spark stream, exactly once.

::

    spark.readStream.format("rip5").option("endpoints", "host:port,...")
        .option("topic", "T").load()

Columns: the batch reader's (``spark_batch.source.SCHEMA``). Options:

- ``endpoints`` (required): brokers' gRPC v2 endpoints, any of them;
- ``topic`` (required);
- ``startingOffsets``: ``earliest`` (default), ``latest``, or JSON
  ``{"QUEUE_ID": OFFSET, ...}`` (a queue not named starts at its earliest);
- ``maxOffsetsPerTrigger``: at most this many messages per micro-batch,
  shared fairly among the queues that have some;
- ``group``: the consumer group the pulls name (default ``rip5-spark``).

Offsets are per queue, ``{"QUEUE_ID": next_offset}`` (JSON in Spark's
checkpoint). A micro-batch reads ``[start, end)`` of each queue, one Spark
partition per queue with messages; Spark writes ``end`` to its offset log
before the batch runs and commits the batch after the sink did, so a query
stopped or killed anywhere and restarted from its checkpoint re-reads exactly
the ranges it had not committed: with a sink that is exactly-once itself
(Spark's file sinks) each message lands once. The reader keeps no position of
its own (nothing is committed to the brokers).

SHELL (network: QueryRoute, QueryOffset, PullMessage).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from protocol.rocketmq.v2 import definition_pb2 as pb
from spark_batch.consumer import TopicConsumer
from spark_batch.producer import BrokerCallFailed, broker_target
from spark_batch.source import ARROW_SCHEMA, ReadOptionError, option_value

DEFAULT_GROUP = "rip5-spark"
PULL_BATCH = 256
STALLED_PULLS = 5
"""Pulls in a row that may return nothing before a range that was stored is declared
unreadable (a broker can lag a moment behind the end offset another one reported)."""

QueueOffsets = dict[int, int]
"""Next offset to read, by queue id."""


def offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """Offsets as Spark keeps them (JSON object keys are strings), queues in order."""
    return {str(queue_id): offsets[queue_id] for queue_id in sorted(offsets)}


def offsets_from_json(value: Mapping[str, Any], what: str) -> QueueOffsets:
    """Offsets from their JSON form; ReadOptionError naming ``what`` when malformed."""
    try:
        offsets = {int(queue_id): int(offset) for queue_id, offset in value.items()}
    except (TypeError, ValueError) as exc:
        raise ReadOptionError(f"{what}: not {{queue id: offset}}: {value!r}") from exc
    negative = {q: o for q, o in offsets.items() if q < 0 or o < 0}
    if negative:
        raise ReadOptionError(f"{what}: negative queue id or offset: {negative}")
    return offsets


def starting_offsets(text: str | None) -> str | QueueOffsets:
    """The ``startingOffsets`` option: ``"earliest"``, ``"latest"`` or explicit offsets."""
    if text is None or text.strip().lower() == "earliest":
        return "earliest"
    if text.strip().lower() == "latest":
        return "latest"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReadOptionError(
            f"option startingOffsets={text!r}: not earliest, latest or JSON offsets"
        ) from exc
    if not isinstance(value, dict):
        raise ReadOptionError(f"option startingOffsets={text!r}: JSON must be an object")
    return offsets_from_json(value, "option startingOffsets")


def capped_end(start: Mapping[int, int], end: Mapping[int, int], limit: int) -> QueueOffsets:
    """``end`` cut so that at most ``limit`` messages lie between ``start`` and it,
    shared fairly: each queue with messages gets an equal share, and what a queue needs
    less than its share goes to the others (lowest queue ids first for the remainder)."""
    wanted = {q: max(end[q] - start.get(q, end[q]), 0) for q in end}
    granted = dict.fromkeys(wanted, 0)
    budget = limit
    open_queues = sorted(q for q, n in wanted.items() if n > 0)
    while budget > 0 and open_queues:
        share, extra = divmod(budget, len(open_queues))
        for index, queue_id in enumerate(open_queues):
            grant = min(share + (1 if index < extra else 0), wanted[queue_id] - granted[queue_id])
            granted[queue_id] += grant
            budget -= grant
        open_queues = [q for q in open_queues if granted[q] < wanted[q]]
    return {q: start.get(q, end[q]) + granted[q] for q in end}


class QueueRange(InputPartition):
    """Offsets ``[start, end)`` of one queue: one Spark partition of a micro-batch."""

    def __init__(self, queue_id: int, start: int, end: int) -> None:
        """Picklable: the numbers only."""
        super().__init__(f"{queue_id}:{start}-{end}")
        self.queue_id = queue_id
        self.start = start
        self.end = end


def messages_to_arrow(messages: list[pb.Message]) -> pa.RecordBatch:
    """Pulled messages as a record batch of the batch reader's columns."""

    def millis(system: pb.SystemProperties, field: str) -> int | None:
        if not system.HasField(field):
            return None
        return int(getattr(system, field).ToMilliseconds()) * 1000

    systems = [m.system_properties for m in messages]
    columns: list[list[Any]] = [
        [m.topic.name for m in messages],
        [s.queue_id for s in systems],
        [s.queue_offset for s in systems],
        [s.message_id for s in systems],
        [s.tag or None for s in systems],
        [list(s.keys) for s in systems],
        [sorted(m.user_properties.items()) for m in messages],
        [m.body for m in messages],
        [s.message_group or None for s in systems],
        [pb.MessageType.Name(s.message_type) for s in systems],
        [millis(s, "born_timestamp") for s in systems],
        [millis(s, "store_timestamp") for s in systems],
        [millis(s, "delivery_timestamp") for s in systems],
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, field.type) for values, field in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )


class Rip5StreamReader(DataSourceStreamReader):
    """Plans micro-batches from the queues' end offsets and pulls their ranges."""

    def __init__(self, options: Mapping[str, str]) -> None:
        """Options as :class:`spark_batch.source.Rip5DataSource` got them."""
        self.endpoints, self.topic = broker_target(options, "a stream")
        self.group = option_value(options, "group") or DEFAULT_GROUP
        self.starting = starting_offsets(option_value(options, "startingOffsets"))
        limit = option_value(options, "maxOffsetsPerTrigger")
        self.max_per_trigger: int | None = None
        if limit is not None:
            if not limit.isdigit() or int(limit) <= 0:
                raise ReadOptionError(f"option maxOffsetsPerTrigger={limit!r}: not a positive int")
            self.max_per_trigger = int(limit)
        self._consumer: TopicConsumer | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for Spark's Python workers: the planner's channels stay behind."""
        return {**self.__dict__, "_consumer": None}

    def _client(self) -> TopicConsumer:
        if self._consumer is None:
            self._consumer = TopicConsumer(
                self.endpoints, self.topic, self.group, f"rip5-spark-stream-{self.topic}"
            )
        return self._consumer

    def _bounds(self, *, end: bool) -> QueueOffsets:
        client = self._client()
        return {q: client.queue_bound(q, end=end) for q in client.readable_queue_ids()}

    def initialOffset(self) -> dict[str, int]:
        """Where a query without a checkpoint starts (``startingOffsets``)."""
        if self.starting == "latest":
            return offsets_json(self._bounds(end=True))
        earliest = self._bounds(end=False)
        if isinstance(self.starting, dict):
            earliest.update(self.starting)
        return offsets_json(earliest)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark's row limit (all available if unset)."""
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """The end of the next micro-batch: every queue's end offset, cut to the limit.
        A queue new since ``start`` is read from its first offset."""
        begin = offsets_from_json(start, "start offset")
        ends = self._bounds(end=True)
        for queue_id in ends.keys() - begin.keys():
            begin[queue_id] = self._client().queue_bound(queue_id, end=False)
        ends = {q: max(ends[q], begin[q]) for q in ends}
        if isinstance(limit, ReadMaxRows):
            ends = capped_end(begin, ends, limit.max_rows)
        return offsets_json({**begin, **ends})

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[QueueRange]:
        """One partition per queue with messages in ``[start, end)``."""
        begin = offsets_from_json(start, "start offset")
        until = offsets_from_json(end, "end offset")
        return [
            QueueRange(q, begin.get(q, 0), until[q])
            for q in sorted(until)
            if until[q] > begin.get(q, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The messages of one queue range, in offset order, each once."""
        assert isinstance(partition, QueueRange)
        consumer = TopicConsumer(
            self.endpoints,
            self.topic,
            self.group,
            f"rip5-spark-stream-{self.topic}-{partition.queue_id}",
        )
        try:
            offset = partition.start
            stalled = 0
            while offset < partition.end:
                pulled = consumer.pull(
                    partition.queue_id, offset, min(PULL_BATCH, partition.end - offset)
                )
                kept = [
                    m
                    for m in pulled.messages
                    if offset <= m.system_properties.queue_offset < partition.end
                ]
                progress = max(
                    [pulled.next_offset, *(m.system_properties.queue_offset + 1 for m in kept)]
                )
                if progress <= offset:
                    stalled += 1
                    if stalled >= STALLED_PULLS:
                        raise BrokerCallFailed(
                            f"queue {self.topic}:{partition.queue_id}: offset {offset} "
                            f"(below its end {partition.end}) could not be read"
                        )
                    continue
                stalled = 0
                offset = progress
                if kept:
                    yield messages_to_arrow(kept)
        finally:
            consumer.close()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the positions live in Spark's checkpoint."""

    def stop(self) -> None:
        """Close the planner's channels."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
