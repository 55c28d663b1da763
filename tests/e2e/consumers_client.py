"""Consumer scenarios (SQL92 filters, recall of timed messages) run by the OFFICIAL Python client.

Run in its own interpreter (``python -m tests.e2e.consumers_client SCENARIO PORT
ARG...``; the client's protobuf modules clash with ours in one process).
Prints one JSON object (the observations) as its last stdout line; the test
asserts on it. Every wait has a deadline.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rocketmq import FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType

from tests.contract.official_client import DEADLINE_S, _code, _config, _message
from tests.e2e.sql_filter_table import BAD_EXPRESSION, EXPRESSIONS, MESSAGES

AWAIT_S = 5
"""The consumers' long-polling time: how long the last, empty receive waits (the
broker polls at least 5 s)."""


def _sql_consumer(port: int, group: str, topic: str, expression: str) -> SimpleConsumer:
    subscription = {topic: FilterExpression(expression, FilterType.SQL)}
    consumer = SimpleConsumer(_config(port), group, subscription, AWAIT_S)
    consumer.startup()
    return consumer


def _consume_exactly(
    port: int, group: str, topic: str, expression: str, expected: int, out: dict[str, Any]
) -> None:
    """Receive (and ack) until ``expected`` messages came, then once more: the bodies."""
    try:
        consumer = _sql_consumer(port, group, topic, expression)
    except Exception as error:  # noqa: BLE001 - reported to the test
        out[expression] = _code(error)
        return
    bodies: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(bodies) < expected and time.monotonic() < deadline:
            for message in consumer.receive(32, 30):
                bodies.append(message.body.decode())
                consumer.ack(message)
        for message in consumer.receive(32, 30):  # nothing else may come
            bodies.append(message.body.decode())
            consumer.ack(message)
    except Exception as error:  # noqa: BLE001 - reported to the test
        out[expression] = _code(error)
        return
    finally:
        consumer.shutdown()
    out[expression] = sorted(int(body) for body in bodies)


def sql_filters(port: int, topic: str) -> dict[str, Any]:
    """Send the table's messages to ``topic``; one consumer group per expression
    (``sql-<i>``), all at once: which message indexes each received."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        for index, (tag, properties) in enumerate(MESSAGES):
            message = _message(topic, str(index).encode(), tag=tag)
            for key, value in properties.items():
                message.add_property(key, value)
            producer.send(message)
    finally:
        producer.shutdown()
    received: dict[str, Any] = {}
    threads = [
        threading.Thread(
            target=_consume_exactly,
            args=(port, f"sql-{i}", topic, expression, len(expected), received),
        )
        for i, (expression, expected) in enumerate(EXPRESSIONS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S + 10)
    return {"received": received}


def sql_refused(port: int, topic: str) -> dict[str, Any]:
    """A SimpleConsumer subscribing with a bad SQL92 expression: what receive raises."""
    out: dict[str, Any] = {}
    consumer = _sql_consumer(port, "sql-bad", topic, BAD_EXPRESSION)
    try:
        consumer.receive(32, 30)
        out["refused"] = False
    except Exception as error:  # noqa: BLE001 - the observation
        out["refused"] = True
        out["code"] = _code(error)
        out["message"] = str(error)
    finally:
        consumer.shutdown()
    return out


def _timed_message(topic: str, body: bytes, due_s: int) -> Message:
    message = _message(topic, body)
    message.delivery_timestamp = due_s  # the client sends whole seconds
    return message


def _wait_until(wall_s: float) -> None:
    """Block until the wall clock reads ``wall_s`` (the scenario's own timing)."""
    while (left_s := wall_s - time.time()) > 0:
        time.sleep(min(left_s, 0.05))


def recall(port: int, topic: str, plain_topic: str) -> dict[str, Any]:
    """Two timed messages due together: one recalled 1 s before due, the other let
    through, then recalled after delivery; a normal message's receipt has no handle."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), (topic, plain_topic))
    producer.startup()
    consumer = SimpleConsumer(_config(port), "recall-reader", {topic: FilterExpression()}, AWAIT_S)
    consumer.startup()
    try:
        due_s = int(time.time()) + 4
        recalled = producer.send(_timed_message(topic, b"recalled", due_s))
        kept = producer.send(_timed_message(topic, b"kept", due_s))
        out["handles"] = [bool(recalled.recall_handle), bool(kept.recall_handle)]
        out["plain_handle"] = producer.send(_message(plain_topic, b"now")).recall_handle
        _wait_until(due_s - 1)
        out["recall_before_due_s"] = due_s - time.time()
        out["recalled_id"] = producer.recall_message(topic, recalled.recall_handle)
        out["sent_ids"] = [recalled.message_id, kept.message_id]
        bodies: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while "kept" not in bodies and time.monotonic() < deadline:
            for message in consumer.receive(32, 30):
                bodies.append(message.body.decode())
                consumer.ack(message)
        for message in consumer.receive(32, 30):  # the recalled one must not follow
            bodies.append(message.body.decode())
            consumer.ack(message)
        out["received"] = bodies
        try:
            producer.recall_message(topic, kept.recall_handle)
            out["late_recall"] = "succeeded"
        except Exception as error:  # noqa: BLE001 - the observation
            out["late_recall"] = {"code": _code(error), "message": str(error)}
    finally:
        consumer.shutdown()
        producer.shutdown()
    return out


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "sql_filters": sql_filters,
    "sql_refused": sql_refused,
    "recall": recall,
}

if __name__ == "__main__":
    scenario, port, *args = sys.argv[1:]
    print(json.dumps(SCENARIOS[scenario](int(port), *args)))
