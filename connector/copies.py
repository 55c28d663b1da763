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

from collections.abc import Sequence

from connector.plan import target_queue
from protocol.rocketmq.v2 import definition_pb2 as pb

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


def copy_message(
    message: pb.Message,
    source_cluster: str,
    source_queue: int,
    target_topic: str,
    target_queues: Sequence[int],
) -> tuple[pb.Message, int]:
    """The copy of pulled ``message`` for ``target_topic``, and its target queue."""
    # One copy of the whole message (upb, in C), then the few changes: cheaper per
    # message than building the copy field by field.
    copy = pb.Message()
    copy.CopyFrom(message)
    out = copy.system_properties
    group = out.message_group if out.HasField("message_group") else None
    queue = target_queue(source_queue, group, target_queues)
    copy.topic.name = target_topic
    properties = copy.user_properties
    properties[SOURCE_CLUSTER] = source_cluster
    properties[SOURCE_TOPIC] = message.topic.name
    properties[SOURCE_QUEUE] = str(source_queue)
    properties[SOURCE_OFFSET] = str(out.queue_offset)
    for name in _DROPPED:
        out.ClearField(name)
    out.body_encoding = pb.IDENTITY
    if out.message_type == pb.TRANSACTION:
        out.message_type = pb.NORMAL
    if group is None:
        out.queue_id = queue
    else:
        out.ClearField("queue_id")
    return copy, queue
