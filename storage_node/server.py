"""The storage role: one node hosting raft groups whose logs are queue commit logs.

``serve`` (the shell contract of rip5/shell.py) opens the node's WAL in
``<data dir>/wal``, hosts a replica of every group ``1 .. groups`` with every
node of ``peers`` as a member (static placement: the nameserver assignment
comes later), and serves on ``listen`` both the raft streams of its peers and
:class:`storage_node.service.StorageService`. It calls ``ready(listen)`` once
it serves, and on ``stopping`` stops the server, then the driver (which
closes the WAL).

``flush``: only ``sync`` is implemented (every append is fsynced on a
majority before it is acknowledged); ``async`` is refused at start.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from angelia_rpc import RpcConfig, Server
from angelia_rpc.cluster_services import StorageService
from raft.angelia_transport import AngeliaTransport
from raft.driver import Driver, DriverOptions
from raft.logstore import LogStore
from storage_node.config import StorageConfig, parse_peers
from storage_node.service import (
    FIRST_GROUP_ID,
    KEEP_ENTRIES,
    SNAPSHOT_ENTRIES,
    GroupReplica,
    StorageNode,
)
from storage_node.store.segment_files import WalMessageStore

_log = logging.getLogger(__name__)


def cluster_peers(config: StorageConfig) -> dict[int, str]:
    """Node id -> address of every node; raises ValueError when ``config`` contradicts itself."""
    if not config.peers:
        return {config.node_id: config.listen}
    peers = parse_peers(config.peers)
    mine = peers.get(config.node_id)
    if mine is None:
        raise ValueError(f"node id {config.node_id} is not in peers {config.peers!r}")
    if mine != config.listen:
        raise ValueError(
            f"peers gives node {config.node_id} the address {mine}, but listen is {config.listen}"
        )
    return peers


async def serve(
    config: StorageConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
) -> None:
    """Run one storage node until ``stopping`` is set."""
    if config.flush != "sync":
        raise ValueError(f"flush={config.flush} is not implemented yet; use flush=sync")
    peers = cluster_peers(config)
    store = LogStore.open(data_dir / "wal")
    transport = AngeliaTransport(
        config.node_id, {n: a for n, a in peers.items() if n != config.node_id}
    )
    options = DriverOptions(snapshot_entries=SNAPSHOT_ENTRIES, keep_entries=KEEP_ENTRIES)
    driver = Driver(config.node_id, store, transport, options)
    bodies = WalMessageStore(store)
    replicas: dict[int, GroupReplica] = {}
    members = sorted(peers)
    for group_id in range(FIRST_GROUP_ID, FIRST_GROUP_ID + config.groups):
        replicas[group_id] = GroupReplica(group_id, bodies)
        driver.add_group(group_id, members, replicas[group_id])
    node = StorageNode(driver, store, replicas, config.groups, peers)
    server = Server([transport.binding(), StorageService.bind(node)], RpcConfig())
    try:
        address = await server.start(config.listen)
        await driver.start()
        timers = asyncio.create_task(node.run_timers(), name="storage-timers")
        indexer = asyncio.create_task(node.run_segment_indexer(), name="segment-indexer")
        _log.info(
            "serving",
            extra={"address": address, "groups": config.groups, "nodes": len(peers)},
        )
        ready(address)
        await stopping.wait()
        for task in (timers, indexer):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await server.stop()
        await driver.stop()
