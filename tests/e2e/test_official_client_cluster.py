"""The official RocketMQ Python client against a real rip5 cluster of processes.

One cluster for the module (1 nameserver, 3 storage nodes replicating 8 raft
groups with fsync, 2 brokers; topics and groups created through the
nameserver as an operator would, auto-create off); the client runs in its own
interpreter (see e2e_client.py). Every scenario uses its own topics or
groups, so they do not see each other's messages. The broker-kill test kills
only the second broker, which no other test uses; the storage-kill test, last,
kills one of the three storage nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from tests.contract.test_official_client import run_official
from tests.e2e.cluster import LocalCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NORMAL, FIFO = 1, 2
INVISIBLE_S = 10  # what hold_through_broker's receive asks for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster, with its topics and consumer groups."""
    local = LocalCluster(tmp_path_factory.mktemp("cluster"), brokers=2)
    try:
        local.start()
        local.create(
            {
                "normal": (4, NORMAL),
                "fifo": (2, FIFO),
                "poison": (2, NORMAL),
                "push": (2, NORMAL),
                "bad": (2, NORMAL),
                "handover": (2, NORMAL),
                "failover": (4, NORMAL),
            },
            {
                "tagged": (False, 3),
                "plain": (False, 3),
                "fifo-simple": (True, 3),
                "fifo-group": (True, 3),
                "dlq-src": (False, 3),
                "dlq-reader": (False, 3),
                "pusher": (False, 3),
                "bad-input": (False, 3),
                "handover": (False, 3),
                "failover": (False, 3),
            },
        )
        yield local
    finally:
        codes = local.stop()
    killed = {"broker-2", "storage-1"}  # by the tests below
    died = {name: code for name, code in codes.items() if name not in killed and code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


def run_client(cluster: LocalCluster, scenario: str, *args: object) -> dict[str, Any]:
    """Run one scenario of the official client in its own interpreter."""
    return run_client_in(cluster.root, scenario, *args)


def run_client_in(root: Path, scenario: str, *args: object) -> dict[str, Any]:
    """Run one scenario with HOME (the client's log folder) under ``root``."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    argv = ["-m", "tests.e2e.e2e_client", scenario, *(str(a) for a in args)]
    return run_official(argv, home, timeout_s=240)


def test_send_and_simple_consume(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "produce_and_simple_consume", cluster.broker_port(0))
    normal_ids = seen["normal_ids"]
    status, entries = seen["batch"]
    assert status == pb.OK
    assert entries == [[pb.OK, message_id] for message_id in seen["batch_ids"]]

    tagged = seen["tagged"]
    assert sorted(m["id"] for m in tagged) == sorted([normal_ids[0], normal_ids[2]])
    assert all(m["tag"] == "a" and m["attempt"] == 1 and not m["corrupted"] for m in tagged)
    assert seen["tagged_after_ack"] == []

    # FIFO: every message once; within each message group, in send order.
    received = seen["fifo_received"]
    assert sorted(m["id"] for m in received) == sorted(i for _, i in seen["fifo_sent"])
    for group in ("order-0", "order-1"):
        sent = [i for g, i in seen["fifo_sent"] if g == group]
        assert [m["id"] for m in received if m["group"] == group] == sent

    every_normal = normal_ids + seen["batch_ids"]
    assert sorted(m["id"] for m in seen["plain_first"]) == sorted(every_normal)
    assert seen["handle_changed"] is True
    (redelivered,) = seen["redelivered"]
    assert redelivered["id"] == normal_ids[0]
    assert redelivered["attempt"] == 2
    assert seen["stale_ack"] == pb.INVALID_RECEIPT_HANDLE
    assert seen["after_all_acked"] == []


def test_dead_letter_after_max_attempts(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "dead_letter_after_max_attempts", cluster.broker_port(0))
    assert seen["attempts"] == [1, 2, 3]
    assert seen["after_max"] == []
    (dead,) = seen["dead_letters"]
    assert dead["id"] == seen["id"]
    assert dead["body"] == "never-acked"


def test_push_consumer_consumes_and_retries(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "push_consume", cluster.broker_port(0))
    sent, calls = seen["sent"], seen["calls"]
    ok_calls = [c for c in calls if c["tag"] == "ok"]
    assert sorted(c["id"] for c in ok_calls) == sorted([sent[0], sent[2]])
    assert all(c["attempt"] == 1 for c in ok_calls)
    assert sorted(c["attempt"] for c in calls if c["id"] == sent[1])[:2] == [1, 2]
    assert seen["left_over"] == []


def test_fifo_push_consumer_keeps_order_and_dead_letters(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "push_fifo_dead_letter", cluster.broker_port(0))
    ids, calls = seen["ids"], seen["calls"]
    # Group A: the poison message is tried max attempts (3) times before the next of A.
    assert calls.count(ids["poison"]) == 3
    last_poison = len(calls) - 1 - calls[::-1].index(ids["poison"])
    assert calls.index(ids["after"]) > last_poison
    assert ids["other"] in calls
    # The client gave up through ForwardMessageToDeadLetterQueue; the DLQ is consumable.
    (dead,) = seen["dead_letters"]
    assert dead["id"] == ids["poison"]
    assert dead["body"] == "poison"


def test_bad_input_gets_documented_status_and_broker_keeps_serving(
    cluster: LocalCluster,
) -> None:
    seen = run_client(cluster, "bad_input", cluster.broker_port(0))
    assert seen["oversized"] == [pb.MESSAGE_BODY_TOO_LARGE, 1]
    assert seen["route_unknown"] == pb.TOPIC_NOT_FOUND
    assert seen["wrong_type"] == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert seen["send_unknown_topic"] == pb.TOPIC_NOT_FOUND
    assert seen["garbage_ack"] == pb.INVALID_RECEIPT_HANDLE
    assert seen["garbage_change"] == pb.INVALID_RECEIPT_HANDLE
    sent_id, received_ids = seen["still_serving"]
    assert received_ids == [sent_id]
    assert all(broker.alive for broker in cluster.brokers)


def test_two_brokers_ack_through_the_other_and_a_killed_broker_redelivers_late(
    cluster: LocalCluster,
) -> None:
    a, b = cluster.broker_port(0), cluster.broker_port(1)
    seen = run_client(cluster, "hold_through_broker", a, b)
    assert sorted(m["id"] for m in seen["received"]) == sorted(seen["sent"])
    assert seen["acked_through_a"] == seen["sent"][0]
    held = seen["sent"][1]

    cluster.brokers[1].kill()  # B dies while its consumer holds the second message

    after = run_client(cluster, "receive_after_kill", a, seen["received_at"])
    (arrival,) = after["arrivals"]  # the acked one never comes back
    assert arrival["id"] == held
    assert arrival["attempt"] == 2
    assert arrival["at"] >= seen["received_at"] + INVISIBLE_S - 0.2


def test_a_storage_node_killed_loses_nothing_acknowledged(cluster: LocalCluster) -> None:
    cluster.storage[1].kill()  # leads some raft groups: they elect new leaders
    seen = run_client(cluster, "after_storage_loss", cluster.broker_port(0))
    assert seen["send_errors"] == []
    assert len(seen["sent"]) == 20
    received = dict(seen["received"])
    for message_id, body in seen["sent"]:  # every acknowledged send is consumed
        assert received.get(message_id) == body
    # A send the client timed out on during the election may be stored twice (it
    # retries to another queue under a new id): at least once, never a stranger.
    assert set(received.values()) == {body for _, body in seen["sent"]}
