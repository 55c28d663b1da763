"""Remoting headers, message properties, batches, offset ids and JSON bodies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import bodies, headers, messages
from protocol.remoting.errors import BodyError, HeaderError

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None)

_TEXT = st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"])
names = st.text(_TEXT, min_size=1, max_size=20)
values = st.text(_TEXT, max_size=20)
properties = st.dictionaries(names, values, max_size=6)
records = st.builds(
    messages.BatchRecord, flag=st.integers(-(1 << 31), (1 << 31) - 1), body=st.binary(max_size=200),
    properties=properties,
)  # fmt: skip


@FUZZ
@given(properties)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert messages.parse_properties(messages.format_properties(props)) == props


def test_properties_skip_entries_without_one_separator() -> None:
    text = "KEYS\x01k1 k2\x02broken\x02TAGS\x01a\x02x\x01y\x01z\x02"
    assert messages.parse_properties(text) == {"KEYS": "k1 k2", "TAGS": "a"}


@FUZZ
@given(st.lists(records, max_size=5))
def test_batches_round_trip(batch: list[messages.BatchRecord]) -> None:
    assert messages.parse_batch(messages.format_batch(batch)) == batch


@FUZZ
@given(st.binary(max_size=200))
def test_garbage_batches_are_a_body_error_or_records(data: bytes) -> None:
    outcome: list[messages.BatchRecord] | str
    try:
        outcome = messages.parse_batch(data)
    except BodyError as error:
        outcome = str(error)
    if isinstance(outcome, str):
        assert "batch record" in outcome
    else:  # whole records
        assert all(isinstance(record, messages.BatchRecord) for record in outcome)
        assert bool(outcome) == bool(data)


def test_batch_with_a_wrong_total_size_names_the_record() -> None:
    data = bytearray(messages.format_batch([messages.BatchRecord(0, b"hello", {"a": "b"})] * 2))
    second = len(data) // 2
    data[second : second + 4] = (999).to_bytes(4, "big")
    with pytest.raises(BodyError, match="batch record 1: total size 999"):
        messages.parse_batch(bytes(data))
    with pytest.raises(BodyError, match="batch record 0 is cut short"):
        messages.parse_batch(b"\x00\x00")


@FUZZ
@given(
    st.tuples(*[st.integers(0, 255)] * 4),
    st.integers(0, 65535),
    st.integers(0, 65535),
    st.integers(-1, (1 << 48) - 2),
)
def test_offset_message_ids_round_trip(
    ip: tuple[int, int, int, int], port: int, queue_id: int, offset: int
) -> None:
    host = ".".join(map(str, ip))
    text = messages.offset_message_id(host, port, queue_id, offset)
    assert len(text) == 32
    assert text == text.upper()
    assert messages.parse_offset_message_id(text) == (host, port, queue_id, offset)


def test_offset_message_id_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match="16 bits"):
        messages.offset_message_id("127.0.0.1", 1, 1 << 16, 0)
    with pytest.raises(ValueError, match="48 bits"):
        messages.offset_message_id("127.0.0.1", 1, 0, 1 << 48)
    with pytest.raises(ValueError, match="not hex"):
        messages.parse_offset_message_id("zz")
    assert messages.parse_offset_message_id(messages.offset_message_id("localhost", 9, 1, 2)) == (
        "0.0.0.0", 9, 1, 2,
    )  # fmt: skip


def test_send_headers_read_the_same_in_long_and_short_keys() -> None:
    long_form = {
        "producerGroup": "pg", "topic": "t", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0",
        "bornTimestamp": "1700000000000", "flag": "0", "properties": "TAGS\x01a\x02",
        "reconsumeTimes": "0", "unitMode": "false", "batch": "true", "maxReconsumeTimes": "16",
    }  # fmt: skip
    short_form = {
        key: long_form[name] for key, name in headers.SEND_V2_KEYS.items() if name in long_form
    }
    a = headers.send_header(long_form, short_keys=False)
    assert a == headers.send_header(short_form, short_keys=True)
    assert (a.topic, a.queue_id, a.batch, a.max_reconsume_times) == ("t", 3, True, 16)


def test_send_header_fields_coerced_as_the_clients_send_them() -> None:
    """C++ sends ints (already text after decoding; booleans as 0 and 1), ali-ons
    "4.0"-style numbers and JSON booleans."""
    assert headers.send_header({"a": "p", "b": "t", "m": "1"}, short_keys=True).batch
    assert not headers.send_header({"a": "p", "b": "t", "m": "0"}, short_keys=True).batch
    assert headers.send_header({"producerGroup": "p", "topic": "t", "batch": "1"},
                               short_keys=False).batch  # fmt: skip
    fields = {"a": "pg", "b": "t", "e": "2.0", "m": "TRUE", "g": "5"}
    header = headers.send_header(fields, short_keys=True)
    assert (header.queue_id, header.batch, header.born_timestamp_ms) == (2, True, 5)
    assert header.properties == ""
    assert header.max_reconsume_times is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"b": "t"}, "'producerGroup' is missing"),
        ({"a": "pg"}, "'topic' is missing"),
        ({"a": "pg", "b": "t", "e": "one"}, "'queueId' is 'one', not an integer"),
        ({"a": "pg", "b": "t", "e": "1.5"}, "not an integer"),
    ],
)
def test_send_header_errors_name_the_field(fields: dict[str, str], message: str) -> None:
    with pytest.raises(HeaderError, match=message):
        headers.send_header(fields, short_keys=True)


def test_other_headers() -> None:
    assert headers.queue_header({"topic": "t", "queueId": "1"}) == headers.QueueHeader("t", 1)
    assert headers.search_offset_header(
        {"topic": "t", "queueId": "1", "timestamp": "99"}
    ) == headers.SearchOffsetHeader("t", 1, 99)
    assert headers.unregister_client_header(
        {"clientID": "c", "producerGroup": "", "consumerGroup": "g"}
    ) == headers.UnregisterClientHeader("c", None, "g")
    end = headers.end_transaction_header(
        {"producerGroup": "p", "commitOrRollback": "8", "msgId": "AB", "transactionId": "x",
         "fromTransactionCheck": "true", "tranStateTableOffset": "5"}
    )  # fmt: skip
    assert (end.commit_or_rollback, end.from_transaction_check, end.topic) == (8, True, None)
    assert headers.topic_header({"topic": "t"}) == "t"
    with pytest.raises(HeaderError, match="'consumerGroup' is missing"):
        headers.consumer_group_header({})


def test_route_body_lists_every_broker_with_the_queues() -> None:
    brokers = [bodies.RouteBroker("b1", "10.0.0.1:8080"), bodies.RouteBroker("b2", "h:1")]
    route = json.loads(bodies.route_body("C", brokers, 8, 8))
    assert [q["brokerName"] for q in route["queueDatas"]] == ["b1", "b2"]
    assert route["queueDatas"][0] == {
        "brokerName": "b1", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0,
    }  # fmt: skip
    assert route["brokerDatas"][1] == {
        "cluster": "C", "brokerName": "b2", "brokerAddrs": {"0": "h:1"},
    }  # fmt: skip
    info = json.loads(bodies.cluster_info_body("C", brokers))
    assert info["clusterAddrTable"] == {"C": ["b1", "b2"]}
    assert info["brokerAddrTable"]["b1"]["brokerAddrs"] == {"0": "10.0.0.1:8080"}
    assert json.loads(bodies.consumer_list_body(["a"])) == {"consumerIdList": ["a"]}


def test_heartbeats_from_cpp_and_java_clients_read_alike() -> None:
    cpp = {
        "clientID": "1.2.3.4@1",
        "producerDataSet": [{"groupName": "pg"}],
        "consumerDataSet": [
            {"groupName": "cg", "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0,
             "subscriptionDataSet": [{"topic": "t", "subString": "a || b"},
                                     {"topic": "%RETRY%cg", "subString": ""}]},
        ],
    }  # fmt: skip
    java = json.loads(json.dumps(cpp))
    java["consumerDataSet"][0].update(consumeType="CONSUME_PASSIVELY", messageModel="CLUSTERING")
    for body in (cpp, java):
        beat = bodies.parse_heartbeat(json.dumps(body).encode())
        assert beat.client_id == "1.2.3.4@1"
        assert beat.producer_groups == ("pg",)
        (consumer,) = beat.consumers
        assert (consumer.group, consumer.consume_type, consumer.message_model) == (
            "cg", "CONSUME_PASSIVELY", "CLUSTERING",
        )  # fmt: skip
        assert consumer.subscriptions == (
            bodies.Subscription("t", "a || b"), bodies.Subscription("%RETRY%cg", "*"),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "not JSON"),
        (b"[]", "not an object"),
        (b"{}", "no clientID"),
        (b'{"clientID": "c", "producerDataSet": {}}', "producerDataSet is not a list"),
        (b'{"clientID": "c", "producerDataSet": [{}]}', "no groupName"),
        (
            b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "consumeType": 9}]}',
            "consumeType 9",
        ),
    ],
)
def test_bad_heartbeats_say_why(body: bytes, message: str) -> None:
    with pytest.raises(BodyError, match=message):
        bodies.parse_heartbeat(body)


hosts = st.builds(
    lambda ip, port: f"{'.'.join(map(str, ip))}:{port}",
    st.tuples(*[st.integers(0, 255)] * 4),
    st.integers(0, 65535),
)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
message_exts = st.builds(
    messages.MessageExt,
    topic=st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=30),
    queue_id=int32, queue_offset=int64, body=st.binary(max_size=200), properties=properties,
    flag=int32, sys_flag=st.integers(0, 0xF), born_timestamp_ms=int64, born_host=hosts,
    store_timestamp_ms=int64, store_host=hosts, physical_offset=int64, reconsume_times=int32,
    prepared_transaction_offset=int64, body_crc=int32,
)  # fmt: skip


@FUZZ
@given(st.lists(message_exts, max_size=4))
def test_message_exts_round_trip(records: list[messages.MessageExt]) -> None:
    data = b"".join(messages.encode_message_ext(record) for record in records)
    assert messages.parse_message_exts(data) == records


@FUZZ
@given(message_exts, st.data())
def test_cut_or_garbled_message_exts_are_a_body_error(
    record: messages.MessageExt, data: st.DataObject
) -> None:
    encoded = messages.encode_message_ext(record)
    cut = data.draw(st.integers(1, len(encoded) - 1))
    with pytest.raises(BodyError):
        messages.parse_message_exts(encoded[:cut])
    with pytest.raises(BodyError, match="magic"):
        messages.parse_message_exts(encoded[:4] + b"\x00\x00\x00\x00" + encoded[8:])


def test_queue_lock_bodies() -> None:
    body = json.dumps(
        {"consumerGroup": "g", "clientId": "c", "onlyThisBroker": False,
         "mqSet": [{"topic": "t", "brokerName": "b", "queueId": 2},
                   {"topic": "t", "brokerName": "b", "queueId": "3"}]}
    ).encode()  # fmt: skip
    locks = bodies.parse_queue_locks(body)
    assert locks == bodies.QueueLocks(
        "g", "c", (bodies.LockedQueue("t", "b", 2), bodies.LockedQueue("t", "b", 3))
    )
    assert json.loads(bodies.locked_queues_body(locks.queues[:1])) == {
        "lockOKMQSet": [{"topic": "t", "brokerName": "b", "queueId": 2}]
    }
    assert bodies.parse_queue_locks(b'{"consumerGroup": "g", "clientId": "c"}').queues == ()
    bad = {
        b"[]": "not an object",
        b'{"clientId": "c"}': "no consumerGroup",
        b'{"consumerGroup": "g"}': "no clientId",
        b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"queueId": 1}]}': "no topic",
        b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": "t", "queueId": -1}]}': (
            "not a queue id"
        ),
        b'{"consumerGroup": "g", "clientId": "c", "mqSet": {}}': "not a list",
    }
    for data, reason in bad.items():
        with pytest.raises(BodyError, match=reason):
            bodies.parse_queue_locks(data)
