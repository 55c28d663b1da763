"""The broker's cached routes across raft group and storage node changes: patched in
memory from the watch's records, equal to what the nameserver would answer, without
reading the routes again (one leader change used to make a broker read every route
it held)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.services.nameserver import ClusterMetadata, NameserverLink
from nameserver import commands as c
from nameserver.api_convert import route_response, watch_batch_info
from nameserver.state import MetadataState
from protocol import nameserver_api as api

CLUSTER = "c"
GROUPS = 16
NODES = 4
TIMEOUT_MS = 1_000


class _StateNameserver:
    """A nameserver over a real ``MetadataState``: routes are read from it (counted),
    and the watch streams its changes whenever ``publish`` is called (``caught_up``
    is set once the watcher, done with a batch reaching the state's revision, asks
    for the next); with ``compacted`` the watch's first batch asks for a resync, as
    a nameserver whose history no longer holds the revision asked."""

    def __init__(self, *, compacted: bool = False) -> None:
        self.state = MetadataState()
        self.route_reads: list[str] = []
        self.compacted = compacted
        self.caught_up = asyncio.Event()
        self._published = asyncio.Event()

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> Any:
        return self

    def publish(self) -> None:
        self._published.set()

    async def route(self, request: api.NameRequest, timeout_ms: int = 0) -> api.RouteResponse:
        self.route_reads.append(request.name)
        return route_response(self.state.route(request.name))

    @asynccontextmanager
    async def watch(self, request: api.WatchRequest) -> AsyncIterator[AsyncIterator[Any]]:
        async def batches() -> AsyncIterator[api.WatchBatchInfo]:
            revision = request.revision
            if self.compacted:
                yield api.WatchBatchInfo(self.state.revision, [], resync_required=True)
                revision = self.state.revision
            while True:
                batch = watch_batch_info(self.state.changes_since(revision))
                yield batch
                revision = batch.revision
                if revision == self.state.revision:
                    self.caught_up.set()
                await self._published.wait()
                self._published.clear()

        yield batches()


def _cluster(nameserver: _StateNameserver, topics: int) -> list[str]:
    """A cluster of NODES nodes and GROUPS groups of 3 replicas, each led by its first
    replica, and ``topics`` topics of 8 queues."""
    state = nameserver.state
    state.apply(c.CreateCluster(CLUSTER, GROUPS, 3))
    for node_id in range(1, NODES + 1):
        state.apply(c.StorageHeartbeat(node_id, CLUSTER, f"storage-{node_id}:1", 0))
    first = state.cluster(CLUSTER).first_group_id
    assignments = tuple(
        c.ReplicaAssignment(first + i, tuple(1 + (i + k) % 3 for k in range(3)))
        for i in range(GROUPS)
    )  # nodes 1-3: node 4 is a replica of nothing yet
    state.apply(c.SetReplicas(assignments))
    for assignment in assignments:
        leader = assignment.replicas[0]
        state.apply(c.ReportLeaders(leader, (c.LeaderReport(assignment.group_id, leader, 1),)))
    names = [f"t{i}" for i in range(topics)]
    state.apply(c.CreateTopics(tuple(c.CreateTopic(name, CLUSTER, 8) for name in names)))
    return names


async def _watched(
    nameserver: _StateNameserver,
) -> tuple[ClusterMetadata, asyncio.Task[None], list[int | None]]:
    metadata = ClusterMetadata(NameserverLink(["ns:1"], nameserver), cluster=CLUSTER)  # type: ignore[arg-type]
    changed: list[int | None] = []
    metadata.on_route_change(changed.append)
    watch = asyncio.create_task(metadata.run_watch())
    await _caught_up(metadata, nameserver)
    return metadata, watch, changed


async def _caught_up(metadata: ClusterMetadata, nameserver: _StateNameserver) -> None:
    nameserver.caught_up.clear()
    nameserver.publish()
    async with asyncio.timeout(5):
        await nameserver.caught_up.wait()
    assert metadata.watching
    assert metadata.revision == nameserver.state.revision


async def _assert_routes_current(
    metadata: ClusterMetadata, nameserver: _StateNameserver, topics: list[str]
) -> None:
    for topic in topics:
        route = await metadata.route(topic)
        expected = route_response(nameserver.state.route(topic))
        assert route.topic == expected.topic
        assert route.queues == expected.queues, topic


async def _stop(watch: asyncio.Task[None]) -> None:
    watch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watch


async def test_one_leader_change_reads_no_route_again() -> None:
    """The figure: 1,000 topics (8,000 queues) cached, one group's leader changes:
    the broker reads no route (it read all 1,000 again before), and each cached route
    is what the nameserver answers now; the listeners hear of that group alone."""
    nameserver = _StateNameserver()
    topics = _cluster(nameserver, 1_000)
    metadata, watch, changed = await _watched(nameserver)
    for topic in topics:
        await metadata.route(topic)
    assert len(nameserver.route_reads) == 1_000
    group = nameserver.state.cluster(CLUSTER).first_group_id + 5
    changed.clear()
    nameserver.state.apply(c.ReportLeaders(2, (c.LeaderReport(group, 2, 2),)))
    await _caught_up(metadata, nameserver)
    assert changed == [group]
    await _assert_routes_current(metadata, nameserver, topics)
    assert len(nameserver.route_reads) == 1_000
    await _stop(watch)


async def test_seeded_leader_replica_and_node_changes_keep_every_route_current() -> None:
    """Random leader changes, replica moves (onto node 4 and back), nodes down and up,
    an address change and drains: after each, every cached route equals the
    nameserver's, and none was read again."""
    rng = random.Random(7)
    nameserver = _StateNameserver()
    topics = _cluster(nameserver, 40)
    state = nameserver.state
    metadata, watch, _changed = await _watched(nameserver)
    await _assert_routes_current(metadata, nameserver, topics)
    reads = len(nameserver.route_reads)
    first = state.cluster(CLUSTER).first_group_id
    now_ms = 0
    for _step in range(60):
        group = state.raft_group(first + rng.randrange(GROUPS))
        event = rng.randrange(5)
        if event == 0:  # another replica leads at the next term
            leader = rng.choice(group.replicas)
            report = c.LeaderReport(group.group_id, leader, group.term + 1)
            state.apply(c.ReportLeaders(leader, (report,)))
        elif event == 1:  # one replica moves to a node that is not one
            others = [n for n in range(1, NODES + 1) if n not in group.replicas]
            replicas = list(group.replicas)
            replicas[rng.randrange(3)] = rng.choice(others)
            state.apply(c.SetReplicas((c.ReplicaAssignment(group.group_id, tuple(replicas)),)))
        elif event == 2:  # a node goes down (its leaderships forgotten), later back up
            now_ms += 2 * TIMEOUT_MS
            down = rng.randrange(1, NODES + 1)
            for node_id in range(1, NODES + 1):
                if node_id != down:
                    address = state.storage_node(node_id).address
                    state.apply(c.StorageHeartbeat(node_id, CLUSTER, address, now_ms))
            state.apply(c.Expire(now_ms, TIMEOUT_MS, TIMEOUT_MS))
        elif event == 3:  # a node (back) up, perhaps at a new address
            node_id = rng.randrange(1, NODES + 1)
            address = f"storage-{node_id}:{rng.choice((1, 2))}"
            state.apply(c.StorageHeartbeat(node_id, CLUSTER, address, now_ms))
        else:  # drained or not: nothing a route holds
            node_id = rng.randrange(1, NODES + 1)
            state.apply(c.DrainStorageNode(node_id, rng.random() < 0.5))
        await _caught_up(metadata, nameserver)
        await _assert_routes_current(metadata, nameserver, topics)
    assert len(nameserver.route_reads) == reads
    await _stop(watch)


async def test_after_a_resync_a_group_moved_to_an_unknown_node_costs_one_route_read() -> None:
    """A broker that resynced knows only the nodes its routes name: a group moved onto
    a node none names cannot be patched, so the first route looked up that uses the
    group is read again; it names the node, and the other routes are patched."""
    nameserver = _StateNameserver(compacted=True)
    topics = _cluster(nameserver, 200)
    state = nameserver.state
    metadata, watch, _changed = await _watched(nameserver)
    await _assert_routes_current(metadata, nameserver, topics)
    reads = len(nameserver.route_reads)
    group = state.raft_group(state.cluster(CLUSTER).first_group_id + 3)
    users = [
        topic
        for topic in topics
        if any(q.group_id == group.group_id for q in state.route(topic).queues)
    ]
    assert 0 < len(users) < len(topics)
    replicas = (4, *group.replicas[1:])  # node 4: named by no route
    state.apply(c.SetReplicas((c.ReplicaAssignment(group.group_id, replicas),)))
    await _caught_up(metadata, nameserver)
    await _assert_routes_current(metadata, nameserver, topics)
    read_again = nameserver.route_reads[reads:]
    assert len(read_again) == 1
    assert read_again[0] in users
    await _stop(watch)
