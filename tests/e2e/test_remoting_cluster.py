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
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.remoting import messages
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

pytestmark = [pytest.mark.integration, pytest.mark.alone]

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
            {
                "g-5x": (False, 3),
                "CG_RETRY": (False, 3),
                "CG_ORDERLY": (False, 3),
                "CG_KILL": (False, 3),
            },
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


def test_messages_queried_by_key_and_id_and_viewed_by_offset_id(cluster: LocalCluster) -> None:
    """No real client exposes QUERY_MESSAGE or VIEW_MESSAGE_BY_ID, so the frames are
    written here. Like a 4.x admin client, the query asks every broker of the route and
    merges: each broker answers the queues it serves, so each message comes once."""

    async def scenario() -> None:
        first, second = (int(a.rpartition(":")[2]) for a in cluster.remoting_addresses)
        sender = await WireClient.connect(first)
        sent = []
        for queue_id, unique in ((0, "QK0"), (1, "QK1"), (3, "QK3")):
            props = messages.format_properties({"UNIQ_KEY": unique, "KEYS": "lookup-key"})
            fields = {"a": "pg", "b": "normal", "c": "TBW102", "d": "4", "e": str(queue_id),
                      "f": "0", "g": "1", "h": "0", "i": props, "j": "0", "k": "false"}  # fmt: skip
            answer = await sender.call(RequestCode.SEND_MESSAGE_V2, fields, unique.encode())
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            sent.append(answer.ext_fields["msgId"])
        await sender.close()
        query = {"topic": "normal", "key": "lookup-key", "maxNum": "32",
                 "beginTimestamp": "0", "endTimestamp": str(1 << 50)}  # fmt: skip
        found: list[bytes] = []
        for port in (first, second):
            client = await WireClient.connect(port)
            answer = await client.call(RequestCode.QUERY_MESSAGE, query)
            if answer.code == ResponseCode.SUCCESS:
                found += [r.body for r in messages.parse_message_exts(answer.body)]
            else:
                assert answer.code == ResponseCode.QUERY_NOT_FOUND, answer.remark
            await client.close()
        assert sorted(found) == [b"QK0", b"QK1", b"QK3"]
        client = await WireClient.connect(second)
        by_id = {**query, "key": "QK3", "_UNIQUE_KEY_QUERY": "true"}
        answers = [await client.call(RequestCode.QUERY_MESSAGE, by_id)]
        other = await WireClient.connect(first)
        answers.append(await other.call(RequestCode.QUERY_MESSAGE, by_id))
        await other.close()
        hits = [r for a in answers if a.code == 0 for r in messages.parse_message_exts(a.body)]
        assert [(r.body, r.properties["UNIQ_KEY"], r.queue_id) for r in hits] == [
            (b"QK3", "QK3", 3)
        ]
        # A view goes to the broker the offset id names (the sender's), any broker reads it.
        host, port, queue_id, offset = messages.parse_offset_message_id(sent[1])
        physical = str(queue_id << messages.QUEUE_OFFSET_BITS | offset)
        view = await client.call(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": physical, "topic": "normal"}
        )
        await client.close()
        assert view.code == ResponseCode.SUCCESS, view.remark
        (record,) = messages.parse_message_exts(view.body)
        assert (record.body, record.queue_id, record.queue_offset) == (b"QK1", 1, offset)
        assert f"{host}:{port}" == cluster.remoting_addresses[0]

    asyncio.run(scenario())


class _Consumer:
    """A 4.x push consumer in a subprocess (``consume_stream``); what it consumed is read
    from its stdout as it goes."""

    def __init__(self, cluster: LocalCluster, name: str, group: str, topic: str) -> None:
        self.home = cluster.root / name
        self.home.mkdir(exist_ok=True)
        namesrv = ";".join(cluster.remoting_addresses)  # either one may be killed
        self.log = (self.home / "stderr.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(CPP_CLIENT), namesrv, "consume_stream", topic, group],
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "HOME": str(self.home), "PYTHONPATH": str(CPP_SITE)},
        )
        self.bodies: list[str] = []
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("got "):
                self.bodies.append(line.split()[1])

    def stop(self) -> None:
        (self.home / "stop").touch()
        assert self.process.wait(timeout=60) == 0, (self.home / "stderr.log").read_text()
        self.reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.log.close()


def _commit_from_zero(cluster: LocalCluster, group: str, topic: str, queues: int) -> None:
    """Commit ``group`` at offset 0 of every queue (the C++ consumer would otherwise
    start at each queue's end when it first gets it, after the producer began). Sent to
    every broker: the one serving the queue stores it."""

    async def commit() -> None:
        for address in cluster.remoting_addresses:
            client = await WireClient.connect(int(address.rpartition(":")[2]))
            for queue_id in range(queues):
                fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
                          "commitOffset": "0"}  # fmt: skip
                answer = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            await client.close()

    asyncio.run(commit())


def test_a_broker_killed_under_a_cpp_producer_and_consumers_loses_nothing_acked(
    cluster: LocalCluster,
) -> None:
    """Last in the module: broker-2 is SIGKILLed while a 4.x producer sends through both
    brokers and two 4.x push consumers of one group consume through both (each queue
    served through one broker, the group's queues shared out between them); the producer
    goes on through broker-1, the consumers take broker-2's queues over there, and every
    send the producer saw acknowledged is consumed (by them, and by a 5.x consumer)."""
    count, kill_at = 300, 100
    _commit_from_zero(cluster, "CG_KILL", "failover", 4)
    consumers = [_Consumer(cluster, f"kill-consumer-{i}", "CG_KILL", "failover") for i in (1, 2)]
    wait_until(
        lambda: all(c.lines[:1] == ["started\n"] for c in consumers), 60, "the consumers to start"
    )
    home = cluster.root / "failover"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, str(CPP_CLIENT), cluster.remoting_addresses[0], "stream"]
    lines: list[str] = []
    try:
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
        # The 4.x consumers, together, consume every acknowledged send (at least once).
        wanted = {a["body"] for a in acked}

        def consumed() -> set[str]:
            return {body for c in consumers for body in c.bodies}

        wait_until(lambda: wanted <= consumed(), 180, "the 4.x consumers to consume every ack")
        assert all(c.bodies for c in consumers), "the group's queues were not shared out"
    finally:
        for consumer in consumers:
            consumer.stop()
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
