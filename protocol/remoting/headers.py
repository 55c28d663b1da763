"""Typed request headers, read from a command's extFields.

The frame decoder has already turned every value into text (see
``frames.field_text``); readers here parse that text into the field's type.
A missing required field or a value of the wrong type raises
:class:`HeaderError` naming the field, so the request can be answered
clearly. Booleans are ``true`` in any case, or ``1`` (the C++ client
writes booleans as the integers 0 and 1); anything else is false. Integers
also accept a decimal point with zeros (``"4.0"``), which JSON number
writers produce.

SEND_MESSAGE_V2 carries the SEND_MESSAGE fields under one-letter keys
(``a`` = producerGroup ... ``n`` = brokerName); :func:`send_header` reads
either form.

PURE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from protocol.remoting.errors import HeaderError


def text(fields: Mapping[str, str], name: str, default: str | None = None) -> str:
    """A text field; HeaderError when missing without a default."""
    value = fields.get(name)
    if value is None:
        if default is None:
            raise HeaderError(f"header field {name!r} is missing")
        return default
    return value


def optional_text(fields: Mapping[str, str], name: str) -> str | None:
    """A text field, None when missing or empty."""
    return fields.get(name) or None


def integer(fields: Mapping[str, str], name: str, default: int | None = None) -> int:
    """An integer field; HeaderError when missing without a default or not a number."""
    value = fields.get(name)
    if value is None or value == "":
        if default is None:
            raise HeaderError(f"header field {name!r} is missing")
        return default
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if number.is_integer():
        return int(number)
    raise HeaderError(f"header field {name!r} is {value!r}, not an integer")


def boolean(fields: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean field: ``true`` in any case, or ``1``, is true (see the module)."""
    value = fields.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("true", "1")


# SEND_MESSAGE_V2's short keys, in RocketMQ's order.
SEND_V2_KEYS: Mapping[str, str] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}


@dataclass(frozen=True, slots=True)
class SendMessageHeader:
    """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""

    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp_ms: int
    flag: int
    properties: str
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    batch: bool = False
    broker_name: str | None = None
    default_topic: str = ""
    default_topic_queue_nums: int = 0


def send_header(fields: Mapping[str, str], *, short_keys: bool) -> SendMessageHeader:
    """The send header in ``fields`` (``short_keys``: the V2 one-letter form)."""
    if short_keys:
        fields = {SEND_V2_KEYS.get(key, key): value for key, value in fields.items()}
    max_reconsume = fields.get("maxReconsumeTimes")
    return SendMessageHeader(
        producer_group=text(fields, "producerGroup"),
        topic=text(fields, "topic"),
        queue_id=integer(fields, "queueId", -1),
        sys_flag=integer(fields, "sysFlag", 0),
        born_timestamp_ms=integer(fields, "bornTimestamp", 0),
        flag=integer(fields, "flag", 0),
        properties=text(fields, "properties", ""),
        reconsume_times=integer(fields, "reconsumeTimes", 0),
        max_reconsume_times=(
            integer(fields, "maxReconsumeTimes") if max_reconsume not in (None, "") else None
        ),
        batch=boolean(fields, "batch"),
        broker_name=optional_text(fields, "brokerName") or optional_text(fields, "bname"),
        default_topic=text(fields, "defaultTopic", ""),
        default_topic_queue_nums=integer(fields, "defaultTopicQueueNums", 0),
    )


@dataclass(frozen=True, slots=True)
class QueueHeader:
    """GET_MAX_OFFSET / GET_MIN_OFFSET / GET_EARLIEST_MSG_STORETIME: one queue."""

    topic: str
    queue_id: int


def queue_header(fields: Mapping[str, str]) -> QueueHeader:
    """The queue a request names."""
    return QueueHeader(text(fields, "topic"), integer(fields, "queueId"))


@dataclass(frozen=True, slots=True)
class SearchOffsetHeader:
    """SEARCH_OFFSET_BY_TIMESTAMP."""

    topic: str
    queue_id: int
    timestamp_ms: int


def search_offset_header(fields: Mapping[str, str]) -> SearchOffsetHeader:
    """The queue and the store time searched for."""
    return SearchOffsetHeader(
        text(fields, "topic"), integer(fields, "queueId"), integer(fields, "timestamp")
    )


@dataclass(frozen=True, slots=True)
class UnregisterClientHeader:
    """UNREGISTER_CLIENT: a client leaves its producer and/or consumer group."""

    client_id: str
    producer_group: str | None
    consumer_group: str | None


def unregister_client_header(fields: Mapping[str, str]) -> UnregisterClientHeader:
    """Who leaves."""
    return UnregisterClientHeader(
        text(fields, "clientID"),
        optional_text(fields, "producerGroup"),
        optional_text(fields, "consumerGroup"),
    )


@dataclass(frozen=True, slots=True)
class EndTransactionHeader:
    """END_TRANSACTION.

    ``commit_or_rollback``: 8 commit, 12 rollback, 0 unknown (see
    :data:`TRANSACTION_COMMIT` ...). ``message_id`` is the offset message id
    of the send; ``transaction_id`` what the send's response gave.
    """

    producer_group: str
    commit_or_rollback: int
    from_transaction_check: bool
    message_id: str
    transaction_id: str | None
    topic: str | None
    queue_offset: int


TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED = 4
TRANSACTION_COMMIT = 8
TRANSACTION_ROLLBACK = 12


def end_transaction_header(fields: Mapping[str, str]) -> EndTransactionHeader:
    """How a producer ends a transaction."""
    return EndTransactionHeader(
        producer_group=text(fields, "producerGroup"),
        commit_or_rollback=integer(fields, "commitOrRollback"),
        from_transaction_check=boolean(fields, "fromTransactionCheck"),
        message_id=text(fields, "msgId"),
        transaction_id=optional_text(fields, "transactionId"),
        topic=optional_text(fields, "topic"),
        queue_offset=integer(fields, "tranStateTableOffset", -1),
    )


def topic_header(fields: Mapping[str, str]) -> str:
    """GET_ROUTEINFO_BY_TOPIC: the topic."""
    return text(fields, "topic")


def consumer_group_header(fields: Mapping[str, str]) -> str:
    """GET_CONSUMER_LIST_BY_GROUP: the consumer group."""
    return text(fields, "consumerGroup")


# PULL_MESSAGE's sysFlag bits.
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4


@dataclass(frozen=True, slots=True)
class PullMessageHeader:
    """PULL_MESSAGE: read a queue from an offset (optionally committing the consumer's
    position first, and waiting up to ``suspend_timeout_ms`` when nothing is there)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_messages: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int
    subscription: str
    expression_type: str = "TAG"  # or SQL92

    @property
    def commits(self) -> bool:
        """The pull carries the consumer's position to commit."""
        return bool(self.sys_flag & PULL_COMMIT_OFFSET) and self.commit_offset >= 0

    @property
    def suspends(self) -> bool:
        """The consumer lets the broker hold the pull until a message comes."""
        return bool(self.sys_flag & PULL_SUSPEND)


def pull_header(fields: Mapping[str, str]) -> PullMessageHeader:
    """A pull request's header; the subscription is ``*`` unless the pull carries one."""
    sys_flag = integer(fields, "sysFlag", 0)
    subscription = text(fields, "subscription", "") if sys_flag & PULL_SUBSCRIPTION else ""
    return PullMessageHeader(
        consumer_group=text(fields, "consumerGroup"),
        topic=text(fields, "topic"),
        queue_id=integer(fields, "queueId"),
        queue_offset=integer(fields, "queueOffset"),
        max_messages=integer(fields, "maxMsgNums", 32),
        sys_flag=sys_flag,
        commit_offset=integer(fields, "commitOffset", -1),
        suspend_timeout_ms=integer(fields, "suspendTimeoutMillis", 0),
        subscription=subscription or "*",
        expression_type=(text(fields, "expressionType", "") or "TAG").upper(),
    )


@dataclass(frozen=True, slots=True)
class ConsumerOffsetHeader:
    """QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET (``commit_offset`` -1 when querying)."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int = -1


def consumer_offset_header(fields: Mapping[str, str]) -> ConsumerOffsetHeader:
    """A consumer offset request's header."""
    return ConsumerOffsetHeader(
        text(fields, "consumerGroup"),
        text(fields, "topic"),
        integer(fields, "queueId"),
        integer(fields, "commitOffset", -1),
    )


MAX_RECONSUME_TIMES_DEFAULT = 16
"""How often a message is retried when the consumer names no limit (RocketMQ's)."""


@dataclass(frozen=True, slots=True)
class SendBackHeader:
    """CONSUMER_SEND_MSG_BACK: a consumer failed a message and gives it back for a retry.

    ``physical_offset`` is the one the pulled MessageExt record carried; a
    ``delay_level`` of 0 lets the broker choose by the reconsume count, a
    negative one sends the message to the dead letters at once.
    """

    group: str
    physical_offset: int
    delay_level: int
    origin_message_id: str | None
    origin_topic: str | None
    max_reconsume_times: int


def send_back_header(fields: Mapping[str, str]) -> SendBackHeader:
    """Which message a consumer gives back, and when it wants it again."""
    return SendBackHeader(
        group=text(fields, "group"),
        physical_offset=integer(fields, "offset"),
        delay_level=integer(fields, "delayLevel", 0),
        origin_message_id=optional_text(fields, "originMsgId"),
        origin_topic=optional_text(fields, "originTopic"),
        max_reconsume_times=integer(fields, "maxReconsumeTimes", MAX_RECONSUME_TIMES_DEFAULT),
    )


UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
"""Set "true" in a QUERY_MESSAGE whose key is a message id (the client's unique key)."""


@dataclass(frozen=True, slots=True)
class QueryMessageHeader:
    """QUERY_MESSAGE: messages of ``topic`` by key (or by id, ``by_id``) stored in
    ``[begin_ms, end_ms]``, at most ``max_messages``."""

    topic: str
    key: str
    max_messages: int
    begin_ms: int
    end_ms: int
    by_id: bool


def query_message_header(fields: Mapping[str, str]) -> QueryMessageHeader:
    """What a message query asks for."""
    return QueryMessageHeader(
        topic=text(fields, "topic"),
        key=text(fields, "key"),
        max_messages=integer(fields, "maxNum"),
        begin_ms=integer(fields, "beginTimestamp"),
        end_ms=integer(fields, "endTimestamp"),
        by_id=boolean(fields, UNIQUE_KEY_QUERY),
    )


@dataclass(frozen=True, slots=True)
class ViewMessageHeader:
    """VIEW_MESSAGE_BY_ID: the message at a physical offset (the last 8 bytes of an
    offset message id); ``topic`` as newer clients send it, None from older ones."""

    physical_offset: int
    topic: str | None


def view_message_header(fields: Mapping[str, str]) -> ViewMessageHeader:
    """Which message a view names."""
    return ViewMessageHeader(integer(fields, "offset"), optional_text(fields, "topic"))
