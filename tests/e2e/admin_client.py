"""Producer and consumer steps of the admin tests, run by the OFFICIAL RocketMQ Python client.

Run in its own interpreter (``python -m tests.e2e.admin_client SCENARIO PORT ARGS...``;
the client's protobuf modules clash with ours in one process). Prints one JSON object
(the observations) as its last stdout line. Every wait has a deadline.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.contract.official_client import DEADLINE_S, _config, _message

INVISIBLE_S = 60
"""Long enough that nothing received here comes back by itself during a test."""


def send_keyed(port: int, topic: str, count: str) -> dict[str, Any]:
    """Send ``count`` messages to ``topic``: message i has keys ``key-<i % 3>`` and
    ``all``, and the property ``origin``; their ids in send order."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        ids = []
        for i in range(int(count)):
            message = _message(topic, f"body-{i}".encode(), tag="admin")
            message.keys = f"key-{i % 3}"
            message.keys = "all"
            message.add_property("origin", "admin-test")
            ids.append(producer.send(message).message_id)
    finally:
        producer.shutdown()
    return {"ids": ids}


def consume(port: int, group: str, topic: str, take: str, ack: str) -> dict[str, Any]:
    """Receive ``take`` messages of ``topic`` as ``group`` (invisible for a minute) and ack
    the first ``ack`` of them; the ids received (in order) and acked."""
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, 5)
    consumer.startup()
    try:
        got: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < int(take) and time.monotonic() < deadline:
            got += consumer.receive(int(take) - len(got), INVISIBLE_S)
        for message in got[: int(ack)]:
            consumer.ack(message)
        return {
            "received": [m.message_id for m in got],
            "attempts": [m.delivery_attempt for m in got],
            "acked": [m.message_id for m in got[: int(ack)]],
        }
    finally:
        consumer.shutdown()


def dead_letter(port: int, group: str, topic: str, count: str) -> dict[str, Any]:
    """Send ``count`` messages to ``topic``; ``group`` (max 2 attempts) fails each twice
    (its invisibility cut to 1 s), then the next receives move them to the dead-letter
    queue."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        ids = []
        for i in range(int(count)):
            message = _message(topic, f"poison-{i}".encode(), tag="poison")
            message.keys = "poison-key"
            message.add_property("origin", "admin-test")
            ids.append(producer.send(message).message_id)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, 5)
    consumer.startup()
    try:
        attempts: dict[str, list[int]] = {message_id: [] for message_id in ids}
        deadline = time.monotonic() + DEADLINE_S
        while any(len(a) < 2 for a in attempts.values()) and time.monotonic() < deadline:
            for received in consumer.receive(32, 10):
                attempts[received.message_id].append(received.delivery_attempt)
                consumer.change_invisible_duration(received, 1)
        after = [m.message_id for m in consumer.receive(32, 10)]
    finally:
        consumer.shutdown()
    return {"ids": ids, "attempts": attempts, "after_max": after}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "send_keyed": send_keyed,
    "consume": consume,
    "dead_letter": dead_letter,
}

if __name__ == "__main__":
    name, port, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    print(json.dumps(SCENARIOS[name](port, *args)))
