"""The remoting server over a real socket, with the in-memory ports.

What the real-client tests cannot reach: bad frames, unknown codes, answers
out of order, and the exact fields of each answer.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest

from broker.domain import GroupInfo, Message, QueueInfo, QueueRef, SendResult, TopicInfo
from broker.grpc.server import Ports, build_service
from broker.remoting import server as remoting_server
from broker.remoting.server import RemotingServer
from broker.remoting.service import FixedBrokers, RemotingService
from broker.services.clock import SystemClock
from broker.services.memory import MemoryCoordination, MemoryMetadata, MemoryStore
from protocol.remoting import bodies, messages
from protocol.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode, SerializeType
from protocol.remoting.frames import RemotingCommand, encode
from protocol.vocabulary import MessageType
from tests.contract.remoting_wire import WireClient, json_body
from tests.waiting import async_wait_until

pytestmark = pytest.mark.integration
FRAME_BYTES_MAX = 64 * 1024


class GatedStore(MemoryStore):
    """Appends to topic ``slow`` wait until ``gate`` opens (to hold a request)."""

    def __init__(self, clock: SystemClock, metadata: MemoryMetadata) -> None:
        super().__init__(clock, metadata)
        self.gate = asyncio.Event()
        self.held = 0  # appends waiting at the gate

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        if queue.topic == "slow":
            self.held += 1
            await self.gate.wait()
        return await super().append(queue, messages)


@dataclass
class Broker:
    server: RemotingServer
    store: GatedStore
    port: int


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    clock = SystemClock()
    metadata = MemoryMetadata(
        [
            TopicInfo(
                "orders", tuple(QueueInfo(i) for i in range(4)), frozenset({MessageType.NORMAL})
            ),
            TopicInfo("slow", (QueueInfo(0),), frozenset({MessageType.NORMAL})),
            TopicInfo("timed", (QueueInfo(0),), frozenset({MessageType.DELAY})),
            TopicInfo("txn", (QueueInfo(0),), frozenset({MessageType.TRANSACTION})),
        ],
        [GroupInfo("cg")],
    )
    store = GatedStore(clock, metadata)
    messaging = build_service(Ports(metadata, store, clock), receipt_secret=b"s", endpoint="x:1")
    service = RemotingService(
        route=messaging.route_processor,
        producer=messaging.producer_processor,
        store=store,
        clock=clock,
        brokers=FixedBrokers(["10.0.0.2:8080", "10.0.0.1:8080"]),
        cluster="DefaultCluster",
        address="10.0.0.1:8080",
        transactions=messaging.transactions,
        pulls=messaging.pulls,
        coordination=MemoryCoordination(clock),
    )
    server = RemotingServer(service, "127.0.0.1:0", frame_bytes_max=FRAME_BYTES_MAX)
    port = await server.start()
    yield Broker(server, store, port)
    store.gate.set()
    await server.stop(1.0)


async def _client(broker: Broker) -> AsyncIterator[WireClient]:
    client = await WireClient.connect(broker.port)
    yield client
    await client.close()


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[WireClient]:
    async for c in _client(broker):
        yield c


def _props(**extra: str) -> str:
    return messages.format_properties({"UNIQ_KEY": "C0A80001000018B4AAC2000000000001", **extra})


def _send_v2(topic: str, queue_id: int, properties: str, **extra: str) -> dict[str, str]:
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0"}
    fields.update(g="1700000000000", h="0", i=properties, j="0", k="false")
    return {**fields, **extra}


async def test_route_lists_every_broker_serving_all_queues(client: WireClient) -> None:
    answer = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert answer.code == ResponseCode.SUCCESS
    route = json_body(answer)
    assert isinstance(route, dict)
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [
        {"0": "10.0.0.1:8080"}, {"0": "10.0.0.2:8080"},
    ]  # fmt: skip
    assert {(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]} == {
        (4, 4, bodies.PERM_READ_WRITE)
    }
    info = json_body(await client.call(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert isinstance(info, dict)
    assert len(info["clusterAddrTable"]["DefaultCluster"]) == 2


async def test_unknown_and_system_topics_have_no_route(client: WireClient) -> None:
    for topic in ("nope", "TBW102"):
        answer = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST, topic
        assert answer.remark
    # A group's retry topic exists once the group does (4.x push consumers subscribe
    # to it by themselves): one queue.
    retry = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%cg"})
    assert retry.code == ResponseCode.SUCCESS
    assert [q["readQueueNums"] for q in json.loads(retry.body)["queueDatas"]] == [1, 1]
    answer = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert answer.code == ResponseCode.INVALID_PARAMETER
    assert answer.remark == "header field 'topic' is missing"


async def test_send_v1_and_v2_store_the_message_with_its_system_properties(
    broker: Broker, client: WireClient
) -> None:
    props = _props(TAGS="tagA", KEYS="k1 k2", color="red")
    v2 = await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 2, props), b"hello")
    assert v2.code == ResponseCode.SUCCESS, v2.remark
    assert (v2.ext_fields["queueId"], v2.ext_fields["queueOffset"]) == ("2", "0")
    assert messages.parse_offset_message_id(v2.ext_fields["msgId"]) == ("10.0.0.1", 8080, 2, 0)
    long_keys = {"producerGroup": "pg", "topic": "orders", "queueId": 2, "sysFlag": 0,
                 "bornTimestamp": 1, "flag": 0, "properties": props}  # fmt: skip
    # The C++ client writes numbers as JSON numbers.
    header = json.dumps({"code": 10, "language": "CPP", "version": 63, "opaque": 99, "flag": 0,
                         "extFields": long_keys}).encode()  # fmt: skip
    client.writer.write(struct.pack(">II", 4 + len(header) + 5, len(header)) + header + b"world")
    v1 = await client.read()
    assert (v1.opaque, v1.code, v1.ext_fields["queueOffset"]) == (99, ResponseCode.SUCCESS, "1")
    stored = broker.store.messages(QueueRef("orders", 2))
    assert [m.body for m in stored] == [b"hello", b"world"]
    first = stored[0]
    assert first.message_id == "C0A80001000018B4AAC2000000000001"
    assert (first.tag, first.keys, dict(first.user_properties)) == (
        "tagA",
        ("k1", "k2"),
        {"color": "red"},
    )
    assert first.message_type is MessageType.NORMAL
    assert first.born_timestamp_ms == 1700000000000


async def test_batch_send_is_one_append_with_every_record(
    broker: Broker, client: WireClient
) -> None:
    records = [
        messages.BatchRecord(0, f"m{i}".encode(), {"UNIQ_KEY": f"ID{i}", "TAGS": "b"})
        for i in range(3)
    ]
    body = messages.format_batch(records)
    batch = await client.call(RequestCode.SEND_BATCH_MESSAGE, _send_v2("orders", 1, ""), body)
    assert batch.code == ResponseCode.SUCCESS, batch.remark
    assert len(batch.ext_fields["msgId"].split(",")) == 3
    # rocketmq==0.4.4's send_batch: SEND_MESSAGE with batch set.
    fields = {"producerGroup": "pg", "topic": "orders", "queueId": "1", "batch": "true"}
    again = await client.call(RequestCode.SEND_MESSAGE, fields, body)
    assert again.code == ResponseCode.SUCCESS
    assert again.ext_fields["queueOffset"] == "3"
    assert [m.message_id for m in broker.store.messages(QueueRef("orders", 1))] == [
        "ID0", "ID1", "ID2", "ID0", "ID1", "ID2",
    ]  # fmt: skip


async def test_compressed_and_timed_and_transactional_sends(
    broker: Broker, client: WireClient
) -> None:
    import zlib

    fields = _send_v2("orders", 0, _props())
    fields["f"] = "1"  # compressed
    answer = await client.call(RequestCode.SEND_MESSAGE_V2, fields, zlib.compress(b"x" * 5000))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert broker.store.messages(QueueRef("orders", 0))[0].body == b"x" * 5000
    timed = await client.call(
        RequestCode.SEND_MESSAGE_V2, _send_v2("timed", 0, _props(DELAY="3")), b"t"
    )
    assert timed.code == ResponseCode.SUCCESS
    assert timed.ext_fields["queueOffset"] == "-1"
    assert broker.store.held_count == 1
    half = await client.call(
        RequestCode.SEND_MESSAGE_V2, _send_v2("txn", 0, _props(TRAN_MSG="true", PGROUP="pg")), b"h"
    )
    assert half.code == ResponseCode.SUCCESS, half.remark
    transaction_id = half.ext_fields["transactionId"]
    assert transaction_id.startswith("txn@")
    assert broker.store.half_count == 1
    end = {"producerGroup": "pg", "tranStateTableOffset": "-1", "commitLogOffset": "0",
           "commitOrRollback": "8", "fromTransactionCheck": "false",
           "msgId": "C0A80001000018B4AAC2000000000001"}  # fmt: skip
    end["transactionId"] = transaction_id
    client.request(RequestCode.END_TRANSACTION, end, flag=FLAG_ONEWAY)  # oneway: no answer
    await async_wait_until(lambda: broker.store.half_count == 0, 10, "the commit")
    assert (await client.call(RequestCode.HEART_BEAT, {}, b'{"clientID": "c"}')).code == 0
    assert len(broker.store.messages(QueueRef("txn", 0))) == 1


async def test_send_errors_say_why(client: WireClient) -> None:
    cases = [
        (_send_v2("nope", 0, _props()), b"x", ResponseCode.TOPIC_NOT_EXIST, "nope"),
        (_send_v2("orders", 0, _props()), b"", ResponseCode.MESSAGE_ILLEGAL, "body is empty"),
        (_send_v2("orders", 0, _props(), e="x"), b"x", ResponseCode.INVALID_PARAMETER, "queueId"),
        (_send_v2("timed", 0, _props()), b"x", ResponseCode.MESSAGE_ILLEGAL, "accepts DELAY"),
    ]
    for fields, body, code, remark in cases:
        answer = await client.call(RequestCode.SEND_MESSAGE_V2, fields, body)
        assert answer.code == code, (fields, answer.remark)
        assert answer.remark is not None
        assert remark in answer.remark
    bad_batch = await client.call(
        RequestCode.SEND_BATCH_MESSAGE, _send_v2("orders", 0, ""), b"\x00\x01"
    )
    assert bad_batch.code == ResponseCode.MESSAGE_ILLEGAL
    assert bad_batch.remark is not None
    assert "batch record 0" in bad_batch.remark


async def test_a_message_without_a_client_id_gets_one_in_the_answer(
    broker: Broker, client: WireClient
) -> None:
    """ali-ons sends no UNIQ_KEY and reports the answer's msgId as the message id."""
    answers = [
        await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 0, "TAGS\x01t\x02"), b"x")
        for _ in range(2)
    ]
    ids = [answer.ext_fields["msgId"] for answer in answers]
    stored = broker.store.messages(QueueRef("orders", 0))
    assert [m.message_id for m in stored] == ids
    assert len(set(ids)) == 2
    assert all(len(i) == 32 for i in ids)


async def test_heartbeat_consumer_list_and_unregister(broker: Broker, client: WireClient) -> None:
    subscriptions = [{"topic": "orders", "subString": "*"}]
    consumer = {"groupName": "cg", "consumeType": 1, "messageModel": 1,
                "subscriptionDataSet": subscriptions}  # fmt: skip
    beat = {
        "clientID": "c1",
        "producerDataSet": [{"groupName": "pg"}],
        "consumerDataSet": [consumer],
    }
    answer = await client.call(RequestCode.HEART_BEAT, {}, json.dumps(beat).encode())
    assert answer.code == ResponseCode.SUCCESS
    listed = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
    assert json_body(listed) == {"consumerIdList": ["c1"]}
    await client.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "cg"})
    listed = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
    assert json_body(listed) == {"consumerIdList": []}
    bad = await client.call(RequestCode.HEART_BEAT, {}, b"{")
    assert bad.code == ResponseCode.MESSAGE_ILLEGAL
    assert bad.remark
    assert "not JSON" in bad.remark


async def test_offsets_of_a_queue(client: WireClient) -> None:
    for i in range(3):
        props = messages.format_properties({"UNIQ_KEY": f"O{i}"})
        await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 3, props), b"x")
    queue = {"topic": "orders", "queueId": "3"}
    assert (await client.call(RequestCode.GET_MAX_OFFSET, queue)).ext_fields["offset"] == "3"
    assert (await client.call(RequestCode.GET_MIN_OFFSET, queue)).ext_fields["offset"] == "0"
    search = await client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": "0"})
    assert search.ext_fields["offset"] == "0"
    late = await client.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": str(1 << 50)}
    )
    assert late.ext_fields["offset"] == "3"
    negative = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "-1"})
    assert negative.code == ResponseCode.INVALID_PARAMETER


async def test_unknown_codes_are_not_supported_and_the_connection_stays(client: WireClient) -> None:
    for code in (RequestCode.GET_KV_CONFIG_BY_VALUE, 12345):
        answer = await client.call(code, {"x": "y"})
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert answer.remark == f"request code {code} is not supported by this broker"
    assert (await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0


async def test_requests_are_answered_out_of_order_by_opaque(
    broker: Broker, client: WireClient
) -> None:
    slow = client.request(RequestCode.SEND_MESSAGE_V2, _send_v2("slow", 0, _props()), b"s")
    fast = client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    first = await client.read()
    assert first.opaque == fast
    assert first.code == ResponseCode.SUCCESS
    broker.store.gate.set()
    second = await client.read()
    assert second.opaque == slow
    assert second.code == ResponseCode.SUCCESS


async def test_binary_headers_are_answered_in_binary(client: WireClient) -> None:
    client.send(
        RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 5, ext_fields={"topic": "orders"},
                        serialize_type=SerializeType.ROCKETMQ)
    )  # fmt: skip
    answer = await client.read()
    assert (answer.opaque, answer.code, answer.serialize_type) == (5, 0, SerializeType.ROCKETMQ)


async def test_malformed_headers_are_answered_and_the_connection_goes_on(
    client: WireClient,
) -> None:
    header = b'{"code": 105, "opaque": 31, "extFields": [1]}'
    client.writer.write(struct.pack(">II", 4 + len(header), len(header)) + header)
    answer = await client.read()
    assert (answer.opaque, answer.code) == (31, ResponseCode.SYSTEM_ERROR)
    assert answer.remark is not None
    assert "extFields is a list" in answer.remark
    garbage = b"\x00\x00\x00\x0c" + b"\x07\x00\x00\x04" + b"junkjunk"
    client.writer.write(garbage)
    answer = await client.read()
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "serialize type 7" in (answer.remark or "")
    assert (await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0


@pytest.mark.parametrize(
    ("data", "remark"),
    [
        (struct.pack(">I", FRAME_BYTES_MAX + 1), f"{FRAME_BYTES_MAX + 1} bytes exceeds"),
        (struct.pack(">I", 2) + b"ab", "below the 4 bytes"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds"),
    ],
)
async def test_unframeable_streams_are_answered_then_closed_and_the_broker_serves_on(
    broker: Broker, client: WireClient, data: bytes, remark: str
) -> None:
    client.writer.write(data)
    answer = await client.read()
    assert (answer.opaque, answer.code) == (0, ResponseCode.SYSTEM_ERROR)
    assert answer.remark is not None
    assert remark in answer.remark
    assert await client.closed()
    async for other in _client(broker):
        assert (await other.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0


async def test_a_truncated_frame_is_answered_when_the_peer_stops_sending(
    broker: Broker, client: WireClient
) -> None:
    frame = encode(
        RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 3, ext_fields={"topic": "orders"})
    )
    opaque = client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    client.writer.write(frame[:-5])
    client.writer.write_eof()
    answered = await client.read()
    assert answered.opaque == opaque
    assert answered.code == 0
    answer = await client.read()
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None
    assert "stream ended inside a frame" in answer.remark
    assert await client.closed()
    async for other in _client(broker):
        assert (await other.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0


async def test_oneway_requests_get_no_answer(client: WireClient) -> None:
    client.request(
        RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 0, _props()), b"o", flag=FLAG_ONEWAY
    )
    # Served concurrently with what follows: wait (with a deadline) until it is stored.
    # Every answer read belongs to a call (``call`` checks the opaque): none to the oneway.
    deadline = asyncio.get_running_loop().time() + 10
    offset = "0"
    while offset != "1" and asyncio.get_running_loop().time() < deadline:
        answer = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "0"})
        offset = answer.ext_fields["offset"]
    assert offset == "1"


async def test_requests_beyond_the_in_flight_limit_are_busy(
    broker: Broker, client: WireClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remoting_server, "REQUESTS_IN_FLIGHT_MAX", 2)
    held = [
        client.request(RequestCode.SEND_MESSAGE_V2, _send_v2("slow", 0, _props()), b"s")
        for _ in range(2)
    ]
    busy = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert busy.code == ResponseCode.SYSTEM_BUSY
    assert busy.remark is not None
    assert "2 requests in flight" in busy.remark
    broker.store.gate.set()
    answered = {(await client.read()).opaque for _ in held}
    assert answered == set(held)
    assert (await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0


async def test_stop_answers_requests_in_flight_then_closes_every_connection(
    broker: Broker, client: WireClient
) -> None:
    idle = await WireClient.connect(broker.port)
    assert (await idle.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})).code == 0
    slow = client.request(RequestCode.SEND_MESSAGE_V2, _send_v2("slow", 0, _props()), b"s")
    await async_wait_until(lambda: broker.store.held == 1, 10, "the send to reach the store")
    stopping = asyncio.create_task(broker.server.stop(grace_s=10))
    broker.store.gate.set()
    answer = await client.read()
    assert (answer.opaque, answer.code) == (slow, ResponseCode.SUCCESS)
    await asyncio.wait_for(stopping, 10)  # the idle connection did not hold it up
    assert await client.closed()
    assert await idle.closed()
    await idle.close()


async def test_pull_found_not_found_and_moved_with_offsets(client: WireClient) -> None:
    for i in range(3):
        props = messages.format_properties({"UNIQ_KEY": f"P{i}", "TAGS": "a" if i != 1 else "b"})
        await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 1, props), b"p%d" % i)
    pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "1", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
            "suspendTimeoutMillis": "15000", "subscription": "a"}  # fmt: skip
    found = await client.call(RequestCode.PULL_MESSAGE, pull)
    assert found.code == ResponseCode.SUCCESS
    assert (found.ext_fields["minOffset"], found.ext_fields["maxOffset"]) == ("0", "3")
    assert found.ext_fields["nextBeginOffset"] == "3"
    records = messages.parse_message_exts(found.body)
    assert [(r.queue_offset, r.body, r.properties["UNIQ_KEY"]) for r in records] == [
        (0, b"p0", "P0"), (2, b"p2", "P2"),
    ]  # fmt: skip
    assert all(r.topic == "orders" and r.queue_id == 1 for r in records)
    none = await client.call(RequestCode.PULL_MESSAGE, {**pull, "queueOffset": "3"})
    assert (none.code, none.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "3")
    moved = await client.call(RequestCode.PULL_MESSAGE, {**pull, "queueOffset": "9"})
    assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_OFFSET_MOVED, "3",
    )  # fmt: skip
    assert moved.remark is not None
    assert "outside [0, 3]" in moved.remark


async def test_a_suspended_pull_waits_for_the_next_message(
    broker: Broker, client: WireClient
) -> None:
    pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "2", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "2", "suspendTimeoutMillis": "15000"}  # fmt: skip
    waiting = client.request(RequestCode.PULL_MESSAGE, pull)
    await async_wait_until(lambda: "orders" in broker.store.waiting_topics, 10, "the pull to wait")
    sent = client.request(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 2, _props()), b"late")
    answers = {answer.opaque: answer for answer in [await client.read(), await client.read()]}
    assert answers[sent].code == ResponseCode.SUCCESS
    assert answers[waiting].code == ResponseCode.SUCCESS
    assert [r.body for r in messages.parse_message_exts(answers[waiting].body)] == [b"late"]


async def test_consumer_offsets_commit_query_and_commit_on_pull(client: WireClient) -> None:
    for i in range(2):
        props = messages.format_properties({"UNIQ_KEY": f"Q{i}"})
        await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 3, props), b"q")
    queue = {"consumerGroup": "cg", "topic": "orders", "queueId": "3"}
    missing = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, queue)
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    updated = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**queue, "commitOffset": "1"})
    assert updated.code == ResponseCode.SUCCESS
    assert (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, queue)).ext_fields["offset"] == "1"
    pull = {**queue, "queueOffset": "1", "maxMsgNums": "1", "sysFlag": "1", "commitOffset": "2"}
    assert (await client.call(RequestCode.PULL_MESSAGE, pull)).code == ResponseCode.SUCCESS
    assert (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, queue)).ext_fields["offset"] == "2"


async def test_a_pull_with_a_sql92_subscription(client: WireClient) -> None:
    for i, color in enumerate(("red", "blue", "red")):
        props = messages.format_properties({"UNIQ_KEY": f"S{i}", "color": color})
        await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 0, props), b"s%d" % i)
    pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "subscription": "color = 'red'",
            "expressionType": "SQL92"}  # fmt: skip
    found = await client.call(RequestCode.PULL_MESSAGE, pull)
    assert found.code == ResponseCode.SUCCESS
    assert [r.body for r in messages.parse_message_exts(found.body)] == [b"s0", b"s2"]
    bad = await client.call(RequestCode.PULL_MESSAGE, {**pull, "subscription": "color = "})
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert bad.remark


async def test_a_send_back_goes_to_the_retry_topic_then_to_the_dead_letters(
    client: WireClient,
) -> None:
    props = messages.format_properties({"UNIQ_KEY": "B0", "TAGS": "t"})
    await client.call(RequestCode.SEND_MESSAGE_V2, _send_v2("orders", 1, props), b"back")
    pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "1", "queueOffset": "0",
            "maxMsgNums": "1", "sysFlag": "0"}  # fmt: skip
    (record,) = messages.parse_message_exts(
        (await client.call(RequestCode.PULL_MESSAGE, pull)).body
    )
    # As the C++ client sends it: no originTopic (the broker knows what cg pulled).
    back = {"group": "cg", "offset": str(record.physical_offset), "delayLevel": "1",
            "maxReconsumeTimes": "1"}  # fmt: skip
    answer = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, back)
    assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)
    route = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%cg"})
    assert route.code == ResponseCode.SUCCESS
    retry_pull = {**pull, "topic": "%RETRY%cg", "queueId": "0", "sysFlag": "2",
                  "suspendTimeoutMillis": "15000"}  # fmt: skip
    found = await client.call(RequestCode.PULL_MESSAGE, retry_pull)  # due after level 1 (1 s)
    (retried,) = messages.parse_message_exts(found.body)
    assert (retried.topic, retried.body, retried.reconsume_times) == ("%RETRY%cg", b"back", 1)
    assert retried.properties["UNIQ_KEY"] == "B0"
    assert retried.properties["RETRY_TOPIC"] == "orders"
    assert retried.properties["TAGS"] == "t"
    # Given back again: it was reconsumed maxReconsumeTimes already, so a dead letter.
    again = {**back, "offset": str(retried.physical_offset)}
    assert (await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, again)).code == 0
    dead_pull = {**pull, "topic": "%DLQ%cg", "queueId": "0"}
    dead = await client.call(RequestCode.PULL_MESSAGE, dead_pull)
    (letter,) = messages.parse_message_exts(dead.body)
    assert (letter.body, letter.properties["UNIQ_KEY"]) == (b"back", "B0")


async def test_a_send_back_that_names_no_message_says_why(client: WireClient) -> None:
    unknown = {"group": "cg", "offset": "5", "delayLevel": "0"}
    answer = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, unknown)
    assert answer.code == ResponseCode.INVALID_PARAMETER
    assert answer.remark is not None
    assert "names no originTopic" in answer.remark
    named = {**unknown, "originTopic": "orders"}
    missing = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, named)
    assert (missing.code, missing.remark) == (
        ResponseCode.QUERY_NOT_FOUND, "no message at offset 5 of orders queue 0 to give back",
    )  # fmt: skip
    no_group = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "5"})
    assert (no_group.code, no_group.remark) == (
        ResponseCode.INVALID_PARAMETER, "header field 'group' is missing",
    )  # fmt: skip


def _locks(client_id: str, *queue_ids: int, broker: str = "b1") -> bytes:
    return json.dumps(
        {"consumerGroup": "cg", "clientId": client_id,
         "mqSet": [{"topic": "orders", "brokerName": broker, "queueId": q} for q in queue_ids]}
    ).encode()  # fmt: skip


async def test_orderly_consumers_lock_queues_one_client_at_a_time(client: WireClient) -> None:
    async def lock(body: bytes) -> list[tuple[str, int]]:
        answer = await client.call(RequestCode.LOCK_BATCH_MQ, {}, body)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return [(q["brokerName"], q["queueId"]) for q in json.loads(answer.body)["lockOKMQSet"]]

    assert await lock(_locks("c1", 0, 1)) == [("b1", 0), ("b1", 1)]
    assert await lock(_locks("c1", 0, broker="b2")) == [("b2", 0)]  # one queue, any broker
    assert await lock(_locks("c2", 0, 1, 2)) == [("b1", 2)]
    unlocked = await client.call(RequestCode.UNLOCK_BATCH_MQ, {}, _locks("c1", 1))
    assert unlocked.code == ResponseCode.SUCCESS
    assert await lock(_locks("c2", 0, 1)) == [("b1", 1)]
    assert await lock(_locks("c1", 0)) == [("b1", 0)]  # renewed by its holder
    bad = await client.call(RequestCode.LOCK_BATCH_MQ, {}, b'{"clientId": "c"}')
    assert (bad.code, bad.remark) == (
        ResponseCode.MESSAGE_ILLEGAL,
        "queue lock has no consumerGroup",
    )
