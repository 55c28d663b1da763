"""Assembling the gRPC v2 endpoint from ports: processors, service, gRPC server.

The endpoint also runs the broker's background work: the transaction
check-back loop (which acts only while this broker holds the check lease).

Plaintext (both official clients default to it). The inbound message limit
is 130 MiB, like the proxy's, so an oversized body reaches validation and
gets MESSAGE_BODY_TOO_LARGE instead of a transport error.

This is not the broker role's ``serve``: that arrives with the
Angelia-backed ports (a broker must not claim to run without real storage).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import grpc

from broker.grpc import convert
from broker.grpc.http2 import Http2GrpcServer
from broker.grpc.service import MessagingService
from broker.grpc.telemetry import TelemetrySessions
from broker.processor import validation
from broker.processor.checkback import CheckPolicy
from broker.processor.consumer import ConsumerProcessor
from broker.processor.producer import ProducerProcessor
from broker.processor.pull import PullProcessor
from broker.processor.route import RouteProcessor
from broker.processor.transaction import AnyProducers, LocalProducers, TransactionProcessor
from broker.services.base import BrokerPeers, Clock, Coordination, MessageStore, MetadataService
from protocol.rocketmq.v2 import service_pb2_grpc

INBOUND_BYTES_MAX = 130 * 1024 * 1024


@dataclass(frozen=True)
class Ports:
    """Everything the broker needs from the cluster."""

    metadata: MetadataService
    store: MessageStore
    clock: Clock
    coordination: Coordination | None = None  # None: a lone broker (owns check-back)
    peers: BrokerPeers | None = None


def build_service(
    ports: Ports,
    *,
    receipt_secret: bytes,
    endpoint: str,
    broker_id: str = "",
    check_policy: CheckPolicy | None = None,
    delivery_ahead_ms_max: int = validation.DELIVERY_AHEAD_MS_MAX,
    more_producers: LocalProducers | None = None,
) -> MessagingService:
    """The v2 service over ``ports``; ``endpoint`` (host:port) is advertised in routes
    when a client does not say how it reached us. ``broker_id`` names this broker to
    its peers (lease owner, peer address); it defaults to ``endpoint``.
    ``more_producers``: producers connected through another protocol (remoting), also
    asked for transaction check-backs."""
    sessions = TelemetrySessions()
    return MessagingService(
        route=RouteProcessor(ports.metadata),
        producer=ProducerProcessor(
            ports.metadata, ports.store, ports.clock, delivery_ahead_ms_max=delivery_ahead_ms_max
        ),
        consumer=ConsumerProcessor(ports.metadata, ports.store, ports.clock, receipt_secret),
        clock=ports.clock,
        endpoint=convert.endpoints_from_address(endpoint),
        sessions=sessions,
        transactions=TransactionProcessor(
            ports.store,
            ports.clock,
            sessions if more_producers is None else AnyProducers(sessions, more_producers),
            owner=broker_id or endpoint,
            policy=check_policy,
            coordination=ports.coordination,
            peers=ports.peers,
        ),
        pulls=PullProcessor(ports.metadata, ports.store),
    )


SERVERS = ("h2", "grpcio")
"""The gRPC servers an endpoint can run: ``broker.grpc.http2`` (the default: it writes
a streamed call's responses together) or grpc.aio."""


class GrpcEndpoint:
    """One MessagingService served on ``listen`` (host:port, port 0 = any) by ``server``
    (one of :data:`SERVERS`)."""

    def __init__(self, service: MessagingService, listen: str, server: str = "h2") -> None:
        if server not in SERVERS:
            raise ValueError(f"unknown gRPC server {server!r}: one of {', '.join(SERVERS)}")
        self.service = service
        self.listen = listen
        self.kind = server
        self.port: int | None = None
        self._server: grpc.aio.Server | Http2GrpcServer | None = None
        self._background: list[asyncio.Task[None]] = []

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        if self.kind == "h2":
            h2_server = Http2GrpcServer(inbound_bytes_max=INBOUND_BYTES_MAX)
            service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, h2_server)
            host, _, port = self.listen.rpartition(":")
            self.port = await h2_server.start(host.strip("[]") or None, int(port))
            self._server = h2_server
        else:
            self.port = await self._start_grpcio()
        if self.service.transactions is not None:
            self._background.append(asyncio.create_task(self.service.transactions.run()))
        return self.port

    async def _start_grpcio(self) -> int:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", INBOUND_BYTES_MAX),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        port = server.add_insecure_port(self.listen)
        if port == 0:
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        self._server = server
        return port

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving and the background work (check-back); calls in flight get
        ``grace_s`` to finish."""
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._background.clear()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
