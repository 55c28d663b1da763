"""Three drivers in one process over a MemoryNetwork, each with a real WAL on disk."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from raft.errors import ProposalDropped, RaftNotLeader, StorageFailed
from raft.host.driver import Driver, DriverOptions
from raft.host.transport import MemoryNetwork
from raft.types import Entry, Snapshot
from raft.wal.logstore import LogStore
from tests.waiting import async_wait_until

NODES = (1, 2, 3)
SEGMENT_BYTES = 1 << 20


class Register:
    """A tiny state machine: the applied data, in order."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def apply(self, entry: Entry) -> object:
        self.values.append(entry.data)
        return len(self.values)

    def restore(self, snapshot: Snapshot) -> None:
        self.values = [v for v in snapshot.data.split(b"\n") if v]

    def snapshot_data(self) -> bytes:
        return b"\n".join(self.values)


class Cluster:
    """Three nodes hosting ``groups`` groups, each replicated on all three."""

    def __init__(self, root: Path, groups: int, options: DriverOptions) -> None:
        self.root = root
        self.groups = groups
        self.options = options
        self.network = MemoryNetwork()
        self.drivers: dict[int, Driver] = {}
        self.machines: dict[tuple[int, int], Register] = {}

    async def start_node(self, node_id: int) -> Driver:
        store = LogStore.open(self.root / f"n{node_id}", segment_bytes=SEGMENT_BYTES)
        opts = dataclasses.replace(self.options, seed=node_id)
        driver = Driver(node_id, store, self.network.endpoint(node_id), opts)
        for group_id in range(1, self.groups + 1):
            machine = Register()
            self.machines[node_id, group_id] = machine
            driver.add_group(group_id, NODES, machine)
        await driver.start()
        self.drivers[node_id] = driver
        return driver

    async def stop_node(self, node_id: int) -> None:
        await self.drivers.pop(node_id).stop()

    def leader(self, group_id: int) -> int:
        """The node every live replica agrees leads ``group_id`` (0 if none yet)."""
        leads = {d.leader_of(group_id) for d in self.drivers.values()}
        if len(leads) == 1:
            (lead,) = leads
            if lead in self.drivers and self.drivers[lead].host.node(group_id).is_leader():
                return lead
        return 0

    async def propose(self, group_id: int, data: bytes, among: Sequence[int] = NODES) -> object:
        """Propose through whichever of ``among`` leads, retrying refused proposals.

        RaftNotLeader and ProposalDropped mean the entry was not committed, so a
        retry cannot duplicate it; leadership may move under a loaded machine.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            leads = [
                n
                for n in among
                if n in self.drivers and self.drivers[n].host.node(group_id).is_leader()
            ]
            if leads:
                try:
                    return await self.drivers[leads[0]].propose(group_id, data)
                except (RaftNotLeader, ProposalDropped):
                    pass
            if loop.time() > deadline:
                raise AssertionError(f"no leader of group {group_id} took {data!r} within 30 s")
            await asyncio.sleep(0.01)

    async def wait_leaders(self) -> dict[int, int]:
        await async_wait_until(
            lambda: all(self.leader(g) for g in range(1, self.groups + 1)),
            timeout_s=30,
            what="a leader in every group",
        )
        return {g: self.leader(g) for g in range(1, self.groups + 1)}


def applied_everywhere(
    cluster: Cluster, group_id: int, expected: list[bytes]
) -> Callable[[], bool]:
    """A condition: every node applied exactly ``expected`` to the group."""
    return lambda: all(cluster.machines[n, group_id].values == expected for n in NODES)


OPTIONS = DriverOptions(tick_ms=10, election_tick=10, heartbeat_tick=2, quiesce_after_ticks=10)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, groups=8, options=OPTIONS)
    for node_id in NODES:
        await c.start_node(node_id)
    yield c
    for node_id in list(c.drivers):
        await c.stop_node(node_id)


async def test_proposals_commit_and_apply_on_every_replica(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    await asyncio.gather(
        *(
            cluster.propose(group_id, b"g%d-v%d" % (group_id, i))
            for group_id in leaders
            for i in range(20)
        )
    )
    for group_id in leaders:
        expected = {b"g%d-v%d" % (group_id, i) for i in range(20)}
        await async_wait_until(
            lambda g=group_id, e=expected: (  # type: ignore[misc]
                len({tuple(cluster.machines[n, g].values) for n in NODES}) == 1
                and set(cluster.machines[1, g].values) == e
                and len(cluster.machines[1, g].values) == len(e)
            ),
            what=f"group {group_id} applied everywhere, in one order",
        )
    # Group commit: far fewer fsyncs than entries.
    assert cluster.drivers[leaders[1]].syncs < 8 * 20


async def test_follower_refuses_with_a_leader_hint(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    follower = next(n for n in NODES if n != leaders[3])
    with pytest.raises(RaftNotLeader) as info:
        await cluster.drivers[follower].propose(3, b"x")
    assert info.value.leader == leaders[3]


async def test_idle_groups_quiesce_and_wake_on_a_proposal(cluster: Cluster) -> None:
    await cluster.wait_leaders()
    await async_wait_until(
        lambda: all(d.host.is_quiesced(g) for d in cluster.drivers.values() for g in range(1, 9)),
        what="every replica of every group quiesced",
    )
    # Read once quiesced: on a loaded machine a first leader may lose an election
    # before its group goes quiet.
    lead = cluster.leader(5)
    assert lead != 0
    assert await cluster.drivers[lead].propose(5, b"wake") == 1
    assert not cluster.drivers[lead].host.is_quiesced(5)
    await async_wait_until(
        lambda: all(cluster.machines[n, 5].values == [b"wake"] for n in NODES),
        what="the woken group applied everywhere",
    )


async def test_a_new_leader_is_elected_when_the_leader_node_is_cut_off(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    # Let groups quiesce first: the orphaned followers must wake by node liveness.
    await async_wait_until(
        lambda: all(cluster.drivers[leaders[1]].host.is_quiesced(g) for g in range(1, 9)),
        what="quiesced",
    )
    old = leaders[1]
    await cluster.propose(1, b"before")
    others = [n for n in NODES if n != old]
    cluster.network.isolate(old, others)

    def new_leader() -> int:
        leads = {cluster.drivers[n].leader_of(1) for n in others}
        if len(leads) == 1:
            (lead,) = leads
            if lead in others and cluster.drivers[lead].host.node(1).is_leader():
                return lead
        return 0

    await async_wait_until(new_leader, timeout_s=30, what="a new leader among the others")
    assert new_leader() != old
    assert await cluster.propose(1, b"after", among=others) == 2
    await async_wait_until(
        lambda: all(cluster.machines[n, 1].values == [b"before", b"after"] for n in others),
        what="the majority side applied both",
    )
    cluster.network.heal()
    await async_wait_until(
        lambda: cluster.machines[old, 1].values == [b"before", b"after"],
        what="the old leader catches up",
    )


async def test_state_survives_a_restart_of_every_node(tmp_path: Path) -> None:
    c = Cluster(tmp_path, groups=4, options=OPTIONS)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    for group_id in leaders:
        for i in range(10):
            await c.propose(group_id, b"%d:%d" % (group_id, i))
    for node_id in NODES:
        await c.stop_node(node_id)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    for group_id in leaders:
        await c.propose(group_id, b"again")
        expected = [b"%d:%d" % (group_id, i) for i in range(10)] + [b"again"]
        await async_wait_until(
            applied_everywhere(c, group_id, expected),
            what=f"group {group_id} replayed and extended",
        )
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_snapshots_compact_the_log_and_catch_up_a_lagging_follower(tmp_path: Path) -> None:
    options = dataclasses.replace(OPTIONS, snapshot_entries=10, keep_entries=5)
    c = Cluster(tmp_path, groups=2, options=options)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    lead = leaders[1]
    lagging = next(n for n in NODES if n != lead)
    for i in range(30):
        await c.propose(1, b"a%d" % i)
    c.network.isolate(lagging, [n for n in NODES if n != lagging])
    for i in range(60):
        await c.propose(1, b"b%d" % i, among=[n for n in NODES if n != lagging])
    log = c.drivers[lead].store.group(1)
    assert log.first_index() > 30  # compacted past what the lagging node has
    c.network.heal()
    expected = [b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(60)]
    await async_wait_until(
        applied_everywhere(c, 1, expected), what="the lagging follower restored by snapshot"
    )
    for node_id in NODES:
        await c.stop_node(node_id)
    for node_id in NODES:
        await c.start_node(node_id)
    await async_wait_until(
        applied_everywhere(c, 1, expected), what="snapshot + log replayed after restart"
    )
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_a_batch_proposal_resolves_once_with_every_result(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    driver = cluster.drivers[leaders[2]]
    first = await driver.propose_many_nowait(2, [b"a", b"b", b"c"])
    second = await driver.propose_many_nowait(2, [b"d"])
    assert first == [1, 2, 3]
    assert second == [4]
    follower = cluster.drivers[next(n for n in NODES if n != leaders[2])]
    with pytest.raises(RaftNotLeader):
        await follower.propose_many_nowait(2, [b"x", b"y"])


async def test_read_index_on_the_leader_sees_every_acknowledged_write(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    group_id = 3
    leader = leaders[group_id]
    followers = [n for n in NODES if n != leader]
    for i in range(5):
        await cluster.propose(group_id, b"w%d" % i)
        index = await cluster.drivers[leader].read_index(group_id, timeout_ms=5000)
        # Applied up to the read index: the state holds every acknowledged write.
        assert cluster.machines[leader, group_id].values[-1] == b"w%d" % i
        assert index >= i + 1
    with pytest.raises(RaftNotLeader) as refused:
        await cluster.drivers[followers[0]].read_index(group_id, timeout_ms=5000)
    assert refused.value.leader == leader


async def test_read_index_wakes_a_quiesced_group(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    group_id = 5
    leader = leaders[group_id]
    await cluster.propose(group_id, b"only")
    await async_wait_until(
        lambda: cluster.drivers[leader].host.is_quiesced(group_id),
        timeout_s=30,
        what="the idle group to quiesce",
    )
    await cluster.drivers[leader].read_index(group_id, timeout_ms=5000)
    assert cluster.machines[leader, group_id].values == [b"only"]


async def test_a_quiesced_leader_hands_its_group_to_the_asked_replica(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    await async_wait_until(
        lambda: all(d.host.is_quiesced(g) for d in cluster.drivers.values() for g in leaders),
        what="every replica of every group quiesced",
    )
    old = leaders[2]
    target = next(n for n in NODES if n != old)
    cluster.drivers[old].transfer_leader(2, target)
    await async_wait_until(lambda: cluster.leader(2) == target, what="the transfer to finish")
    # The group goes on taking proposals through its new leader.
    assert await cluster.drivers[target].propose(2, b"after") == 1


async def test_a_failed_wal_write_stops_rounds_for_good_and_says_why(cluster: Cluster) -> None:
    """The WAL's io_hook fails a write (ENOSPC): the node's rounds stop, proposals to it
    fail at once, wait_failed() names the cause, and the other two keep committing."""
    leaders = await cluster.wait_leaders()
    victim = cluster.drivers[1]
    waiting = asyncio.create_task(victim.wait_failed())

    def disk_full(operation: str) -> None:
        if operation == "write":
            raise OSError(errno.ENOSPC, "No space left on device")

    victim.store.io_hook = disk_full
    group_id = next(iter(leaders))
    await cluster.propose(group_id, b"after-the-disk-filled", among=(2, 3))
    failure = await asyncio.wait_for(waiting, 30)
    assert "No space left on device" in str(failure)
    assert victim.stopped
    with pytest.raises(StorageFailed, match="the driver stopped"):
        await victim.propose(group_id, b"refused")
    await cluster.propose(group_id, b"still-served", among=(2, 3))
