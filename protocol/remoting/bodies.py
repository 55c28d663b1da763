"""The JSON bodies of the remoting protocol: routes, cluster info, heartbeats.

Written as standard JSON (RocketMQ's fastjson writes integer map keys
unquoted, ``{0:"addr"}``; the C++ client's jsoncpp and ali-ons both read the
quoted form). Read leniently: heartbeat enums arrive as numbers from the C++
client and as names from the Java-like ones, and both are accepted.

PURE.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.remoting.errors import BodyError

PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
MASTER_ID = "0"


@dataclass(frozen=True, slots=True)
class RouteBroker:
    """One broker of a route: its name and remoting address."""

    name: str
    address: str


def route_body(
    cluster: str,
    brokers: Sequence[RouteBroker],
    read_queue_count: int,
    write_queue_count: int,
    perm: int = PERM_READ_WRITE,
) -> bytes:
    """GET_ROUTEINFO_BY_TOPIC's answer: every broker serves the topic's queues."""
    return _dump(
        {
            "orderTopicConf": None,
            "queueDatas": [
                {
                    "brokerName": broker.name,
                    "readQueueNums": read_queue_count,
                    "writeQueueNums": write_queue_count,
                    "perm": perm,
                    "topicSysFlag": 0,
                }
                for broker in brokers
            ],
            "brokerDatas": [
                {
                    "cluster": cluster,
                    "brokerName": broker.name,
                    "brokerAddrs": {MASTER_ID: broker.address},
                }
                for broker in brokers
            ],
            "filterServerTable": {},
        }
    )


def cluster_info_body(cluster: str, brokers: Sequence[RouteBroker]) -> bytes:
    """GET_BROKER_CLUSTER_INFO's answer: the brokers, all masters of one cluster."""
    return _dump(
        {
            "brokerAddrTable": {
                broker.name: {
                    "cluster": cluster,
                    "brokerName": broker.name,
                    "brokerAddrs": {MASTER_ID: broker.address},
                }
                for broker in brokers
            },
            "clusterAddrTable": {cluster: [broker.name for broker in brokers]},
        }
    )


def consumer_list_body(client_ids: Sequence[str]) -> bytes:
    """GET_CONSUMER_LIST_BY_GROUP's answer."""
    return _dump({"consumerIdList": list(client_ids)})


# Heartbeat enums: numbers (C++) and names (Java, ali-ons) in RocketMQ's order.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")


@dataclass(frozen=True, slots=True)
class Subscription:
    """A consumer's subscription: a topic and its tag expression."""

    topic: str
    expression: str


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group a client consumes in."""

    group: str
    consume_type: str
    message_model: str
    subscriptions: tuple[Subscription, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """HEART_BEAT's body: who the client is and the groups it belongs to."""

    client_id: str
    producer_groups: tuple[str, ...]
    consumers: tuple[ConsumerData, ...]


def parse_heartbeat(body: bytes) -> Heartbeat:
    """Read a heartbeat body; BodyError saying what is missing or of the wrong type."""
    data = _load(body, "heartbeat")
    client_id = data.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise BodyError("heartbeat has no clientID")
    producers = tuple(
        _text(item, "groupName", "producer data")
        for item in _list(data.get("producerDataSet"), "producerDataSet")
    )
    consumers = []
    for item in _list(data.get("consumerDataSet"), "consumerDataSet"):
        subscriptions = tuple(
            Subscription(_text(sub, "topic", "subscription"), _expression(sub.get("subString")))
            for sub in _list(item.get("subscriptionDataSet"), "subscriptionDataSet")
        )
        consumers.append(
            ConsumerData(
                _text(item, "groupName", "consumer data"),
                _enum(item.get("consumeType"), CONSUME_TYPES, "consumeType"),
                _enum(item.get("messageModel"), MESSAGE_MODELS, "messageModel"),
                subscriptions,
            )
        )
    return Heartbeat(client_id, producers, tuple(consumers))


@dataclass(frozen=True, slots=True)
class LockedQueue:
    """A message queue as LOCK_BATCH_MQ names it (the broker name kept to answer)."""

    topic: str
    broker_name: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class QueueLocks:
    """LOCK_BATCH_MQ's and UNLOCK_BATCH_MQ's body: a consumer of a group locking (or
    unlocking) queues for orderly consumption."""

    group: str
    client_id: str
    queues: tuple[LockedQueue, ...]


def parse_queue_locks(body: bytes) -> QueueLocks:
    """Read a lock or unlock body; BodyError saying what is missing or mistyped."""
    data = _load(body, "queue lock")
    group = data.get("consumerGroup")
    client_id = data.get("clientId")
    if not isinstance(group, str) or not group:
        raise BodyError("queue lock has no consumerGroup")
    if not isinstance(client_id, str) or not client_id:
        raise BodyError("queue lock has no clientId")
    queues = []
    for item in _list(data.get("mqSet"), "mqSet"):
        queue_id = item.get("queueId")
        if isinstance(queue_id, str) and queue_id.isdigit():
            queue_id = int(queue_id)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
            raise BodyError(f"message queue has queueId {queue_id!r}, not a queue id")
        broker_name = item.get("brokerName")
        queues.append(
            LockedQueue(
                _text(item, "topic", "message queue"),
                broker_name if isinstance(broker_name, str) else "",
                queue_id,
            )
        )
    return QueueLocks(group, client_id, tuple(queues))


def locked_queues_body(queues: Sequence[LockedQueue]) -> bytes:
    """LOCK_BATCH_MQ's answer: the queues the client now holds."""
    return _dump(
        {
            "lockOKMQSet": [
                {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id}
                for q in queues
            ]
        }
    )


def _dump(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _load(body: bytes, what: str) -> dict[str, object]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise BodyError(f"{what} body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise BodyError(f"{what} body is a {type(data).__name__}, not an object")
    return data


def _list(value: object, what: str) -> list[dict[str, object]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise BodyError(f"{what} is not a list of objects")
    return value


def _text(item: dict[str, object], name: str, what: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise BodyError(f"{what} has no {name}")
    return value


def _expression(value: object) -> str:
    return value if isinstance(value, str) and value else "*"


def _enum(value: object, names: tuple[str, ...], what: str) -> str:
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if value is None:
        return ""
    raise BodyError(f"{what} {value!r} is not one of {', '.join(names)}")
