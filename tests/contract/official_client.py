"""Scenarios run by the OFFICIAL RocketMQ Python client (rocketmq-python-client).

Run in its own interpreter (``python official_client.py PORT SCENARIO``): the
client's generated protobuf modules clash with ours in one process. Prints
one JSON object (the scenario's observations) as its last stdout line; the
test asserts on it. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import ClientException

DEADLINE_S = 40.0


def _config(port: int) -> ClientConfiguration:
    return ClientConfiguration(f"127.0.0.1:{port}", Credentials())


def _message(topic: str, body: bytes, tag: str | None = None, group: str | None = None) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    if tag is not None:
        message.tag = tag
    if group is not None:
        message.message_group = group
    return message


def _receive_until(consumer: SimpleConsumer, count: int, invisible_s: int) -> list[Message]:
    received: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < count and time.monotonic() < deadline:
        received.extend(consumer.receive(32, invisible_s))
    return received


def _view(message: Message) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "body": message.body.decode(),
        "tag": message.tag,
        "group": message.message_group,
        "attempt": message.delivery_attempt,
        "corrupted": message.corrupted,
    }


def _code(error: BaseException) -> int | str:
    if isinstance(error, ClientException) and error.code:
        return int(error.code)
    return f"{type(error).__name__}: {error}"


def tag_filter_then_ack(port: int, out: dict[str, Any]) -> None:
    """Group ``tagged`` on topic ``normal`` with filter "a": only "a" messages reach it,
    and once acked nothing is left (``out["tagged"]``, ``out["tagged_after_ack"]``)."""
    tagged = SimpleConsumer(_config(port), "tagged", {"normal": FilterExpression("a")}, 5)
    tagged.startup()
    try:
        got = _receive_until(tagged, 2, 15)
        out["tagged"] = [_view(m) for m in got]
        for message in got:
            tagged.ack(message)
        out["tagged_after_ack"] = [_view(m) for m in tagged.receive(32, 15)]
    finally:
        tagged.shutdown()


def redelivery_after_change(port: int, out: dict[str, Any], count: int) -> None:
    """Group ``plain`` receives the ``count`` messages of topic ``normal``, cuts the
    invisibility of ``out["normal_ids"][0]`` to 1 s and acks the rest; that one comes
    back with attempt 2, its old handle is refused, and after its ack nothing is left."""
    plain = SimpleConsumer(_config(port), "plain", {"normal": FilterExpression()}, 5)
    plain.startup()
    try:
        first = _receive_until(plain, count, 15)
        out["plain_first"] = [_view(m) for m in first]
        target = next(m for m in first if m.message_id == out["normal_ids"][0])
        old_handle = target.receipt_handle
        plain.change_invisible_duration(target, 1)
        out["handle_changed"] = target.receipt_handle != old_handle
        for message in first:
            if message is not target:
                plain.ack(message)
        again = _receive_until(plain, 1, 15)
        out["redelivered"] = [_view(m) for m in again]
        stale = Message()
        stale.topic = "normal"
        stale.message_id = target.message_id
        stale.receipt_handle = old_handle
        stale.endpoints = target.endpoints
        try:
            plain.ack(stale)
            out["stale_ack"] = "accepted"
        except Exception as error:  # noqa: BLE001 - the observation
            out["stale_ack"] = _code(error)
        for message in again:
            plain.ack(message)
        out["after_all_acked"] = [_view(m) for m in plain.receive(32, 15)]
    finally:
        plain.shutdown()


def produce_and_simple_consume(port: int) -> dict[str, Any]:
    """NORMAL and FIFO sends; SimpleConsumer receive, tag filter, ack, redelivery."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("normal", "fifo"))
    producer.startup()
    try:
        sent_normal = [
            producer.send(_message("normal", f"n{i}".encode(), tag="a" if i % 2 == 0 else "b"))
            for i in range(4)
        ]
        out["normal_ids"] = [receipt.message_id for receipt in sent_normal]
        sent_fifo = [
            producer.send(_message("fifo", f"f{i}".encode(), group="order-1")) for i in range(3)
        ]
        out["fifo_ids"] = [receipt.message_id for receipt in sent_fifo]

        tag_filter_then_ack(port, out)

        # FIFO: the group's messages come in order, one batch at a time.
        fifo = SimpleConsumer(_config(port), "fifo-group", {"fifo": FilterExpression()}, 5)
        fifo.startup()
        try:
            got = _receive_until(fifo, 3, 15)
            out["fifo_received"] = [_view(m) for m in got]
            for message in got:
                fifo.ack(message)
        finally:
            fifo.shutdown()

        redelivery_after_change(port, out, 4)
    finally:
        producer.shutdown()
    return out


class _Listener(MessageListener):
    """Records every call in order; fails the messages ``fails`` picks."""

    def __init__(self, fails: Callable[[Message], bool]) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.fails = fails

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.calls.append(_view(message))
        return ConsumeResult.FAILURE if self.fails(message) else ConsumeResult.SUCCESS


def push_consume(port: int, topic: str = "mixed", last_group: str | None = "g") -> dict[str, Any]:
    """PushConsumer: settings handshake, assignment, consume, nack -> redelivery.

    The third message carries ``last_group`` as its message group (None: none).
    """
    out: dict[str, Any] = {}
    # The first delivery of the message tagged "retry" fails.
    listener = _Listener(lambda m: m.tag == "retry" and m.delivery_attempt == 1)
    consumer = PushConsumer(_config(port), "pusher", listener, {topic: FilterExpression()})
    consumer.startup()
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        ids = [producer.send(_message(topic, b"p0", tag="ok")).message_id]
        ids.append(producer.send(_message(topic, b"p1", tag="retry")).message_id)
        ids.append(producer.send(_message(topic, b"p2", tag="ok", group=last_group)).message_id)
        out["sent"] = ids
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            with listener.lock:
                done = {c["id"] for c in listener.calls if c["tag"] == "ok"}
                retried = [c for c in listener.calls if c["tag"] == "retry" and c["attempt"] == 2]
            if len(done) == 2 and retried:
                break
            time.sleep(0.05)
        with listener.lock:
            out["calls"] = list(listener.calls)
    finally:
        producer.shutdown()
        consumer.shutdown()
    # Everything was acked: the group has nothing left to deliver.
    check = SimpleConsumer(_config(port), "pusher", {topic: FilterExpression()}, 5)
    check.startup()
    try:
        out["left_over"] = [_view(m) for m in check.receive(32, 15)]
    finally:
        check.shutdown()
    return out


def push_fifo_dead_letter(port: int) -> dict[str, Any]:
    """FIFO PushConsumer: per-group order, local retries, then ForwardMessageToDeadLetterQueue."""
    out: dict[str, Any] = {}
    listener = _Listener(lambda m: m.tag == "poison")  # every delivery of it fails
    consumer = PushConsumer(_config(port), "fifo-group", listener, {"fifo": FilterExpression()})
    consumer.startup()
    producer = Producer(_config(port), ("fifo",))
    producer.startup()
    try:
        poison = producer.send(_message("fifo", b"poison", tag="poison", group="A")).message_id
        after = producer.send(_message("fifo", b"after", tag="ok", group="A")).message_id
        other = producer.send(_message("fifo", b"other", tag="ok", group="B")).message_id
        out["ids"] = {"poison": poison, "after": after, "other": other}
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            with listener.lock:
                if any(c["id"] == after for c in listener.calls):
                    break
            time.sleep(0.05)
        with listener.lock:
            out["calls"] = [c["id"] for c in listener.calls]
    finally:
        producer.shutdown()
        consumer.shutdown()
    dead = SimpleConsumer(_config(port), "dlq-reader", {"%DLQ%fifo-group": FilterExpression()}, 5)
    dead.startup()
    try:
        got = _receive_until(dead, 1, 15)
        out["dead_letters"] = [_view(m) for m in got]
        for message in got:
            dead.ack(message)
    finally:
        dead.shutdown()
    return out


def _raw_stub(port: int) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return channel, service_pb2_grpc.MessagingServiceStub(channel)


def garbage_handles_then_round_trip(
    producer: Producer, consumer: SimpleConsumer, topic: str
) -> dict[str, Any]:
    """Ack and renew with a garbage handle (the codes), then a round trip still works."""
    out: dict[str, Any] = {}
    receipt = producer.send(_message(topic, b"before-bad-handles"))
    real = next(m for m in _receive_until(consumer, 1, 15) if m.message_id == receipt.message_id)
    garbage = Message()
    garbage.topic = topic
    garbage.message_id = real.message_id
    garbage.receipt_handle = "not-a-receipt-handle"
    garbage.endpoints = real.endpoints
    try:
        consumer.ack(garbage)
        out["garbage_ack"] = "accepted"
    except Exception as error:  # noqa: BLE001 - the observation
        out["garbage_ack"] = _code(error)
    try:
        consumer.change_invisible_duration(garbage, 5)
        out["garbage_change"] = "accepted"
    except Exception as error:  # noqa: BLE001
        out["garbage_change"] = _code(error)
    out["garbage_handle_kept"] = garbage.receipt_handle
    # Still serving: the real handle still acks, and a new round trip works.
    consumer.ack(real)
    receipt = producer.send(_message(topic, b"after-bad-input"))
    got = _receive_until(consumer, 1, 15)
    for message in got:
        consumer.ack(message)
    out["still_serving"] = [receipt.message_id, [m.message_id for m in got]]
    return out


def bad_input(port: int) -> dict[str, Any]:
    """Oversized body, unknown topic, garbage handle, missing client id, unbuilt RPCs."""
    out: dict[str, Any] = {}
    metadata = (("x-mq-client-id", "contract-raw-client"),)
    channel, stub = _raw_stub(port)
    with channel:
        big = definition_pb2.Message(
            topic=definition_pb2.Resource(name="normal"),
            body=b"x" * (4 * 1024 * 1024 + 1),
            system_properties=definition_pb2.SystemProperties(
                message_id="0100000000000000000000000000000001",
                message_type=definition_pb2.NORMAL,
                body_encoding=definition_pb2.IDENTITY,
            ),
        )
        response = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[big]), metadata=metadata, timeout=10
        )
        out["oversized"] = [response.status.code, len(response.entries)]
        response = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="no-such-topic")),
            metadata=metadata,
            timeout=10,
        )
        out["route_unknown"] = response.status.code
        response = stub.Heartbeat(service_pb2.HeartbeatRequest(), timeout=10)
        out["no_client_id"] = response.status.code
        response = stub.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=definition_pb2.Resource(name="txn"),
                message_id="0100000000000000000000000000000001",
                transaction_id="not-a-transaction-id",
                resolution=definition_pb2.COMMIT,
            ),
            metadata=metadata,
            timeout=10,
        )
        out["end_transaction"] = response.status.code
        response = stub.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=definition_pb2.Resource(name="txn"),
                message_id="0100000000000000000000000000000001",
                transaction_id="T1:0:0100000000000000000000000000000001",
                resolution=definition_pb2.COMMIT,
            ),
            metadata=metadata,
            timeout=10,
        )
        out["end_unknown_transaction"] = response.status.code
        for name, topic, ahead_s in [
            ("delay_to_normal", "normal", 5),
            ("delay_too_far", "timed", 24 * 3600 + 60),
        ]:
            timed = definition_pb2.Message(
                topic=definition_pb2.Resource(name=topic),
                body=b"timed",
                system_properties=definition_pb2.SystemProperties(
                    message_id=f"01000000000000000000000000000000{len(name):02d}",
                    message_type=definition_pb2.DELAY,
                    body_encoding=definition_pb2.IDENTITY,
                ),
            )
            timed.system_properties.delivery_timestamp.seconds = int(time.time()) + ahead_s
            response = stub.SendMessage(
                service_pb2.SendMessageRequest(messages=[timed]), metadata=metadata, timeout=10
            )
            out[name] = [response.status.code, response.status.message]
        pulled = list(
            stub.PullMessage(service_pb2.PullMessageRequest(), metadata=metadata, timeout=10)
        )
        out["pull"] = [
            r.status.code if r.HasField("status") else ["next_offset", r.next_offset]
            for r in pulled
        ]

    producer = Producer(_config(port), ("normal",))
    producer.startup()
    try:
        try:
            producer.send(_message("no-such-topic", b"x"))
            out["send_unknown_topic"] = "accepted"
        except Exception as error:  # noqa: BLE001
            out["send_unknown_topic"] = str(error)
        consumer = SimpleConsumer(_config(port), "bad-input", {"normal": FilterExpression()}, 5)
        consumer.startup()
        try:
            out.update(garbage_handles_then_round_trip(producer, consumer, "normal"))
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()
    return out


def timed(port: int) -> dict[str, Any]:
    """A DELAY message due in 3 s: when it was due and when the consumer got it."""
    out: dict[str, Any] = {}
    producer = Producer(_config(port), ("timed",))
    producer.startup()
    consumer = SimpleConsumer(_config(port), "timed-reader", {"timed": FilterExpression()}, 5)
    consumer.startup()
    try:
        message = _message("timed", b"later")
        due_s = int(time.time()) + 3  # the client sends whole seconds
        message.delivery_timestamp = due_s
        out["sent_ms"] = int(time.time() * 1000)
        out["id"] = producer.send(message).message_id
        got = _receive_until(consumer, 1, 15)
        out["arrived_ms"] = int(time.time() * 1000)
        out["due_ms"] = due_s * 1000
        out["received"] = [_view(m) for m in got]
        out["delivery_timestamps"] = [m.delivery_timestamp for m in got]
        for received in got:
            consumer.ack(received)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return out


class _Checker(TransactionChecker):
    """Answers check-backs: COMMIT for the ids it was told, "unknown yet" otherwise (the
    local transaction may still run); records calls."""

    def __init__(self, commit_ids: set[str]) -> None:
        self.commit_ids = commit_ids
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, message: Message) -> TransactionResolution:
        with self.lock:
            self.checked.append(message.message_id)
        if message.message_id in self.commit_ids:
            return TransactionResolution.COMMIT
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


def transactions(port: int) -> dict[str, Any]:
    """Commit one half message, roll back another: only the committed one is consumed."""
    out: dict[str, Any] = {}
    checker = _Checker(set())
    producer = Producer(_config(port), ("txn",), checker)
    producer.startup()
    consumer = SimpleConsumer(_config(port), "txn-reader", {"txn": FilterExpression()}, 5)
    consumer.startup()
    try:
        committed = producer.begin_transaction()
        receipt = producer.send(_message("txn", b"commit-me"), committed)
        out["committed"] = receipt.message_id
        out["transaction_id"] = receipt.transaction_id
        out["before_commit"] = [_view(m) for m in consumer.receive(32, 15)]
        committed.commit()
        rolled_back = producer.begin_transaction()
        out["rolled_back"] = producer.send(_message("txn", b"drop-me"), rolled_back).message_id
        rolled_back.rollback()
        got = _receive_until(consumer, 1, 15)
        for message in got:
            consumer.ack(message)
        # Two more long polls: the rolled-back message must never show up.
        got += consumer.receive(32, 15) + consumer.receive(32, 15)
        out["received"] = [_view(m) for m in got]
        try:
            committed.commit()
            out["commit_again"] = "accepted"
        except Exception as error:  # noqa: BLE001 - the observation
            out["commit_again"] = _code(error)
        out["checked"] = list(checker.checked)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return out


def orphan_send(port: int) -> dict[str, Any]:
    """Send a half message and die without deciding (no shutdown: the process just ends)."""
    producer = Producer(_config(port), ("txn",), _Checker(set()))
    producer.startup()
    transaction = producer.begin_transaction()
    receipt = producer.send(_message("txn", b"orphan"), transaction)
    print(json.dumps({"orphan": receipt.message_id}), flush=True)
    os._exit(0)


def orphan_resolve(port: int, orphan_id: str) -> dict[str, Any]:
    """A second producer of the group answers the check-back of the orphan with COMMIT."""
    out: dict[str, Any] = {}
    checker = _Checker({orphan_id})
    producer = Producer(_config(port), ("txn",), checker)
    producer.startup()
    consumer = SimpleConsumer(_config(port), "orphan-reader", {"txn": FilterExpression()}, 5)
    consumer.startup()
    try:
        got: list[Message] = []
        deadline = time.monotonic() + DEADLINE_S
        while orphan_id not in {m.message_id for m in got} and time.monotonic() < deadline:
            batch = consumer.receive(32, 15)
            for message in batch:
                consumer.ack(message)
            got += batch
        out["received"] = [_view(m) for m in got if m.message_id == orphan_id]
        with checker.lock:
            out["checked"] = list(checker.checked)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return out


def pending_then_exit(port: int, timed_topic: str, count: str) -> dict[str, Any]:
    """Send ``count`` timed messages (due in 4 s) and ``count`` half messages, print
    their ids, and die without deciding the transactions."""
    producer = Producer(_config(port), (timed_topic, "txn"), _Checker(set()))
    producer.startup()
    due_s = int(time.time()) + 4
    timed_ids = []
    for n in range(int(count)):
        message = _message(timed_topic, f"timed-{n}".encode())
        message.delivery_timestamp = due_s
        timed_ids.append(producer.send(message).message_id)
    orphans = [
        producer.send(
            _message("txn", f"orphan-{n}".encode()), producer.begin_transaction()
        ).message_id
        for n in range(int(count))
    ]
    print(json.dumps({"timed": timed_ids, "due_ms": due_s * 1000, "orphans": orphans}), flush=True)
    os._exit(0)


def settle_and_receive(
    port: int, timed_topic: str, orphan_ids: str, timed_count: str
) -> dict[str, Any]:
    """A producer of the transaction group commits the orphans when asked; consumers
    collect the committed orphans and the timed messages, with arrival times."""
    out: dict[str, Any] = {}
    orphans = set(orphan_ids.split(","))
    checker = _Checker(orphans)
    producer = Producer(_config(port), ("txn",), checker)
    producer.startup()
    txn = SimpleConsumer(_config(port), "settled-reader", {"txn": FilterExpression()}, 5)
    txn.startup()
    timed = SimpleConsumer(_config(port), "timed-survivor", {timed_topic: FilterExpression()}, 5)
    timed.startup()
    try:
        arrivals: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(arrivals) < int(timed_count) and time.monotonic() < deadline:
            for message in timed.receive(32, 30):
                arrivals.append({"id": message.message_id, "arrived_ms": int(time.time() * 1000)})
                timed.ack(message)
        out["timed"] = arrivals
        settled: list[Message] = []
        while len({m.message_id for m in settled} & orphans) < len(orphans) and (
            time.monotonic() < deadline
        ):
            batch = txn.receive(32, 30)
            for message in batch:
                txn.ack(message)
            settled += [m for m in batch if m.message_id in orphans]
        out["settled"] = [_view(m) for m in settled]
        with checker.lock:
            out["checked"] = list(checker.checked)
    finally:
        timed.shutdown()
        txn.shutdown()
        producer.shutdown()
    return out


def tls_round_trip(port: int) -> dict[str, Any]:
    """A Producer and a SimpleConsumer in the client's TLS mode (tls_enable): the server's
    certificate is checked against GRPC_DEFAULT_SSL_ROOTS_FILE_PATH."""
    producer = Producer(_config(port), ("normal",), tls_enable=True)
    producer.startup()
    try:
        sent = [producer.send(_message("normal", b"tls-%d" % i)).message_id for i in range(3)]
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(
        _config(port), "tls-group", {"normal": FilterExpression()}, 5, tls_enable=True
    )
    consumer.startup()
    try:
        received = _receive_until(consumer, len(sent), 30)
        for message in received:
            consumer.ack(message)
    finally:
        consumer.shutdown()
    return {"sent": sorted(sent), "received": sorted(m.message_id for m in received)}


def send_for_4x(port: int, topic: str, count: str) -> dict[str, Any]:
    """Send ``count`` messages (tag, two keys, two properties each) for a 4.x consumer."""
    producer = Producer(_config(port), (topic,))
    producer.startup()
    try:
        ids = []
        for i in range(int(count)):
            message = _message(topic, f"v5-{i}".encode(), tag=f"tag{i}")
            message.keys = f"key{i}"  # the setter adds to the message's keys
            message.keys = f"other{i}"
            message.add_property("color", "green")
            message.add_property("index", str(i))
            ids.append(producer.send(message).message_id)
    finally:
        producer.shutdown()
    return {"ids": ids}


def receive_all(
    port: int, topic: str, group: str, count: str, bodies_file: str = ""
) -> dict[str, Any]:
    """Receive (acking each batch at once) ``count`` messages of ``topic`` sent by another
    client (e.g. a 4.x one over remoting), or with ``bodies_file`` (one body per line)
    until every body in it came: everything the consumer sees of each."""
    wanted = set(Path(bodies_file).read_text().split()) if bodies_file else None
    consumer = SimpleConsumer(_config(port), group, {topic: FilterExpression()}, 5)
    consumer.startup()
    got: list[Message] = []
    seen: set[str] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and (
            len(got) < int(count) if wanted is None else not wanted <= seen
        ):
            batch = consumer.receive(32, 15)
            for message in batch:
                consumer.ack(message)
                seen.add(message.body.decode())
            got.extend(batch)
    finally:
        consumer.shutdown()
    return {
        "received": [
            {
                **_view(message),
                "keys": sorted(message.keys or ()),
                "properties": dict(message.properties or {}),
            }
            for message in got
        ]
    }


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "receive_all": receive_all,
    "send_for_4x": send_for_4x,
    "tls_round_trip": tls_round_trip,
    "produce_and_simple_consume": produce_and_simple_consume,
    "push_consume": push_consume,
    "push_fifo_dead_letter": push_fifo_dead_letter,
    "bad_input": bad_input,
    "timed": timed,
    "transactions": transactions,
    "orphan_send": orphan_send,
    "orphan_resolve": orphan_resolve,
    "pending_then_exit": pending_then_exit,
    "settle_and_receive": settle_and_receive,
}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[2]](int(sys.argv[1]), *sys.argv[3:])
    print(json.dumps(result))
