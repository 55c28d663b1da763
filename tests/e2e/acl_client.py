"""Scenarios run by the OFFICIAL RocketMQ Python client with credentials (ACL 2.0; with
ACL off the broker ignores them).

Run in its own interpreter (``python -m tests.e2e.acl_client SCENARIO PORT AK SK
...``); prints one JSON object (the observations) as its last stdout line.
Refusals are recorded as the client reports them: the v2 status code its
exception carries, and the message.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2
from rocketmq.v5.util.signature import Signature

from tests.contract.official_client import _code, _message, _raw_stub, _receive_until


def _config(port: int, ak: str, sk: str) -> ClientConfiguration:
    return ClientConfiguration(f"127.0.0.1:{port}", Credentials(ak, sk))


def _refusal(error: BaseException) -> dict[str, Any]:
    return {"code": _code(error), "message": str(error)}


def send(port: int, ak: str, sk: str, topic: str) -> dict[str, Any]:
    """Start a producer on ``topic`` and send one message: the id, or the refusal (of
    the start or of the send)."""
    producer = Producer(_config(port, ak, sk), (topic,))
    try:
        producer.startup()
    except Exception as error:  # noqa: BLE001 - the observation
        return {"started": False, **_refusal(error)}
    try:
        receipt = producer.send(_message(topic, f"from {ak}".encode()))
        return {"started": True, "sent": receipt.message_id}
    except Exception as error:  # noqa: BLE001
        return {"started": True, "sent": None, **_refusal(error)}
    finally:
        producer.shutdown()


def receive(port: int, ak: str, sk: str, topic: str, group: str, count: str) -> dict[str, Any]:
    """Receive and ack ``count`` messages of ``topic`` as ``group``: their bodies, or
    the refusal."""
    consumer = SimpleConsumer(_config(port, ak, sk), group, {topic: FilterExpression()}, 5)
    try:
        consumer.startup()
    except Exception as error:  # noqa: BLE001
        return {"started": False, **_refusal(error)}
    try:
        got = _receive_until(consumer, int(count), 10)
        for message in got:
            consumer.ack(message)
        return {"started": True, "received": [m.body.decode() for m in got]}
    except Exception as error:  # noqa: BLE001
        return {"started": True, "received": None, **_refusal(error)}
    finally:
        consumer.shutdown()


def signed_send(port: int, ak: str, sk: str, topic: str) -> dict[str, Any]:
    """One SendMessage signed by the official client's own signing code (the headers
    every call of its Producer carries), over its gRPC stack: the status the broker
    answered (the Producer hides it behind "failed to fetch route" when the route
    lookup itself is refused)."""
    metadata = Signature.metadata(_config(port, ak, sk), "acl-e2e-client")
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic),
        body=b"signed",
        system_properties=definition_pb2.SystemProperties(
            message_id="01ACL00000000000000000000000000001",
            message_type=definition_pb2.NORMAL,
            body_encoding=definition_pb2.IDENTITY,
        ),
    )
    channel, stub = _raw_stub(port)
    with channel:
        request = service_pb2.SendMessageRequest(messages=[message])
        response = stub.SendMessage(request, metadata=metadata, timeout=20)
    return {"code": response.status.code, "message": response.status.message}


def round_trip(port: int, ak: str, sk: str, topic: str, group: str) -> dict[str, Any]:
    """Send one message to ``topic`` and receive (and ack) it as ``group``."""
    sent = send(port, ak, sk, topic)
    return {**sent, **receive(port, ak, sk, topic, group, "1")}


def each(scenario: Callable[..., dict[str, Any]]) -> Callable[..., list[dict[str, Any]]]:
    """``scenario`` once per (AK, SK, TOPIC) triple of the arguments, in one process."""

    def run(port: int, *args: str) -> list[dict[str, Any]]:
        triples = [args[i : i + 3] for i in range(0, len(args), 3)]
        return [scenario(port, *triple) for triple in triples]

    return run


SCENARIOS: dict[str, Callable[..., Any]] = {
    "round_trip": round_trip,
    "sends": each(send),
    "receive": receive,
    "signed_sends": each(signed_send),
}

if __name__ == "__main__":
    name, port, *args = sys.argv[1:]
    print(json.dumps(SCENARIOS[name](int(port), *args)))
