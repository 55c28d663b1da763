"""The request and response types of the brokers' own Angelia API (``broker.*``).

Brokers call each other for what only a particular broker can do: reach a
client whose stream is open on it. Today that is the check-back of an
orphaned transaction, sent to a producer of the transaction's group. Operators'
tools ask a broker which clients are connected to it (``rip5 dashboard``) and
drain it (``rip5 admin broker drain``).

Evolution: fields are only added at the end of a type.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.storage_api import Message


@dataclass(frozen=True, slots=True)
class OrphanCheckRequest:
    """Send a RecoverOrphanedTransactionCommand for the half message ``message``
    (stored in queue ``(message.topic, message.queue_id)`` at ``store_timestamp_ms``)
    to one producer of ``producer_group`` connected to the called broker."""

    producer_group: str
    transaction_id: str
    message: Message
    store_timestamp_ms: int
    check_count: int = 0


@dataclass(frozen=True, slots=True)
class OrphanCheckResponse:
    """Whether a producer of the group was connected and was sent the check."""

    delivered: bool


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """A client connected to a broker, as the connection metrics count it and the
    operators' views list it: a consumer has a ``group``, a producer none. Empty
    strings stand for what the client did not say."""

    client_id: str
    group: str = ""
    language: str = ""
    version: str = ""
    consume_mode: str = ""  # push, simple, pull (gRPC); empty for a remoting consumer
    protocol: str = "grpc"  # or "remoting"


@dataclass(frozen=True, slots=True)
class ClientsRequest:
    """List the clients connected to the called broker (``group`` not empty: only that
    consumer group's)."""

    group: str = ""


@dataclass(frozen=True, slots=True)
class ClientsResponse:
    """The clients connected to the called broker."""

    clients: list[ClientConnection]


@dataclass(frozen=True, slots=True)
class DrainRequest:
    """Drain the called broker: refuse new client calls, finish those in flight
    (long polls included), stop heartbeating, then exit. Asking again is harmless."""


@dataclass(frozen=True, slots=True)
class DrainResponse:
    """Where the drain stands: ``in_flight`` client calls still running, ``refused``
    calls answered SHUTTING_DOWN since it started."""

    in_flight: int
    refused: int
