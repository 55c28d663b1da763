"""The broker's RIP-46 metrics (broker/metrics.py), read back as Prometheus text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.domain import Message
from broker.metrics import BrokerMetrics
from protocol.broker_api import ClientConnection
from protocol.vocabulary import MessageType


def samples(metrics: BrokerMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample: (name, labels without the three common ones) -> value."""
    text = generate_latest(metrics.registry).decode()
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            assert (labels.pop("cluster"), labels.pop("node_type"), labels.pop("node_id")) == (
                "c1",
                "broker",
                "b1",
            )
            found[(sample.name, frozenset(labels.items()))] = sample.value
    return found


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def test_a_batch_counts_messages_bytes_and_sizes_once_each() -> None:
    metrics = BrokerMetrics(CollectorRegistry(), "c1", "b1")
    bodies = [b"x" * 10, b"y" * 2000, b"z" * 5000]
    metrics.stored([Message("orders", body, f"id{i}") for i, body in enumerate(bodies)])
    metrics.stored([Message("orders", b"w" * 1024, "id9", MessageType.FIFO)])
    metrics.stored([Message("%RETRY%g", b"r", "id10"), Message("%RETRY%g", b"r", "id11")])
    metrics.stored([Message("rmq_sys_x", b"s", "id12")])
    seen = samples(metrics)
    normal = {"topic": "orders", "message_type": "normal", "is_system": "false"}
    assert seen[_key("rocketmq_messages_in_total", **normal)] == 3
    assert seen[_key("rocketmq_throughput_in_total", **normal)] == 7010
    assert seen[_key("rocketmq_message_size_bucket", le="1024.0", **normal)] == 1
    assert seen[_key("rocketmq_message_size_bucket", le="4096.0", **normal)] == 2
    assert seen[_key("rocketmq_message_size_bucket", le="524288.0", **normal)] == 3
    assert seen[_key("rocketmq_message_size_bucket", le="+Inf", **normal)] == 3
    assert seen[_key("rocketmq_message_size_sum", **normal)] == 7010
    fifo = {"topic": "orders", "message_type": "fifo", "is_system": "false"}
    assert seen[_key("rocketmq_message_size_bucket", le="1024.0", **fifo)] == 1  # le: <=
    system = {"topic": "rmq_sys_x", "message_type": "normal", "is_system": "true"}
    assert seen[_key("rocketmq_messages_in_total", **system)] == 1
    assert not any("%RETRY%" in str(key) for key in seen)  # retry topics are not "in"


def test_deliveries_dead_letters_transactions_and_latency() -> None:
    metrics = BrokerMetrics(CollectorRegistry(), "c1", "b1")
    metrics.delivered("g", "orders", 4, 400)
    metrics.delivered("g", "%RETRY%g", 1, 10)
    metrics.dead_lettered("g", "orders")
    metrics.ended("orders", commit=True)
    metrics.ended("orders", commit=False)
    metrics.ended("orders", commit=False)
    metrics.answered("grpc", "ReceiveMessage", "OK", 2.0, failed=False)
    metrics.answered("grpc", "SendMessage", "", 5000.0, failed=True)
    seen = samples(metrics)
    out = {"topic": "orders", "consumer_group": "g", "is_system": "false", "is_retry": "false"}
    assert seen[_key("rocketmq_messages_out_total", **out)] == 4
    assert seen[_key("rocketmq_throughput_out_total", **out)] == 400
    retry = {**out, "topic": "%RETRY%g", "is_retry": "true"}
    assert seen[_key("rocketmq_messages_out_total", **retry)] == 1
    dlq = {"consumer_group": "g", "topic": "orders", "is_system": "false"}
    assert seen[_key("rocketmq_send_to_dlq_messages_total", **dlq)] == 1
    assert seen[_key("rocketmq_commit_messages_total", topic="orders")] == 1
    assert seen[_key("rocketmq_rollback_messages_total", topic="orders")] == 2
    receive = {
        "protocol_type": "grpc",
        "request_code": "ReceiveMessage",
        "response_code": "OK",
        "is_long_polling": "true",
        "result": "success",
    }
    assert seen[_key("rocketmq_rpc_latency_milliseconds_bucket", le="3.0", **receive)] == 1
    failed = {**receive, "request_code": "SendMessage", "response_code": ""}
    failed.update(is_long_polling="false", result="process_request_failed")
    assert seen[_key("rocketmq_rpc_latency_milliseconds_bucket", le="3000.0", **failed)] == 0
    assert seen[_key("rocketmq_rpc_latency_milliseconds_count", **failed)] == 1


def test_connections_follow_the_clients_and_gone_ones_disappear() -> None:
    metrics = BrokerMetrics(CollectorRegistry(), "c1", "b1")
    clients = [
        ClientConnection("p1", language="PYTHON", version="5.1.2"),
        ClientConnection("p2", language="PYTHON", version="5.1.2"),
        ClientConnection("c1", group="g", language="JAVA", version="5.0.7", consume_mode="push"),
        ClientConnection("r1", group="g", protocol="remoting"),
    ]
    metrics.watch_connections(lambda: list(clients))
    metrics.refresh()
    seen = samples(metrics)
    producers = {"language": "PYTHON", "version": "5.1.2", "protocol_type": "grpc"}
    assert seen[_key("rocketmq_producer_connections", **producers)] == 2
    push = {
        "consumer_group": "g",
        "language": "JAVA",
        "version": "5.0.7",
        "consume_mode": "push",
        "protocol_type": "grpc",
        "is_system": "false",
    }
    assert seen[_key("rocketmq_consumer_connections", **push)] == 1
    remoting = {
        **push,
        "language": "",
        "version": "",
        "consume_mode": "",
        "protocol_type": "remoting",
    }
    assert seen[_key("rocketmq_consumer_connections", **remoting)] == 1
    del clients[2:]
    metrics.refresh()
    seen = samples(metrics)
    assert not any(name == "rocketmq_consumer_connections" for name, _ in seen)
    assert seen[_key("rocketmq_producer_connections", **producers)] == 2
