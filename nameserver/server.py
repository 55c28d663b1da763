"""The nameserver process: one replica of the nameserver's raft group, serving
:class:`nameserver.service.NameserverService` and the raft peer streams on one
Angelia address.

One node (``--peers`` empty) or several (``--peers 1=h1:p1,2=h2:p2,3=h3:p3``
naming every replica, this one included, and ``--node-id``). The raft WAL
lives in ``<data dir>/raft``; the metadata state is rebuilt from it (snapshot
plus committed entries) on start.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from angelia_rpc import Server
from angelia_rpc.cluster_services import ControlService, NameserverService
from angelia_rpc.metrics_export import exported, refresh_every
from nameserver.config import NameserverConfig, parse_peers
from nameserver.controller import REPLICAS_MAX
from nameserver.ensemble import ControlImpl, run_controller_duties
from nameserver.leader_duties import run_leader_duties
from nameserver.metrics import NameserverMetrics
from nameserver.service import NameserverImpl
from nameserver.service_base import GROUP_ID, MetadataMachine
from protocol.acl import InvalidAcl, User, UserType, parse_credentials_line
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from raft.wal.logstore import LogStore

log = logging.getLogger("nameserver.server")

SNAPSHOT_ENTRIES = 10_000
KEEP_ENTRIES = 2_000


class ConfigRefused(ValueError):
    """The configuration cannot describe a working nameserver (the message says why)."""


def members(config: NameserverConfig) -> dict[int, str]:
    """Node id -> address of every replica (this one is ``config.node_id``)."""
    if not config.peers:
        return {config.node_id: config.listen}
    peers = parse_peers(config.peers)
    if config.node_id not in peers:
        raise ConfigRefused(
            f"--node-id {config.node_id} is not one of --peers ({', '.join(map(str, peers))})"
        )
    return peers


def super_user_of(path: str) -> User | None:
    """The super user in ``path`` (one line ``NAME:SECRET``), None without a path;
    :class:`ConfigRefused` if the file is unreadable or malformed."""
    if not path:
        return None
    try:
        return parse_credentials_line(Path(path).read_text(), UserType.SUPER)
    except (OSError, InvalidAcl) as error:
        raise ConfigRefused(f"--acl-super-user-file {path}: {error}") from None


async def serve(
    config: NameserverConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
) -> None:
    """Run one nameserver replica until ``stopping`` is set."""
    addresses = members(config)
    super_user = super_user_of(config.acl_super_user_file)
    if config.replication == "controller" and config.replication_factor > REPLICAS_MAX:
        raise ConfigRefused(
            f"--replication controller holds at most {REPLICAS_MAX} replicas per group "
            f"(--replication-factor is {config.replication_factor})"
        )
    store = LogStore.open(data_dir / "raft")
    others = {n: a for n, a in addresses.items() if n != config.node_id}
    rpc = config.rpc_config()
    transport = AngeliaTransport(config.node_id, others, config=rpc)
    options = DriverOptions(
        tick_ms=config.tick_ms,
        snapshot_entries=SNAPSHOT_ENTRIES,
        keep_entries=KEEP_ENTRIES,
    )
    driver = Driver(config.node_id, store, transport, options)
    machine = MetadataMachine()
    impl = NameserverImpl(driver, machine, addresses)

    def learn(recorded: dict[int, str]) -> None:
        # Members added after bootstrap (their addresses are in the group's state).
        for node_id, address in recorded.items():
            impl.addresses[node_id] = address
            if node_id != config.node_id:
                transport.addresses[node_id] = address

    machine.on_addresses = learn
    # Joining: no membership of its own; the leader's snapshot brings it (and the peers).
    driver.add_group(GROUP_ID, [] if config.join else sorted(addresses), machine)
    control = ControlImpl(impl)
    services = [transport.binding(), NameserverService.bind(impl), ControlService.bind(control)]
    server = Server(services, rpc)
    endpoint = await server.start(config.listen)
    await driver.start()
    if len(addresses) == 1 and not config.join:
        driver.campaign(GROUP_ID)  # alone: no reason to wait for an election timeout
    duties = asyncio.create_task(
        run_leader_duties(
            impl,
            cluster=config.cluster,
            group_count=config.groups,
            replication_factor=config.replication_factor,
            expire_interval_ms=config.expire_interval_ms,
            storage_node_timeout_ms=config.storage_node_timeout_ms,
            broker_timeout_ms=config.broker_timeout_ms,
            evacuate_after_ms=config.evacuate_after_ms,
            moves_max=config.moves_max,
            super_user=super_user,
            placement=config.placement,
        ),
        name="nameserver-leader-duties",
    )
    registry = CollectorRegistry()
    refresh: asyncio.Task[None] | None = None
    if config.metrics_listen:
        labels = {
            "cluster": config.cluster,
            "node_type": "nameserver",
            "node_id": str(config.node_id),
        }
        metrics = NameserverMetrics(registry, driver, GROUP_ID, lambda: machine.state, labels)
        refresh = asyncio.create_task(refresh_every(metrics.refresh), name="metrics")
    if config.replication == "controller" and config.cluster:
        controlling = asyncio.create_task(
            run_controller_duties(
                control,
                config.cluster,
                grace_ms=rpc.reconnect_wait_max_ms,
                dead_after_ms=config.controller_dead_after_ms,
            ),
            name="nameserver-controller",
        )
    else:
        controlling = None
    log.info("serving", extra={"endpoint": endpoint, "members": len(addresses)})
    ready(endpoint)
    try:
        with exported(registry, config.metrics_listen):
            await stopping.wait()
    finally:
        for task in (duties, controlling, refresh):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await server.stop()
        await driver.stop()
