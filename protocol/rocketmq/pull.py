"""The RocketMQ v2 PullMessage exchange, for our clients of the brokers' offset API.

A pull asks one queue for up to ``batch_size`` messages from ``offset``; the
broker answers with a stream of responses: one status, the messages (each
with its ``queue_offset``), and the offset to pull next (docs/consumers.md).
:func:`pull_request` builds the request and :func:`read_pull` reads the
stream back; the callers (the connector's asyncio client, the Spark
streaming reader's blocking one) make the call and decide what a status
means to them.

PURE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

BATCH_SIZE_MAX = 32
"""The most messages a broker answers one pull or receive with: RocketMQ's
``maxTransferCountOnMessageInMemory``."""
REPLICATOR_HEADER = "x-rip5-replicator"
"""A pull whose call carries this header (any value) is a replicator's (the
connector's): the broker answers it with up to :data:`REPLICATOR_BATCH_SIZE_MAX`
messages and no body digest, since the replicator copies bodies as they are and
sends its copies without one. Every other caller keeps RocketMQ's limit and digest.
The cap is a bound on one call's work, not a permission: a storage read is bounded to
4 MiB of records whatever the count."""
REPLICATOR_BATCH_SIZE_MAX = 256
"""The most messages a broker answers a replicator's pull with: a queue copied at a
few thousand messages a second needs a pull per 32 messages otherwise, a chain of
round trips that fell behind the queue (messages waited longer for their pull than
for their send) and cost the source a pull's fixed work per 32 messages."""


def pull_request(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    batch_size: int,
    poll_ms: int,
    expression: str = "*",
) -> spb.PullMessageRequest:
    """A PullMessage of queue ``topic:queue_id`` from ``offset`` as consumer group
    ``group``: at most ``batch_size`` messages whose tag matches ``expression``,
    waiting up to ``poll_ms`` for a first one."""
    request = spb.PullMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
        offset=offset,
        batch_size=batch_size,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression),
    )
    request.long_polling_timeout.FromMilliseconds(poll_ms)
    return request


@dataclass(frozen=True)
class PullAnswer:
    """What a PullMessage's response stream said."""

    status: pb.Status
    """OK unless the stream carried another status."""
    messages: Sequence[pb.Message]
    """In offset order."""
    next_offset: int
    """Where to pull next: the stream's, else the offset pulled from."""


def read_pull(responses: Iterable[spb.PullMessageResponse], offset: int) -> PullAnswer:
    """The status, messages and next offset of a pull from ``offset``."""
    messages: list[pb.Message] = []
    status = pb.Status(code=pb.OK)
    next_offset = offset
    for response in responses:
        kind = response.WhichOneof("content")
        if kind == "status":
            status = response.status
        elif kind == "message":
            messages.append(response.message)
        elif kind == "next_offset":
            next_offset = int(response.next_offset)
    return PullAnswer(status, messages, next_offset)
