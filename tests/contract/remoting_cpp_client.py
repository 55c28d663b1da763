"""Scenarios run by the C++ RocketMQ 4.x client, through one of its Python wrappers:
PyPI ``rocketmq-client-python==0.5.0rc2`` (transactions, sharding-key order) or
``rocketmq==0.4.4`` (batches, explicit queue selectors).

Run in its own interpreter with the wrapper's folder first on ``sys.path``
(``python remoting_cpp_client.py NAMESRV SCENARIO [ARGS]``): both packages are
named ``rocketmq``, like the official 5.x client's, so none shares a site. Each
scenario imports what only its wrapper has.
NAMESRV is a broker's remoting address (every broker answers name-server
requests). Prints one JSON object (the scenario's observations) as its last
stdout line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rocketmq.client import Message, Producer, SendStatus

GROUP = "PG_CPP"
CHECK_WAIT_S = 60.0
PULL_DEADLINE_S = 40.0
FIRST_SEND_ATTEMPTS = 3
FAST_FAILURE_S = 1.0  # well under the client's 3 s send timeout
FIRST_SEND_PAUSE_S = 0.5

T = TypeVar("T")


def _first_send(send: Callable[[], T]) -> T:
    """A producer's first send, tried again (at most ``FIRST_SEND_ATTEMPTS`` times) when
    it fails within ``FAST_FAILURE_S``.

    The C++ client creates its first connection to a broker from the sending thread
    and from its route/heartbeat timer at once; under CPU load the loser gives up
    without waiting (its log: ``GetTransport of:ADDR get timed_mutex timeout``, each
    of its 5 attempts within a millisecond, then ``No route info of this topic``).
    Nothing reached a broker, so a user tries again. A failure that took as long as a
    send timeout may have stored the message, so it is not retried; nor is a failure
    after the first attempts: a broker that keeps failing still fails the scenario.
    """
    for attempt in range(1, FIRST_SEND_ATTEMPTS):
        started = time.monotonic()
        try:
            return send()
        except Exception:
            if time.monotonic() - started >= FAST_FAILURE_S:
                raise
            print(f"first send failed at once (attempt {attempt}): trying again", file=sys.stderr)
            time.sleep(FIRST_SEND_PAUSE_S)  # a pause before retrying, not a wait for a state
    return send()  # the last attempt: its failure is the scenario's


def _message(topic: str, body: str, tag: str, keys: str, **properties: str) -> Message:
    message = Message(topic)
    message.set_tags(tag)
    message.set_keys(keys)
    message.set_body(body)
    for name, value in properties.items():
        message.set_property(name, value)
    return message


def produce(namesrv: str) -> dict[str, Any]:
    """Sync sends with tags, keys and properties, a body large enough to be compressed,
    oneway sends, and orderly sends by sharding key."""
    out: dict[str, Any] = {}
    producer = Producer(GROUP)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:

        def sync(i: int) -> Any:
            return producer.send_sync(
                _message("normal", f"sync-{i}", f"tag{i}", f"key{i} other{i}", color="red",
                         index=str(i))
            )  # fmt: skip

        sent = [_first_send(lambda: sync(0)), sync(1), sync(2)]
        out["sync"] = [{"status": int(r.status), "id": r.msg_id, "offset": r.offset} for r in sent]
        big = producer.send_sync(_message("normal", "z" * 10_000, "big", "bigkey"))
        out["big"] = {"status": int(big.status), "id": big.msg_id}
        for i in range(2):
            producer.send_oneway(_message("normal", f"oneway-{i}", "oneway", f"ow{i}"))
    finally:
        producer.shutdown()
    orderly = Producer(GROUP + "_ORDERLY", orderly=True)
    orderly.set_namesrv_addr(namesrv)
    orderly.start()
    try:
        results = [
            orderly.send_orderly_with_sharding_key(
                _message("normal", f"order-{i}", "fifo", f"o{i}"), "order-42"
            )
            for i in range(5)
        ]
        out["orderly"] = [{"status": int(r.status), "offset": r.offset} for r in results]
    finally:
        orderly.shutdown()
    out["ok"] = int(SendStatus.OK)
    return out


def transactions(namesrv: str) -> dict[str, Any]:
    """A transaction committed and one rolled back by the local transaction."""
    from rocketmq.client import TransactionMQProducer, TransactionStatus

    decided: dict[str, str] = {}
    lock = threading.Lock()

    def check(message: Any) -> Any:
        return TransactionStatus.UNKNOWN

    def execute(message: Any, user_args: Any) -> Any:
        body = message.body.decode() if isinstance(message.body, bytes) else str(message.body)
        with lock:
            decided[body] = "commit" if body.startswith("commit") else "rollback"
        return TransactionStatus.COMMIT if body.startswith("commit") else TransactionStatus.ROLLBACK

    producer = TransactionMQProducer(GROUP + "_TXN", check)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:

        def send(body: str) -> Any:
            return producer.send_message_in_transaction(_message("txn", body, "t", body), execute)

        results = [_first_send(lambda: send("commit-1")), send("rollback-1")]
    finally:
        producer.shutdown()
    return {
        "sent": [{"status": int(r.status), "id": r.msg_id} for r in results],
        "decided": decided,
    }


def check_back(namesrv: str) -> dict[str, Any]:
    """A transaction left unknown by the local transaction; the broker's check-back asks
    the producer, whose checker commits it. Waits (with a deadline) for the check, prints
    ``checked``, and stays connected (the commit goes out after the checker returns)
    until its stdin closes."""
    from rocketmq.client import TransactionMQProducer, TransactionStatus

    checked: list[dict[str, Any]] = []
    asked = threading.Event()

    def check(message: Any) -> Any:
        checked.append(
            {"id": message.id, "body": message.body.decode(), "tags": message.tags.decode()}
        )
        asked.set()
        return TransactionStatus.COMMIT

    def execute(message: Any, user_args: Any) -> Any:
        return TransactionStatus.UNKNOWN

    producer = TransactionMQProducer(GROUP + "_CHECKED", check)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        result = _first_send(
            lambda: producer.send_message_in_transaction(
                _message("txn", "checked-1", "c", "checked-key", origin="cpp"), execute
            )
        )
        print("checked" if asked.wait(CHECK_WAIT_S) else "not checked", flush=True)
        sys.stdin.read()
    finally:
        producer.shutdown()
    return {"sent": {"status": int(result.status), "id": result.msg_id}, "checked": checked}


def stream(namesrv: str, topic: str, count: str) -> dict[str, Any]:
    """``count`` sync sends one after another, each reported on its own line as it
    ends (so a test can act in the middle); failures are counted, not fatal."""
    acked: list[dict[str, Any]] = []
    failed: list[str] = []
    producer = Producer(GROUP + "_STREAM")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(int(count)):
            try:
                result = producer.send_sync(_message(topic, f"s-{i}", "s", f"s{i}"))
            except Exception as error:  # noqa: BLE001 - the client's own exception types
                failed.append(f"{i}: {type(error).__name__}: {error}")
            else:
                if result.status == SendStatus.OK:
                    acked.append({"body": f"s-{i}", "id": result.msg_id})
                else:
                    failed.append(f"{i}: status {int(result.status)}")
            print(f"progress {i + 1}", flush=True)
    finally:
        producer.shutdown()
    return {"acked": acked, "failed": failed}


SELECTED_QUEUE = 1  # where batch_and_select's queue selector sends


def _always_one_queue(queue_count: int, message: Any, arg: Any) -> int:
    return SELECTED_QUEUE % queue_count


def batch_and_select(namesrv: str, topic: str) -> dict[str, Any]:
    """One batch of 4 messages (SEND_MESSAGE with batch set), then 3 sends through a
    queue selector that always picks queue 1."""
    producer = Producer("PG_BATCH")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        batch = producer.send_batch(
            [_message(topic, f"batch-{i}", "bt", f"bk{i}", part=str(i)) for i in range(4)]
        )
        selected = [
            producer.send_orderly(
                _message(topic, f"selected-{i}", "sel", f"sk{i}"),
                0,
                queue_selector=_always_one_queue,
            )
            for i in range(3)
        ]
    finally:
        producer.shutdown()
    return {
        "ok": int(SendStatus.OK),
        "batch": {"status": int(batch.status), "id": batch.msg_id, "offset": batch.offset},
        "selected": [{"status": int(r.status), "offset": r.offset} for r in selected],
    }


def pull_all(namesrv: str, topic: str, expression: str, count: str) -> dict[str, Any]:
    """A pull consumer reads every queue of ``topic`` from offset 0 (through the
    expression) until it has ``count`` messages or its deadline passes."""
    from rocketmq.client import PullConsumer

    consumer = PullConsumer("CG_PULL")
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + PULL_DEADLINE_S
    try:
        while len(got) < int(count) and time.monotonic() < deadline:
            for message in consumer.pull(topic, expression):
                got.append(
                    {
                        "id": message.id,
                        "body": message.body.decode(),
                        "tags": message.tags.decode(),
                        "keys": sorted(message.keys.decode().split()),
                        "properties": {
                            name: message.get_property(name).decode() for name in ("color", "index")
                        },
                        "queue": message.queue_id,
                        "offset": message.queue_offset,
                    }
                )
    finally:
        consumer.shutdown()
    return {"received": got}


def push(namesrv: str, topic: str, count: str) -> dict[str, Any]:
    """A push consumer (pull with long polling underneath, offsets committed by the
    client) subscribed to ``topic``; a producer in the same process sends one message
    a second until the consumer has ``count`` (it starts from the queues' ends, the
    C++ client's default) or the deadline passes."""
    from rocketmq.client import ConsumeStatus

    got: list[dict[str, Any]] = []
    enough = threading.Event()
    lock = threading.Lock()

    def consume(message: Any) -> Any:
        with lock:
            got.append({"id": message.id, "body": message.body.decode()})
            if len(got) >= int(count):
                enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    sent = _push_session(namesrv, "push", topic, consume, enough, lambda: True)
    with lock:
        return {"sent": sent, "received": list(got)}


def _push_session(
    namesrv: str,
    name: str,
    topic: str,
    consume: Callable[[Any], Any],
    done: threading.Event,
    sending: Callable[[], bool],
    *,
    orderly: bool = False,
) -> list[dict[str, Any]]:
    """Run a push consumer of group ``CG_<NAME>`` calling ``consume`` on ``topic``,
    and a producer sending ``<name>-<n>`` (tag the name's first letter) once a second
    while ``sending()``, until ``done`` is set or the deadline passes; what was sent.
    ``orderly``: an orderly consumer (it locks its queues) and a producer sending
    every message with one sharding key (one queue)."""
    from rocketmq.client import PushConsumer

    consumer = PushConsumer(f"CG_{name.upper()}", orderly=orderly)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, consume)
    consumer.start()
    producer = Producer(f"{GROUP}_{name.upper()}", orderly=orderly)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sent: list[dict[str, Any]] = []
    deadline = time.monotonic() + PULL_DEADLINE_S
    try:
        while not done.is_set() and time.monotonic() < deadline:
            if sending():
                body = f"{name}-{len(sent)}"
                message = _message(topic, body, name[0], f"{name[0]}k")
                result = (
                    producer.send_orderly_with_sharding_key(message, name)
                    if orderly
                    else producer.send_sync(message)
                )
                sent.append({"id": result.msg_id, "body": body})
            done.wait(1.0)
    finally:
        producer.shutdown()
        consumer.shutdown()
    return sent


def retry(namesrv: str, topic: str) -> dict[str, Any]:
    """A push consumer that fails the first message it gets (RECONSUME_LATER: the
    client gives it back with CONSUMER_SEND_MSG_BACK) and takes everything after; a
    producer sends one message a second until the consumer has had the failed one
    again, or the deadline passes. Each delivery as the consumer saw it."""
    from rocketmq.client import ConsumeStatus

    got: list[dict[str, Any]] = []
    again = threading.Event()
    lock = threading.Lock()

    def consume(message: Any) -> Any:
        with lock:
            got.append(
                {
                    "id": message.id,
                    "body": message.body.decode(),
                    "topic": message.topic,
                    "reconsume_times": message.reconsume_times,
                    "retry_topic": (message.get_property("RETRY_TOPIC") or b"").decode(),
                    "at": time.monotonic(),
                }
            )
            first = got[0]
            if len(got) == 1:
                return ConsumeStatus.RECONSUME_LATER
            if got[-1]["body"] == first["body"] and got[-1]["reconsume_times"] > 0:
                again.set()  # back from the retry topic (not a duplicate pull)
        return ConsumeStatus.CONSUME_SUCCESS

    sent = _push_session(namesrv, "retry", topic, consume, again, lambda: not got)
    with lock:
        return {"sent": sent, "received": list(got)}


def orderly(namesrv: str, topic: str, count: str) -> dict[str, Any]:
    """An orderly push consumer (it locks each queue it consumes, LOCK_BATCH_MQ) of
    ``topic``; an orderly producer sends one message a second, all with one sharding
    key, until the consumer has ``count`` or the deadline passes."""
    from rocketmq.client import ConsumeStatus

    got: list[dict[str, Any]] = []
    enough = threading.Event()
    lock = threading.Lock()

    def consume(message: Any) -> Any:
        with lock:
            got.append({"id": message.id, "body": message.body.decode(),
                        "queue": message.queue_id, "offset": message.queue_offset})  # fmt: skip
            if len(got) >= int(count):
                enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    sent = _push_session(namesrv, "orderly", topic, consume, enough, lambda: True, orderly=True)
    with lock:
        return {"sent": sent, "received": list(got)}


STOP_FILE = "stop"
CONSUME_DEADLINE_S = 300.0


def consume_stream(namesrv: str, topic: str, group: str) -> dict[str, Any]:
    """A push consumer of ``group`` on ``topic`` that prints ``got BODY ID`` for each
    message as it is consumed, until a file named ``stop`` appears in the working
    folder (the test's signal) or the deadline passes."""
    from pathlib import Path

    from rocketmq.client import ConsumeStatus, PushConsumer

    lock = threading.Lock()
    count = 0

    def consume(message: Any) -> Any:
        nonlocal count
        with lock:
            count += 1
            print(f"got {message.body.decode()} {message.id}", flush=True)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, consume)
    consumer.start()
    print("started", flush=True)
    deadline = time.monotonic() + CONSUME_DEADLINE_S
    try:
        while not Path(STOP_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # the test's signal is a file: looked for until the deadline
    finally:
        consumer.shutdown()
    with lock:
        return {"consumed": count}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "consume_stream": consume_stream,
    "orderly": orderly,
    "push": push,
    "retry": retry,
    "pull_all": pull_all,
    "batch_and_select": batch_and_select,
    "produce": produce,
    "transactions": transactions,
    "stream": stream,
    "check_back": check_back,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[2]](sys.argv[1], *sys.argv[3:])))
