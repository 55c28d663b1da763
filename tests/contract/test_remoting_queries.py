"""Operators' lookups and queues shared out among brokers, over a real socket with the
in-memory ports (the fixtures of ``test_remoting_server``).

QUERY_MESSAGE by key and by id, VIEW_MESSAGE_BY_ID by an offset message id, and a
broker that serves a queue to consumers only when the queue is its share
(``queue_owner``): pulls of another broker's queue wait and then answer
PULL_NOT_FOUND at the group's committed offset, their commits are not stored.
"""

from __future__ import annotations

import json
import time

import pytest

from broker.remoting.service import FixedBrokers, queue_owner
from protocol.remoting import messages
from protocol.remoting.codes import RequestCode, ResponseCode
from tests.contract import test_remoting_server as server_tests
from tests.contract.remoting_wire import WireClient
from tests.contract.test_remoting_server import Broker, _send_v2

broker = server_tests.broker  # the fixtures
client = server_tests.client

pytestmark = pytest.mark.integration
SELF, OTHER = "10.0.0.1:8080", "10.0.0.2:8080"


async def _send(client: WireClient, queue_id: int, unique: str, keys: str, body: bytes) -> str:
    props = messages.format_properties({"UNIQ_KEY": unique, "KEYS": keys, "TAGS": "t"})
    answer = await client.call(
        RequestCode.SEND_MESSAGE_V2, _send_v2("orders", queue_id, props), body
    )
    assert answer.code == ResponseCode.SUCCESS
    return answer.ext_fields["msgId"]


def _query(key: str, **extra: str) -> dict[str, str]:
    now = int(time.time() * 1000)
    return {"topic": "orders", "key": key, "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(now + 60_000), **extra}  # fmt: skip


async def test_query_by_key_and_by_id_and_view_by_offset_id(client: WireClient) -> None:
    await _send(client, 0, "ID-A", "order-1 shared", b"a")
    offset_id = await _send(client, 2, "ID-B", "order-2 shared", b"b")
    found = await client.call(RequestCode.QUERY_MESSAGE, _query("shared"))
    assert found.code == ResponseCode.SUCCESS
    records = messages.parse_message_exts(found.body)
    assert sorted((r.body, r.properties["UNIQ_KEY"], r.queue_id) for r in records) == [
        (b"a", "ID-A", 0), (b"b", "ID-B", 2),
    ]  # fmt: skip
    assert int(found.ext_fields["indexLastUpdateTimestamp"]) > 0
    by_id = await client.call(RequestCode.QUERY_MESSAGE, _query("ID-B", _UNIQUE_KEY_QUERY="true"))
    assert [r.body for r in messages.parse_message_exts(by_id.body)] == [b"b"]
    none = await client.call(RequestCode.QUERY_MESSAGE, _query("nothing"))
    assert none.code == ResponseCode.QUERY_NOT_FOUND
    assert none.remark is not None
    assert "'nothing'" in none.remark
    # The offset id's last 8 bytes are the physical offset a client views by.
    position = messages.parse_offset_message_id(offset_id)
    physical = str(position[2] << messages.QUEUE_OFFSET_BITS | position[3])
    viewed = await client.call(
        RequestCode.VIEW_MESSAGE_BY_ID, {"offset": physical, "topic": "orders"}
    )
    assert viewed.code == ResponseCode.SUCCESS
    (record,) = messages.parse_message_exts(viewed.body)
    assert (record.body, record.properties["UNIQ_KEY"], record.queue_id) == (b"b", "ID-B", 2)
    untopical = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": physical})
    assert untopical.code == ResponseCode.INVALID_PARAMETER
    assert untopical.remark is not None
    assert "no topic" in untopical.remark
    gone = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "7", "topic": "orders"})
    assert (gone.code, gone.remark) == (
        ResponseCode.QUERY_NOT_FOUND, "no message at offset 7 of orders queue 0",
    )  # fmt: skip
    no_key = await client.call(RequestCode.QUERY_MESSAGE, {"topic": "orders"})
    assert (no_key.code, no_key.remark) == (
        ResponseCode.INVALID_PARAMETER, "header field 'key' is missing",
    )  # fmt: skip


def test_queues_are_shared_out_by_address_order() -> None:
    assert queue_owner(3, []) is None
    owners = [queue_owner(q, [OTHER, SELF]) for q in range(4)]
    assert owners == [SELF, OTHER, SELF, OTHER]
    assert queue_owner(5, [SELF]) == SELF


async def test_a_broker_serves_consumers_only_its_share_of_the_queues(
    broker: Broker, client: WireClient
) -> None:
    broker.server.service.brokers = FixedBrokers([SELF, OTHER], serving=[SELF, OTHER])
    for queue_id in (0, 1):
        for i in range(3):
            await _send(client, queue_id, f"S{queue_id}{i}", f"k{queue_id}", b"m")
    pull = {"consumerGroup": "cg", "topic": "orders", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "2", "suspendTimeoutMillis": "1500"}  # fmt: skip
    mine = await client.call(RequestCode.PULL_MESSAGE, {**pull, "queueId": "0"})
    assert mine.code == ResponseCode.SUCCESS
    assert len(messages.parse_message_exts(mine.body)) == 3
    # Queue 1 is the other broker's: its commit is not stored here...
    commit = {"consumerGroup": "cg", "topic": "orders", "queueId": "1", "commitOffset": "3"}
    assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    offset = {"consumerGroup": "cg", "topic": "orders", "queueId": "1"}
    missing = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, offset)
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    # ...and a pull of it is held, then answered with nothing, naming the owner.
    started = time.monotonic()
    theirs = await client.call(RequestCode.PULL_MESSAGE, {**pull, "queueId": "1"})
    assert time.monotonic() - started >= 1.0
    assert (theirs.code, theirs.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "0")
    assert theirs.remark == f"queue 1 is served to consumers through broker {OTHER}"
    # The owner's commit moves the position a consumer of the other name is given.
    broker.server.service.brokers = FixedBrokers([SELF, OTHER], serving=[SELF])
    assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    broker.server.service.brokers = FixedBrokers([SELF, OTHER], serving=[SELF, OTHER])
    quick = {**pull, "queueId": "1", "sysFlag": "0"}
    theirs = await client.call(RequestCode.PULL_MESSAGE, quick)
    assert (theirs.code, theirs.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "3")
    # A query answers only this broker's share (a client asks every broker and merges).
    found = await client.call(RequestCode.QUERY_MESSAGE, _query("k1"))
    assert found.code == ResponseCode.QUERY_NOT_FOUND
    found = await client.call(RequestCode.QUERY_MESSAGE, _query("k0"))
    assert len(messages.parse_message_exts(found.body)) == 3


def _beat(client_id: str) -> bytes:
    consumer = {"groupName": "cg", "consumeType": 1, "messageModel": 1,
                "subscriptionDataSet": [{"topic": "orders", "subString": "*"}]}  # fmt: skip
    return json.dumps({"clientID": client_id, "consumerDataSet": [consumer]}).encode()


async def test_a_groups_consumers_are_told_when_a_consumer_joins_or_leaves(
    broker: Broker, client: WireClient
) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED (oneway, to the group's other consumers): on a join,
    on UNREGISTER_CLIENT and when a consumer's connection closes."""
    assert (await client.call(RequestCode.HEART_BEAT, {}, _beat("first"))).code == 0
    # Its own heartbeat again changes nothing: no notice.
    assert (await client.call(RequestCode.HEART_BEAT, {}, _beat("first"))).code == 0
    other = await WireClient.connect(broker.port)
    assert (await other.call(RequestCode.HEART_BEAT, {}, _beat("second"))).code == 0
    notice = await client.read()
    assert (notice.code, notice.is_oneway, notice.is_response) == (
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, True, False,
    )  # fmt: skip
    assert notice.ext_fields == {"consumerGroup": "cg"}
    leave = {"clientID": "second", "consumerGroup": "cg"}
    assert (await other.call(RequestCode.UNREGISTER_CLIENT, leave)).code == 0
    assert (await client.read()).code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert (await other.call(RequestCode.HEART_BEAT, {}, _beat("second"))).code == 0
    assert (await client.read()).code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    await other.close()
    assert (await client.read()).ext_fields == {"consumerGroup": "cg"}
    listed = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
    assert json.loads(listed.body) == {"consumerIdList": ["first"]}
