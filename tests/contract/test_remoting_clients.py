"""The broker's remoting endpoint against real RocketMQ 4.x clients, each in a subprocess.

Clients (installed by ``make remoting-clients`` into ``.clients/python`` and
``tests/clients/node``):
the C++ client through PyPI ``rocketmq-client-python==0.5.0rc2`` (its wheel
bundles the library; its package is named ``rocketmq`` like the official 5.x
client's, so it lives in its own folder) and npm ``ali-ons@3.12.0`` (pure
JavaScript, behaves like the Java client: JSON numbers and booleans in
extFields, SEND_MESSAGE_V2, no client-side message ids).

Each test sends with a 4.x client through the broker's remoting port, then
receives with the official 5.x client over gRPC from the same broker: the
ids, tags, keys, properties and bodies the 5.x consumer sees are the ones
the 4.x producer sent and reported. Consuming through remoting (pull) is not
built yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.contract.test_official_client import BrokerProcess, broker, run_client

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
CPP_SITE = ROOT / ".clients" / "python"  # outside tests/: a package, not our code
BATCH_SITE = ROOT / ".clients" / "python-0.4.4"
NODE_DIR = CLIENTS / "node"
CPP_CLIENT = Path(__file__).with_name("remoting_cpp_client.py")
CLIENT_TIMEOUT_S = 120

pytestmark = [pytest.mark.integration, pytest.mark.alone]
__all__ = ["broker"]  # the one-broker fixture of the official-client tests (it serves remoting)


def _namesrv(broker: BrokerProcess) -> str:
    port = broker.port_file.with_suffix(".remoting").read_text().split(",")[0]
    return f"127.0.0.1:{port}"


def _last_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, f"client failed:\n{result.stdout}\n{result.stderr}"
    observed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return observed


def run_cpp(
    namesrv: str,
    scenario: str,
    home: Path,
    *args: str,
    site: Path = CPP_SITE,
) -> dict[str, Any]:
    """A scenario of a C++ client wrapper (``site``: its folder, first on the path;
    HOME: its logs)."""
    assert (site / "rocketmq" / "librocketmq.so").exists(), (
        f"the 4.x client in {site} is not installed: run `make remoting-clients`"
    )
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, str(CPP_CLIENT), namesrv, scenario, *args],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env=env,
        check=False,
    )
    return _last_json(result)


def run_ons(namesrv: str, scenario: str, home: Path, *args: str) -> dict[str, Any]:
    """A scenario of ali-ons (HOME: its logs)."""
    assert (NODE_DIR / "node_modules" / "ali-ons").exists(), (
        "ali-ons is not installed: run `make remoting-clients`"
    )
    result = subprocess.run(
        ["node", str(NODE_DIR / "ons_client.js"), namesrv, scenario, *args],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    return _last_json(result)


def _received_by_5x(broker: BrokerProcess, topic: str, count: int, home: Path) -> list[Any]:
    received: list[Any] = run_client(broker.port, "receive_all", home, topic, "g-5x", str(count))[
        "received"
    ]
    assert len(received) == count
    return received


def assert_sync_sends_received(
    sync: list[dict[str, Any]], by_body: dict[str, Any], body_prefix: str, color: str
) -> None:
    """Each sync send of a ``produce`` scenario reached the 5.x consumer as it was sent:
    the id the 4.x producer reported, its tag, keys and user properties."""
    for i, result in enumerate(sync):
        message = by_body[f"{body_prefix}-{i}"]
        assert message["id"] == result["id"]
        assert message["tag"] == f"tag{i}"
        assert message["keys"] == sorted([f"key{i}", f"other{i}"])
        assert message["properties"] == {"color": color, "index": str(i)}


def _consecutive(offsets: list[int]) -> bool:
    return offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def test_cpp_client_sends_and_a_5x_consumer_receives_the_same_messages(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = run_cpp(_namesrv(broker), "produce", tmp_path)
    assert {r["status"] for r in sent["sync"]} == {sent["ok"]}
    assert sent["big"]["status"] == sent["ok"]
    # FIFO through the client's queue selector: one queue, in send order.
    assert {r["status"] for r in sent["orderly"]} == {sent["ok"]}
    assert _consecutive([r["offset"] for r in sent["orderly"]])

    received = _received_by_5x(broker, "normal", 3 + 1 + 2 + 5, tmp_path)
    by_body = {m["body"]: m for m in received}
    assert_sync_sends_received(sent["sync"], by_body, "sync", "red")
    assert by_body["z" * 10_000]["id"] == sent["big"]["id"]  # compressed on the wire
    assert {f"oneway-{i}" for i in range(2)} <= set(by_body)
    assert {f"order-{i}" for i in range(5)} <= set(by_body)
    assert len({m["id"] for m in received}) == len(received)


def test_cpp_client_transactions_commit_and_roll_back(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = run_cpp(_namesrv(broker), "transactions", tmp_path)
    assert sent["decided"] == {"commit-1": "commit", "rollback-1": "rollback"}
    (received,) = _received_by_5x(broker, "txn", 1, tmp_path)
    assert received["body"] == "commit-1"
    assert received["id"] == sent["sent"][0]["id"]


def test_batch_and_queue_selector_of_the_0_4_client(broker: BrokerProcess, tmp_path: Path) -> None:
    """rocketmq==0.4.4: a batch (SEND_MESSAGE with batch set) stored whole, and sends
    through an explicit queue selector in one queue, in order."""
    sent = run_cpp(
        _namesrv(broker), "batch_and_select", tmp_path, "normal",
        site=BATCH_SITE,
    )  # fmt: skip
    assert sent["batch"]["status"] == sent["ok"]
    assert [r["status"] for r in sent["selected"]] == [sent["ok"]] * 3
    assert [r["offset"] for r in sent["selected"]] == [0, 1, 2]  # queue 1 held nothing before
    received = {m["body"]: m for m in _received_by_5x(broker, "normal", 4 + 3, tmp_path)}
    for i in range(4):
        message = received[f"batch-{i}"]
        assert (message["tag"], message["keys"]) == ("bt", [f"bk{i}"])
        assert message["properties"] == {"part": str(i)}
    assert {f"selected-{i}" for i in range(3)} <= set(received)
    assert len({m["id"] for m in received.values()}) == 7


def test_a_4x_pull_consumer_reads_what_a_5x_producer_sent(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """5.x to 4.x: the official client sends over gRPC; rocketmq==0.4.4's pull consumer
    reads every queue through remoting (PULL_MESSAGE), with a tag expression too."""
    ids = run_client(broker.port, "send_for_4x", tmp_path, "normal", "6")["ids"]
    pulled = run_cpp(_namesrv(broker), "pull_all", tmp_path, "normal", "*", "6", site=BATCH_SITE)
    by_body = {m["body"]: m for m in pulled["received"]}
    assert sorted(by_body) == [f"v5-{i}" for i in range(6)]
    for i, message_id in enumerate(ids):
        message = by_body[f"v5-{i}"]
        assert message["id"] == message_id
        assert message["tags"] == f"tag{i}"
        assert message["keys"] == sorted([f"key{i}", f"other{i}"])
        assert message["properties"] == {"color": "green", "index": str(i)}
    tagged = run_cpp(
        _namesrv(broker), "pull_all", tmp_path, "normal", "tag1 || tag4", "2", site=BATCH_SITE
    )
    assert sorted(m["body"] for m in tagged["received"]) == ["v5-1", "v5-4"]


def test_cpp_push_consumer_receives_through_remoting(broker: BrokerProcess, tmp_path: Path) -> None:
    """The C++ client's push consumer: route, heartbeat, consumer list, offsets
    (QUERY_NOT_FOUND, then GET_MAX_OFFSET), long-polled pulls and committed offsets."""
    seen = run_cpp(_namesrv(broker), "push", tmp_path, "normal", "5")
    received = seen["received"]
    assert len(received) >= 5
    sent = {m["body"]: m["id"] for m in seen["sent"]}
    assert all(sent[m["body"]] == m["id"] for m in received)
    assert len({m["id"] for m in received}) == len(received)


def test_cpp_push_consumer_gets_a_failed_message_again_through_the_retry_topic(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """The C++ push consumer fails a message once: it gives it back
    (CONSUMER_SEND_MSG_BACK), the broker stores it in ``%RETRY%CG_RETRY`` due after
    delay level 3 (10 s), and the consumer, subscribed to that topic by itself, gets
    it again: the same id under its own topic, reconsumed once."""
    assert_came_back_once(run_cpp(_namesrv(broker), "retry", tmp_path, "normal"), "normal")


def assert_came_back_once(seen: dict[str, Any], topic: str) -> None:
    """The first message of a ``retry`` scenario came back once, from the retry topic:
    the id it was sent with, under ``topic``, reconsumed once, after level 3."""
    first, *later = seen["received"]
    again = [m for m in later if m["body"] == first["body"]]
    assert len(again) == 1, seen
    (second,) = again
    assert first["id"] == second["id"] == {m["body"]: m["id"] for m in seen["sent"]}[first["body"]]
    assert first["reconsume_times"] == 0
    assert second["reconsume_times"] == 1
    assert second["topic"] == first["topic"] == topic
    assert second["retry_topic"] == topic  # set by the broker's send-back alone
    assert second["at"] - first["at"] >= 9.0  # level 3 is 10 s (less the clocks' grain)


def test_cpp_orderly_push_consumer_locks_its_queues_and_receives_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """The C++ orderly push consumer consumes a queue only once it holds its lock
    (LOCK_BATCH_MQ, renewed by the client); what one sharding key sent arrives in
    send order, from one queue."""
    seen = run_cpp(_namesrv(broker), "orderly", tmp_path, "normal", "4")
    received = seen["received"]
    assert len(received) >= 4, seen
    assert len({m["queue"] for m in received}) == 1
    assert _consecutive([m["offset"] for m in received])
    sent = {m["body"]: m["id"] for m in seen["sent"]}
    assert all(sent[m["body"]] == m["id"] for m in received)
    assert [m["body"] for m in received] == sorted(
        (m["body"] for m in received), key=lambda body: int(body.rpartition("-")[2])
    )


def test_ons_push_consumer_gets_a_failed_message_again_through_the_retry_topic(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """ali-ons gives a failed message back (JSON numbers, originTopic and originMsgId
    in the header); it comes again from ``%RETRY%CG_ONS_RETRY`` after level 3 (10 s;
    ali-ons's own fallback, re-sending it at once, would come sooner)."""
    assert_came_back_once(run_ons(_namesrv(broker), "retry", tmp_path, "normal"), "normal")


def test_ons_client_sends_and_a_5x_consumer_receives_the_same_messages(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = run_ons(_namesrv(broker), "produce", tmp_path)
    assert {r["status"] for r in sent["sync"]} == {"SEND_OK"}
    assert sent["big"]["status"] == "SEND_OK"
    orderly = sent["orderly"]
    assert {r["status"] for r in orderly} == {"SEND_OK"}
    assert len({r["queue"] for r in orderly}) == 1
    assert _consecutive([r["offset"] for r in orderly])

    received = _received_by_5x(broker, "normal", 3 + 1 + 5, tmp_path)
    by_body = {m["body"]: m for m in received}
    assert_sync_sends_received(sent["sync"], by_body, "ons", "blue")
    assert by_body["y" * 10_000]["id"] == sent["big"]["id"]
    assert [by_body[f"order-{i}"]["id"] for i in range(5)] == [r["id"] for r in orderly]


def test_cpp_client_answers_a_check_back_and_its_commit_arrives(tmp_path: Path) -> None:
    """The local transaction says "unknown"; the broker asks the producer (oneway
    CHECK_TRANSACTION_STATE with the half message), whose checker commits."""
    broker = BrokerProcess(tmp_path, "--check-delay-ms", "1000", "--check-interval-ms", "2000")
    try:
        env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(CPP_SITE)}
        argv = [sys.executable, str(CPP_CLIENT), _namesrv(broker), "check_back"]
        with (
            (tmp_path / "producer.err").open("w") as errors,
            subprocess.Popen(
                argv, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=errors, text=True, env=env,
            ) as producer,
        ):  # fmt: skip
            assert producer.stdin is not None
            assert producer.stdout is not None
            assert producer.stdout.readline().strip() == "checked"
            (received,) = _received_by_5x(broker, "txn", 1, tmp_path)
            producer.stdin.close()
            assert producer.wait(timeout=CLIENT_TIMEOUT_S) == 0, (
                tmp_path / "producer.err"
            ).read_text()
            outcome = json.loads(producer.stdout.read().strip().splitlines()[-1])
    finally:
        broker.stop()
    (checked,) = outcome["checked"]
    assert checked["body"] == "checked-1"
    assert checked["tags"] == "c"
    assert received["body"] == "checked-1"
    assert received["id"] == outcome["sent"]["id"] == checked["id"]
    assert received["properties"] == {"origin": "cpp"}


def test_ons_push_consumer_receives_through_remoting(broker: BrokerProcess, tmp_path: Path) -> None:
    """ali-ons's push consumer: its group's offsets start at the queues' ends, then each
    message it is sent arrives, with the id its producer reported (as UNIQ_KEY)."""
    seen = run_ons(_namesrv(broker), "consume", tmp_path, "normal", "3")
    received = seen["received"]
    assert len(received) >= 3
    sent = {m["body"]: m["id"] for m in seen["sent"]}
    assert all(sent[m["body"]] == m["id"] for m in received)
    assert all(len(m["offsetId"]) == 32 for m in received)
