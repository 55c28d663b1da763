"""Elastic brokers on real processes: routes spread over the live brokers, and a drain.

One cluster (1 nameserver marking a broker down after 2 s of silence, 3
storage nodes, 2 brokers with ``--route-mode brokers`` heartbeating every
0.5 s). The official Python client reaches the cluster through broker 1;
its routes spread the topic's queues over both brokers, so its sends land
on both. Half way through its sends, ``rip5 admin broker drain`` drains
broker 2: broker 2 refuses new calls (retriable), finishes those in flight
and exits with code 0; the client's sends all succeed (its retries go to
broker 1). A fresh consumer then reads every message back through broker 1
(whose routes no longer list broker 2) with no receive error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import nameserver_api as api
from rip5.admin import NameserverClient
from tests.contract.test_official_client import run_official
from tests.e2e.cluster import CLUSTER, LocalCluster

pytestmark = pytest.mark.integration

NORMAL = 1
QUEUES = 8
DRAIN_BOUND_S = 40.0
DOWN_WAIT_S = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two brokers spreading routes over each other (see the module docstring)."""
    local = LocalCluster(
        tmp_path_factory.mktemp("drain"),
        brokers=2,
        broker_flags=("--route-mode", "brokers", "--heartbeat-interval-ms", "500"),
        nameserver_flags=("--broker-timeout-ms", "2000"),
    )
    try:
        local.start()
        local.create({"elastic": (QUEUES, NORMAL)}, {"elastic-readers": (False, 3)})
        yield local
    finally:
        local.stop()


def run_client(cluster: LocalCluster, *args: object) -> dict[str, Any]:
    """One scenario of tests/e2e/drain_client.py in its own interpreter."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = ["-m", "tests.e2e.drain_client", *(str(a) for a in args)]
    return run_official(argv, home, timeout_s=120)


def brokers_alive(cluster: LocalCluster) -> dict[str, bool]:
    """Client address -> alive, from the nameserver."""

    async def read() -> api.ClusterStatusResponse:
        client = NameserverClient(cluster.nameserver_addresses)
        try:
            return await client.call(lambda ns: ns.cluster_status(api.NameRequest(CLUSTER)))
        finally:
            await client.close()

    return {b.address: b.alive for b in asyncio.run(read()).brokers}


def test_drain_moves_clients_to_the_other_broker(cluster: LocalCluster) -> None:
    first, second = (b.endpoint for b in cluster.brokers)
    started = time.monotonic()
    seen = run_client(
        cluster, "send_through_drain", cluster.broker_port(0), cluster.nameserver_address, second
    )
    drain_s = time.monotonic() - started
    assert seen["drain_exit"] == 0, seen["drain_output"]
    assert f"broker {second}: exited" in seen["drain_output"] or "exited" in seen["drain_output"]
    assert drain_s < DRAIN_BOUND_S
    # The drained broker exits by itself, cleanly.
    assert cluster.brokers[1].popen is not None
    assert cluster.brokers[1].popen.wait(timeout=10) == 0

    # No error reached the application: the client's retries went to broker 1.
    assert seen["send_errors"] == []
    sent = seen["sent"]
    total = 16 + seen["sends_during_drain"] + 16
    assert len(sent) == total
    landed = [endpoint for _, _, endpoint in sent]
    assert set(landed[:16]) == {first, second}  # the route spread the sends
    assert set(landed[-16:]) == {first}  # after the drain, only broker 1

    # Broker 2 goes down in the nameserver, so broker 1's routes leave it out.
    deadline = time.monotonic() + DOWN_WAIT_S
    while brokers_alive(cluster).get(second, False):
        assert time.monotonic() < deadline, "the drained broker was not marked down"
        time.sleep(0.2)
    got = run_client(cluster, "receive_all", cluster.broker_port(0), len(sent))
    assert got["receive_errors"] == []
    assert sorted(got["received"]) == sorted([message_id, body] for message_id, body, _ in sent)
