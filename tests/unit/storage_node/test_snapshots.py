"""Group snapshots and log truncation on real WALs and sockets (in one process).

- A node that snapshotted and truncated its log reads every message back,
  before and after a restart (the restart replays only what follows the
  snapshot).
- A replica that was down while its leader truncated catches up from a
  snapshot that carries the referenced bodies, serves them, and still has
  them after its own restart.
- Compaction by WAL bytes (raft's retention) stops at the group's truncate
  floor, which the replica keeps below its oldest referenced entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from angelia_rpc import RpcConfig, Server
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.ports import free_port
from protocol.storage_api import (
    AckRequest,
    AppendRequest,
    Message,
    QueueInfoRequest,
    ReadRequest,
    ReceiveRequest,
)
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from raft.wal.logstore import LogStore
from storage_node import housekeeping
from storage_node.errors import StorageNotLeader
from storage_node.partition.commands import Tick, encode
from storage_node.replica import GroupReplica
from storage_node.service import FIRST_GROUP_ID, StorageNode
from storage_node.store.segment_files import WalBodyStore
from tests.waiting import async_wait_until

CONTEXT: Any = None
GROUP = FIRST_GROUP_ID
SNAPSHOT_EVERY = 8


@dataclass
class Running:
    node: StorageNode
    server: Server | None

    @property
    def replica(self) -> GroupReplica:
        return self.node.replicas[GROUP]

    @property
    def log_first_index(self) -> int:
        return self.node.store.group(GROUP).first_index()


@contextlib.asynccontextmanager
async def storage_node(
    data_dir: Path,
    node_id: int = 1,
    addresses: dict[int, str] | None = None,
    *,
    by_bytes: bool = False,
) -> AsyncIterator[Running]:
    """One storage node hosting group 1, snapshotting every few entries.

    ``by_bytes``: tiny segments, and compaction by WAL bytes instead of by entries.
    """
    addresses = addresses or {1: "127.0.0.1:1"}
    store = LogStore.open(data_dir, segment_bytes=4096 if by_bytes else 1 << 20)
    others = {n: a for n, a in addresses.items() if n != node_id}
    transport = AngeliaTransport(node_id, others)
    options = DriverOptions(
        tick_ms=10,
        seed=node_id,
        snapshot_entries=0 if by_bytes else SNAPSHOT_EVERY,
        keep_entries=0,
        wal_retain_bytes=8192 if by_bytes else 0,
    )
    driver = Driver(node_id, store, transport, options)
    replica = GroupReplica(GROUP, WalBodyStore(store))
    driver.add_group(GROUP, sorted(addresses), replica)
    node = StorageNode(driver, store, {GROUP: replica}, 1, addresses)
    server = None
    if others:
        server = Server([transport.binding(), StorageService.bind(node)], RpcConfig())
        await server.start(addresses[node_id])
    await driver.start()
    floors = asyncio.create_task(housekeeping.run_floor_keeper(node))
    try:
        yield Running(node, server)
    finally:
        floors.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await floors
        if server is not None:
            await server.stop()
        await driver.stop()


async def leader_of(nodes: list[Running]) -> Running:
    """The node leading the group, once there is one."""
    await async_wait_until(
        lambda: any(n.node.driver.host.node(GROUP).is_leader() for n in nodes), 20, "a leader"
    )
    return next(n for n in nodes if n.node.driver.host.node(GROUP).is_leader())


async def ticks(running: Running, count: int) -> None:
    """Entries that reference no message (they may be truncated once snapshotted)."""
    for _ in range(count):
        await running.node.driver.propose(GROUP, encode(Tick(int(time.time() * 1000))))


async def append_batches(running: Running, batches: int) -> list[str]:
    ids = []
    for b in range(batches):
        messages = [Message("t", 0, f"b{b}-{i}", b"body-%d-%d" % (b, i) * 20) for i in range(5)]
        await running.node.append(AppendRequest("t", 0, messages), CONTEXT)
        ids += [m.message_id for m in messages]
    return ids


async def read_all(running: Running, from_follower: bool = False) -> list[str]:
    request = ReadRequest("t", 0, 0, count_max=1000, from_follower=from_follower)
    read = await running.node.read(request, CONTEXT)
    return [m.message.message_id for m in read.messages]


async def test_bodies_stay_readable_after_snapshots_truncation_and_restart(tmp_path: Path) -> None:
    async with storage_node(tmp_path) as running:
        await leader_of([running])
        await ticks(running, 30)
        ids = await append_batches(running, 6)
        received = await running.node.receive(ReceiveRequest("g", "t", 0, 7, 60_000), CONTEXT)
        handles = [m.handle for m in received.messages]
        await running.node.ack(AckRequest("g", "t", 0, handles), CONTEXT)
        await ticks(running, 2 * SNAPSHOT_EVERY)
        first_append = running.replica.state.entry("t", 0, 0).log_index
        snapshot_index = running.node.store.group(GROUP).snapshot().metadata.index
        # Truncated up to the first referenced entry, never past it.
        assert running.log_first_index == first_append
        assert snapshot_index > first_append + 6
        assert await read_all(running) == ids
    async with storage_node(tmp_path) as running:
        await leader_of([running])
        assert running.log_first_index == first_append
        assert await read_all(running) == ids
        again = await running.node.receive(ReceiveRequest("g", "t", 0, 100, 60_000), CONTEXT)
        assert [m.message.queue_offset for m in again.messages] == list(range(7, 30))


async def test_a_replica_that_was_down_catches_up_from_a_snapshot_with_bodies(
    tmp_path: Path,
) -> None:
    addresses = {n: f"127.0.0.1:{free_port()}" for n in (1, 2, 3)}
    async with contextlib.AsyncExitStack() as stack:
        nodes = [
            await stack.enter_async_context(storage_node(tmp_path / f"n{n}", n, addresses))
            for n in (1, 2)
        ]
        leader = await leader_of(nodes)
        await ticks(leader, 30)
        ids = await append_batches(leader, 4)
        await ticks(leader, 2 * SNAPSHOT_EVERY)
        first_append = leader.replica.state.entry("t", 0, 0).log_index
        await async_wait_until(lambda: all(n.log_first_index == first_append for n in nodes), 20)
        async with storage_node(tmp_path / "n3", 3, addresses) as late:
            applied = leader.replica.applied_index
            await async_wait_until(lambda: late.replica.applied_index >= applied, 30, "catch-up")
            # Restored from the leader's snapshot: its log starts after it ...
            assert late.log_first_index > first_append
            # ... and yet every body reads back (they came with the snapshot).
            # ... and yet it serves every body (they came with the snapshot): a read
            # replica answers from what it applied.
            assert await read_all(late, from_follower=True) == ids
            info = await late.node.queue_info(
                QueueInfoRequest("t", 0, timestamp_ms=0, from_follower=True), CONTEXT
            )
            assert (info.first_offset, info.end_offset, info.timestamp_offset) == (0, 20, 0)
            if not late.node.driver.host.node(GROUP).is_leader():
                with pytest.raises(StorageNotLeader):
                    await read_all(late)
        async with storage_node(tmp_path / "n3", 3, addresses) as restarted:
            await async_wait_until(
                lambda: restarted.replica.applied_index >= applied, 30, "restart"
            )
            assert await read_all(restarted, from_follower=True) == ids


async def test_compaction_by_wal_bytes_stops_at_the_truncate_floor(tmp_path: Path) -> None:
    async with storage_node(tmp_path, by_bytes=True) as running:
        await leader_of([running])
        await ticks(running, 100)
        ids = await append_batches(running, 3)
        received = await running.node.receive(ReceiveRequest("g", "t", 0, 4, 60_000), CONTEXT)
        handles = [m.handle for m in received.messages]
        await running.node.ack(AckRequest("g", "t", 0, handles), CONTEXT)
        first_append = running.replica.state.entry("t", 0, 0).log_index
        assert running.log_first_index < first_append
        # The WAL outgrows its budget many times over: compacted up to the oldest
        # referenced entry (the acked messages stay in the queue), never past it.
        deadline = time.monotonic() + 30
        while running.log_first_index != first_append:
            assert running.log_first_index < first_append
            assert time.monotonic() < deadline, "timed out waiting for compaction to the floor"
            await ticks(running, 50)
        assert await read_all(running) == ids
        await ticks(running, 200)
        assert running.log_first_index == first_append
    async with storage_node(tmp_path, by_bytes=True) as running:
        await leader_of([running])
        assert running.log_first_index == first_append
        assert await read_all(running) == ids
