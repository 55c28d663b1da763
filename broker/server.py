"""The broker role: the RocketMQ gRPC v2 endpoint over the cluster's nameserver and storage.

``serve`` (the shell contract of rip5/shell.py) connects the ports
(:class:`~broker.services.nameserver.ClusterMetadata` kept fresh by the
nameserver watch, :class:`~broker.services.storage.StorageStore` over the
storage nodes), serves clients with grpc.aio on ``listen``, heartbeats to
the nameserver with the producer groups whose clients hold a Telemetry
stream here, and calls ``ready(host:port)`` once it serves. It keeps no
state of its own: receipt handles are signed with the cluster ``secret``,
so any broker of the cluster can finish what another handed out.

On ``stopping`` it stops accepting calls, gives calls in flight a second,
and closes its connections.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from angelia_rpc import Peers, RpcConfig
from broker.config import BrokerConfig
from broker.grpc.server import GrpcEndpoint, Ports, build_service
from broker.services.clock import SystemClock
from broker.services.nameserver import ClusterMetadata, NameserverLink, run_heartbeats
from broker.services.storage import StorageStore

log = logging.getLogger("broker.server")


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
    peers = Peers(RpcConfig())
    link = NameserverLink(addresses(config.nameserver), peers)
    metadata = ClusterMetadata(link, cluster=config.cluster, auto_create=config.auto_create)
    store = StorageStore(metadata, peers, seeds=addresses(config.storage))
    clock = SystemClock()
    service = build_service(
        Ports(metadata, store, clock),
        receipt_secret=config.secret.encode(),
        endpoint=config.listen,
    )
    endpoint = GrpcEndpoint(service, config.listen)
    tasks: list[asyncio.Task[None]] = []
    try:
        port = await endpoint.start()
        host = config.listen.rpartition(":")[0]
        address = f"{host}:{port}"
        tasks.append(asyncio.create_task(metadata.run_watch(), name="broker-metadata-watch"))
        tasks.append(
            asyncio.create_task(
                run_heartbeats(
                    metadata,
                    broker_id=address,
                    address=address,
                    producer_groups=lambda: service.sessions.producer_groups,
                    interval_ms=config.heartbeat_interval_ms,
                ),
                name="broker-heartbeat",
            )
        )
        log.info(
            "serving",
            extra={
                "address": address,
                "nameserver": config.nameserver,
                "auto_create": config.auto_create,
            },
        )
        ready(address)
        await stopping.wait()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await endpoint.stop(1.0)
        await peers.close()
