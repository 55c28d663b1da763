"""The streaming reader's calls to the brokers: QueryOffset and PullMessage (gRPC v2).

A pull consumer in RocketMQ's sense, over the brokers' offset API
(docs/consumers.md): the reader asks each queue's first and end offsets and
pulls ``[start, end)`` ranges of a queue. Its positions live in Spark's
checkpoint, not in the brokers, so it never commits a consumer offset; the
consumer group it names only identifies it to the brokers.

SHELL (network).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.rocketmq.pull import pull_request, read_pull
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from spark_batch.producer import CALL_TIMEOUT_S, BrokerCallFailed, TopicClient

PULL_POLL_MS = 1_000
"""A pull's long poll: the ranges pulled are stored already, so a pull waits only when
a broker lags behind the offset it reported."""


@dataclass(frozen=True)
class Pulled:
    """One PullMessage's answer: the messages (in offset order) and where to go on."""

    messages: Sequence[pb.Message]
    next_offset: int


class TopicConsumer(TopicClient):
    """Reads the queues of one topic by offset, as consumer group ``group``."""

    def __init__(self, endpoints: Sequence[str], topic: str, group: str, client_id: str) -> None:
        """Channels are opened lazily, one per endpoint used."""
        super().__init__(endpoints, topic, client_id)
        self.group = group

    def queue_bound(self, queue_id: int, *, end: bool) -> int:
        """The queue's end offset (the next message's) or its first stored offset."""
        request = spb.QueryOffsetRequest(
            message_queue=self._queue(queue_id),
            query_offset_policy=pb.END if end else pb.BEGINNING,
        )
        answer = self._call(lambda stub: stub.QueryOffset(request, **self._options()))
        if answer.status.code != pb.OK:
            raise BrokerCallFailed(
                f"offsets of queue {self.topic}:{queue_id}: "
                f"{pb.Code.Name(answer.status.code)}: {answer.status.message}"
            )
        return int(answer.offset)

    def pull(self, queue_id: int, offset: int, batch_size: int) -> Pulled:
        """Up to ``batch_size`` messages of the queue from ``offset``; an offset outside
        the stored range (messages deleted by retention) raises, naming the range."""
        request = pull_request(
            self.group,
            self.topic,
            queue_id,
            offset,
            batch_size=batch_size,
            poll_ms=PULL_POLL_MS,
        )
        timeout_s = PULL_POLL_MS / 1000 + CALL_TIMEOUT_S
        responses = self._call(
            lambda stub: list(stub.PullMessage(request, metadata=self.metadata, timeout=timeout_s))
        )
        answer = read_pull(responses, offset)
        status = answer.status
        if status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
            raise BrokerCallFailed(
                f"pull of queue {self.topic}:{queue_id} at offset {offset}: "
                f"{pb.Code.Name(status.code)}: {status.message}"
            )
        return Pulled(answer.messages, answer.next_offset)

    def _queue(self, queue_id: int) -> pb.MessageQueue:
        return pb.MessageQueue(topic=pb.Resource(name=self.topic), id=queue_id)
