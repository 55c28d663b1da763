"""The OFFICIAL RocketMQ Python client while a broker drains (see test_broker_drain_cluster.py).

Run in its own interpreter (``python -m tests.e2e.drain_client SCENARIO ...``;
the client's protobuf modules clash with ours in one process). Prints one
JSON object (the observations) as its last stdout line. Every wait has a
deadline.

- ``send_through_drain PORT NAMESERVER DRAINED``: a producer reaching the
  cluster through the broker at PORT sends messages before, during and after
  ``rip5 admin broker drain DRAINED`` (started by this script half way, so the
  drain overlaps the sends); records where each send landed and every error
  the application saw (the client retries internally).
- ``receive_all PORT COUNT``: a simple consumer receives and acks COUNT
  messages; records each and every receive error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.contract.official_client import _code, _config, _message

TOPIC = "elastic"
GROUP = "elastic-readers"
SENDS_BEFORE = 16  # before the drain starts
SENDS_DURING_MAX = 400  # while the drain runs (it ends sooner)
SENDS_AFTER = 16  # once the drained broker has exited
DRAIN_TIMEOUT_S = 30.0
RECEIVE_DEADLINE_S = 20.0


def send_through_drain(port: int, nameserver: str, drained: str) -> dict[str, Any]:
    """See the module docstring."""
    sent: list[list[str]] = []
    errors: list[Any] = []
    producer = Producer(_config(port), (TOPIC,))
    producer.startup()

    def send(index: int) -> None:
        try:
            receipt = producer.send(_message(TOPIC, f"m{index}".encode()))
        except Exception as error:  # noqa: BLE001 - the observation
            errors.append(_code(error))
            return
        sent.append([receipt.message_id, f"m{index}", str(receipt.message_queue.endpoints)])

    try:
        for index in range(SENDS_BEFORE):
            send(index)
        drain = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rip5",
                "admin",
                "broker",
                "drain",
                drained,
                "--nameserver",
                nameserver,
                "--timeout-s",
                str(DRAIN_TIMEOUT_S),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        index = SENDS_BEFORE
        while drain.poll() is None and index < SENDS_BEFORE + SENDS_DURING_MAX:
            send(index)
            index += 1
        during = index - SENDS_BEFORE
        output, _ = drain.communicate(timeout=DRAIN_TIMEOUT_S + 10)
        for _ in range(SENDS_AFTER):
            send(index)
            index += 1
    finally:
        producer.shutdown()
    return {
        "sent": sent,
        "send_errors": errors,
        "sends_during_drain": during,
        "drain_exit": drain.returncode,
        "drain_output": output,
    }


def receive_all(port: int, count: int) -> dict[str, Any]:
    """See the module docstring."""
    received: list[list[str]] = []
    errors: list[Any] = []
    consumer = SimpleConsumer(_config(port), GROUP, {TOPIC: FilterExpression()}, 5)
    consumer.startup()
    try:
        deadline = time.monotonic() + RECEIVE_DEADLINE_S
        while len(received) < count and time.monotonic() < deadline:
            try:
                batch = consumer.receive(32, 15)
            except Exception as error:  # noqa: BLE001 - the observation
                errors.append(_code(error))
                continue
            for message in batch:
                received.append([message.message_id, message.body.decode()])
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return {"received": received, "receive_errors": errors}


if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    if name == "send_through_drain":
        result = send_through_drain(int(args[0]), args[1], args[2])
    else:
        result = receive_all(int(args[0]), int(args[1]))
    print(json.dumps(result))
