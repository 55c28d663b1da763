"""Replica moves on a real cluster on 127.0.0.1: a node joins, a node dies for good.

One nameserver and three storage nodes with data in several queues, then:

- a 4th storage node joins: the nameserver moves replicas to it (learner
  added, caught up by snapshot and log, promoted, old voter removed and its
  replica deleted) until replica counts differ by at most one; every group
  still has 3 replicas on distinct nodes, every storage node agrees on that
  membership, and every acknowledged message reads back from every replica
  of every group (read-replica reads);
- one node is SIGKILLed and stays down: after the evacuation time its
  replicas are replaced on the other nodes; every group again has 3 alive
  replicas and every message reads back from each of them;
- ``rip5 admin cluster status`` and the routes show the new replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as api
from protocol.storage_api import AppendRequest, AppendResponse, Message, ReadRequest
from rip5.bench.storage_cluster import LocalStorageCluster, _read_line, free_port
from rip5.shell import READY_FD_ENV

pytestmark = pytest.mark.integration

GROUPS = 12
CLUSTER = "DefaultCluster"
TOPICS = ("orders", "payments")
QUEUES = 6
MESSAGES_PER_QUEUE = 5
EVACUATE_AFTER_MS = 4000
MOVES_TIMEOUT_S = 120.0
# Each step of a move waits for the group leader's next heartbeat and the nameserver
# leader's next sweep (500 ms each by default): at 100 ms this module's moves take about
# a quarter of the time. What it checks (where the replicas end up, every message on each)
# does not depend on the pace. test_storage_elasticity keeps the defaults: its fsync and
# append p99 figures are per heartbeat.
QUICK_SWEEPS = ("--expire-interval-ms", "100")
QUICK_HEARTBEATS = ("--heartbeat-interval-ms", "100")
LOG_LEVEL = os.environ.get("RIP5_TEST_LOG_LEVEL", "warning")  # "info" shows every move step


@contextlib.asynccontextmanager
async def _nameserver(root: Path, nameserver_flags: tuple[str, ...] = ()) -> AsyncIterator[str]:
    address = f"127.0.0.1:{free_port()}"
    read_fd, write_fd = os.pipe()
    args = [
        sys.executable,
        "-m",
        "rip5",
        "nameserver",
        *("--data-dir", str(root / "nameserver"), "--log-level", LOG_LEVEL),
        *("--listen", address, "--groups", str(GROUPS)),
        *("--evacuate-after-ms", str(EVACUATE_AFTER_MS), "--moves-max", "4"),
        *nameserver_flags,
    ]
    try:
        process = await asyncio.create_subprocess_exec(
            *args, env={**os.environ, READY_FD_ENV: str(write_fd)}, pass_fds=(write_fd,)
        )
    finally:
        os.close(write_fd)
    try:
        line = await asyncio.wait_for(
            asyncio.get_running_loop().run_in_executor(None, _read_line, read_fd), 60
        )
    finally:
        os.close(read_fd)
    assert line.startswith("ready"), f"the nameserver did not start (exit {process.returncode})"
    try:
        yield address
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _wait(condition: object, timeout_s: float, what: str) -> object:
    """Await an async condition until it is truthy, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await condition()  # type: ignore[operator]
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.1)


class Moves:
    """The cluster under test and what was acknowledged."""

    def __init__(self, client: NameserverClient, storage: LocalStorageCluster) -> None:
        self.client = client
        self.storage = storage
        self.acked: dict[tuple[str, int], list[str]] = {}

    async def status(self) -> api.ClusterStatusResponse:
        return await self.client.call(
            lambda ns: ns.cluster_status(api.NameRequest(CLUSTER), timeout_ms=2000)
        )

    async def settled(self, nodes: set[int]) -> api.ClusterStatusResponse | None:
        """The status once every group has 3 replicas on distinct nodes of ``nodes``,
        no move is recorded, replica counts differ by at most one, each node hosts
        exactly its assigned replicas, and every group has a known leader."""
        status = await self.status()
        counts = dict.fromkeys(nodes, 0)
        for group in status.groups:
            if group.joining or group.leaving or len(set(group.replicas)) != 3:
                return None
            if not set(group.replicas) <= nodes:
                return None
            for node_id in group.replicas:
                counts[node_id] += 1
        if max(counts.values()) - min(counts.values()) > 1:
            return None
        # Every node hosts just its assigned replicas (the count it heartbeats), and
        # every group has a known leader.
        hosted = {n.node_id: n.groups for n in status.storage_nodes if n.alive}
        if any(hosted.get(n) != counts[n] for n in nodes):
            return None
        if any(g.leader == 0 for g in status.groups):
            return None
        return status

    async def append_everywhere(self, round_: int) -> None:
        for topic in TOPICS:
            for queue_id in range(QUEUES):
                ids = [f"{topic}-{queue_id}-{round_}-{i}" for i in range(MESSAGES_PER_QUEUE)]
                group = self.storage.group_of(topic, queue_id)
                request = AppendRequest(
                    topic, queue_id, [Message(topic, queue_id, m, m.encode()) for m in ids]
                )

                async def append(
                    stub: StorageService, r: AppendRequest = request
                ) -> AppendResponse:
                    return await stub.append(r)

                response = await self.storage.call(append, group=group)
                assert len(response.outcomes) == len(ids)
                self.acked.setdefault((topic, queue_id), []).extend(ids)

    async def read_back_everywhere(self, status: api.ClusterStatusResponse) -> None:
        """Every acknowledged message, from every replica of its queue's group."""
        replicas = {g.group_id: g.replicas for g in status.groups}
        for (topic, queue_id), ids in self.acked.items():
            group = self.storage.group_of(topic, queue_id)
            for node_id in replicas[group]:

                async def complete(
                    n: int = node_id, t: str = topic, q: int = queue_id, want: int = len(ids)
                ) -> list[str] | None:
                    try:
                        read = await self.storage.stub(n).read(
                            ReadRequest(t, q, 0, count_max=1000, from_follower=True),
                            timeout_ms=2000,
                        )
                    except AngeliaError:
                        return None
                    got = [m.message.message_id for m in read.messages]
                    return got if len(got) >= want else None

                got = await _wait(complete, 30, f"{topic}/{queue_id} on node {node_id}")
                assert got == ids, f"{topic}/{queue_id} on node {node_id}"


@contextlib.asynccontextmanager
async def four_node_cluster(
    root: Path,
    started: tuple[int, ...],
    nameserver_flags: tuple[str, ...] = (),
    storage_flags: tuple[str, ...] = (),
) -> AsyncIterator[Moves]:
    """A nameserver and room for storage nodes 1-4 under ``root``; the ``started``
    ones run (the others can be started later); more flags of the nameserver and of
    every storage node."""
    async with _nameserver(root, nameserver_flags) as nameserver:
        storage = LocalStorageCluster(
            root,
            nodes=4,
            groups=GROUPS,
            nameserver=nameserver,
            static=False,
            log_level=LOG_LEVEL,
            flags=storage_flags,
        )
        client = NameserverClient([nameserver])
        try:
            await asyncio.gather(*(storage.start_node(n) for n in started))
            yield Moves(client, storage)
        finally:
            await storage.stop()
            await client.close()


@pytest.fixture
async def moves(tmp_path: Path) -> AsyncIterator[Moves]:
    async with four_node_cluster(tmp_path, (1, 2, 3), QUICK_SWEEPS, QUICK_HEARTBEATS) as cluster:
        yield cluster


async def test_a_joining_node_takes_its_share_and_a_dead_one_is_evacuated(moves: Moves) -> None:
    for topic in TOPICS:
        request = api.CreateTopicRequest(topic, CLUSTER, QUEUES)
        await moves.client.call(
            lambda ns, r=request: ns.create_topic(r, timeout_ms=5000)  # type: ignore[misc]
        )
    await _wait(lambda: moves.settled({1, 2, 3}), 60, "the initial placement")
    await moves.append_everywhere(0)

    # A 4th node joins: it ends up with its share; the data follows.
    await moves.storage.start_node(4)
    joined_at = time.monotonic()
    status = await _wait(lambda: moves.settled({1, 2, 3, 4}), MOVES_TIMEOUT_S, "the rebalance")
    assert isinstance(status, api.ClusterStatusResponse)
    print(f"join rebalance of {GROUPS} groups took {time.monotonic() - joined_at:.1f} s")
    on_new = sum(1 for g in status.groups if 4 in g.replicas)
    assert on_new >= (GROUPS * 3) // 4
    await moves.append_everywhere(1)
    await moves.read_back_everywhere(status)

    # Routes name the new replicas.
    route = await moves.client.call(
        lambda ns: ns.route(api.NameRequest(TOPICS[0]), timeout_ms=2000)
    )
    replicas = {g.group_id: set(g.replicas) for g in status.groups}
    for queue in route.queues:
        named = {f.node_id for f in queue.followers}
        if queue.leader is not None:
            named.add(queue.leader.node_id)
        assert named == replicas[queue.group_id]

    # A node dies for good: after the evacuation time its replicas move to the others.
    victim = 2
    moves.storage.kill(victim)
    killed_at = time.monotonic()
    status = await _wait(lambda: moves.settled({1, 3, 4}), MOVES_TIMEOUT_S, "the evacuation")
    assert isinstance(status, api.ClusterStatusResponse)
    elapsed_s = time.monotonic() - killed_at
    assert elapsed_s >= EVACUATE_AFTER_MS / 1000
    print(f"evacuation of node {victim} done {elapsed_s:.1f} s after the kill")
    alive = {n.node_id for n in status.storage_nodes if n.alive}
    assert alive == {1, 3, 4}
    assert all(set(g.replicas) <= alive and len(g.replicas) == 3 for g in status.groups)
    await moves.read_back_everywhere(status)

    # The admin CLI shows the dead node with no replica left.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rip5",
        *("admin", "cluster", "status", "--nameserver", moves.client.addresses[0]),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert f"{victim}(down)" not in text
    assert f"raft groups: {GROUPS} of {GROUPS} placed" in text
