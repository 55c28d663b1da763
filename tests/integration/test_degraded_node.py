"""A storage node whose disk turns slow is marked degraded and loses its leaders.

Real processes on 127.0.0.1: one nameserver and four storage nodes (12
groups, 3 replicas each), under a steady append load so every node syncs
its WAL. Once leadership is balanced, node 3's fault-injection file makes
every one of its WAL fdatasyncs take 200 ms longer
(``storage_node/fault_injection.py``). Its heartbeats report the fsync p99;
the nameserver leader finds it an outlier among its peers (median/MAD, three
windows in a row: ``nameserver/load_monitor.py``), marks it degraded
(``rip5 admin cluster status`` shows it) and asks for its leaderships to be
handed to its healthy peers: within 30 s it leads no group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError
from protocol import nameserver_api as api
from storage_node.fault_injection import FAULT_FILE_ENV
from tests.integration.test_replica_moves import (
    CLUSTER,
    QUEUES,
    TOPICS,
    Moves,
    _wait,
    four_node_cluster,
)

pytestmark = pytest.mark.integration

SLOW = 3
DETECTION_BOUND_S = 30.0


@pytest.fixture
async def moves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Moves]:
    fault_file = tmp_path / "faults.json"
    fault_file.write_text("{}")
    async with four_node_cluster(tmp_path, (1, 2, 4)) as cluster:
        # Only the slow node reads a fault file (the environment is copied at spawn).
        monkeypatch.setenv(FAULT_FILE_ENV, str(fault_file))
        await cluster.storage.start_node(SLOW)
        monkeypatch.delenv(FAULT_FILE_ENV)
        yield cluster


async def _load(moves: Moves, stop: asyncio.Event) -> int:
    """Append to every queue, round after round, until ``stop``; the rounds that failed
    (an append caught in a leader transfer: not what this test is about)."""
    failed = 0
    round_ = 0
    while not stop.is_set():
        round_ += 1
        try:
            await moves.append_everywhere(round_)
        except AngeliaError:
            failed += 1
    return failed


async def test_a_slow_disk_marks_its_node_degraded_and_takes_its_leaders(
    moves: Moves, tmp_path: Path
) -> None:
    for topic in TOPICS:
        request = api.CreateTopicRequest(topic, CLUSTER, QUEUES)
        await moves.client.call(
            lambda ns, r=request: ns.create_topic(r, timeout_ms=5000)  # type: ignore[misc]
        )
    await _wait(lambda: moves.settled({1, 2, 3, 4}), 60, "the initial placement")
    stop = asyncio.Event()
    load = asyncio.create_task(_load(moves, stop))
    try:

        async def slow_node_leads() -> bool:
            status = await moves.status()
            return any(g.leader == SLOW for g in status.groups)

        await _wait(slow_node_leads, 60, f"node {SLOW} leading some groups")
        (tmp_path / "faults.json").write_text(json.dumps({"wal_sync_delay_ms": 200}))
        slowed_at = time.monotonic()

        async def degraded_and_leaderless() -> api.ClusterStatusResponse | None:
            status = await moves.status()
            node = next(n for n in status.storage_nodes if n.node_id == SLOW)
            if not node.degraded or any(g.leader == SLOW for g in status.groups):
                return None
            return status if node.leaders == 0 else None

        status = await _wait(degraded_and_leaderless, DETECTION_BOUND_S + 10, "the demotion")
        elapsed_s = time.monotonic() - slowed_at
    finally:
        stop.set()
        with contextlib.suppress(AngeliaError):
            await asyncio.wait_for(load, 60)
    assert isinstance(status, api.ClusterStatusResponse)
    figures = {n.node_id: (n.degraded, n.fsync_p99_us, n.leaders) for n in status.storage_nodes}
    print(f"node {SLOW} degraded and leaderless {elapsed_s:.1f} s after its disk slowed: {figures}")
    assert elapsed_s <= DETECTION_BOUND_S
    slow = next(n for n in status.storage_nodes if n.node_id == SLOW)
    assert slow.fsync_p99_us >= 200_000
    # Its groups are led by healthy replicas; it still holds its replicas.
    assert all(g.leader not in (0, SLOW) for g in status.groups)
    assert any(SLOW in g.replicas for g in status.groups)
