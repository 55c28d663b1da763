"""Input rules of the RocketMQ 5 proxy, as protocol-agnostic checks.

Every check raises :class:`BrokerError` with the :class:`Reason` the official
clients expect (see the v2 status table); none of them touches state.

PURE.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

from broker.domain import Message, TopicInfo
from broker.errors import BrokerError, Reason
from protocol import errors as codes
from protocol.rocketmq.pull import BATCH_SIZE_MAX
from protocol.vocabulary import MessageType

TOPIC_LENGTH_MAX = 127
GROUP_LENGTH_MAX = 120
BODY_BYTES_MAX = 4 * 1024 * 1024
PROPERTY_COUNT_MAX = 128
PROPERTIES_BYTES_MAX = 16 * 1024
MESSAGE_GROUP_BYTES_MAX = 63  # 64 bytes or more is refused
DELIVERY_AHEAD_MS_MAX = 24 * 3600 * 1000
RECEIVE_INVISIBLE_MS_MIN = 10_000
INVISIBLE_MS_MAX = 12 * 3600 * 1000

_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")
SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", "CID_SYS_RMQ_")
# Property keys the storage layer uses itself; a client may not set them.
RESERVED_PROPERTY_KEYS = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
        "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG",
        "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME",
        "CLUSTER", "MSG_TYPE", "__STARTDELIVERTIME", "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "SHARDING_KEY", "__SHARDINGKEY",
        "TRANSACTION_ID", "INNER_NUM", "INNER_BASE",
    }
)  # fmt: skip


@functools.lru_cache(maxsize=4096)  # every sent message is checked; a name passes or not
def check_topic(name: str) -> None:
    """Topic names: ``[%|a-zA-Z0-9_-]``, at most 127 characters, not a system topic.

    Only names that pass are remembered (a raise is not cached).
    """
    if not name or not name.strip():
        raise BrokerError.of(Reason.ILLEGAL_TOPIC, "topic name is blank")
    if len(name) > TOPIC_LENGTH_MAX:
        raise BrokerError.of(
            Reason.ILLEGAL_TOPIC, f"topic name is longer than {TOPIC_LENGTH_MAX} characters"
        )
    if not _NAME.fullmatch(name):
        raise BrokerError.of(
            Reason.ILLEGAL_TOPIC, f"topic name {name!r} has characters outside [%|a-zA-Z0-9_-]"
        )
    if name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIXES):
        raise BrokerError.of(Reason.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")


def check_group(name: str) -> None:
    """Consumer group names: ``[%|a-zA-Z0-9_-]``, at most 120 characters, not a system group."""
    if not name or not name.strip():
        raise BrokerError.of(Reason.ILLEGAL_CONSUMER_GROUP, "consumer group name is blank")
    if len(name) > GROUP_LENGTH_MAX:
        raise BrokerError.of(
            Reason.ILLEGAL_CONSUMER_GROUP,
            f"consumer group name is longer than {GROUP_LENGTH_MAX} characters",
        )
    if not _NAME.fullmatch(name):
        raise BrokerError.of(
            Reason.ILLEGAL_CONSUMER_GROUP,
            f"consumer group name {name!r} has characters outside [%|a-zA-Z0-9_-]",
        )
    if name.startswith(SYSTEM_GROUP_PREFIXES):
        raise BrokerError.of(Reason.ILLEGAL_CONSUMER_GROUP, f"group {name!r} is a system group")


def check_tag(tag: str | None) -> None:
    """Tags may not contain ``|`` or control characters, nor be only whitespace."""
    if tag is None:
        return
    if not tag.strip():
        raise BrokerError.of(Reason.ILLEGAL_MESSAGE_TAG, "tag is blank")
    if "|" in tag:
        raise BrokerError.of(Reason.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains '|'")
    if _CONTROL.search(tag):
        raise BrokerError.of(Reason.ILLEGAL_MESSAGE_TAG, "tag contains a control character")


def check_keys(keys: Iterable[str]) -> None:
    """Message keys may not be blank nor contain control characters."""
    for key in keys:
        if not key.strip():
            raise BrokerError.of(Reason.ILLEGAL_MESSAGE_KEY, "message key is blank")
        if _CONTROL.search(key):
            raise BrokerError.of(Reason.ILLEGAL_MESSAGE_KEY, "message key has a control character")


@functools.lru_cache(maxsize=4096)  # every sent property is checked; a key passes or not
def _property_key_bytes(key: str) -> int:
    """A user property key's UTF-8 size, once it is neither blank, nor with a control
    character, nor reserved (only keys that pass are remembered)."""
    if not key or not key.strip():
        raise BrokerError.of(Reason.ILLEGAL_MESSAGE_PROPERTY_KEY, "property key is blank")
    if _CONTROL.search(key):
        raise BrokerError.of(
            Reason.ILLEGAL_MESSAGE_PROPERTY_KEY, "property key has a control character"
        )
    if key in RESERVED_PROPERTY_KEYS:
        raise BrokerError.of(
            Reason.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved"
        )
    return len(key.encode())


def check_properties(properties: Mapping[str, str]) -> None:
    """At most 128 user properties, 16 KiB in all; keys neither reserved nor with controls."""
    if len(properties) > PROPERTY_COUNT_MAX:
        raise BrokerError.of(
            Reason.MESSAGE_PROPERTIES_TOO_LARGE,
            f"message has {len(properties)} user properties, more than {PROPERTY_COUNT_MAX}",
        )
    size = 0
    for key, value in properties.items():
        size += _property_key_bytes(key) + len(value.encode())
    if size > PROPERTIES_BYTES_MAX:
        raise BrokerError.of(
            Reason.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties take {size} bytes, more than {PROPERTIES_BYTES_MAX}",
        )


def check_message(
    message: Message, now_ms: int, delivery_ahead_ms_max: int = DELIVERY_AHEAD_MS_MAX
) -> None:
    """Every rule a single message must pass before its topic is looked up.

    A DELAY message may be due at most ``delivery_ahead_ms_max`` after ``now_ms``
    (a time in the past means at once).
    """
    check_topic(message.topic)
    if not message.message_id.strip():
        raise BrokerError.of(Reason.ILLEGAL_MESSAGE_ID, "message id is blank")
    if not message.body:
        raise BrokerError.of(Reason.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(message.body) > BODY_BYTES_MAX:
        raise BrokerError.of(
            Reason.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {BODY_BYTES_MAX}"
        )
    check_tag(message.tag)
    check_keys(message.keys)
    check_properties(message.user_properties)
    group = message.message_group
    if group is not None:
        if not group.strip() or _CONTROL.search(group):
            raise BrokerError.of(Reason.ILLEGAL_MESSAGE_GROUP, "message group is blank or odd")
        if len(group.encode()) > MESSAGE_GROUP_BYTES_MAX:
            raise BrokerError.of(
                Reason.ILLEGAL_MESSAGE_GROUP,
                f"message group must be shorter than {MESSAGE_GROUP_BYTES_MAX + 1} bytes",
            )
    if (message.message_type is MessageType.FIFO) != (group is not None):
        raise BrokerError.of(
            Reason.MESSAGE_TYPE_CONFLICT, "a message group is set exactly on FIFO messages"
        )
    delivery = message.delivery_timestamp_ms
    if (message.message_type is MessageType.DELAY) != (delivery is not None):
        raise BrokerError.of(
            Reason.MESSAGE_TYPE_CONFLICT, "a delivery timestamp is set exactly on DELAY messages"
        )
    if delivery is not None and delivery - now_ms > delivery_ahead_ms_max:
        raise BrokerError.of(
            Reason.ILLEGAL_DELIVERY_TIME,
            f"delivery timestamp is {delivery - now_ms} ms ahead, more than the maximum "
            f"delay of {delivery_ahead_ms_max} ms",
        )


def check_type_allowed(message: Message, topic: TopicInfo) -> None:
    """The topic must accept the message's type."""
    if message.message_type not in topic.message_types:
        allowed = ", ".join(sorted(t.name for t in topic.message_types))
        raise BrokerError.of(
            Reason.MESSAGE_TYPE_CONFLICT,
            f"topic {topic.name!r} accepts {allowed}, not {message.message_type.name}",
        )


def check_receive_invisible_ms(invisible_ms: int) -> None:
    """Receive: 10 s to 12 h."""
    if not RECEIVE_INVISIBLE_MS_MIN <= invisible_ms <= INVISIBLE_MS_MAX:
        raise BrokerError.of(
            Reason.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration {invisible_ms} ms is outside [10 s, 12 h]",
        )


def check_change_invisible_ms(invisible_ms: int) -> None:
    """ChangeInvisibleDuration: 0 to 12 h."""
    if not 0 <= invisible_ms <= INVISIBLE_MS_MAX:
        raise BrokerError.of(
            Reason.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration {invisible_ms} ms is outside [0, 12 h]",
        )


def check_batch_size(batch_size: int, most: int = BATCH_SIZE_MAX) -> int:
    """A receive or pull batch: at least 1; more than ``most`` (RocketMQ's 32, or a
    replicator's pull cap) is capped to it."""
    if batch_size <= 0:
        raise BrokerError(codes.BAD_REQUEST, f"batch size {batch_size} must be positive")
    return min(batch_size, most)
