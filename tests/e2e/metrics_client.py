"""Load for the metrics tests, by the OFFICIAL RocketMQ Python client (its own interpreter,
as tests/e2e/e2e_client.py; prints one JSON object as its last stdout line).

``python -m tests.e2e.metrics_client load PORT TOPIC GROUP STOP_FILE CONSUMED``:
sends messages to TOPIC until STOP_FILE exists (at most ``LOAD_MAX_S``); once
it has sent CONSUMED of them, a simple consumer of GROUP receives and acks
exactly CONSUMED, then stops, so the group has consumed the topic and lags
behind it by every later message.
``consume PORT TOPIC GROUP STOP_FILE COUNT``: receives and acks exactly COUNT
messages, then stays connected (idle) until STOP_FILE exists (at most
``LOAD_MAX_S``). ``send PORT TOPIC - STOP_FILE COUNT``: sends COUNT messages
(keys ``key-<n>``) and prints their ids; ``delayed PORT TOPIC - STOP_FILE COUNT``
sends COUNT messages due in an hour; ``dead_letter PORT TOPIC GROUP STOP_FILE 1``
sends one message and lets GROUP (one delivery attempt allowed) receive it
and cut its invisibility to 1 s without acking it, so that the next receive
moves it to ``%DLQ%GROUP``; it prints the message's id. Every wait has a
deadline.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.contract.official_client import DEADLINE_S, _config, _message

INVISIBLE_S = 30
AWAIT_S = 5  # the consumers' long poll: a shorter one leaves the call under the broker's
# minimum poll once the client's request timeout is counted (BAD_REQUEST)
LOAD_MAX_S = 120.0
"""The longest a scenario runs when its stop file never comes."""


def _running(stop: Path, end: float) -> bool:
    return not stop.exists() and time.monotonic() < end


def _consume_exactly(port: int, topic: str, group: str, count: int) -> int:
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, AWAIT_S)
    consumer.startup()
    acked = 0
    try:
        deadline = time.monotonic() + DEADLINE_S
        while acked < count and time.monotonic() < deadline:
            for message in consumer.receive(min(32, count - acked), INVISIBLE_S):
                consumer.ack(message)
                acked += 1
    finally:
        consumer.shutdown()
    return acked


def load(port: int, topic: str, group: str, stop: Path, consumed: int) -> dict[str, Any]:
    """Send until ``stop`` exists; a consumer of ``group`` takes ``consumed`` of them on
    the way."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    sent = acked = 0
    try:
        end = time.monotonic() + LOAD_MAX_S
        while _running(stop, end) or sent < consumed:
            producer.send(_message(topic, f"m{sent}".encode() * 8))
            sent += 1
            if sent == consumed:
                acked = _consume_exactly(port, topic, group, consumed)
    finally:
        producer.shutdown()
    return {"sent": sent, "acked": acked}


def consume(port: int, topic: str, group: str, stop: Path, count: int) -> dict[str, Any]:
    """Receive and ack ``count`` messages, then stay connected until ``stop`` exists."""
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, AWAIT_S)
    consumer.startup()
    acked = 0
    try:
        deadline = time.monotonic() + DEADLINE_S
        while acked < count and time.monotonic() < deadline:
            for message in consumer.receive(min(16, count - acked), INVISIBLE_S):
                consumer.ack(message)
                acked += 1
        print(json.dumps({"acked": acked}), flush=True)  # the test reads this line first
        end = time.monotonic() + LOAD_MAX_S
        while _running(stop, end):
            time.sleep(0.2)  # idle and connected: the client's heartbeats go on meanwhile
    finally:
        consumer.shutdown()
    return {"acked": acked}


def send(port: int, topic: str, count: int) -> dict[str, Any]:
    """Send ``count`` messages with keys ``key-<n>``; their ids."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        ids = []
        for n in range(count):
            message = _message(topic, f"body of message {n}".encode())
            message.keys = f"key-{n}"
            ids.append(producer.send(message).message_id)
    finally:
        producer.shutdown()
    return {"ids": ids}


def delayed(port: int, topic: str, count: int) -> dict[str, Any]:
    """Send ``count`` messages due in an hour (they wait in the storage's timers)."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        for n in range(count):
            message = _message(topic, f"later {n}".encode())
            message.delivery_timestamp = int(time.time()) + 3600
            producer.send(message)
    finally:
        producer.shutdown()
    return {"sent": count}


def dead_letter(port: int, topic: str, group: str) -> dict[str, Any]:
    """One message of ``topic`` delivered to ``group`` once, never acked, then moved to
    the group's dead-letter topic by the next receive (the group allows one attempt)."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, AWAIT_S)
    consumer.startup()
    try:
        message_id = producer.send(_message(topic, b"nobody wants me")).message_id
        deadline = time.monotonic() + DEADLINE_S
        first: list[Any] = []
        while not first and time.monotonic() < deadline:
            first = consumer.receive(1, INVISIBLE_S)
        (delivered,) = first
        consumer.change_invisible_duration(delivered, 1)
        visible_at = time.monotonic() + 1
        # A long poll wakes when a queue grows, not when a message turns visible again:
        # the receive that dead-letters it (attempt 2 past the group's one) starts after.
        time.sleep(max(0.0, visible_at + 0.5 - time.monotonic()))
        again = consumer.receive(1, INVISIBLE_S)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return {"id": message_id, "redelivered": len(again)}


def main() -> None:
    """Run the scenario named by argv[1]; print its JSON."""
    scenario, port, topic, group, stop, *rest = sys.argv[1:]
    if scenario == "load":
        out = load(int(port), topic, group, Path(stop), int(rest[0]))
    elif scenario == "consume":
        out = consume(int(port), topic, group, Path(stop), int(rest[0]))
    elif scenario == "send":
        out = send(int(port), topic, int(rest[0]))
    elif scenario == "delayed":
        out = delayed(int(port), topic, int(rest[0]))
    elif scenario == "dead_letter":
        out = dead_letter(int(port), topic, group)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
