"""4.x messages to domain messages and back: system properties, types, ids; the client
registry of the remoting adapter."""

from __future__ import annotations

import itertools
import zlib

import pytest

from broker.domain import Message, QueueRef, SendResult
from broker.errors import BrokerError, Reason
from broker.remoting import convert
from broker.remoting.clients import RemotingClients
from broker.remoting.status import REASON_CODES, code_of
from protocol import errors as codes
from protocol.remoting import messages as wire
from protocol.remoting.bodies import ConsumerData, Heartbeat
from protocol.remoting.codes import ResponseCode
from protocol.remoting.errors import BodyError, HeaderError
from protocol.remoting.headers import SendBackHeader, SendMessageHeader, send_back_header
from protocol.vocabulary import MessageType, Placement

NOW_MS = 1_700_000_000_000


def _header(
    properties: dict[str, str], *, sys_flag: int = 0, queue_id: int = 2
) -> SendMessageHeader:
    return SendMessageHeader(
        "pg", "t", queue_id, sys_flag, 123, 0, wire.format_properties(properties)
    )


def _one(
    properties: dict[str, str],
    body: bytes = b"b",
    *,
    fifo_topic: bool = False,
    sys_flag: int = 0,
) -> tuple[Message, bool]:
    ids = (f"GEN{i}" for i in itertools.count())
    (message,), (named,) = convert.messages_from_send(
        _header(properties, sys_flag=sys_flag), body, batch=False, born_host="10.0.0.9:5000",
        now_ms=NOW_MS, new_id=lambda: next(ids), fifo_topic=fifo_topic,
    )  # fmt: skip
    return message, named


def test_system_properties_become_fields_and_the_rest_user_properties() -> None:
    message, named = _one(
        {"UNIQ_KEY": "ID1", "TAGS": "tg", "KEYS": "a  b", "PGROUP": "pg", "WAIT": "true", "x": "1"}
    )
    assert named
    assert (message.message_id, message.tag, message.keys) == ("ID1", "tg", ("a", "b"))
    assert dict(message.user_properties) == {"x": "1"}
    assert (message.queue_id, message.born_host, message.born_timestamp_ms) == (
        2,
        "10.0.0.9:5000",
        123,
    )
    assert message.message_type is MessageType.NORMAL


def test_a_message_without_a_client_id_gets_a_new_one() -> None:
    message, named = _one({"TAGS": "tg"})
    assert (message.message_id, named) == ("GEN0", False)


@pytest.mark.parametrize(
    ("properties", "due_ms"),
    [
        ({"DELAY": "3"}, NOW_MS + 10_000),
        ({"DELAY": "99"}, NOW_MS + 7_200_000),  # beyond the last level: the last
        ({"TIMER_DELIVER_MS": str(NOW_MS + 5)}, NOW_MS + 5),
        ({"__STARTDELIVERTIME": str(NOW_MS + 6)}, NOW_MS + 6),
        ({"TIMER_DELAY_MS": "7"}, NOW_MS + 7),
        ({"TIMER_DELAY_SEC": "8"}, NOW_MS + 8_000),
    ],
)
def test_timed_messages(properties: dict[str, str], due_ms: int) -> None:
    message, _ = _one({"UNIQ_KEY": "I", **properties})
    assert message.message_type is MessageType.DELAY
    assert message.delivery_timestamp_ms == due_ms


def test_delay_level_zero_is_not_timed_and_bad_times_are_corrupted() -> None:
    assert _one({"UNIQ_KEY": "I", "DELAY": "0"})[0].message_type is MessageType.NORMAL
    with pytest.raises(BrokerError) as error:
        _one({"UNIQ_KEY": "I", "TIMER_DELAY_MS": "soon"})
    assert error.value.reason is Reason.MESSAGE_CORRUPTED


def test_transaction_by_property_or_flag() -> None:
    assert _one({"UNIQ_KEY": "I", "TRAN_MSG": "true"})[0].message_type is MessageType.TRANSACTION
    assert _one({"UNIQ_KEY": "I"}, sys_flag=4)[0].message_type is MessageType.TRANSACTION


def test_sharding_key_makes_fifo_only_on_a_fifo_topic() -> None:
    fifo, _ = _one({"UNIQ_KEY": "I", "__SHARDINGKEY": "o1"}, fifo_topic=True)
    assert (fifo.message_type, fifo.message_group) == (MessageType.FIFO, "o1")
    normal, _ = _one({"UNIQ_KEY": "I", "__SHARDINGKEY": "o1"}, fifo_topic=False)
    assert (normal.message_type, normal.message_group, normal.queue_id) == (
        MessageType.NORMAL,
        None,
        2,
    )


def test_compressed_bodies_are_inflated_within_the_limit() -> None:
    message, _ = _one({"UNIQ_KEY": "I"}, zlib.compress(b"z" * 100), sys_flag=1)
    assert message.body == b"z" * 100
    with pytest.raises(BrokerError) as error:
        _one({"UNIQ_KEY": "I"}, b"not zlib", sys_flag=1)
    assert error.value.reason is Reason.MESSAGE_CORRUPTED
    bomb = zlib.compress(b"\0" * (4 * 1024 * 1024 + 1))
    with pytest.raises(BrokerError) as error:
        _one({"UNIQ_KEY": "I"}, bomb, sys_flag=1)
    assert error.value.reason is Reason.MESSAGE_BODY_TOO_LARGE


def test_batches_and_empty_batches() -> None:
    body = wire.format_batch(
        [wire.BatchRecord(0, b"1", {"UNIQ_KEY": "A"}), wire.BatchRecord(0, b"2", {"TAGS": "t"})]
    )
    messages, named = convert.messages_from_send(
        _header({}), body, batch=True, born_host="h:1", now_ms=NOW_MS,
        new_id=lambda: "NEW", fifo_topic=False,
    )  # fmt: skip
    assert [m.message_id for m in messages] == ["A", "NEW"]
    assert named == [True, False]
    with pytest.raises(BrokerError, match="holds no message"):
        convert.messages_from_send(
            _header({}), b"", batch=True, born_host="h:1", now_ms=NOW_MS,
            new_id=lambda: "NEW", fifo_topic=False,
        )  # fmt: skip


def test_send_answer_fields() -> None:
    message, _ = _one({"UNIQ_KEY": "ID1"})
    queued = SendResult(QueueRef("t", 3), 41, NOW_MS)
    fields = convert.send_response_fields([message], [True], [queued], "10.1.2.3:8080")
    assert wire.parse_offset_message_id(fields["msgId"]) == ("10.1.2.3", 8080, 3, 41)
    assert (fields["queueId"], fields["queueOffset"]) == ("3", "41")
    assert "transactionId" not in fields
    named_here = convert.send_response_fields([message], [False], [queued], "10.1.2.3:8080")
    assert named_here["msgId"] == "ID1"
    half = SendResult(QueueRef("t", 3), -1, NOW_MS, Placement.HALF)
    fields = convert.send_response_fields([message], [True], [half], "10.1.2.3:8080")
    assert convert.parse_transaction_id(fields["transactionId"]) == ("t", "T1:3:ID1")
    assert fields["queueOffset"] == "-1"


def test_transaction_ids_refuse_what_they_did_not_issue() -> None:
    for text in ("", "T1:3:ID1", "@T1:3:x", "t@"):
        with pytest.raises(BrokerError) as error:
            convert.parse_transaction_id(text)
        assert error.value.reason is Reason.INVALID_TRANSACTION_ID


def test_route_brokers_are_named_by_address_once_each() -> None:
    brokers = convert.route_brokers(["10.0.0.2:8080", "10.0.0.1:8080", "10.0.0.2:8080"])
    assert [(b.name, b.address) for b in brokers] == [
        ("rip5-10-0-0-1-8080", "10.0.0.1:8080"), ("rip5-10-0-0-2-8080", "10.0.0.2:8080"),
    ]  # fmt: skip


def test_clients_by_heartbeat_connection_and_group() -> None:
    clients = RemotingClients()
    consumer = ConsumerData("cg", "CONSUME_PASSIVELY", "CLUSTERING", ())
    clients.heartbeat(1, Heartbeat("c1", ("pg",), (consumer,)), 10)
    clients.heartbeat(2, Heartbeat("c2", (), (consumer,)), 10)
    assert clients.consumers_of("cg") == ["c1", "c2"]
    assert clients.producer_groups == ["pg"]
    clients.unregister("c1", "pg", None)
    assert "c1" in clients  # still a consumer
    clients.unregister("c1", None, "cg")
    assert "c1" not in clients
    clients.connection_closed(2)
    assert clients.consumers_of("cg") == []
    clients.unregister("nobody", "pg", "cg")  # unknown: nothing to do


def test_every_reason_and_codec_error_has_a_response_code() -> None:
    assert set(REASON_CODES) == set(Reason)
    assert code_of(BrokerError(codes.UNAVAILABLE, "x")) is ResponseCode.SERVICE_NOT_AVAILABLE
    assert code_of(BrokerError(codes.OVERLOADED, "x")) is ResponseCode.SYSTEM_BUSY
    assert code_of(BrokerError(codes.STORAGE_FAILED, "x")) is ResponseCode.SYSTEM_ERROR
    assert code_of(HeaderError("x")) is ResponseCode.INVALID_PARAMETER
    assert code_of(BodyError("x")) is ResponseCode.MESSAGE_ILLEGAL
    assert code_of(RuntimeError("bug")) is ResponseCode.SYSTEM_ERROR


def _back(**fields: str) -> SendBackHeader:
    return send_back_header({"group": "cg", "offset": "0", **fields})


def test_a_send_back_names_its_message_by_position_and_topic() -> None:
    physical = convert.physical_offset(QueueRef("orders", 3), 41)
    assert convert.given_back_position(_back(offset=str(physical)), {"orders"}) == (
        QueueRef("orders", 3), 41,
    )  # fmt: skip
    named = _back(offset=str(physical), originTopic="other")
    assert convert.given_back_position(named, {"orders"})[0] == QueueRef("other", 3)
    retried = convert.physical_offset(QueueRef("%RETRY%cg", 0), 7)
    assert retried & convert.RETRY_POSITION_MARK
    assert convert.given_back_position(_back(offset=str(retried)), set()) == (
        QueueRef("%RETRY%cg", 0), 7,
    )  # fmt: skip
    for topics in (set(), {"a", "b"}):
        with pytest.raises(BrokerError, match="names no originTopic"):
            convert.given_back_position(_back(offset=str(physical)), topics)
    with pytest.raises(BrokerError, match="negative"):
        convert.given_back_position(_back(offset="-1"), {"orders"})


def test_a_message_given_back_is_retried_later_then_dead_lettered() -> None:
    original = Message("orders", b"x", "ID1", tag="t", user_properties={"k": "v"}, queue_id=2)
    first = convert.given_back(original, "orders", _back(), 1_000)
    assert (first.topic, first.message_id, first.tag) == ("%RETRY%cg", "ID1", "t")
    assert first.message_type is MessageType.DELAY
    assert first.delivery_timestamp_ms == 1_000 + 10_000  # level 3 + 0 times
    assert first.user_properties == {
        "k": "v", "RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": "ID1", "RECONSUME_TIME": "1",
    }  # fmt: skip
    assert convert.reconsume_times(first) == 1
    second = convert.given_back(first, "%RETRY%cg", _back(), 0)
    assert second.delivery_timestamp_ms == 30_000  # level 3 + 1 time
    assert second.user_properties["RETRY_TOPIC"] == "orders"
    assert second.user_properties["RECONSUME_TIME"] == "2"
    chosen = convert.given_back(original, "orders", _back(delayLevel="99"), 0)
    assert chosen.delivery_timestamp_ms == convert.DELAY_LEVELS_MS[-1]
    dead = convert.given_back(second, "%RETRY%cg", _back(maxReconsumeTimes="2"), 0)
    assert (dead.topic, dead.message_type, dead.delivery_timestamp_ms) == (
        "%DLQ%cg", MessageType.NORMAL, None,
    )  # fmt: skip
    assert dead.dead_letter_of == ("orders", "ID1")
    at_once = convert.given_back(original, "orders", _back(delayLevel="-1"), 0)
    assert at_once.topic == "%DLQ%cg"


def test_send_back_header_fields() -> None:
    header = send_back_header({"group": "g", "offset": "9", "delayLevel": "2",
                               "originMsgId": "M", "originTopic": "T",
                               "maxReconsumeTimes": "3"})  # fmt: skip
    assert header == SendBackHeader("g", 9, 2, "M", "T", 3)
    assert _back().max_reconsume_times == 16
    with pytest.raises(HeaderError, match="'offset'"):
        send_back_header({"group": "g"})
