"""Timed and transactional messages with the official client against a real cluster.

One cluster for the module: 1 nameserver, 3 storage nodes (8 raft groups,
fsync), 2 brokers whose orphan check-back starts 6 s after a half message
is stored (the default) and repeats every 3 s (default 30 s); topics created
through the nameserver as an operator would. The client scenarios are the
contract ones (``tests/contract/official_client.py``), each in its own
interpreter, pointed at one broker's port.

Broker 1 starts first, so it takes the check-back lease and keeps it while
it lives: the orphan test exercises the peer path (broker 1 scans, a
producer on broker 2 answers); the kill test, last, SIGKILLs broker 1 and
checks that broker 2 takes the lease over and settles what was pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from tests.contract.test_official_client import run_client as run_contract_client
from tests.e2e.cluster import LocalCluster

pytestmark = pytest.mark.integration

DELAY, TRANSACTION = 3, 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster (see the module docstring)."""
    local = LocalCluster(
        tmp_path_factory.mktemp("txn-cluster"),
        brokers=2,
        broker_flags=("--transaction-check-interval-ms", "3000"),
    )
    try:
        local.start()
        local.create(
            {"timed": (2, DELAY), "timed-kill": (2, DELAY), "txn": (2, TRANSACTION)},
            {
                "timed-reader": (False, 3),
                "timed-survivor": (False, 3),
                "txn-reader": (False, 3),
                "orphan-reader": (False, 3),
                "settled-reader": (False, 3),
            },
        )
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if name != "broker-1" and code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


def run_client(cluster: LocalCluster, broker: int, scenario: str, *args: str) -> dict[str, Any]:
    """One scenario of the official client against broker ``broker`` (0-based)."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    return run_contract_client(cluster.broker_port(broker), scenario, home, *args)


def _log(cluster: LocalCluster, name: str) -> str:
    return (cluster.root / f"{name}.log").read_text(errors="replace")


def test_timed_message_arrives_when_due_not_before(cluster: LocalCluster) -> None:
    seen = run_client(cluster, 1, "timed")
    (received,) = seen["received"]
    assert received["id"] == seen["id"]
    assert seen["delivery_timestamps"] == [seen["due_ms"]]
    assert seen["due_ms"] <= seen["arrived_ms"] <= seen["due_ms"] + 1_000


def test_commit_is_visible_and_rollback_never(cluster: LocalCluster) -> None:
    seen = run_client(cluster, 1, "transactions")
    assert seen["before_commit"] == []
    assert [m["id"] for m in seen["received"]] == [seen["committed"]]
    assert seen["commit_again"] == pb.NOT_FOUND
    # A check-back may have come before the commit: the checker said "unknown yet".
    assert set(seen["checked"]) <= {seen["committed"]}


def test_orphan_is_resolved_through_a_producer_on_the_other_broker(
    cluster: LocalCluster,
) -> None:
    orphan = run_client(cluster, 0, "orphan_send")["orphan"]
    seen = run_client(cluster, 1, "orphan_resolve", orphan)
    assert orphan in seen["checked"]
    assert [m["id"] for m in seen["received"]] == [orphan]
    # Broker 1 owns the check-back and reached the producer through broker 2.
    assert "owned here" in _log(cluster, "broker-1")
    assert "check-back of transaction T1:" in _log(cluster, "broker-1")
    assert "sent through broker" in _log(cluster, "broker-1")


def test_killed_broker_leaves_nothing_pending(cluster: LocalCluster) -> None:
    """Timed messages and undecided transactions sent through broker 1, which then dies
    (SIGKILL) while it owns the check-back: broker 2 takes the lease over, the timers
    fire on time, and a producer on broker 2 settles every orphan."""
    assert "owned here" in _log(cluster, "broker-1")
    sent = run_client(cluster, 0, "pending_then_exit", "timed-kill", "3")
    cluster.brokers[0].kill()
    seen = run_client(
        cluster, 1, "settle_and_receive", "timed-kill", ",".join(sent["orphans"]), "3"
    )
    assert sorted(a["id"] for a in seen["timed"]) == sorted(sent["timed"])
    assert all(a["arrived_ms"] >= sent["due_ms"] for a in seen["timed"])
    assert sorted(m["id"] for m in seen["settled"]) == sorted(sent["orphans"])
    assert set(sent["orphans"]) <= set(seen["checked"])
    assert "owned here" in _log(cluster, "broker-2")
    assert "sent to a producer here" in _log(cluster, "broker-2")
