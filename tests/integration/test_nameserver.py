"""Real nameserver processes on 127.0.0.1: the admin CLI round trip on one node,
and a 3-node group whose leader is SIGKILLed while topics are being created."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from angelia_rpc.ports import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

RIP5 = [sys.executable, "-m", "rip5"]


class Nameservers:
    """Nameserver processes, each with its own data directory and log file."""

    def __init__(self, root: Path, count: int) -> None:
        self.root = root
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in range(1, count + 1)}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, node_id: int) -> None:
        args = [
            *RIP5,
            "nameserver",
            "--data-dir",
            str(self.root / f"ns{node_id}"),
            "--listen",
            self.addresses[node_id],
            "--node-id",
            str(node_id),
            "--groups",
            "4",
        ]
        if len(self.addresses) > 1:
            args += ["--peers", ",".join(f"{n}={a}" for n, a in self.addresses.items())]
        log = open(self.root / f"ns{node_id}.log", "ab")  # noqa: SIM115 - the child owns it
        self.processes[node_id] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill(self, node_id: int) -> None:
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for node_id, process in list(self.processes.items()):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            del self.processes[node_id]

    def nameserver_option(self) -> str:
        return ",".join(self.addresses.values())


@pytest.fixture
def one_node(tmp_path: Path) -> Iterator[Nameservers]:
    cluster = Nameservers(tmp_path, 1)
    cluster.start(1)
    yield cluster
    cluster.stop_all()


def admin(cluster: Nameservers, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RIP5, "admin", *args, "--nameserver", cluster.nameserver_option()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_admin_cli_round_trip_on_one_node(one_node: Nameservers) -> None:
    # The leader creates the configured cluster once it leads: wait for it.
    wait_until(
        lambda: admin(one_node, "cluster", "status").returncode == 0,
        timeout_s=30,
        what="the nameserver to serve cluster status",
    )
    created = admin(one_node, "topic", "create", "OrderTopic", "--queues", "4")
    assert created.returncode == 0, created.stderr
    assert "OrderTopic" in created.stdout

    again = admin(one_node, "topic", "create", "OrderTopic")
    assert again.returncode == 1
    assert "ALREADY_EXISTS" in again.stderr
    assert "Traceback" not in again.stderr

    bad = admin(one_node, "topic", "create", "bad topic")
    assert bad.returncode == 2
    assert "' ' at position 3" in bad.stderr

    updated = admin(one_node, "topic", "update", "OrderTopic", "--queues", "6", "--perm", "r")
    assert updated.returncode == 0, updated.stderr
    shrink = admin(one_node, "topic", "update", "OrderTopic", "--queues", "2")
    assert shrink.returncode == 1
    assert "may only grow" in shrink.stderr

    described = admin(one_node, "topic", "describe", "OrderTopic")
    assert described.returncode == 0, described.stderr
    assert "│ 6 " in described.stdout  # six queues
    assert described.stdout.count("\n│ ") >= 1 + 6  # the topic row and one row per queue

    assert admin(one_node, "group", "create", "GID_orders", "--fifo").returncode == 0
    listed = admin(one_node, "group", "list")
    assert "GID_orders" in listed.stdout
    assert "true" in listed.stdout
    group = admin(one_node, "group", "describe", "GID_orders")
    assert "7200000" in group.stdout  # RocketMQ's last retry level (2 h)

    status = admin(one_node, "cluster", "status")
    assert "1 topics, 1 consumer groups" in status.stdout

    # Everything survives a restart (the WAL is in the data directory).
    one_node.stop_all()
    one_node.start(1)
    topics = wait_until(
        lambda: (r := admin(one_node, "topic", "list")).returncode == 0 and r,
        timeout_s=30,
        what="the restarted nameserver to answer",
    )
    assert isinstance(topics, subprocess.CompletedProcess)
    assert "OrderTopic" in topics.stdout
    assert "│ r " in topics.stdout

    assert admin(one_node, "topic", "delete", "OrderTopic").returncode == 0
    assert admin(one_node, "group", "delete", "GID_orders").returncode == 0
    gone = admin(one_node, "topic", "describe", "OrderTopic")
    assert gone.returncode == 1
    assert "TOPIC_NOT_FOUND" in gone.stderr

    # Bulk creation from a file: 1,200 topics go as two CreateTopics entries (1,000 + 200),
    # each all or nothing. One exists already: without --skip-existing the first batch is
    # refused naming it, and nothing of that batch is created (the rerun skips only one).
    lines = ["name,queues,type"] + [
        f"bulk-{i},{1 + i % 8},{'FIFO' if i % 2 else ''}" for i in range(1200)
    ]
    topic_file = one_node.root / "topics.csv"
    topic_file.write_text("\n".join(lines) + "\n")
    assert admin(one_node, "topic", "create", "bulk-5").returncode == 0
    refused = admin(one_node, "topic", "create", "--from-file", str(topic_file))
    assert refused.returncode == 1
    assert "topics[5] ('bulk-5')" in refused.stderr
    assert "exists already" in refused.stderr
    bulk = admin(
        one_node, "topic", "create", "--from-file", str(topic_file), "--skip-existing", "--json"
    )
    assert bulk.returncode == 0, bulk.stderr
    summary = json.loads(bulk.stdout)
    assert (summary["topics"], summary["created"], summary["skipped"]) == (1200, 1199, 1)
    described = admin(one_node, "topic", "describe", "bulk-7")
    assert "│ 8 " in described.stdout
    assert "FIFO" in described.stdout.upper()
