"""End-to-end scenarios run by the OFFICIAL RocketMQ Python client against a real cluster.

Run in its own interpreter (``python -m tests.e2e.e2e_client SCENARIO PORT...``;
the client's protobuf modules clash with ours in one process). Prints one JSON
object (the observations) as its last stdout line; the test asserts on it.
The client helpers are the contract tests' (``tests/contract/official_client.py``).
Every wait has a deadline.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from rocketmq import FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from tests.contract.official_client import (
    DEADLINE_S,
    _code,
    _config,
    _message,
    _raw_stub,
    _receive_until,
    _view,
    garbage_handles_then_round_trip,
    push_consume,
    push_fifo_dead_letter,
    redelivery_after_change,
    tag_filter_then_ack,
)

RAW_METADATA = (("x-mq-client-id", "e2e-raw-client"),)


def _raw_message(topic: str, body: bytes, message_id: str, **system: Any) -> Any:
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic),
        body=body,
        system_properties=definition_pb2.SystemProperties(
            message_id=message_id,
            message_type=system.pop("message_type", definition_pb2.NORMAL),
            body_encoding=definition_pb2.IDENTITY,
            **system,
        ),
    )


def produce_and_simple_consume(port: int) -> dict[str, Any]:
    """NORMAL, FIFO and batch sends; tag filter, ack, change invisibility, redelivery."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("normal", "fifo"))
    producer.startup()
    try:
        out["normal_ids"] = [
            producer.send(
                _message("normal", f"n{i}".encode(), tag="a" if i % 2 == 0 else "b")
            ).message_id
            for i in range(4)
        ]
        fifo_sent = []
        for i in range(6):
            group = f"order-{i % 2}"
            receipt = producer.send(_message("fifo", f"{group}:{i}".encode(), group=group))
            fifo_sent.append([group, receipt.message_id])
        out["fifo_sent"] = fifo_sent

        # A batch: three messages in one SendMessage, one entry each.
        channel, stub = _raw_stub(port)
        with channel:
            ids = [f"01E2E0000000000000000000000000B{i}" for i in range(3)]
            batch = service_pb2.SendMessageRequest(
                messages=[
                    _raw_message("normal", f"batch{i}".encode(), ids[i], tag="c") for i in range(3)
                ]
            )
            response = stub.SendMessage(batch, metadata=RAW_METADATA, timeout=20)
            out["batch"] = [
                response.status.code,
                [[e.status.code, e.message_id] for e in response.entries],
            ]
            out["batch_ids"] = ids

        # Tag filter "a": only messages 0 and 2 reach this group; acks finish them.
        tag_filter_then_ack(port, out)

        # FIFO: receive, ack, receive: each message group's messages come in send order.
        fifo = SimpleConsumer(_config(port), "fifo-simple", {"fifo": FilterExpression()}, 5)
        fifo.startup()
        try:
            received: list[dict[str, Any]] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(received) < 6 and time.monotonic() < deadline:
                for message in fifo.receive(32, 15):
                    received.append(_view(message))
                    fifo.ack(message)
            out["fifo_received"] = received
        finally:
            fifo.shutdown()

        # Redelivery: invisibility cut to 1 s, then received again with attempt 2;
        # the 4 NORMAL and 3 batch messages.
        redelivery_after_change(port, out, 7)
    finally:
        producer.shutdown()
    return out


def dead_letter_after_max_attempts(port: int) -> dict[str, Any]:
    """Never acked: delivered max attempts (3) times, then found in ``%DLQ%<group>``."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("poison",))
    producer.startup()
    try:
        out["id"] = producer.send(_message("poison", b"never-acked")).message_id
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(_config(port), "dlq-src", {"poison": FilterExpression()}, 5)
    consumer.startup()
    try:
        # Each delivery fails: its invisibility is cut to 1 s (as a push consumer nacks).
        attempts: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(attempts) < 3 and time.monotonic() < deadline:
            for message in consumer.receive(32, 10):
                attempts.append(message.delivery_attempt)
                consumer.change_invisible_duration(message, 1)
        out["attempts"] = attempts
        # The next pop past max attempts moves it to the dead-letter queue instead.
        out["after_max"] = [_view(m) for m in consumer.receive(32, 10)]
    finally:
        consumer.shutdown()
    dead = SimpleConsumer(_config(port), "dlq-reader", {"%DLQ%dlq-src": FilterExpression()}, 5)
    dead.startup()
    try:
        got = _receive_until(dead, 1, 15)
        out["dead_letters"] = [_view(m) for m in got]
        for message in got:
            dead.ack(message)
    finally:
        dead.shutdown()
    return out


def bad_input(port: int) -> dict[str, Any]:
    """Oversized body, unknown topic, wrong message type, garbage handles; still serving."""
    out: dict[str, Any] = {}
    channel, stub = _raw_stub(port)
    with channel:
        big = _raw_message("bad", b"x" * (4 * 1024 * 1024 + 1), "01E2E00000000000000000000000000B1")
        response = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[big]), metadata=RAW_METADATA, timeout=20
        )
        out["oversized"] = [response.status.code, len(response.entries)]
        response = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="no-such-topic")),
            metadata=RAW_METADATA,
            timeout=20,
        )
        out["route_unknown"] = response.status.code
        fifo_to_normal = _raw_message(
            "bad",
            b"grouped",
            "01E2E00000000000000000000000000B2",
            message_type=definition_pb2.FIFO,
            message_group="g",
        )
        response = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[fifo_to_normal]),
            metadata=RAW_METADATA,
            timeout=20,
        )
        out["wrong_type"] = response.status.code
        unknown = _raw_message("no-such-topic", b"x", "01E2E00000000000000000000000000B3")
        response = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[unknown]), metadata=RAW_METADATA, timeout=20
        )
        out["send_unknown_topic"] = response.status.code

    producer = Producer(_config(port), ("bad",))
    producer.startup()
    try:
        consumer = SimpleConsumer(_config(port), "bad-input", {"bad": FilterExpression()}, 5)
        consumer.startup()
        try:
            out.update(garbage_handles_then_round_trip(producer, consumer, "bad"))
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()
    return out


def hold_through_broker(port_a: int, port_b: int) -> dict[str, Any]:
    """Send through A, receive through B (invisible 10 s), ack one of two through A."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port_a), ("handover",))
    producer.startup()
    try:
        receipts = [producer.send(_message("handover", f"h{i}".encode())) for i in range(2)]
        out["sent"] = [r.message_id for r in receipts]
        endpoints_a = receipts[0].message_queue.endpoints
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(_config(port_b), "handover", {"handover": FilterExpression()}, 5)
    consumer.startup()
    try:
        out["received_at"] = time.time()
        got = _receive_until(consumer, 2, 10)
        out["received"] = [_view(m) for m in got]
        acked = next(m for m in got if m.message_id == out["sent"][0])
        acked.endpoints = endpoints_a  # the handle B issued, finished through A
        consumer.ack(acked)
        out["acked_through_a"] = acked.message_id
    finally:
        consumer.shutdown()
    return out


def receive_after_kill(port_a: int, held_since: float) -> dict[str, Any]:
    """Through A: nothing before the held message's invisibility ends, then attempt 2."""
    out: dict[str, Any] = {}
    consumer = SimpleConsumer(_config(port_a), "handover", {"handover": FilterExpression()}, 5)
    consumer.startup()
    try:
        arrivals: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE_S
        while not arrivals and time.monotonic() < deadline:
            for message in consumer.receive(32, 30):
                arrivals.append({**_view(message), "at": time.time()})
                consumer.ack(message)
        out["arrivals"] = arrivals
        out["held_since"] = held_since
    finally:
        consumer.shutdown()
    return out


def first_use(port: int) -> dict[str, Any]:
    """Against ``rip5 dev`` (auto-create): a new topic and group work on first use."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("first-use",))
    producer.startup()
    try:
        out["sent"] = [
            producer.send(_message("first-use", f"hello {i}".encode())).message_id for i in range(3)
        ]
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(_config(port), "first-group", {"first-use": FilterExpression()}, 5)
    consumer.startup()
    try:
        got = _receive_until(consumer, 3, 15)
        out["received"] = [_view(m) for m in got]
        for message in got:
            consumer.ack(message)
    finally:
        consumer.shutdown()
    # FIFO: the topic is made FIFO by its first send, the group FIFO by its subscription.
    producer = Producer(_config(port), ("first-fifo",))
    producer.startup()
    try:
        out["fifo_sent"] = [
            producer.send(_message("first-fifo", f"o{i}".encode(), group="o")).message_id
            for i in range(4)
        ]
    finally:
        producer.shutdown()
    ordered = SimpleConsumer(
        _config(port), "first-fifo-group", {"first-fifo": FilterExpression()}, 5
    )
    ordered.startup()
    try:
        received: list[dict[str, Any]] = []
        batches: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < 4 and time.monotonic() < deadline:
            got = ordered.receive(32, 15)
            if got:
                batches.append(len(got))
            for message in got:
                received.append(_view(message))
                ordered.ack(message)
        out["fifo_received"] = received
        out["fifo_batches"] = batches
    finally:
        ordered.shutdown()
    return out


def after_storage_loss(port: int) -> dict[str, Any]:
    """Send and consume while a storage node is down (its groups elect new leaders)."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("failover",))
    producer.startup()
    try:
        sent, errors = [], []
        for i in range(20):
            try:
                receipt = producer.send(_message("failover", f"f{i}".encode()))
                sent.append([receipt.message_id, f"f{i}"])
            except Exception as error:  # noqa: BLE001 - the observation
                errors.append(_code(error))
        out["sent"], out["send_errors"] = sent, errors
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(_config(port), "failover", {"failover": FilterExpression()}, 5)
    consumer.startup()
    try:
        got = _receive_until(consumer, len(out["sent"]), 15)
        out["received"] = [[m.message_id, m.body.decode()] for m in got]
        for message in got:
            consumer.ack(message)
    finally:
        consumer.shutdown()
    return out


def simple_consume_all(
    port: int, topic: str, group: str, count: int, deadline_s: float = DEADLINE_S
) -> dict[str, Any]:
    """A fresh consumer group receives (and acks) ``count`` messages of ``topic`` within
    ``deadline_s``; ``out["received"]``: their ids in the order received."""
    out: dict[str, Any] = {}
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, 5)
    consumer.startup()
    try:
        received: list[str] = []
        deadline = time.monotonic() + deadline_s
        while len(set(received)) < count and time.monotonic() < deadline:
            for message in consumer.receive(32, 30):
                received.append(message.message_id)
                consumer.ack(message)
        out["received"] = received
    finally:
        consumer.shutdown()
    return out


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "produce_and_simple_consume": produce_and_simple_consume,
    "dead_letter_after_max_attempts": dead_letter_after_max_attempts,
    "push_consume": lambda port: push_consume(port, topic="push", last_group=None),
    "push_fifo_dead_letter": push_fifo_dead_letter,
    "bad_input": bad_input,
    "hold_through_broker": hold_through_broker,
    "first_use": first_use,
    "after_storage_loss": after_storage_loss,
    "tier_consume_all": lambda port, count: simple_consume_all(
        port, "archived", "tier-readers", count
    ),
    "tier_consume_all_large": lambda port, count: simple_consume_all(
        port, "archived", "tier-readers-large", count, deadline_s=200
    ),
}

if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    if name == "receive_after_kill":
        result = receive_after_kill(int(args[0]), float(args[1]))
    else:
        result = SCENARIOS[name](*(int(a) for a in args))
    print(json.dumps(result))
