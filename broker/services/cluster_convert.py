"""Conversions between the broker's domain and the cluster's wire types.

The nameserver's records (``protocol.nameserver_api``) become topics and
groups, the storage node's (``protocol.storage_api``) become messages and
pops, and an Angelia failure becomes a :class:`BrokerError` with the same
shared code (so ``status.py`` answers the documented v2 status).

Queue ids follow ``protocol.routing``: an ordinary topic has queues ``0 ..
queue_count - 1``; a dead-letter topic's queue ids are the raft group ids of
its cluster (the nameserver's route lists them).

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from angelia_rpc.errors import AngeliaError
from broker.domain import (
    NO_PROPERTIES,
    GroupInfo,
    Message,
    PoppedMessage,
    QueueInfo,
    QueueRef,
    RetryPolicy,
    TopicInfo,
    new_message,
)
from broker.errors import BrokerError, Reason
from protocol import errors as codes
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.positional import positional
from protocol.records import MessageRecord
from protocol.vocabulary import MessageType, Permission

DEFAULT_MAX_DELIVERY_ATTEMPTS = 17


def permission_of(bits: int) -> Permission:
    """The permission of a nameserver permission bit set (RocketMQ ``PermName`` bits;
    bits other than read and write, such as inherit, are ignored)."""
    return Permission(bits & Permission.READ_WRITE)


_MESSAGE_TYPES = {int(kind): frozenset({kind}) for kind in MessageType}
"""One set per type, shared by every topic of it (a broker may cache many topics)."""


def message_types_of(message_type: int) -> frozenset[MessageType]:
    """What a topic of the nameserver's ``message_type`` accepts: that type only
    (RocketMQ's topic message type check)."""
    kinds = _MESSAGE_TYPES.get(message_type)
    return frozenset({MessageType(message_type)}) if kinds is None else kinds


def topic_from_route(route: ns.RouteResponse) -> TopicInfo:
    """A topic with the queue ids its route names (dead-letter topics: the group ids)."""
    permission = permission_of(route.topic.permission)
    return TopicInfo(
        route.topic.name,
        tuple(QueueInfo(queue.queue_id, permission) for queue in route.queues),
        message_types_of(route.topic.message_type),
    )


def topic_from_info(topic: ns.TopicInfo, queue_ids: Sequence[int]) -> TopicInfo:
    """A topic from its record and its queue ids."""
    permission = permission_of(topic.permission)
    return TopicInfo(
        topic.name,
        tuple(QueueInfo(queue_id, permission) for queue_id in queue_ids),
        message_types_of(topic.message_type),
    )


def group_from_info(group: ns.ConsumerGroupInfo) -> GroupInfo:
    """A consumer group from its record.

    The backoff list is the group's customised delays; without one the
    exponential policy gives the delays, one per retry.
    """
    retry = group.retry
    backoff = tuple(retry.backoff_ms)
    if not backoff:
        delays = []
        delay = float(retry.initial_backoff_ms)
        for _ in range(max(1, group.max_delivery_attempts - 1)):
            delays.append(int(min(delay, retry.max_backoff_ms)))
            delay *= retry.multiplier
        backoff = tuple(delays)
    return GroupInfo(
        group.name,
        fifo=group.fifo,
        retry=RetryPolicy(max_delivery_attempts=group.max_delivery_attempts, backoff_ms=backoff),
    )


def message_to_wire(message: Message, queue: QueueRef) -> st.Message:
    """The storage API form of a message sent to ``queue`` (its record, as a wire message)."""
    return st.from_record(message_to_record(message, queue))


def message_to_record(message: Message, queue: QueueRef) -> MessageRecord:
    """The stored form of a message sent to ``queue``: what an append's ``records``
    carry (``protocol.records.pack_records``), built in one step per sent message."""
    dead_topic, dead_id = message.dead_letter_of or ("", "")
    properties = message.user_properties
    return MessageRecord(
        queue.topic,
        queue.queue_id,
        message.message_id,
        message.body,
        message.tag or "",
        tuple(message.keys),
        message.message_group or "",
        MessageRecord.sorted_properties(properties) if properties else (),
        message.born_timestamp_ms,
        message.delivery_timestamp_ms or 0,
        message.message_type,
        message.born_host,
        dead_topic,
        dead_id,
    )


def message_from_wire(message: st.Message) -> Message:
    """A stored message as the broker sees it; ValueError for an unknown message type."""
    return message_from_record(st.to_record(message))


def popped_from_packed(delivery: st.PackedDelivery, record: MessageRecord) -> PoppedMessage:
    """One delivery of a packed storage receive, and its message's record."""
    return _new_popped(
        (
            message_from_record(record),
            QueueRef(delivery.topic, delivery.queue_id),
            delivery.queue_offset,
            delivery.store_timestamp_ms,
            delivery.delivery_attempt,
            delivery.generation,
            delivery.invisible_until_ms,
        )
    )


_new_popped = positional(PoppedMessage)  # one per delivered message


def message_from_record(record: MessageRecord) -> Message:
    """A stored record as the broker sees it."""
    return new_message(
        (
            record.topic,
            record.body,
            record.message_id,
            record.message_type,
            record.tag or None,
            record.keys,
            dict(record.properties) if record.properties else NO_PROPERTIES,
            record.message_group or None,
            record.born_timestamp_ms,
            record.born_host,
            record.delivery_timestamp_ms or None,
            record.queue_id,
            (record.dead_letter_topic, record.dead_letter_message_id)
            if record.dead_letter_topic
            else None,
        )
    )


def storage_handle(queue: QueueRef, offset: int, generation: int) -> st.ReceiptHandle:
    """The storage half of a receipt handle."""
    return st.ReceiptHandle(queue.topic, queue.queue_id, offset, generation)


def error_from_angelia(error: AngeliaError, what: str) -> BrokerError:
    """The broker error for a failed cluster call; the shared code is kept.

    Missing topics and groups keep their precise reasons (the clients tell
    them apart from other NOT_FOUNDs).
    """
    message = f"{what}: {error.message}"
    if error.code is codes.TOPIC_NOT_FOUND:
        return BrokerError.of(Reason.TOPIC_NOT_FOUND, message)
    if error.code is codes.CONSUMER_GROUP_NOT_FOUND:
        return BrokerError.of(Reason.CONSUMER_GROUP_NOT_FOUND, message)
    if error.code is codes.INVALID_RECEIPT_HANDLE:
        return BrokerError.of(Reason.INVALID_RECEIPT_HANDLE, message)
    return BrokerError(error.code, message)


def ack_error(outcome: st.AckOutcome) -> BrokerError | None:
    """The error of one ack outcome (None: acknowledged)."""
    if outcome.error_code == 0:
        return None
    code = codes.by_number(outcome.error_code)
    if code is codes.INVALID_RECEIPT_HANDLE:
        return BrokerError.of(
            Reason.INVALID_RECEIPT_HANDLE,
            f"receipt handle is stale: {outcome.error or 'the message is finished'}",
        )
    return BrokerError(code, outcome.error or code.description)
