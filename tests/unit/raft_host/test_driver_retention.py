"""Driver duties beyond the round: WAL retention by bytes, membership change, entry size.

Real WALs on disk, drivers in one process over a MemoryNetwork.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from raft.errors import ProposalDropped, ProposalTooLarge, RaftNotLeader
from raft.host.driver import Driver
from raft.types import ConfChange, ConfChangeType, ConfChangeV2
from raft.wal.logstore import LogStore
from tests.unit.raft_host.test_driver import NODES, OPTIONS, Cluster, Register, applied_everywhere
from tests.waiting import async_wait_until

SEGMENT_BYTES = 64 << 10


class SmallSegments(Cluster):
    """The test cluster with 64 KiB segments, so a few hundred entries fill several."""

    async def start_node(self, node_id: int) -> Driver:
        store = LogStore.open(
            self.root / f"n{node_id}", segment_bytes=SEGMENT_BYTES, spare_segments_max=4
        )
        opts = dataclasses.replace(self.options, seed=node_id)
        driver = Driver(node_id, store, self.network.endpoint(node_id), opts)
        for group_id in range(1, self.groups + 1):
            machine = Register()
            self.machines[node_id, group_id] = machine
            driver.add_group(group_id, NODES, machine)
        await driver.start()
        self.drivers[node_id] = driver
        return driver


RETAIN = dataclasses.replace(OPTIONS, wal_retain_bytes=4 * SEGMENT_BYTES, wal_keep_segments=2)


async def test_the_wal_is_kept_within_its_byte_budget_and_replays(tmp_path: Path) -> None:
    c = SmallSegments(tmp_path, groups=4, options=RETAIN)
    for node_id in NODES:
        await c.start_node(node_id)
    await c.wait_leaders()
    body = b"x" * 1000
    expected: dict[int, list[bytes]] = {g: [] for g in range(1, 5)}
    for i in range(80):  # ~320 KiB per node: 5+ segments without compaction
        for group_id, values in expected.items():
            data = b"%d-%d-" % (group_id, i) + body
            await c.propose(group_id, data)
            values.append(data)
    for group_id, values in expected.items():
        await async_wait_until(applied_everywhere(c, group_id, values), what="applied everywhere")
    for node_id in NODES:
        driver = c.drivers[node_id]
        await async_wait_until(
            lambda d=driver: d.compactions > 0,  # type: ignore[misc]
            what=f"node {node_id} compacted",
        )
        # The budget holds: at most one segment past it (the one being filled).
        assert driver.store.retained_bytes() <= RETAIN.wal_retain_bytes + SEGMENT_BYTES
        assert all(driver.store.group(g).first_index() > 1 for g in expected)
    for node_id in NODES:
        await c.stop_node(node_id)
    for node_id in NODES:
        await c.start_node(node_id)
    for group_id, values in expected.items():
        await async_wait_until(
            applied_everywhere(c, group_id, values), what="snapshot + log replayed"
        )
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_a_truncate_floor_holds_compaction_back(tmp_path: Path) -> None:
    c = SmallSegments(tmp_path, groups=2, options=RETAIN)
    for node_id in NODES:
        await c.start_node(node_id)
    await c.wait_leaders()
    for driver in c.drivers.values():
        driver.set_truncate_floor(1, 10)  # group 1 keeps everything above entry 10
    body = b"y" * 1000
    for i in range(200):  # ~400 KiB per node: 6+ segments without compaction
        await c.propose(1, b"1-%d" % i + body)
        await c.propose(2, b"2-%d" % i + body)
    for node_id, driver in c.drivers.items():
        await async_wait_until(
            lambda d=driver: d.compactions > 0,  # type: ignore[misc]
            what=f"node {node_id} compacted",
        )
        assert driver.store.group(1).first_index() <= 11
        assert driver.store.group(2).first_index() > 11
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_the_hook_before_a_spare_fill_runs_in_the_spare_thread(tmp_path: Path) -> None:
    c = SmallSegments(tmp_path, groups=1, options=OPTIONS)
    calls: dict[int, list[tuple[str, list[int], bool]]] = {n: [] for n in NODES}
    for node_id in NODES:
        driver = await c.start_node(node_id)
        store = driver.store

        def hook(
            live: list[int],
            calls: list[tuple[str, list[int], bool]] = calls[node_id],
            store: LogStore = store,
        ) -> None:
            # What the fill will see: no spare ready yet, the live segments as given.
            calls.append((threading.current_thread().name, live, store.has_spare()))
            if len(calls) % 2:
                raise OSError("advice refused")  # logged; the fill goes on

        driver.before_spare_fill(hook)
    await c.wait_leaders()
    body = b"s" * 1000
    for i in range(200):  # ~200 KiB per node: a new spare every 64 KiB
        await c.propose(1, b"%d-" % i + body)
    for node_id in NODES:
        driver = c.drivers[node_id]
        await async_wait_until(
            lambda n=node_id: len(calls[n]) >= 2,  # type: ignore[misc]
            what=f"node {node_id} filled two spares",
        )
        await async_wait_until(driver.store.has_spare, what=f"node {node_id} has a spare")
        for thread, live, had_spare in calls[node_id]:
            assert thread.startswith(f"wal-spare-{node_id}")
            assert live  # the live segments, oldest first
            assert live == sorted(live)
            assert not had_spare
        assert len(driver.store.segment_seqs()) >= 3
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_an_entry_larger_than_a_segment_fails_alone(tmp_path: Path) -> None:
    c = SmallSegments(tmp_path, groups=1, options=OPTIONS)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    driver = c.drivers[leaders[1]]
    with pytest.raises(ProposalTooLarge, match="exceeds"):
        await driver.propose(1, b"z" * SEGMENT_BYTES)
    with pytest.raises(ProposalTooLarge):
        await driver.propose_many_nowait(1, [b"ok", b"z" * SEGMENT_BYTES])
    # The driver goes on: the next proposal commits everywhere.
    await c.propose(1, b"after")
    await async_wait_until(applied_everywhere(c, 1, [b"after"]), what="the next proposal")
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_a_member_joins_by_snapshot_and_another_leaves(tmp_path: Path) -> None:
    """Node 4 joins (learner, then voter) after the log was compacted; a follower leaves."""
    options = dataclasses.replace(OPTIONS, snapshot_entries=10, keep_entries=2)
    c = SmallSegments(tmp_path, groups=1, options=options)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    values = [b"v%d" % i for i in range(30)]
    for value in values:
        await c.propose(1, value)
    lead = c.drivers[leaders[1]]
    assert lead.store.group(1).first_index() > 1  # a newcomer cannot start from entries
    store = LogStore.open(tmp_path / "n4", segment_bytes=SEGMENT_BYTES)
    newcomer = Driver(4, store, c.network.endpoint(4), dataclasses.replace(options, seed=4))
    machine = Register()
    newcomer.add_group(1, (), machine)  # no peers: it learns its membership from the leader
    await newcomer.start()

    first = lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.ADD_LEARNER, 4))
    second = lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.ADD_VOTER, 4))
    assert await first is None
    with pytest.raises(ProposalDropped, match="membership change"):
        await second  # one change at a time: refused while the first was unapplied
    await async_wait_until(lambda: machine.values == values, what="the learner caught up")
    assert newcomer.store.group(1).snapshot().metadata.index > 0  # it came by snapshot

    await lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.ADD_VOTER, 4))
    leaving = next(n for n in NODES if n != leaders[1])
    await lead.propose_conf_change_nowait(
        1, ConfChangeV2((ConfChange(ConfChangeType.REMOVE_NODE, leaving),))
    )
    staying = [n for n in NODES if n != leaving]
    assert lead.host.node(1).status().conf_state.voters == frozenset([*staying, 4])
    await lead.propose(1, b"after")
    expected = [*values, b"after"]
    await async_wait_until(
        lambda: (
            machine.values == expected and all(c.machines[n, 1].values == expected for n in staying)
        ),
        what="the new membership commits",
    )
    assert b"after" not in c.machines[leaving, 1].values
    await newcomer.stop()
    for node_id in NODES:
        await c.stop_node(node_id)


async def test_a_member_joins_by_snapshot_of_an_uncompacted_log_and_the_leaver_deletes(
    tmp_path: Path,
) -> None:
    """Node 4 joins while the leader's log still starts at entry 1 (it is sent the
    snapshot taken at its ADD_LEARNER, not entries from 1, whose initial membership
    is not in the log); the node that leaves then stops and deletes its replica."""
    c = SmallSegments(tmp_path, groups=1, options=OPTIONS)
    for node_id in NODES:
        await c.start_node(node_id)
    leaders = await c.wait_leaders()
    values = [b"v%d" % i for i in range(10)]
    for value in values:
        await c.propose(1, value)
    lead = c.drivers[leaders[1]]
    assert lead.store.group(1).first_index() == 1
    store = LogStore.open(tmp_path / "n4", segment_bytes=SEGMENT_BYTES)
    newcomer = Driver(4, store, c.network.endpoint(4), dataclasses.replace(OPTIONS, seed=4))
    machine = Register()
    newcomer.add_group(1, (), machine)
    await newcomer.start()
    await lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.ADD_LEARNER, 4))
    await async_wait_until(lambda: machine.values == values, what="the learner caught up")
    assert newcomer.store.group(1).snapshot().metadata.index > 0  # it came by snapshot
    await lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.ADD_VOTER, 4))
    leaving = next(n for n in NODES if n != leaders[1])
    await lead.propose_conf_change_nowait(1, ConfChange(ConfChangeType.REMOVE_NODE, leaving))
    await lead.propose(1, b"after")
    await async_wait_until(lambda: machine.values == [*values, b"after"], what="4 votes")

    gone = c.drivers[leaving]
    await gone.remove_group(1)
    assert 1 not in gone.host.group_ids()
    with pytest.raises(RaftNotLeader):
        await gone.propose(1, b"not hosted")
    await c.stop_node(leaving)
    reopened = LogStore.open(tmp_path / f"n{leaving}", segment_bytes=SEGMENT_BYTES)
    log = reopened.group(1)
    assert log.last_index() == 0
    assert log.snapshot().is_empty()
    assert log.initial_state()[0].term > 0  # the term (and vote) survive the drop
    reopened.close()
    await newcomer.stop()
    for node_id in NODES:
        if node_id != leaving:
            await c.stop_node(node_id)
