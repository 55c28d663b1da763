"""Brokers coordinating through the nameserver and calling each other over Angelia.

:class:`ClusterCoordination` is the ``Coordination`` port: leases are the
nameserver's (``acquire_lease`` takes a free or expired lease or extends our
own; LEASE_HELD means another broker holds it), and the brokers that serve a
producer group are the live brokers whose heartbeats list it (their
``broker_id`` is the address where their peer service listens).

:class:`AngeliaPeers` is the ``BrokerPeers`` port: it calls another broker's
``broker.*`` service (``angelia_rpc.cluster_services.BrokerService``);
:class:`PeerHandler` serves that service on this broker. An unreachable
or failing peer answers "not delivered", so the caller tries the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from angelia_rpc import AngeliaError, CallContext, Peers
from angelia_rpc.cluster_services import BrokerService, NameserverService
from broker.domain import HalfMessage, QueueRef
from broker.errors import BrokerError
from broker.services import cluster_convert as convert
from broker.services.nameserver import ClusterMetadata, NameserverLink
from protocol import broker_api as br
from protocol import errors as codes
from protocol import nameserver_api as ns

log = logging.getLogger("broker.peers")

PEER_CALL_TIMEOUT_MS = 2_000


class ClusterCoordination:
    """Leases and producer registrations through the nameserver (see the module)."""

    def __init__(self, link: NameserverLink, metadata: ClusterMetadata) -> None:
        self._link = link
        self._metadata = metadata

    async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend the lease; False while another broker holds it."""
        request = ns.LeaseRequest(name, owner, ttl_ms)

        async def acquire(stub: NameserverService, timeout_ms: int) -> bool:
            # LEASE_HELD is retriable (the lease frees when it expires) but here it
            # is the answer: the link must not wait it out.
            try:
                await stub.acquire_lease(request, timeout_ms=timeout_ms)
            except AngeliaError as error:
                if error.code is codes.LEASE_HELD:
                    return False
                raise
            return True

        return await self._link.call(f"lease {name!r}", acquire)

    async def release_lease(self, name: str, owner: str) -> None:
        """Give the lease up (nothing happens if we no longer hold it)."""
        request = ns.LeaseRequest(name, owner)
        try:
            await self._link.call(
                f"release lease {name!r}",
                lambda stub, timeout_ms: stub.release_lease(request, timeout_ms=timeout_ms),
            )
        except BrokerError as error:
            if error.code is not codes.LEASE_NOT_HELD:
                raise

    async def brokers_with_producers(self, producer_group: str) -> list[str]:
        """Peer addresses (broker ids) of live brokers reporting the producer group."""
        status = await self._metadata.cluster_status()
        return sorted(
            broker.broker_id
            for broker in status.brokers
            if broker.alive and producer_group in broker.producer_groups
        )


class AngeliaPeers:
    """The ``BrokerPeers`` port over Angelia (see the module docstring)."""

    def __init__(self, peers: Peers, *, timeout_ms: int = PEER_CALL_TIMEOUT_MS) -> None:
        self._peers = peers
        self._timeout_ms = timeout_ms

    async def deliver_orphan_check(
        self, broker: str, half: HalfMessage, transaction_id: str
    ) -> bool:
        """Ask ``broker`` to check the orphan with one of its producers; False if it
        has none or cannot be reached."""
        request = br.OrphanCheckRequest(
            half.producer_group,
            transaction_id,
            convert.message_to_wire(half.message, half.queue),
            half.store_timestamp_ms,
            half.check_count,
        )
        try:
            response = await self._peers.stub(BrokerService, broker).deliver_orphan_check(
                request, timeout_ms=self._timeout_ms
            )
        except AngeliaError as error:
            log.warning("peer broker %s did not take a check-back: %s", broker, error)
            return False
        return response.delivered


class LocalCheckTarget(Protocol):
    """Where a peer's check lands: this broker's producers (the transaction processor)."""

    def deliver_local(self, half: HalfMessage, transaction_id: str) -> bool:
        """Send the check to a producer connected here; whether one was."""
        ...


class DrainTarget(Protocol):
    """What ``broker.drain`` starts: this broker's drain (``broker.server``)."""

    def drain(self) -> br.DrainResponse:
        """Start draining (once; again: no effect) and say where it stands."""
        ...


class PeerHandler:
    """Serves ``broker.*`` for the other brokers."""

    def __init__(self, target: LocalCheckTarget, drain: DrainTarget | None = None) -> None:
        self._target = target
        self._drain = drain
        # The clients connected here (set by the broker role once its endpoints exist).
        self.connections: Callable[[], Sequence[br.ClientConnection]] = tuple

    async def clients(self, request: br.ClientsRequest, context: CallContext) -> br.ClientsResponse:
        """The clients connected to this broker (of ``request.group``, if named)."""
        found = [c for c in self.connections() if not request.group or c.group == request.group]
        return br.ClientsResponse(found)

    async def deliver_orphan_check(
        self, request: br.OrphanCheckRequest, context: CallContext
    ) -> br.OrphanCheckResponse:
        """Send the check to a producer of the group connected here."""
        message = convert.message_from_wire(request.message)
        half = HalfMessage(
            message,
            QueueRef(request.message.topic, request.message.queue_id),
            request.store_timestamp_ms,
            request.check_count,
        )
        return br.OrphanCheckResponse(self._target.deliver_local(half, request.transaction_id))

    async def drain(self, request: br.DrainRequest, context: CallContext) -> br.DrainResponse:
        """Start draining this broker (see ``broker_api.DrainRequest``)."""
        if self._drain is None:
            raise BrokerError(codes.UNSUPPORTED, "this broker cannot be drained")
        return self._drain.drain()
