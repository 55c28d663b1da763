"""The broker role: the RocketMQ gRPC v2 endpoint over the cluster's nameserver and storage.

``serve`` (the shell contract of rip5/shell.py) connects the ports
(:class:`~broker.services.nameserver.ClusterMetadata` kept fresh by the
nameserver watch, :class:`~broker.services.storage.StorageStore` over the
storage nodes), serves clients with grpc.aio on ``listen``, heartbeats to
the nameserver with the producer groups whose clients hold a Telemetry
stream here, and calls ``ready(host:port)`` once it serves. It keeps no
state of its own: receipt handles are signed with the cluster ``secret``,
so any broker of the cluster can finish what another handed out.

It also serves the classic RocketMQ remoting protocol (4.x clients) on
``remoting_listen`` (``broker/remoting/``), over the same processors, and
reports that address in its heartbeats, so every broker's routes can list
every live broker.

It also serves the brokers' own Angelia API (``broker.*``) on
``peer_listen``; that address is its broker id in the nameserver, so a
broker owning the orphan check-back (through the nameserver lease) can have
it deliver a check to a producer connected here.

On ``stopping`` it stops accepting calls, gives calls in flight a second,
and closes its connections.

Drain (``broker.drain``, from ``rip5 admin broker drain``): it stops
heartbeating (the nameserver marks it down after its broker timeout, and
other brokers' routes leave it out), its own routes leave it out, every new
client call is refused with a retriable status (``broker/grpc/drain.py``),
the calls in flight (long polls) run to their end (at most
``drain_timeout_ms``), and then it stops as on ``stopping`` and ``serve``
returns.

Routes (``route_mode``): ``endpoint`` answers the address the client used
(brokers behind a load balancer); ``brokers`` spreads a topic's queues over
the live brokers' gRPC addresses from the nameserver.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from angelia_rpc import Peers, Server
from angelia_rpc.cluster_services import BrokerService
from angelia_rpc.metrics_export import exported, refresh_every
from broker import fault_injection
from broker.acl import AclCache, AclGuard
from broker.config import BrokerConfig
from broker.domain import HalfMessage
from broker.errors import BrokerError
from broker.grpc.drain import DrainGate
from broker.grpc.server import GrpcEndpoint, Ports, build_service, client_tls
from broker.metrics import BrokerMetrics
from broker.processor.checkback import CheckPolicy
from broker.processor.transaction import TransactionProcessor
from broker.remoting.brokers import ClusterBrokers
from broker.remoting.producers import RemotingProducers
from broker.remoting.server import RemotingServer
from broker.remoting.service import RemotingService
from broker.services.clock import SystemClock
from broker.services.nameserver import ClusterMetadata, NameserverLink, run_heartbeats
from broker.services.peers import AngeliaPeers, ClusterCoordination, PeerHandler
from broker.services.storage import StorageStore
from protocol import broker_api as br
from protocol import errors as codes
from protocol import nameserver_api as ns
from protocol.acl import AclTables, InvalidAcl, parse_credentials_line
from protocol.acl_wire import signed_by, tables_of
from protocol.broker_api import ClientConnection

log = logging.getLogger("broker.server")


ACL_FIRST_READ_S = 10.0
"""How long a starting broker with --acl tries to read the ACL tables before serving."""
ACL_RETRY_S = 0.2


class ConfigRefused(ValueError):
    """The configuration cannot describe a working broker (the message says why)."""


def addresses(text: str) -> list[str]:
    """``h1:p1,h2:p2`` -> the addresses, blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


async def serve(
    config: BrokerConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
) -> None:
    """Run one broker until ``stopping`` is set."""
    if not config.secret:
        raise ConfigRefused(
            "the broker needs the cluster secret that signs receipt handles: "
            "set RIP5_BROKER_SECRET (or --secret) to the same value on every broker"
        )
    rpc = config.rpc_config()
    peers = Peers(rpc)
    link = NameserverLink(addresses(config.nameserver), peers)
    metadata = ClusterMetadata(
        link,
        cluster=config.cluster,
        auto_create=config.auto_create,
        route_stale_max_ms=config.route_stale_max_ms,
        signer=inner_signer(config.acl_inner_user_file),
    )
    store = StorageStore(
        metadata,
        peers,
        seeds=addresses(config.storage),
    )
    clock = SystemClock()
    transactions: list[TransactionProcessor] = []
    drain = _Drain()
    peer_handler = PeerHandler(_LateTarget(transactions), drain)
    peer_server = Server([BrokerService.bind(peer_handler)], rpc)
    tasks: list[asyncio.Task[None]] = []
    registry = CollectorRegistry()
    endpoint: GrpcEndpoint | None = None
    remoting: RemotingServer | None = None
    remoting_address = ""
    try:
        peer_address = await peer_server.start(
            config.peer_listen or f"{config.listen.rpartition(':')[0]}:0"
        )
        remoting_producers = RemotingProducers()
        coordination = ClusterCoordination(link, metadata)
        service = build_service(
            Ports(
                metadata,
                fault_injection.wrap_store(store),  # itself unless a chaos test plants a bug
                clock,
                coordination=coordination,
                peers=AngeliaPeers(peers),
            ),
            receipt_secret=config.secret.encode(),
            endpoint=config.listen,
            broker_id=peer_address,
            check_policy=CheckPolicy(
                delay_ms=config.transaction_check_delay_ms,
                interval_ms=config.transaction_check_interval_ms,
                check_max=config.transaction_check_max,
            ),
            delivery_ahead_ms_max=config.delay_max_ms,
            more_producers=remoting_producers,
        )
        assert service.transactions is not None
        transactions.append(service.transactions)
        metrics = None
        if config.metrics_listen:
            metrics = BrokerMetrics(registry, config.cluster, node_id=peer_address)
            service.producer_processor.metrics = metrics
            service.consumer_processor.metrics = metrics
            service.transactions.metrics = metrics
            if service.pulls is not None:
                service.pulls.metrics = metrics
        acl = await _acl_guard(config, link, tasks)
        endpoint = GrpcEndpoint(
            service, config.listen, config.grpc_server, client_tls(config), acl=acl, metrics=metrics
        )
        port = await endpoint.start()
        if endpoint.tls is not None:  # SIGHUP: read the certificate and key again
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, endpoint.reload_tls)
        host = config.listen.rpartition(":")[0]
        address = f"{host}:{port}"
        remoting_service: RemotingService | None = None
        grpc_brokers = ClusterBrokers(metadata, own_address="", own_grpc_address=address)
        if config.route_mode == "brokers":
            service.route_brokers = grpc_brokers.grpc_addresses
        if config.remoting_listen:
            # Both addresses are known once the port is bound (the listen port may be 0).
            brokers = ClusterBrokers(metadata, own_address=config.remoting_listen)
            remoting_service = RemotingService(
                route=service.route_processor,
                producer=service.producer_processor,
                store=store,
                clock=clock,
                brokers=brokers,
                cluster=config.cluster,
                address=config.remoting_listen,
                transactions=service.transactions,
                producers=remoting_producers,
                pulls=service.pulls,
                coordination=coordination,
                acl=acl,
            )
            remoting = RemotingServer(remoting_service, config.remoting_listen)
            remoting_port = await remoting.start()
            remoting_address = f"{config.remoting_listen.rpartition(':')[0]}:{remoting_port}"
            remoting_service.address = brokers.own_address = remoting_address
            remoting_producers.store_address = remoting_address
        tasks.append(asyncio.create_task(metadata.run_watch(), name="broker-metadata-watch"))
        remoting_clients = remoting_service.clients if remoting_service else None

        def connections() -> list[ClientConnection]:
            grpc_clients = service.sessions.connections()
            return grpc_clients + (remoting_clients.connections() if remoting_clients else [])

        peer_handler.connections = connections  # rip5 dashboard lists them
        if metrics is not None:
            metrics.watch_connections(connections)
            tasks.append(asyncio.create_task(refresh_every(metrics.refresh), name="metrics"))
        heartbeats = asyncio.create_task(
            run_heartbeats(
                metadata,
                broker_id=peer_address,
                address=address,
                # Where check-backs can reach a producer: gRPC producers' groups and
                # the topics remoting producers sent half messages to.
                producer_groups=lambda: sorted(
                    {*service.sessions.producer_groups, *remoting_producers.topics}
                ),
                interval_ms=config.heartbeat_interval_ms,
                remoting_address=remoting_address,
            ),
            name="broker-heartbeat",
        )
        tasks.append(heartbeats)
        drain.attach(endpoint.drain, grpc_brokers, heartbeats)
        log.info(
            "serving",
            extra={
                "address": address,
                "remoting_address": remoting_address,
                "peer_address": peer_address,
                "nameserver": config.nameserver,
                "auto_create": config.auto_create,
            },
        )
        ready(address)
        with exported(registry, config.metrics_listen):
            await _first(stopping.wait(), drain.requested.wait())
            if drain.requested.is_set() and not stopping.is_set():
                idle = await endpoint.drain.wait_idle(config.drain_timeout_ms / 1000)
                log.info(
                    "drained: stopping",
                    extra={"idle": idle, "in_flight": endpoint.drain.in_flight},
                )
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if remoting is not None:
            await remoting.stop(1.0)
        if endpoint is not None:
            await endpoint.stop(1.0)
        await peer_server.stop()
        await peers.close()


def inner_signer(path: str) -> Callable[[], ns.SignedBy]:
    """What signs this broker's own nameserver writes: the user in ``path`` (one line
    NAME:SECRET), or nothing without a path; :class:`ConfigRefused` naming a bad file."""
    if not path:
        return ns.SignedBy
    try:
        user = parse_credentials_line(Path(path).read_text())
    except (OSError, InvalidAcl) as error:
        raise ConfigRefused(f"--acl-inner-user-file {path}: {error}") from None

    return lambda: signed_by(user.name, user.secret, int(time.time() * 1000))


async def _acl_guard(
    config: BrokerConfig, link: NameserverLink, tasks: list[asyncio.Task[None]]
) -> AclGuard | None:
    """With ``--acl``: the guard over a cache of the nameserver's ACL tables, read once
    now (a failure is logged: calls are refused as unavailable until a refresh works)
    and refreshed by a task added to ``tasks``."""
    if not config.acl:
        return None

    async def fetch() -> AclTables:
        response = await link.call(
            "ACL tables",
            lambda stub, timeout_ms: stub.acl_tables(ns.AclTablesRequest(), timeout_ms=timeout_ms),
        )
        return tables_of(response)

    cache = AclCache(fetch, config.acl_refresh_ms)
    # The nameserver may still be starting (rip5 dev starts every child at once): try
    # for a while before serving, then serve anyway (calls wait for the refresh task).
    deadline = asyncio.get_running_loop().time() + ACL_FIRST_READ_S
    while True:
        try:
            await cache.refresh()
            break
        except BrokerError as error:
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("ACL tables not read yet", extra={"error": error.message})
                break
        await asyncio.sleep(ACL_RETRY_S)
    tasks.append(asyncio.create_task(cache.run(), name="broker-acl-refresh"))
    return AclGuard(cache, skew_ms=config.acl_skew_ms)


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    pending = {asyncio.ensure_future(wait) for wait in waits}
    try:
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in pending:
            task.cancel()


class _Drain:
    """The ``DrainTarget`` of the peer service: starts this broker's drain (see the
    module docstring); ``requested`` is set once it has started."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self._gate: DrainGate | None = None
        self._brokers: ClusterBrokers | None = None
        self._heartbeats: asyncio.Task[None] | None = None

    def attach(
        self, gate: DrainGate, brokers: ClusterBrokers, heartbeats: asyncio.Task[None]
    ) -> None:
        """What a drain acts on, once the broker serves."""
        self._gate, self._brokers, self._heartbeats = gate, brokers, heartbeats

    def drain(self) -> br.DrainResponse:
        """Start the drain (once); where it stands."""
        if self._gate is None or self._brokers is None or self._heartbeats is None:
            raise BrokerError(codes.UNAVAILABLE, "the broker is still starting: drain it later")
        if not self.requested.is_set():
            log.info("draining: new calls refused, calls in flight finish")
            self._heartbeats.cancel()
            self._brokers.draining = True
            self._gate.start()
            self.requested.set()
        return br.DrainResponse(self._gate.in_flight, self._gate.refused)


class _LateTarget:
    """The transaction processor, once built (the peer server starts before it, since
    its address is the broker id the processor owns leases by)."""

    def __init__(self, processors: list[TransactionProcessor]) -> None:
        self._processors = processors

    def deliver_local(self, half: HalfMessage, transaction_id: str) -> bool:
        """Deliver through the processor; nothing is connected before it exists."""
        return bool(self._processors) and self._processors[0].deliver_local(half, transaction_id)
