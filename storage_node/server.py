"""The storage role: one node hosting raft groups whose logs are queue commit logs.

``serve`` (the shell contract of rip5/shell.py) opens the node's WAL in
``<data dir>/wal``, serves on ``listen`` both the raft streams of its peers
and :class:`storage_node.service.StorageService`, calls ``ready(listen)``
once it serves, and on ``stopping`` stops the server, then the driver (which
closes the WAL).

Which groups this node hosts (issue 5, "placement"):

- With ``--nameserver`` the node first learns its cluster's group count there
  (:func:`storage_node.registration.join_cluster`; a disagreeing ``--groups``
  is refused), then heartbeats and reports its groups' leaders.
- Placement by the nameserver (``--nameserver`` without ``--peers``): the node
  starts with no groups; every heartbeat answers the groups assigned to it,
  and :class:`storage_node.local_groups.LocalGroups` starts the missing local replicas (idempotent;
  peer addresses from the nameserver's node list), stops and deletes the
  ones moved away, and, on the groups this node leads, carries out replica
  moves as raft membership changes (:meth:`LocalGroups.run_memberships`; the
  protocol is in docs/storage-node.md, "Replica moves").
- Static placement (``--peers`` given): every node replicates every group
  with every node of ``--peers`` as a member. Static ``--peers`` WINS over the
  nameserver: the node ignores the assignments in heartbeat answers (it
  still registers, reports leaders and follows leader transfer requests).
- Neither: this node alone hosts every group.

Leader transfers asked by the nameserver (leader balancing) arrive in
heartbeat answers; a transfer of a group this node no longer leads is
dropped (the nameserver plans again from fresh leader reports).

A failed disk (a WAL write or fdatasync error) does not end the process:
the node refuses requests with NOT_LEADER naming the cause, stops heartbeating, and once
the disk takes writes again reopens its WAL and serves anew on the same
address (storage_node/disk_failure.py has the contract).

``flush``: only ``sync`` is implemented (every append is fsynced on a
majority before it is acknowledged); ``async`` is refused at start.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from angelia_rpc import Peers, Server
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.metrics_export import exported, refresh_every
from angelia_rpc.nameserver_client import NameserverClient, parse_addresses
from protocol import nameserver_api as api
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from storage_node import data_loss, disk_failure, fault_injection, housekeeping, retention
from storage_node.config import GROUPS_DEFAULT, StorageConfig, parse_peers
from storage_node.controlled_node import ControlledNode
from storage_node.controller_follower import ControllerFollower
from storage_node.local_groups import LocalGroups
from storage_node.metrics import StorageMetrics
from storage_node.registration import CALL_TIMEOUT_MS, Registration, join_cluster
from storage_node.service import (
    KEEP_ENTRIES,
    SNAPSHOT_ENTRIES,
    StorageNode,
)
from storage_node.store.segment_files import WalBodyStore
from storage_node.tier_plan import UploadPolicy
from storage_node.tier_reads import TierReader
from storage_node.tier_store import Tier
from storage_node.tier_uploader import Uploader

_log = logging.getLogger(__name__)


def _ready_once(_address: str) -> None:
    """``ready`` after the first serving pass: the shell was told already."""


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
    client = (
        NameserverClient(parse_addresses(config.nameserver), config.rpc_config())
        if config.nameserver
        else None
    )
    try:
        group_count = config.groups or GROUPS_DEFAULT
        if client is not None:
            cluster = await join_cluster(client, config, stopping)
            if cluster is None:
                return  # asked to stop before the nameserver answered
            group_count = cluster.group_count
            _log.info("joined cluster", extra={"cluster": cluster.name, "groups": group_count})
        served = await _serve_groups(config, data_dir, stopping, ready, peers, client, group_count)
        while served is not None:  # the disk failed and takes writes again: serve anew
            config = dataclasses.replace(config, listen=served)
            served = await _serve_groups(
                config, data_dir, stopping, _ready_once, peers, client, group_count
            )
    finally:
        if client is not None:
            await client.close()


TIER_ROUND_MS = 200
"""How often the uploader looks for pending uploads (the batch limits decide when one goes)."""


async def _open_tier(config: StorageConfig) -> Tier | None:
    """The tier of ``--tier-url`` (None without one); an unusable URL stops the node."""
    if not config.tier_url:
        return None
    tier = await asyncio.to_thread(Tier, config.tier_url)
    _log.info("tier on", extra={"tier": config.tier_url})
    return tier


def _topic_lister(client: NameserverClient, cluster: str) -> housekeeping.TopicLister:
    """The cluster's topics and their limits, read from the nameserver leader.

    The last list is kept with its revision: while no topic changed after it, the
    nameserver answers "unchanged" instead of listing every topic again (at a
    million queues, a list of 125,000 topics each round). The answer is
    linearizable either way, so the kept list is as current as a fresh one.
    """
    known: tuple[int, dict[str, retention.TopicLimits]] = (0, {})

    async def listed() -> dict[str, retention.TopicLimits]:
        nonlocal known
        request = api.ListRequest(cluster, unchanged_since=known[0])
        response = await client.call(lambda ns: ns.list_topics(request, timeout_ms=CALL_TIMEOUT_MS))
        if response.unchanged:
            known = (response.revision, known[1])
            return known[1]
        limits = {
            topic.name: retention.TopicLimits(
                topic.retention_ms,
                topic.retention_bytes,
                topic.local_retention_ms,
                topic.local_retention_bytes,
            )
            for topic in response.topics
        }
        known = (response.revision, limits)
        return limits

    return listed


async def _serve_groups(
    config: StorageConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
    peers: dict[int, str],
    client: NameserverClient | None,
    group_count: int,
) -> str | None:
    """Serve until ``stopping`` is set (None), or until the disk failed and takes
    writes again (the address served, to serve anew on): storage_node/disk_failure.py."""
    static = bool(config.peers) or client is None
    store, loss = data_loss.open_wal(data_dir, config.wal_segment_bytes)
    transport = AngeliaTransport(
        config.node_id,
        {n: a for n, a in peers.items() if n != config.node_id},
        config=config.rpc_config(),
    )
    options = DriverOptions(
        snapshot_entries=SNAPSHOT_ENTRIES,
        keep_entries=KEEP_ENTRIES,
        wal_retain_bytes=config.wal_retain_mb << 20,
    )
    driver = Driver(config.node_id, store, transport, options)
    injection = fault_injection.from_environment()  # None outside the chaos suite
    if injection is not None:
        store.io_hook = injection.wal_io
    node = StorageNode(
        driver, store, {}, group_count, peers, injection.wall_ms if injection else None
    )
    node.wal_set_aside = "" if loss is None else loss.cause
    callers = Peers(config.rpc_config())
    groups = LocalGroups(
        node, transport, client, config.cluster, WalBodyStore(store), callers, loss, data_dir
    )
    controlled = config.replication == "controller"
    if controlled:
        if client is None or config.peers:
            raise ValueError("--replication controller needs --nameserver (the controller)")
        groups.node_class = ControlledNode
        groups.min_in_sync = config.min_in_sync
    if static:
        groups.start_all(sorted(peers))
    server = Server([transport.binding(), StorageService.bind(node)], config.rpc_config())
    tasks: list[asyncio.Task[None]] = []
    try:
        address = await server.start(config.listen)
        await driver.start()
        if injection is not None:
            tasks.append(asyncio.create_task(injection.run(), name="fault-injection"))
        tasks.append(asyncio.create_task(housekeeping.run_timers(node), name="storage-timers"))
        tasks.append(
            asyncio.create_task(housekeeping.run_segment_indexer(node), name="segment-indexer")
        )
        tasks.append(
            asyncio.create_task(housekeeping.run_floor_keeper(node), name="truncate-floors")
        )
        tier = await _open_tier(config)
        if tier is not None:
            node.tier_reader = TierReader(tier)
            uploader = Uploader(
                node,
                tier,
                UploadPolicy(
                    batch_messages_min=config.tier_batch_messages,
                    batch_wait_ms=config.tier_batch_wait_ms,
                ),
            )
            node.tier_status = uploader.queue_status
            tasks.append(asyncio.create_task(uploader.run(TIER_ROUND_MS), name="tier-uploads"))
        registration_task: asyncio.Task[None] | None = None
        if client is not None:

            async def on_heartbeat(response: api.StorageHeartbeatResponse) -> None:
                if not static:
                    await groups.reconcile(response.groups)
                groups.transfer_leaders(response.leader_transfers)

            tasks.append(
                asyncio.create_task(
                    housekeeping.run_retention(
                        node,
                        _topic_lister(client, config.cluster),
                        config.retention_check_ms,
                        tier,
                    ),
                    name="retention",
                )
            )
            told = config.advertise or address  # what brokers and peers dial
            registration = Registration(client, node, config, told, data_dir, on_heartbeat)
            registration_task = asyncio.create_task(registration.run(), name="storage-registration")
            tasks.append(registration_task)
            if controlled:
                follower = ControllerFollower(node, client)
                tasks.append(asyncio.create_task(follower.run(), name="controller-follower"))
            elif not static:
                tasks.append(asyncio.create_task(groups.run_memberships(), name="memberships"))
        _log.info(
            "serving",
            extra={
                "address": address,
                "groups": group_count,
                "placement": "static" if static else "nameserver",
                "nodes": len(peers),
            },
        )
        registry = CollectorRegistry()
        if config.metrics_listen:
            labels = {
                "cluster": config.cluster,
                "node_type": "storage",
                "node_id": str(config.node_id),
            }
            metrics = StorageMetrics(registry, node, labels)
            tasks.append(asyncio.create_task(refresh_every(metrics.refresh), name="metrics"))
        ready(address)
        with exported(registry, config.metrics_listen):
            cause = await disk_failure.failure_or_stop(driver, stopping)
            if cause is None:
                return None
            node.wal_failure = str(cause)
            _log.error(
                "the WAL failed; this node serves no group (requests answer NOT_LEADER, its "
                "groups elect leaders elsewhere) and stops heartbeating until the disk takes "
                "writes again: %s",
                cause,
            )
            if registration_task is not None:
                registration_task.cancel()  # the nameserver reports this node down
            if not await disk_failure.until_disk_takes_writes(
                data_dir / "wal", store.io_hook, stopping
            ):
                return None
            _log.warning("the disk takes writes again: this node reopens its WAL and serves again")
            return address
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await groups.close()
        await callers.close()
        await server.stop()
        await driver.stop()
