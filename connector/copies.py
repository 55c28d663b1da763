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


def copy_message(
    message: pb.Message,
    source_cluster: str,
    source_queue: int,
    target_topic: str,
    target_queues: Sequence[int],
) -> tuple[pb.Message, int]:
    """The copy of pulled ``message`` for ``target_topic``, and its target queue."""
    system = message.system_properties
    group = system.message_group if system.HasField("message_group") else None
    queue = target_queue(source_queue, group, target_queues)
    copy = pb.Message(topic=pb.Resource(name=target_topic), body=message.body)
    copy.user_properties.update(message.user_properties)
    copy.user_properties[SOURCE_CLUSTER] = source_cluster
    copy.user_properties[SOURCE_TOPIC] = message.topic.name
    copy.user_properties[SOURCE_QUEUE] = str(source_queue)
    copy.user_properties[SOURCE_OFFSET] = str(system.queue_offset)
    out = copy.system_properties
    out.message_id = system.message_id
    out.keys.extend(system.keys)
    out.body_encoding = pb.IDENTITY
    out.message_type = pb.NORMAL if system.message_type == pb.TRANSACTION else system.message_type
    out.born_timestamp.CopyFrom(system.born_timestamp)
    out.born_host = system.born_host
    if system.HasField("tag"):
        out.tag = system.tag
    if group is not None:
        out.message_group = group
    else:
        out.queue_id = queue
    if system.HasField("delivery_timestamp"):
        out.delivery_timestamp.CopyFrom(system.delivery_timestamp)
    return copy, queue
