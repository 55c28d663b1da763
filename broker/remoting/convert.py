"""Remoting wire values <-> broker domain, both directions.

Conversion only: no lookups, no policy. A 4.x message is one property
string beside its body; the system properties (``RESERVED_PROPERTY_KEYS``)
become the domain message's fields and the rest its user properties:

- ``UNIQ_KEY`` (the id the client generated) is the message id, so a 5.x
  consumer sees the id the 4.x producer reported; a client that sends none
  (ali-ons) reports the ``msgId`` of the answer as the message's id, so the
  broker gives the message a new id and answers it there;
- ``TAGS`` the tag, ``KEYS`` the keys (space separated);
- ``TRAN_MSG`` (or the prepared bits of ``sysFlag``) makes a TRANSACTION
  message; ``TIMER_DELIVER_MS`` / ``__STARTDELIVERTIME`` (absolute),
  ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC`` or a ``DELAY`` level (relative to
  ``now_ms``) make a DELAY message; ``__SHARDINGKEY`` makes a FIFO message of
  that message group when the topic takes FIFO messages (4.x clients cannot
  say what type they send: an orderly send to a NORMAL topic stays NORMAL,
  in the queue the client chose, as a RocketMQ broker without type checks
  takes it);
- the header's queue id is the queue the client chose (its queue selector
  decides, as with a RocketMQ broker).

A body with the compressed bit of ``sysFlag`` is zlib-inflated.

Transaction ids handed to remoting producers carry the topic before the
v2 transaction id (``<topic>@T1:<queue>:<message id>``): a 4.x client's
END_TRANSACTION names no topic, and any broker must be able to end it.

PURE.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence, Set
from typing import NamedTuple

from broker.domain import HalfMessage, Message, PulledMessage, QueueRef, SendResult, new_message
from broker.errors import BrokerError, Reason
from broker.processor import transaction_id as transaction_ids
from broker.processor.validation import BODY_BYTES_MAX, RESERVED_PROPERTY_KEYS
from protocol import errors as codes
from protocol.remoting import messages as wire
from protocol.remoting.bodies import RouteBroker
from protocol.remoting.codes import FLAG_ONEWAY, RequestCode
from protocol.remoting.frames import RemotingCommand
from protocol.remoting.headers import SendBackHeader, SendMessageHeader
from protocol.routing import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, is_retry_topic
from protocol.vocabulary import MessageType, Placement

COMPRESSED_FLAG = 0x1
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_PREPARED_FLAG = 0x4

DELAY_LEVELS_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip
"""RocketMQ's default delay levels 1..18 (``messageDelayLevel``)."""

RETRY_POSITION_MARK = 1 << 62
"""Set in the physical offset of a record pulled from a retry topic: a send-back
names the message by that offset and its original topic alone, so the mark says
the message lives in the group's retry topic (queue ids stay below 2**14)."""
RETRY_DELAY_LEVEL_BASE = 3
"""A send-back with delay level 0 waits level 3 + the times already given back
(10 s first), as a RocketMQ broker does."""

BROKER_NAME_PREFIX = "rip5-"
_TRANSACTION_SEPARATOR = "@"


def broker_name(address: str) -> str:
    """The broker name a route gives the broker at remoting ``address`` (host:port)."""
    host, _, port = address.rpartition(":")
    return f"{BROKER_NAME_PREFIX}{host.strip('[]').replace('.', '-').replace(':', '-')}-{port}"


def route_brokers(addresses: Sequence[str]) -> list[RouteBroker]:
    """The brokers of a route, one per remoting address, in address order."""
    return [RouteBroker(broker_name(address), address) for address in sorted(set(addresses))]


def messages_from_send(
    header: SendMessageHeader,
    body: bytes,
    *,
    batch: bool,
    born_host: str,
    now_ms: int,
    new_id: Callable[[], str],
    fifo_topic: bool,
) -> tuple[list[Message], list[bool]]:
    """The messages of a send request (one, or a batch body's records), and for each
    whether the client named it (``UNIQ_KEY``; otherwise ``new_id()`` did).
    ``fifo_topic``: the topic takes FIFO messages."""
    if not batch:
        if header.sys_flag & COMPRESSED_FLAG:
            body = _inflate(body)
        records = [wire.BatchRecord(header.flag, body, wire.parse_properties(header.properties))]
    else:
        records = wire.parse_batch(body)
        if not records:
            raise BrokerError.of(Reason.MESSAGE_CORRUPTED, "batch body holds no message")
    common = _SendCommon(
        header.topic,
        header.born_timestamp_ms,
        born_host,
        header.queue_id if header.queue_id >= 0 else None,
        header.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_FLAG,
        now_ms,
        fifo_topic,
    )
    messages: list[Message] = []
    named: list[bool] = []
    for _flag, record_body, properties in records:
        message_id = properties.get(wire.UNIQUE_ID)
        named.append(bool(message_id))
        messages.append(_message(common, record_body, properties, message_id or new_id()))
    return messages, named


class _SendCommon(NamedTuple):
    """What every message of one send request shares (read from its header once)."""

    topic: str
    born_timestamp_ms: int
    born_host: str
    queue_id: int | None  # the queue the client chose
    prepared: bool  # sysFlag marks a half message
    now_ms: int
    fifo_topic: bool


def _inflate(body: bytes) -> bytes:
    try:
        inflater = zlib.decompressobj()
        inflated = inflater.decompress(body, BODY_BYTES_MAX + 1)
    except zlib.error:
        raise BrokerError.of(
            Reason.MESSAGE_CORRUPTED, "message body is flagged compressed but is not zlib"
        ) from None
    if len(inflated) > BODY_BYTES_MAX:
        raise BrokerError.of(
            Reason.MESSAGE_BODY_TOO_LARGE, f"inflated body exceeds the max {BODY_BYTES_MAX}"
        )
    return inflated


def _message(
    common: _SendCommon, body: bytes, properties: Mapping[str, str], message_id: str
) -> Message:
    get = properties.get
    keys_text = get(wire.KEYS)
    keys = tuple(key for key in keys_text.split(wire.KEY_SEPARATOR) if key) if keys_text else ()
    if not common.prepared and properties.keys() <= _PLAIN:
        # As most 4.x messages: system properties only, none that makes another type.
        kind: _Kind = (MessageType.NORMAL, {}, None, None)
    else:
        kind = _kind(common, properties)
    message_type, user, message_group, delivery_ms = kind
    return new_message(
        (
            common.topic,
            body,
            message_id,
            message_type,
            get(wire.TAGS) or None,
            keys,
            user,
            message_group,
            common.born_timestamp_ms,
            common.born_host,
            delivery_ms,
            common.queue_id,
            None,
        )
    )


_Kind = tuple[MessageType, dict[str, str], str | None, int | None]
"""A message's type, user properties, message group (FIFO) and delivery time (DELAY)."""


def _kind(common: _SendCommon, properties: Mapping[str, str]) -> _Kind:
    user = {name: value for name, value in properties.items() if name not in RESERVED_PROPERTY_KEYS}
    message_group = (properties.get(wire.SHARDING_KEY) or None) if common.fifo_topic else None
    delivery_ms = _delivery_ms(properties, common.now_ms)
    if common.prepared or properties.get(wire.TRANSACTION_PREPARED, "").lower() == "true":
        return MessageType.TRANSACTION, user, None, None
    if delivery_ms is not None:
        return MessageType.DELAY, user, None, delivery_ms
    if message_group is not None:
        return MessageType.FIFO, user, message_group, None
    return MessageType.NORMAL, user, None, None


_TIMING = frozenset(
    (wire.DELIVER_AT_MS, wire.START_DELIVER_TIME, wire.DELAY_MS, wire.DELAY_SEC, wire.DELAY_LEVEL)
)
"""The properties :func:`_delivery_ms` reads."""
_PLAIN = RESERVED_PROPERTY_KEYS - _TIMING - {wire.TRANSACTION_PREPARED, wire.SHARDING_KEY}
"""System properties that leave a message NORMAL, with no user property."""


def _delivery_ms(properties: Mapping[str, str], now_ms: int) -> int | None:
    """When a timed message is due (None: not timed); a bad number is MESSAGE_CORRUPTED."""
    try:
        for name in (wire.DELIVER_AT_MS, wire.START_DELIVER_TIME):
            if properties.get(name):
                return int(properties[name])
        if properties.get(wire.DELAY_MS):
            return now_ms + int(properties[wire.DELAY_MS])
        if properties.get(wire.DELAY_SEC):
            return now_ms + int(properties[wire.DELAY_SEC]) * 1000
        level = int(properties.get(wire.DELAY_LEVEL) or 0)
    except ValueError:
        raise BrokerError.of(
            Reason.MESSAGE_CORRUPTED, "a delivery time property is not an integer"
        ) from None
    if level <= 0:
        return None
    return now_ms + DELAY_LEVELS_MS[min(level, len(DELAY_LEVELS_MS)) - 1]


def send_response_fields(
    messages: Sequence[Message],
    named: Sequence[bool],
    results: Sequence[SendResult],
    store_address: str,
) -> dict[str, str]:
    """The extFields of a send's answer: per message (comma-joined for a batch) its
    offset id, or its id when the broker named it; the queue and the first message's
    offset; the transaction id of a half message."""
    host, _, port = store_address.rpartition(":")
    store_host = wire.store_host_hex(host, int(port))  # the same for every message
    first = results[0]
    fields = {
        "msgId": ",".join(
            store_host + wire.offset_position_hex(result.queue.queue_id, result.offset)
            if client_named
            else message.message_id
            for message, client_named, result in zip(messages, named, results, strict=True)
        ),
        "queueId": str(first.queue.queue_id),
        "queueOffset": str(first.offset),
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    if first.placement is Placement.HALF:
        fields["transactionId"] = transaction_id(first.queue, messages[0].message_id)
    return fields


def transaction_id(queue: QueueRef, message_id: str) -> str:
    """The transaction id a remoting producer is given for a half message."""
    return f"{queue.topic}{_TRANSACTION_SEPARATOR}{transaction_ids.encode(queue, message_id)}"


def parse_transaction_id(text: str) -> tuple[str, str]:
    """(topic, v2 transaction id) of a remoting transaction id; INVALID_TRANSACTION_ID
    when it is not one."""
    topic, separator, v2_id = text.partition(_TRANSACTION_SEPARATOR)
    if not separator or not topic or not v2_id:
        raise BrokerError.of(
            Reason.INVALID_TRANSACTION_ID, f"transaction id {text!r} was not issued by this cluster"
        )
    return topic, v2_id


def message_properties(message: Message) -> dict[str, str]:
    """The property string's entries for a domain message: its user properties, then
    its id, tag and keys as a 4.x client reads them."""
    properties = dict(message.user_properties)
    properties[wire.UNIQUE_ID] = message.message_id
    if message.tag is not None:
        properties[wire.TAGS] = message.tag
    if message.keys:
        properties[wire.KEYS] = wire.KEY_SEPARATOR.join(message.keys)
    if message.message_group is not None:
        properties[wire.SHARDING_KEY] = message.message_group
    return properties


def check_request(
    half: HalfMessage, producer_group: str, store_address: str, opaque: int
) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (oneway) for ``half``, addressed to a producer of
    ``producer_group``: the header names the transaction, the body is the half message
    (with the producer group and the prepared mark the client picks its producer by)."""
    message = half.message
    host, _, port = store_address.rpartition(":")
    offset_id = wire.offset_message_id(host, int(port), half.queue.queue_id, -1)
    properties = message_properties(message)
    properties[wire.PRODUCER_GROUP] = producer_group
    properties[wire.TRANSACTION_PREPARED] = "true"
    position = wire.parse_offset_message_id(offset_id)
    physical = half.queue.queue_id << wire.QUEUE_OFFSET_BITS | wire.UNQUEUED
    body = wire.encode_message_ext(
        wire.MessageExt(
            topic=half.queue.topic,
            queue_id=half.queue.queue_id,
            queue_offset=-1,
            body=message.body,
            properties=properties,
            sys_flag=TRANSACTION_PREPARED_FLAG,
            born_timestamp_ms=message.born_timestamp_ms,
            born_host=message.born_host if ":" in message.born_host else "0.0.0.0:0",
            store_timestamp_ms=half.store_timestamp_ms,
            store_host=f"{position[0]}:{position[1]}",
            physical_offset=physical,
        )
    )
    return RemotingCommand(
        code=RequestCode.CHECK_TRANSACTION_STATE,
        opaque=opaque,
        flag=FLAG_ONEWAY,
        ext_fields={
            "tranStateTableOffset": "-1",
            "commitLogOffset": str(physical),
            "msgId": message.message_id,
            "offsetMsgId": offset_id,
            "transactionId": transaction_id(half.queue, message.message_id),
            "topic": half.queue.topic,
        },
        body=body,
    )


def consumer_ids_changed(group: str, opaque: int) -> RemotingCommand:
    """NOTIFY_CONSUMER_IDS_CHANGED (oneway) to a consumer of ``group``: the group's
    consumers changed, so rebalance now rather than at the next periodic rebalance."""
    return RemotingCommand(
        code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
        opaque=opaque,
        flag=FLAG_ONEWAY,
        ext_fields={"consumerGroup": group},
    )


def pulled_body(pulled: Sequence[PulledMessage], store_address: str) -> bytes:
    """A pull answer's body: one MessageExt record per message, in offset order. The
    physical offset is the queue id and offset, as in the offset message ids."""
    host, _, port = store_address.rpartition(":")
    out = bytearray()
    for item in pulled:
        message = item.message
        out += wire.encode_message_ext(
            wire.MessageExt(
                topic=item.queue.topic,
                queue_id=item.queue.queue_id,
                queue_offset=item.offset,
                body=message.body,
                properties=message_properties(message),
                born_timestamp_ms=message.born_timestamp_ms,
                born_host=message.born_host if ":" in message.born_host else "0.0.0.0:0",
                store_timestamp_ms=item.store_timestamp_ms,
                store_host=f"{host}:{port}",
                physical_offset=physical_offset(item.queue, item.offset),
                reconsume_times=reconsume_times(message),
            )
        )
    return bytes(out)


def physical_offset(queue: QueueRef, offset: int) -> int:
    """The physical offset of a pulled record: the queue id and offset (as in the
    offset message ids), with :data:`RETRY_POSITION_MARK` in a retry topic."""
    mark = RETRY_POSITION_MARK if is_retry_topic(queue.topic) else 0
    return mark | queue.queue_id << wire.QUEUE_OFFSET_BITS | offset


def retry_topic(group: str) -> str:
    """The retry topic of a consumer group."""
    return RETRY_TOPIC_PREFIX + group


def given_back_position(header: SendBackHeader, pulled_topics: Set[str]) -> tuple[QueueRef, int]:
    """Where the message a send-back names is stored: (queue, offset).

    The physical offset names the queue id and offset; the topic is the group's
    retry topic when the offset carries :data:`RETRY_POSITION_MARK`, else the
    ``originTopic`` the client sent or, as the C++ client sends none, the one topic
    the group pulled through this broker (``pulled_topics``). Several such topics
    cannot be told apart: INVALID_PARAMETER (the client then retries locally).
    """
    physical = header.physical_offset
    if physical & RETRY_POSITION_MARK:
        topic = retry_topic(header.group)
    elif header.origin_topic:
        topic = header.origin_topic
    elif len(pulled_topics) == 1:
        (topic,) = pulled_topics
    else:
        raise BrokerError(
            codes.BAD_REQUEST,
            f"the send-back names no originTopic and group {header.group!r} pulled "
            f"{len(pulled_topics)} topics through this broker: "
            f"{sorted(pulled_topics)[:8]}",
        )
    return viewed_position(topic, physical)


def viewed_position(topic: str, physical: int) -> tuple[QueueRef, int]:
    """(queue, offset) of the message a view names by ``topic`` and the physical offset
    of its offset message id (the queue id and offset; a retry topic's mark dropped)."""
    if physical < 0:
        raise BrokerError(codes.BAD_REQUEST, f"offset {physical} of the message is negative")
    physical &= ~RETRY_POSITION_MARK
    return QueueRef(topic, physical >> wire.QUEUE_OFFSET_BITS), physical & wire.UNQUEUED


def reconsume_times(message: Message) -> int:
    """How often ``message`` was given back already (0 for one never given back)."""
    try:
        return int(message.user_properties.get(wire.RECONSUME_TIME, "0"))
    except ValueError:
        return 0


def given_back(
    original: Message, original_topic: str, header: SendBackHeader, now_ms: int
) -> Message:
    """The message a send-back stores next: into the group's retry topic, due after
    the delay level (0: :data:`RETRY_DELAY_LEVEL_BASE` + times given back), or into
    ``%DLQ%<group>`` when it was given back ``max_reconsume_times`` times already or
    the level is negative. The id stays; ``RETRY_TOPIC`` keeps the topic the client
    subscribed to (the client shows the message under it), ``RECONSUME_TIME`` counts."""
    times = reconsume_times(original)
    properties = dict(original.user_properties)
    properties.setdefault(wire.RETRY_TOPIC, original_topic)
    properties.setdefault(wire.ORIGIN_MESSAGE_ID, original.message_id)
    first_topic = properties[wire.RETRY_TOPIC]
    if header.delay_level < 0 or times >= header.max_reconsume_times:
        return original._replace(
            topic=DLQ_TOPIC_PREFIX + header.group,
            message_type=MessageType.NORMAL,
            user_properties=properties,
            delivery_timestamp_ms=None,
            queue_id=None,
            dead_letter_of=(first_topic, original.message_id),
        )
    level = header.delay_level or RETRY_DELAY_LEVEL_BASE + times
    properties[wire.RECONSUME_TIME] = str(times + 1)
    return original._replace(
        topic=retry_topic(header.group),
        message_type=MessageType.DELAY,
        user_properties=properties,
        delivery_timestamp_ms=now_ms + DELAY_LEVELS_MS[min(level, len(DELAY_LEVELS_MS)) - 1],
        queue_id=None,
        dead_letter_of=None,
    )
