"""Real RocketMQ 4.x clients against a real rip5 cluster, through the brokers' remoting ports.

One cluster for the module (1 nameserver, 3 storage nodes, 2 brokers; topics
and groups created through the nameserver, auto-create off). A 4.x client
names one broker's remoting address as its name server; the route it gets
lists both brokers (from their nameserver heartbeats), so it sends through
either. What it sent is received with the official 5.x client over gRPC:
same ids, tags, keys, properties and bodies, from the same storage.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.remoting.codes import RequestCode, ResponseCode
from tests.contract.remoting_wire import WireClient, json_body
from tests.contract.test_official_client import run_official
from tests.contract.test_remoting_clients import (
    CPP_CLIENT,
    CPP_SITE,
    assert_sync_sends_received,
    run_cpp,
    run_ons,
)
from tests.e2e.cluster import LocalCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL_CLIENT = ROOT / "tests" / "contract" / "official_client.py"
NORMAL, TRANSACTION = 1, 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("remoting"), brokers=2)
    try:
        local.start()
        local.create(
            {
                "normal": (4, NORMAL),
                "txn": (2, TRANSACTION),
                "ons": (4, NORMAL),
                "failover": (4, NORMAL),
                "retried": (4, NORMAL),
                "ordered": (4, NORMAL),
            },
            {"g-5x": (False, 3), "CG_RETRY": (False, 3), "CG_ORDERLY": (False, 3)},
        )
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if name != "broker-2" and code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


def _route(address: str, topic: str) -> tuple[int, Any]:
    async def ask() -> tuple[int, Any]:
        client = await WireClient.connect(int(address.rpartition(":")[2]))
        try:
            answer = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        finally:
            await client.close()
        return answer.code, json_body(answer) if answer.body else answer.remark

    return asyncio.run(ask())


def _receive(cluster: LocalCluster, topic: str, count: int) -> list[Any]:
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = [str(OFFICIAL_CLIENT), str(cluster.broker_port(0)), "receive_all", topic, "g-5x"]
    received: list[Any] = run_official([*argv, str(count)], home, timeout_s=240)["received"]
    assert len(received) == count
    return received


def test_a_route_from_either_broker_lists_both(cluster: LocalCluster) -> None:
    first, second = cluster.remoting_addresses

    def both_listed() -> bool:
        code, route = _route(first, "normal")
        assert code == ResponseCode.SUCCESS, route
        return sorted(b["brokerAddrs"]["0"] for b in route["brokerDatas"]) == sorted(
            [first, second]
        )

    wait_until(both_listed, 30, "broker-1's routes to list broker-2")
    code, route = _route(second, "normal")
    assert code == ResponseCode.SUCCESS
    assert {q["writeQueueNums"] for q in route["queueDatas"]} == {4}
    assert _route(first, "missing")[0] == ResponseCode.TOPIC_NOT_EXIST


def test_cpp_client_sends_through_the_cluster_to_a_5x_consumer(cluster: LocalCluster) -> None:
    home = cluster.root / "cpp"
    home.mkdir(exist_ok=True)
    sent = run_cpp(cluster.remoting_addresses[0], "produce", home)
    assert {r["status"] for r in sent["sync"]} == {sent["ok"]}
    orderly = [r["offset"] for r in sent["orderly"]]
    assert orderly == list(range(orderly[0], orderly[0] + 5))
    received = {m["body"]: m for m in _receive(cluster, "normal", 3 + 1 + 2 + 5)}
    assert_sync_sends_received(sent["sync"], received, "sync", "red")
    assert received["z" * 10_000]["id"] == sent["big"]["id"]


def test_cpp_client_transactions_through_the_cluster(cluster: LocalCluster) -> None:
    home = cluster.root / "cpp-txn"
    home.mkdir(exist_ok=True)
    sent = run_cpp(cluster.remoting_addresses[1], "transactions", home)
    assert sent["decided"] == {"commit-1": "commit", "rollback-1": "rollback"}
    (received,) = _receive(cluster, "txn", 1)
    assert (received["body"], received["id"]) == ("commit-1", sent["sent"][0]["id"])


def test_ons_client_sends_through_the_cluster_to_a_5x_consumer(cluster: LocalCluster) -> None:
    home = cluster.root / "ons"
    home.mkdir(exist_ok=True)
    sent = run_ons(cluster.remoting_addresses[1], "produce", home, "ons")
    assert {r["status"] for r in sent["sync"] + sent["orderly"]} == {"SEND_OK"}
    assert len({r["queue"] for r in sent["orderly"]}) == 1
    received = {m["body"]: m for m in _receive(cluster, "ons", 3 + 1 + 5)}
    assert_sync_sends_received(sent["sync"], received, "ons", "blue")
    assert [received[f"order-{i}"]["id"] for i in range(5)] == [r["id"] for r in sent["orderly"]]


def test_a_failed_consume_comes_back_through_the_retry_topic_of_the_cluster(
    cluster: LocalCluster,
) -> None:
    """The C++ push consumer fails a message once; the broker it pulled it from stores
    it in ``%RETRY%CG_RETRY`` (created through the nameserver on the consumer's first
    route lookup, auto-create off), the storage's timer holds it for delay level 3, and
    the consumer gets it again, the same id reconsumed once. (A route lists every queue
    through both brokers, so deliveries may repeat: see docs/remoting.md.)"""
    home = cluster.root / "cpp-retry"
    home.mkdir()
    seen = run_cpp(cluster.remoting_addresses[0], "retry", home, "retried")
    first, *later = seen["received"]
    again = [m for m in later if m["reconsume_times"] == 1]
    assert again, seen
    assert {m["id"] for m in again} == {first["id"]}
    assert {(m["topic"], m["retry_topic"]) for m in again} == {("retried", "retried")}


def test_an_orderly_consumer_locks_queues_through_the_nameserver(cluster: LocalCluster) -> None:
    """The C++ orderly push consumer's LOCK_BATCH_MQ takes leases through the
    nameserver; with its locks it consumes one sharding key's messages in send order
    (each first arrival: a queue is listed under both brokers, so it may come twice)."""
    home = cluster.root / "cpp-orderly"
    home.mkdir()
    seen = run_cpp(cluster.remoting_addresses[1], "orderly", home, "ordered", "4")
    received = seen["received"]
    assert len(received) >= 4, seen
    assert len({m["queue"] for m in received}) == 1
    sent = {m["body"]: m["id"] for m in seen["sent"]}
    assert all(sent[m["body"]] == m["id"] for m in received)
    firsts = list(dict.fromkeys(m["body"] for m in received))
    assert firsts == sorted(firsts, key=lambda body: int(body.rpartition("-")[2]))


def test_a_broker_killed_under_a_cpp_producer_loses_nothing_acked(cluster: LocalCluster) -> None:
    """Last in the module: broker-2 is SIGKILLed while a 4.x producer sends through both;
    the producer goes on through broker-1 and every send it saw acknowledged arrives."""
    count, kill_at = 300, 100
    home = cluster.root / "failover"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, str(CPP_CLIENT), cluster.remoting_addresses[0], "stream"]
    lines: list[str] = []
    with (
        (home / "stderr.log").open("w") as errors,
        subprocess.Popen(
            [*argv, "failover", str(count)],
            cwd=home,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, "HOME": str(home), "PYTHONPATH": str(CPP_SITE)},
        ) as producer,
    ):
        assert producer.stdout is not None
        for line in producer.stdout:  # ends when the producer does (bounded by its sends)
            lines.append(line)
            if line.strip() == f"progress {kill_at}":
                cluster.brokers[1].kill()
        assert producer.wait(timeout=240) == 0, (home / "stderr.log").read_text()
    assert not cluster.brokers[1].alive
    outcome = json.loads(lines[-1])
    acked = outcome["acked"]
    # It went on: most sends were acknowledged, the last ones all of them.
    assert len(acked) >= count - 10, outcome["failed"]
    assert [a["body"] for a in acked[-50:]] == [f"s-{i}" for i in range(count - 50, count)]
    # Every acknowledged send arrives with its id. A send whose answer was lost with the
    # broker may have been stored too, and again by the client's retry: at least once.
    bodies = home / "acked.txt"
    bodies.write_text("\n".join(a["body"] for a in acked))
    argv = [str(OFFICIAL_CLIENT), str(cluster.broker_port(0)), "receive_all", "failover"]
    received = run_official([*argv, "g-5x", "0", str(bodies)], home, timeout_s=240)["received"]
    ids_by_body: dict[str, set[str]] = {}
    for message in received:
        ids_by_body.setdefault(message["body"], set()).add(message["id"])
    assert all(a["id"] in ids_by_body.get(a["body"], ()) for a in acked)
    assert set(ids_by_body) <= {f"s-{i}" for i in range(count)}
