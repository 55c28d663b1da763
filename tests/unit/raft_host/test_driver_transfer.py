"""Driver.transfer_leader: the leader hands a group to another replica, even when idle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.raft_host.test_driver import NODES, OPTIONS, Cluster
from tests.waiting import async_wait_until


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, groups=4, options=OPTIONS)
    for node_id in NODES:
        await c.start_node(node_id)
    yield c
    for node_id in list(c.drivers):
        await c.stop_node(node_id)


async def test_a_quiesced_leader_hands_its_group_to_the_asked_replica(cluster: Cluster) -> None:
    leaders = await cluster.wait_leaders()
    await async_wait_until(
        lambda: all(d.host.is_quiesced(g) for d in cluster.drivers.values() for g in range(1, 5)),
        what="every replica of every group quiesced",
    )
    old = leaders[2]
    target = next(n for n in NODES if n != old)
    cluster.drivers[old].transfer_leader(2, target)
    await async_wait_until(lambda: cluster.leader(2) == target, what="the transfer to finish")
    # The group goes on taking proposals through its new leader.
    assert await cluster.drivers[target].propose(2, b"after") == 1
