"""Writing a DataFrame into a topic through the brokers: ``df.write.format("rip5")``.

Columns: ``body`` (binary or string; required) and, optional, ``tag``,
``keys`` (array<string>), ``properties`` (map<string,string>) and
``message_group`` (a message with one is sent as FIFO). Options:
``endpoints`` (``host:port,...`` of brokers; required), ``topic``
(required), ``batchMessages`` (messages per SendMessage, default 256) and
``writeId`` (default: drawn once per write, on the driver).

A retried task does not duplicate. Every message id is a hash of the write
id, the task's partition and the row's position in it
(:func:`message_id`), so every attempt of a task sends the same ids; and
every attempt sends to the same queue: messages without a message group go
to the queue the partition names (:func:`queue_for_partition`), those with
one where their group hashes. The queue's raft group then remembers each id
in its dedup window and stores a resent message once. Messages already
sent are not taken back when a write aborts (a topic has no transaction
across sends): rerun the write with the same ``writeId`` to complete it
without duplicates.

SHELL (network).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from google.protobuf.timestamp_pb2 import Timestamp
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from protocol.rocketmq.v2 import definition_pb2 as pb
from spark_batch.producer import TopicProducer, broker_target
from spark_batch.source import ReadOptionError, option_value

BATCH_MESSAGES = 256
BATCH_BYTES_MAX = 2 << 20
"""A send carries at most this many body bytes (besides one message that is larger)."""
WRITER_COLUMNS = ("body", "tag", "keys", "properties", "message_group")


def message_id(write_id: str, partition: int, row: int) -> str:
    """The id of row ``row`` of partition ``partition`` of write ``write_id``: the same
    on every attempt (32 upper-case hex digits)."""
    digest = hashlib.blake2b(f"{write_id}/{partition}/{row}".encode(), digest_size=16)
    return digest.hexdigest().upper()


def queue_for_partition(partition: int, writable: Sequence[int]) -> int:
    """The queue partition ``partition`` sends to, among the writable queue ids.

    Queue 0 is left out when there are others: the v2 protocol's queue id 0
    means "none named" (the broker would pick a queue itself, perhaps another
    on a retry); a topic whose only writable queue is 0 gets everything there.
    """
    named = [queue for queue in writable if queue > 0] or list(writable)
    if not named:
        raise ReadOptionError("the topic has no writable queue")
    return named[partition % len(named)]


@dataclass
class SentPartition(WriterCommitMessage):
    """What one task sent."""

    partition: int
    messages: int


class Rip5Writer(DataSourceArrowWriter):
    """Sends each partition's rows as messages (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        """Checks the options and columns on the driver, before any task runs."""
        self.endpoints, self.topic = broker_target(options, "writing")
        self.write_id = option_value(options, "writeId") or uuid.uuid4().hex
        batch = option_value(options, "batchMessages")
        self.batch_messages = int(batch) if batch else BATCH_MESSAGES
        names = set(schema.fieldNames())
        if "body" not in names:
            raise ReadOptionError("the DataFrame needs a body column")
        unknown = names - set(WRITER_COLUMNS)
        if unknown:
            raise ReadOptionError(
                f"unknown columns {sorted(unknown)}: a message has {', '.join(WRITER_COLUMNS)}"
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentPartition:
        """Send this task's rows (every attempt the same ids, to the same queue)."""
        from pyspark import TaskContext  # noqa: PLC0415 - only inside a task

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        producer = TopicProducer(self.endpoints, self.topic, f"rip5-spark-{self.write_id}")
        try:
            queue_id = queue_for_partition(partition, producer.writable_queue_ids())
            row = 0
            pending: list[pb.Message] = []
            pending_bytes = 0
            for batch in iterator:
                for values in _rows(batch):
                    message = _message(
                        self.topic, queue_id, message_id(self.write_id, partition, row), values
                    )
                    row += 1
                    if pending and (
                        len(pending) >= self.batch_messages
                        or pending_bytes + len(message.body) > BATCH_BYTES_MAX
                    ):
                        producer.send(pending)
                        pending, pending_bytes = [], 0
                    pending.append(message)
                    pending_bytes += len(message.body)
            if pending:
                producer.send(pending)
        finally:
            producer.close()
        return SentPartition(partition, row)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to publish: each message was stored when its send returned."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo (see the module docstring: rerun with the same ``writeId``)."""


def _rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    names = list(columns)
    for values in zip(*columns.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def _message(topic: str, queue_id: int, message_id_: str, values: dict[str, Any]) -> pb.Message:
    body = values["body"]
    if body is None:
        raise ReadOptionError(f"message {message_id_}: body is null")
    if isinstance(body, str):
        body = body.encode()
    group = values.get("message_group")
    born = Timestamp()
    born.FromMilliseconds(int(time.time() * 1000))
    system = pb.SystemProperties(
        message_id=message_id_,
        keys=values.get("keys") or [],
        body_encoding=pb.IDENTITY,
        born_timestamp=born,
        queue_id=queue_id,
        message_type=pb.FIFO if group else pb.NORMAL,
    )
    if values.get("tag"):
        system.tag = values["tag"]
    if group:
        system.message_group = group
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties=dict(values.get("properties") or ()),
        system_properties=system,
        body=body,
    )
