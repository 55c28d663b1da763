"""The proxy's input rules and the reasons they report."""

from __future__ import annotations

import pytest

from broker.domain import Message, QueueInfo, TopicInfo
from broker.errors import BrokerError, Reason
from broker.processor import validation
from protocol.vocabulary import MessageType

NOW_MS = 1_700_000_000_000


def _message(**changes: object) -> Message:
    base = Message(topic="orders", body=b"x", message_id="0100AB")
    return base._replace(**changes)  # type: ignore[arg-type]


def _reason(call: object, *args: object) -> Reason | None:
    with pytest.raises(BrokerError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.reason


@pytest.mark.parametrize(
    "name",
    ["", "  ", "a" * 128, "bad topic", "bad/topic", "bad\n", "TBW102", "rmq_sys_x", "RMQ_SYS_Y"],
)
def test_bad_topic_names(name: str) -> None:
    assert _reason(validation.check_topic, name) is Reason.ILLEGAL_TOPIC
    assert _reason(validation.check_topic, name) is Reason.ILLEGAL_TOPIC  # not remembered


@pytest.mark.parametrize("name", ["orders", "a" * 127, "%DLQ%group", "a|b", "A-b_9"])
def test_good_topic_names(name: str) -> None:
    validation.check_topic(name)


@pytest.mark.parametrize("name", ["", "g" * 121, "bad group", "group\n", "CID_RMQ_SYS_x"])
def test_bad_group_names(name: str) -> None:
    assert _reason(validation.check_group, name) is Reason.ILLEGAL_CONSUMER_GROUP


def test_good_group_name() -> None:
    validation.check_group("g" * 120)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"body": b""}, Reason.MESSAGE_BODY_EMPTY),
        ({"body": b"x" * (4 * 1024 * 1024 + 1)}, Reason.MESSAGE_BODY_TOO_LARGE),
        ({"message_id": " "}, Reason.ILLEGAL_MESSAGE_ID),
        ({"topic": "no spaces"}, Reason.ILLEGAL_TOPIC),
        ({"tag": "a|b"}, Reason.ILLEGAL_MESSAGE_TAG),
        ({"tag": "a\x01"}, Reason.ILLEGAL_MESSAGE_TAG),
        ({"tag": "   "}, Reason.ILLEGAL_MESSAGE_TAG),
        ({"keys": ("ok", " ")}, Reason.ILLEGAL_MESSAGE_KEY),
        (
            {"user_properties": {f"k{i}": "v" for i in range(129)}},
            Reason.MESSAGE_PROPERTIES_TOO_LARGE,
        ),
        ({"user_properties": {"k": "v" * 16 * 1024}}, Reason.MESSAGE_PROPERTIES_TOO_LARGE),
        ({"user_properties": {"UNIQ_KEY": "v"}}, Reason.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"user_properties": {"a\nb": "v"}}, Reason.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"user_properties": {"": "v"}}, Reason.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (
            {"message_type": MessageType.FIFO, "message_group": "g" * 64},
            Reason.ILLEGAL_MESSAGE_GROUP,
        ),
        ({"message_type": MessageType.FIFO}, Reason.MESSAGE_TYPE_CONFLICT),
        ({"message_group": "g"}, Reason.MESSAGE_TYPE_CONFLICT),
        ({"message_type": MessageType.DELAY}, Reason.MESSAGE_TYPE_CONFLICT),
        (
            {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS + 25 * 3600_000},
            Reason.ILLEGAL_DELIVERY_TIME,
        ),
    ],
)
def test_bad_messages(changes: dict[str, object], reason: Reason) -> None:
    assert _reason(validation.check_message, _message(**changes), NOW_MS) is reason


def test_limits_are_inclusive() -> None:
    validation.check_message(
        _message(
            body=b"x" * 4 * 1024 * 1024,
            user_properties={f"k{i}": "v" for i in range(128)},
            message_type=MessageType.FIFO,
            message_group="g" * 63,
            tag="tag-1",
            keys=("k1", "k2"),
        ),
        NOW_MS,
    )


def test_topic_type_must_allow_the_message() -> None:
    topic = TopicInfo("orders", (QueueInfo(0),), frozenset({MessageType.NORMAL}))
    validation.check_type_allowed(_message(), topic)
    fifo = _message(message_type=MessageType.FIFO, message_group="g")
    assert _reason(validation.check_type_allowed, fifo, topic) is Reason.MESSAGE_TYPE_CONFLICT


def test_invisible_durations() -> None:
    validation.check_receive_invisible_ms(10_000)
    validation.check_receive_invisible_ms(12 * 3600_000)
    for bad in (9_999, 12 * 3600_000 + 1):
        assert _reason(validation.check_receive_invisible_ms, bad) is Reason.ILLEGAL_INVISIBLE_TIME
    validation.check_change_invisible_ms(0)
    assert _reason(validation.check_change_invisible_ms, -1) is Reason.ILLEGAL_INVISIBLE_TIME


def test_batch_size_is_capped() -> None:
    assert validation.check_batch_size(100) == 32
    assert validation.check_batch_size(1) == 1
    assert validation.check_batch_size(1000, 256) == 256  # a replicator's pull
    with pytest.raises(BrokerError):
        validation.check_batch_size(0)


def test_a_refused_property_key_is_refused_every_time() -> None:
    """Keys that pass are remembered; a refused one is checked (and refused) again."""
    for _ in range(2):
        validation.check_properties({"fine": "v"})
        with pytest.raises(BrokerError) as refused:
            validation.check_properties({"fine": "v", "UNIQ_KEY": "v"})
        assert refused.value.reason is Reason.ILLEGAL_MESSAGE_PROPERTY_KEY
