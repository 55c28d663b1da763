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

log = logging.getLogger("broker.remoting")

REFRESH_MS = 2_000


class ClusterBrokers:
    """The ``BrokerDirectory`` over the nameserver (see the module docstring)."""

    def __init__(
        self, metadata: ClusterMetadata, own_address: str, *, refresh_ms: int = REFRESH_MS
    ) -> None:
        self._metadata = metadata
        self.own_address = own_address
        self._refresh_ms = refresh_ms
        self._addresses: list[str] = []
        self._read_at = float("-inf")

    async def remoting_addresses(self) -> list[str]:
        """Live brokers' remoting addresses, this broker's included."""
        loop = asyncio.get_running_loop()
        if (loop.time() - self._read_at) * 1000 >= self._refresh_ms:
            try:
                status = await self._metadata.cluster_status()
            except BrokerError as error:
                log.warning("cluster status unavailable for a route: %s", error.message)
            else:
                self._addresses = [
                    broker.remoting_address
                    for broker in status.brokers
                    if broker.alive and broker.remoting_address
                ]
                self._read_at = loop.time()
        return sorted({self.own_address, *self._addresses})

    async def serving_addresses(self) -> list[str]:
        """Every live broker serves its share of the queues (``queue_owner``)."""
        return await self.remoting_addresses()
