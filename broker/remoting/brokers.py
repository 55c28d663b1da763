"""Where the cluster's live brokers serve remoting clients, from the nameserver.

Every broker reports its remoting address in its heartbeat; a route a
4.x client asks for lists the live brokers that have one. The cluster's
status is read at most once per ``refresh_ms`` (routes are asked for often,
brokers come and go rarely); this broker is always listed, and if the
nameserver cannot be reached the last list read is used.

SHELL.
"""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError
from broker.services.nameserver import ClusterMetadata
from protocol.nameserver_api import BrokerInfo

log = logging.getLogger("broker.remoting")

REFRESH_MS = 2_000


class ClusterBrokers:
    """The ``BrokerDirectory`` over the nameserver (see the module docstring).

    It also lists the live brokers' gRPC addresses, for v2 routes that spread
    clients over the brokers (``route_mode = brokers``)."""

    def __init__(
        self,
        metadata: ClusterMetadata,
        own_address: str,
        *,
        refresh_ms: int = REFRESH_MS,
        own_grpc_address: str = "",
    ) -> None:
        self._metadata = metadata
        self.own_address = own_address
        self.own_grpc_address = own_grpc_address
        self.draining = False  # this broker is draining: its routes leave it out
        self._refresh_ms = refresh_ms
        self._brokers: list[BrokerInfo] = []
        self._read_at = float("-inf")

    async def _live(self) -> list[BrokerInfo]:
        """The live brokers, as last read (at most ``refresh_ms`` ago when readable)."""
        loop = asyncio.get_running_loop()
        if (loop.time() - self._read_at) * 1000 >= self._refresh_ms:
            try:
                status = await self._metadata.cluster_status()
            except BrokerError as error:
                log.warning("cluster status unavailable for a route: %s", error.message)
            else:
                self._brokers = [broker for broker in status.brokers if broker.alive]
                self._read_at = loop.time()
        return self._brokers

    async def remoting_addresses(self) -> list[str]:
        """Live brokers' remoting addresses, this broker's included."""
        listed = [b.remoting_address for b in await self._live() if b.remoting_address]
        return sorted({self.own_address, *listed})

    async def serving_addresses(self) -> list[str]:
        """Every live broker serves its share of the queues (``queue_owner``)."""
        return await self.remoting_addresses()

    async def grpc_addresses(self) -> list[str]:
        """Live brokers' gRPC addresses, sorted: this broker's included unless it is
        draining (then left out, unless no other broker is known)."""
        listed = {b.address for b in await self._live() if b.address}
        if self.draining:
            others = sorted(listed - {self.own_grpc_address})
            return others or [self.own_grpc_address]
        return sorted({self.own_grpc_address, *listed})
