"""The remoting clients connected to this broker, as their heartbeats describe them.

A client (one ``clientID``) belongs to producer and consumer groups; it is
known here while a connection it sent a heartbeat on stays open, and
leaves a group with UNREGISTER_CLIENT. Each broker knows only its own
clients.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.broker_api import ClientConnection
from protocol.remoting.bodies import Heartbeat


@dataclass(slots=True)
class RemotingClient:
    """One client: the connection it heartbeats on and its groups."""

    client_id: str
    connection: int
    last_heartbeat_ms: int
    producer_groups: set[str] = field(default_factory=set)
    consumer_groups: set[str] = field(default_factory=set)


class RemotingClients:
    """Clients by id (see the module docstring)."""

    def __init__(self) -> None:
        self._clients: dict[str, RemotingClient] = {}

    def heartbeat(self, connection: int, beat: Heartbeat, now_ms: int) -> RemotingClient:
        """Record a heartbeat: the client's groups are the ones it names now."""
        client = self._clients.get(beat.client_id)
        if client is None or client.connection != connection:
            client = RemotingClient(beat.client_id, connection, now_ms)
            self._clients[beat.client_id] = client
        client.last_heartbeat_ms = now_ms
        client.producer_groups = set(beat.producer_groups)
        client.consumer_groups = {consumer.group for consumer in beat.consumers}
        return client

    def unregister(
        self, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        """The client leaves the named groups; a client in no group is forgotten."""
        client = self._clients.get(client_id)
        if client is None:
            return
        if producer_group:
            client.producer_groups.discard(producer_group)
        if consumer_group:
            client.consumer_groups.discard(consumer_group)
        if not client.producer_groups and not client.consumer_groups:
            del self._clients[client_id]

    def connection_closed(self, connection: int) -> set[str]:
        """Forget every client whose heartbeats came on ``connection``; the consumer
        groups they were in."""
        gone = [c for c in self._clients.values() if c.connection == connection]
        for client in gone:
            del self._clients[client.client_id]
        return {group for client in gone for group in client.consumer_groups}

    def consumer_groups_of(self, client_id: str) -> set[str]:
        """The consumer groups ``client_id`` is in here (none if unknown)."""
        client = self._clients.get(client_id)
        return set(client.consumer_groups) if client is not None else set()

    def consumer_connections(self, group: str, *, but: str = "") -> list[int]:
        """The connections of ``group``'s consumers here (but client ``but``'s)."""
        return sorted(
            {
                c.connection
                for c in self._clients.values()
                if group in c.consumer_groups and c.client_id != but
            }
        )

    def consumers_of(self, group: str) -> list[str]:
        """Ids of the clients consuming in ``group``, sorted."""
        return sorted(c.client_id for c in self._clients.values() if group in c.consumer_groups)

    @property
    def producer_groups(self) -> list[str]:
        """Every producer group with a client here, sorted."""
        return sorted({group for c in self._clients.values() for group in c.producer_groups})

    def connections(self) -> list[ClientConnection]:
        """Every client: one entry per consumer group it consumes in, and one as a
        producer if it produces (the remoting protocol carries no client language or
        version in heartbeats)."""
        found: list[ClientConnection] = []
        for client in self._clients.values():
            found.extend(
                ClientConnection(client.client_id, group=group, protocol="remoting")
                for group in sorted(client.consumer_groups)
            )
            if client.producer_groups:
                found.append(ClientConnection(client.client_id, protocol="remoting"))
        return found

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._clients
