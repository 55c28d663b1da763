"""The copy of a source message as the connector sends it to the target.

Kept from the source: message id (so the target's dedup by id absorbs a
resend), body, tag, keys, user properties, message group, delivery time,
born time and host, message type (a TRANSACTION message, pulled only once
committed, is sent as NORMAL: the copy is not a transaction on the target).
Added: :data:`SOURCE_PROPERTIES` naming the source cluster, topic, queue and
offset. The copy names its target queue (``queue_id``) unless it is FIFO (its
message group picks the queue on every broker alike).

PURE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from connector.plan import target_queue
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

SOURCE_CLUSTER = "CONNECTOR_SOURCE_CLUSTER"
SOURCE_TOPIC = "CONNECTOR_SOURCE_TOPIC"
SOURCE_QUEUE = "CONNECTOR_SOURCE_QUEUE"
SOURCE_OFFSET = "CONNECTOR_SOURCE_OFFSET"
SOURCE_PROPERTIES = (SOURCE_CLUSTER, SOURCE_TOPIC, SOURCE_QUEUE, SOURCE_OFFSET)


_KEPT = frozenset(
    {
        "tag",
        "keys",
        "message_id",
        "body_encoding",
        "message_type",
        "born_timestamp",
        "born_host",
        "delivery_timestamp",
        "message_group",
        "queue_id",
    }
)
_DROPPED = tuple(f.name for f in pb.SystemProperties.DESCRIPTOR.fields if f.name not in _KEPT)
"""System properties a copy does not keep: the source's store facts (time, host, offset,
receipt handle, ...) and whatever the list above does not name."""


def copy_messages(
    messages: Iterable[pb.Message],
    source_cluster: str,
    source_queue: int,
    target_topic: str,
    target_queues: Sequence[int],
) -> tuple[spb.SendMessageRequest, list[int]]:
    """The copies of pulled ``messages`` (of one source queue) for ``target_topic``,
    in order, as the SendMessage that carries them (built in place: no second copy of
    each), and each one's target queue."""
    # Per copy: one copy of the whole message and one merge of what every copy of the
    # batch adds (upb, in C), then the few per-message changes: the batch's copies
    # cost a few microseconds each, most of it the clearing of the dropped fields.
    plain_queue = target_queue(source_queue, None, target_queues)
    added: dict[str, tuple[pb.Message, pb.Message]] = {}  # by source topic: plain, FIFO
    request = spb.SendMessageRequest()
    add = request.messages.add
    queues: list[int] = []
    for message in messages:
        source_topic = message.topic.name
        templates = added.get(source_topic)
        if templates is None:
            templates = added[source_topic] = _added(
                source_cluster, source_topic, source_queue, target_topic, plain_queue
            )
        copy = add()
        copy.CopyFrom(message)
        out = copy.system_properties
        if out.HasField("message_group"):
            copy.MergeFrom(templates[1])
            out.ClearField("queue_id")
            queues.append(target_queue(source_queue, out.message_group, target_queues))
        else:
            copy.MergeFrom(templates[0])
            queues.append(plain_queue)
        copy.user_properties[SOURCE_OFFSET] = str(out.queue_offset)
        for name in _DROPPED:
            out.ClearField(name)
        if out.message_type == pb.TRANSACTION:
            out.message_type = pb.NORMAL
    return request, queues


def _added(
    source_cluster: str, source_topic: str, source_queue: int, target_topic: str, queue: int
) -> tuple[pb.Message, pb.Message]:
    """What a copy gets merged in: its target topic, the source properties but the
    offset, an identity body; a plain copy names its target ``queue``, a FIFO one none."""
    fifo = pb.Message(
        topic=pb.Resource(name=target_topic),
        user_properties={
            SOURCE_CLUSTER: source_cluster,
            SOURCE_TOPIC: source_topic,
            SOURCE_QUEUE: str(source_queue),
        },
    )
    fifo.system_properties.body_encoding = pb.IDENTITY
    plain = pb.Message()
    plain.CopyFrom(fifo)
    plain.system_properties.queue_id = queue
    return plain, fifo


def copy_message(
    message: pb.Message,
    source_cluster: str,
    source_queue: int,
    target_topic: str,
    target_queues: Sequence[int],
) -> tuple[pb.Message, int]:
    """The copy of pulled ``message`` for ``target_topic``, and its target queue (see
    :func:`copy_messages`)."""
    request, queues = copy_messages(
        (message,), source_cluster, source_queue, target_topic, target_queues
    )
    return request.messages[0], queues[0]
