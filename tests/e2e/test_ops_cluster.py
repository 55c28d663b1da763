"""Operating a running cluster: a real Prometheus scrapes every role's metrics
(docs/metrics.md) while the official client loads the cluster.

One cluster (a nameserver, three storage nodes, a broker; every process with
its own ``--metrics-listen``) and one Prometheus serve the whole module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster
from tests.e2e.prometheus import Prometheus, prometheus

pytestmark = pytest.mark.e2e

NORMAL = 1
GROUPS = 8
TOPIC = "metered"
GROUP = "metered-group"
CONSUMED = 40  # the group acks this many, then lags behind the rest


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("ops"), storage=3, brokers=1, groups=GROUPS)
    try:
        local.start()
        # One queue: the group's lag covers the queues it has consumption state in
        # (docs/metrics.md), and it consumes this one.
        local.create({TOPIC: (1, NORMAL)}, {GROUP: (False, 3)})
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


@pytest.fixture(scope="module")
def scraper(cluster: LocalCluster) -> Iterator[Prometheus]:
    jobs: dict[str, list[str]] = {}
    for name, address in cluster.metrics_addresses.items():
        jobs.setdefault(name.split("-")[0], []).append(address)
    with prometheus(cluster.root / "prometheus", jobs) as server:
        yield server


def client(cluster: LocalCluster, scenario: str, *args: object) -> subprocess.Popen[str]:
    """Start a scenario of tests/e2e/metrics_client.py (the official client) on broker 0."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "tests.e2e.metrics_client", scenario]
    argv += [str(cluster.broker_port(0)), *(str(a) for a in args)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(home)},
    )


def finish(process: subprocess.Popen[str], stop: Path) -> dict[str, int]:
    """Tell a scenario to stop; the JSON it printed."""
    stop.touch()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"client failed:\n{out}\n{err}"
    result: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return result


def test_prometheus_scrapes_every_role_and_queries_rates_and_lag_under_load(
    cluster: LocalCluster, scraper: Prometheus
) -> None:
    processes = len(cluster.metrics_addresses)
    scraper.wait_for("every process scraped", "sum(up)", lambda v: v == processes)

    stop = cluster.root / "load.stop"
    load = client(cluster, "load", TOPIC, GROUP, stop, CONSUMED)
    try:
        rate = f'sum(rate(rocketmq_messages_in_total{{topic="{TOPIC}"}}[5s]))'
        scraper.wait_for("a send rate", rate, lambda v: v > 0)
        assert load.poll() is None, "the load ended before its rate was seen"
        lag = f'sum(rocketmq_consumer_lag_messages{{consumer_group="{GROUP}",topic="{TOPIC}"}})'
        scraper.wait_for("the group's lag", lag, lambda v: v > 0)
        producers = 'sum(rocketmq_producer_connections{language="PYTHON",protocol_type="grpc"})'
        scraper.wait_for("the load's producer", producers, lambda v: v >= 1)
        assert load.poll() is None, "the load ended before the lag was seen"
    finally:
        done = finish(load, stop)
    sent, acked = done["sent"], done["acked"]
    assert acked == CONSUMED
    assert sent > CONSUMED

    # Once the load is over, the figures settle on exactly what the client did.
    total_in = f'sum(rocketmq_messages_in_total{{topic="{TOPIC}"}})'
    scraper.wait_for("every send counted", total_in, lambda v: v == sent)
    scraper.wait_for("the lag of what was not consumed", lag, lambda v: v == sent - acked)
    total_out = f'sum(rocketmq_messages_out_total{{topic="{TOPIC}",consumer_group="{GROUP}"}})'
    assert scraper.value(total_out) == acked
    body_bytes = f'sum(rocketmq_throughput_in_total{{topic="{TOPIC}"}})'
    assert scraper.value(body_bytes) == sum(len(f"m{i}".encode() * 8) for i in range(sent))
    sizes = f'sum(rocketmq_message_size_bucket{{topic="{TOPIC}",le="1024.0"}})'
    assert scraper.value(sizes) == sent
    age = f'max(rocketmq_consumer_lag_latency_milliseconds{{consumer_group="{GROUP}"}})'
    assert (scraper.value(age) or 0) > 0
    sends = 'sum(rocketmq_rpc_latency_milliseconds_count{request_code="SendMessage"})'
    assert (scraper.value(sends) or 0) >= sent

    # Storage and nameserver figures of their own.
    assert scraper.value('sum(rip5_raft_leaders{node_type="storage"})') == GROUPS
    assert scraper.value('sum(rip5_raft_groups{node_type="storage"})') == GROUPS * 3
    assert scraper.value('rip5_nameserver_storage_nodes{alive="true"}') == 3
    assert scraper.value('rip5_nameserver_leader{node_type="nameserver"}') == 1
    assert (scraper.value('sum(rip5_raft_fsync_seconds_count{node_type="storage"})') or 0) > 0
