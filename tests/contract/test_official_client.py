"""The broker's gRPC v2 endpoint against the OFFICIAL RocketMQ Python client.

The broker (in-memory ports) runs in one process on 127.0.0.1, the client
in another (its protobuf modules clash with ours in one interpreter; HOME
points at tmp_path because it writes logs under ~/logs). These prove the
protocol layer; the full-cluster e2e comes with storage.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("official_client.py")

pytestmark = pytest.mark.integration


class BrokerProcess:
    """The broker process of one test."""

    def __init__(self, tmp_path: Path, *options: str) -> None:
        self.port_file = tmp_path / "port"
        self.log_path = tmp_path / "broker.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.contract.memory_broker", str(self.port_file), *options],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: self.port_file.exists() or self.process.poll() is not None,
            what="the broker to listen",
        )
        assert self.process.poll() is None, self.log_path.read_text()
        self.port = int(self.port_file.read_text())
        self.ports = [int(p) for p in self.port_file.with_suffix(".all").read_text().split(",")]
        self.stopped_alive = False  # set once stop() found it serving

    def stop(self) -> list[dict[str, Any]]:
        """Stop the broker (SIGTERM); the consumer state it wrote on the way out."""
        if self.process.poll() is None:
            self.stopped_alive = True
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        state_file = self.port_file.with_suffix(".state")
        if not state_file.exists():
            return []
        state: list[dict[str, Any]] = json.loads(state_file.read_text())
        return state


@contextlib.contextmanager
def serving_broker(tmp_path: Path, *options: str) -> Iterator[BrokerProcess]:
    """A broker process for the block; it must still serve at the end and stop cleanly."""
    process = BrokerProcess(tmp_path, *options)
    try:
        yield process
    finally:
        process.stop()
    assert process.stopped_alive, f"the broker died during the test: {process.log_path}"
    assert process.process.returncode == 0, process.log_path.read_text()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker process over the in-memory ports."""
    with serving_broker(tmp_path) as process:
        yield process


def _consumed(state: list[dict[str, Any]], group: str, topic: str) -> tuple[int, int]:
    """(messages finished, deliveries in flight) of ``group`` on ``topic``, over its queues."""
    rows = [row for row in state if row["group"] == group and row["topic"] == topic]
    return sum(row["committed"] for row in rows), sum(row["in_flight"] for row in rows)


def run_official(
    argv: list[str], home: Path, timeout_s: float = 180, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run the official client's script ``argv`` in its own interpreter (HOME, where the
    client writes its logs, set to ``home``; ``env`` added to the environment); the JSON
    object on its last stdout line."""
    result = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "HOME": str(home), **(env or {})},
        check=False,
    )
    assert result.returncode == 0, f"client failed:\n{result.stdout}\n{result.stderr}"
    observed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return observed


def run_client(port: int, scenario: str, home: Path, *args: str) -> dict[str, Any]:
    """Run one scenario of the official client in its own interpreter."""
    return run_official([str(CLIENT), str(port), scenario, *args], home)


def test_produce_and_simple_consume(broker: BrokerProcess, tmp_path: Path) -> None:
    seen = run_client(broker.port, "produce_and_simple_consume", tmp_path)
    normal_ids, fifo_ids = seen["normal_ids"], seen["fifo_ids"]
    assert len(set(normal_ids + fifo_ids)) == 7

    # Tag filter "a": messages 0 and 2, bodies intact (MD5 digest checked by the client).
    tagged = seen["tagged"]
    assert sorted(m["id"] for m in tagged) == sorted([normal_ids[0], normal_ids[2]])
    assert all(m["tag"] == "a" and m["attempt"] == 1 and not m["corrupted"] for m in tagged)
    assert seen["tagged_after_ack"] == []

    # FIFO: one group's messages arrive in send order.
    fifo = seen["fifo_received"]
    assert [m["id"] for m in fifo] == fifo_ids
    assert [m["body"] for m in fifo] == ["f0", "f1", "f2"]
    assert {m["group"] for m in fifo} == {"order-1"}

    # Every normal message once, then the one whose invisibility was cut to 1 s again.
    assert sorted(m["id"] for m in seen["plain_first"]) == sorted(normal_ids)
    assert seen["handle_changed"] is True
    (redelivered,) = seen["redelivered"]
    assert redelivered["id"] == normal_ids[0]
    assert redelivered["attempt"] == 2
    assert seen["stale_ack"] == pb.INVALID_RECEIPT_HANDLE
    assert seen["after_all_acked"] == []
    state = broker.stop()
    assert _consumed(state, "plain", "normal") == (4, 0)
    assert _consumed(state, "tagged", "normal") == (4, 0)  # "b" messages skipped by the filter
    assert _consumed(state, "fifo-group", "fifo") == (3, 0)


def test_push_consumer_consumes_and_retries(broker: BrokerProcess, tmp_path: Path) -> None:
    seen = run_client(broker.port, "push_consume", tmp_path)
    sent = seen["sent"]
    calls = seen["calls"]
    ok_calls = [c for c in calls if c["tag"] == "ok"]
    assert sorted(c["id"] for c in ok_calls) == sorted([sent[0], sent[2]])
    assert all(c["attempt"] == 1 for c in ok_calls)
    retry_attempts = sorted(c["attempt"] for c in calls if c["id"] == sent[1])
    assert retry_attempts[:2] == [1, 2]
    assert seen["left_over"] == []
    # Every delivery was acked through the push consumer's AckMessage calls.
    assert _consumed(broker.stop(), "pusher", "mixed") == (3, 0)


def test_bad_input_gets_documented_status_and_server_keeps_serving(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    seen = run_client(broker.port, "bad_input", tmp_path)
    assert seen["oversized"] == [pb.MESSAGE_BODY_TOO_LARGE, 1]
    assert seen["route_unknown"] == pb.TOPIC_NOT_FOUND
    assert seen["no_client_id"] == pb.CLIENT_ID_REQUIRED
    assert seen["end_transaction"] == pb.INVALID_TRANSACTION_ID
    assert seen["end_unknown_transaction"] == pb.NOT_FOUND
    # A DELAY message to a NORMAL topic: the proxy's MESSAGE_PROPERTY_CONFLICT_WITH_TYPE.
    code, message = seen["delay_to_normal"]
    assert code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "NORMAL, not DELAY" in message
    code, message = seen["delay_too_far"]
    assert code == pb.ILLEGAL_DELIVERY_TIME
    assert "maximum delay of 86400000 ms" in message
    # A pull without a group: the group's status, then next_offset (always sent).
    assert seen["pull"] == [pb.ILLEGAL_CONSUMER_GROUP, ["next_offset", 0]]
    assert "route" in seen["send_unknown_topic"]
    assert seen["garbage_ack"] == pb.INVALID_RECEIPT_HANDLE
    assert seen["garbage_change"] == pb.INVALID_RECEIPT_HANDLE
    # The client adopts the returned handle before checking the status: we echo the old one.
    assert seen["garbage_handle_kept"] == "not-a-receipt-handle"
    sent_id, received_ids = seen["still_serving"]
    assert received_ids == [sent_id]


def test_fifo_push_consumer_keeps_order_and_dead_letters(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    seen = run_client(broker.port, "push_fifo_dead_letter", tmp_path)
    ids = seen["ids"]
    calls = seen["calls"]
    # Group A: the poison message is tried max_delivery_attempts (3) times, locally,
    # and only then does the next message of group A arrive; group B is not held up.
    assert calls.count(ids["poison"]) == 3
    last_poison = len(calls) - 1 - calls[::-1].index(ids["poison"])
    assert calls.index(ids["after"]) > last_poison
    assert ids["other"] in calls
    # The client gave up through ForwardMessageToDeadLetterQueue: the copy is in %DLQ%<group>.
    (dead,) = seen["dead_letters"]
    assert dead["id"] == ids["poison"]
    assert dead["body"] == "poison"
    state = broker.stop()
    assert _consumed(state, "fifo-group", "fifo") == (3, 0)
    assert _consumed(state, "dlq-reader", "%DLQ%fifo-group") == (1, 0)
