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
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from angelia_rpc import TlsConfig
from angelia_rpc.transport.tls import server_context
from broker.config import BrokerConfig
from broker.grpc import convert
from broker.grpc.acl_guard import AclGuard
from broker.grpc.bad_requests import BadRequests, CheckedRegistration
from broker.grpc.drain import DrainGate
from broker.grpc.http2 import Http2GrpcServer
from broker.grpc.service import MessagingService
from broker.grpc.telemetry import TelemetrySessions
from broker.metrics import BrokerMetrics
from broker.processor import validation
from broker.processor.checkback import CheckPolicy
from broker.processor.consumer import ConsumerProcessor
from broker.processor.producer import ProducerProcessor
from broker.processor.pull import PullProcessor
from broker.processor.route import RouteProcessor
from broker.processor.transaction import AnyProducers, LocalProducers, TransactionProcessor
from broker.services.base import BrokerPeers, Clock, Coordination, MessageStore, MetadataService
from protocol.rocketmq.v2 import service_pb2_grpc

log = logging.getLogger("broker.grpc.server")

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


def client_tls(config: BrokerConfig) -> TlsConfig | None:
    """The client endpoint's TLS from ``--tls-cert``, ``--tls-key`` and
    ``--tls-client-ca`` (None: cleartext); ValueError if the first two are not given
    together, the third comes without them, or a file cannot be read."""
    if not config.tls_cert and not config.tls_key:
        if config.tls_client_ca:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not config.tls_cert or not config.tls_key:
        raise ValueError("--tls-cert and --tls-key go together: give both or neither")
    for flag, name in (
        ("--tls-cert", config.tls_cert),
        ("--tls-key", config.tls_key),
        ("--tls-client-ca", config.tls_client_ca),
    ):
        if name and not Path(name).is_file():
            raise ValueError(f"{flag} {name}: no such file")
    return TlsConfig(
        cert_file=config.tls_cert, key_file=config.tls_key, ca_file=config.tls_client_ca
    )


SERVERS = ("h2", "grpcio")
"""The gRPC servers an endpoint can run: ``broker.grpc.http2`` (the default: it writes
a streamed call's responses together) or grpc.aio."""


class GrpcEndpoint:
    """One MessagingService served on ``listen`` (host:port, port 0 = any) by ``server``
    (one of :data:`SERVERS`)."""

    def __init__(
        self,
        service: MessagingService,
        listen: str,
        server: str = "h2",
        tls: TlsConfig | None = None,
        acl: AclGuard | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        """``tls``: serve TLS (HTTP/2 over TLS, ALPN h2) with its certificate and key;
        with a ``ca_file``, every client must present a certificate it signs. ``acl``:
        every call is authenticated and checked by it (ACL 2.0; None: off).
        ``metrics``: time every call (``rocketmq_rpc_latency``)."""
        if server not in SERVERS:
            raise ValueError(f"unknown gRPC server {server!r}: one of {', '.join(SERVERS)}")
        self.service = service
        self.listen = listen
        self.kind = server
        self.tls = tls
        self.acl = acl
        self.metrics = metrics
        self.port: int | None = None
        self.bad_requests = BadRequests()  # undecodable requests answered, by method
        self.drain = DrainGate()  # refuses new calls once a drain starts
        self._server: grpc.aio.Server | Http2GrpcServer | None = None
        self._ssl_context: ssl.SSLContext | None = None  # h2's, reloaded in place
        # grpcio's next certificate, taken by its fetcher at the next handshake.
        self._next_certificate: Any = None
        self._background: list[asyncio.Task[None]] = []

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        if self.kind == "h2":
            h2_server = Http2GrpcServer(inbound_bytes_max=INBOUND_BYTES_MAX)
            service_pb2_grpc.add_MessagingServiceServicer_to_server(
                self.service,
                CheckedRegistration(
                    h2_server, self.bad_requests, self.acl, metrics=self.metrics, gate=self.drain
                ),
            )
            host, _, port = self.listen.rpartition(":")
            if self.tls:
                self._ssl_context = server_context(self.tls, alpn=["h2"])
                if self.tls.ca_file:
                    self._ssl_context.load_verify_locations(self.tls.ca_file)
                    self._ssl_context.verify_mode = ssl.CERT_REQUIRED
            self.port = await h2_server.start(
                host.strip("[]") or None, int(port), ssl=self._ssl_context
            )
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
        service_pb2_grpc.add_MessagingServiceServicer_to_server(
            self.service,
            CheckedRegistration(
                server, self.bad_requests, self.acl, metrics=self.metrics, gate=self.drain
            ),
        )
        if self.tls:
            tls = self.tls
            key_cert = await asyncio.to_thread(
                lambda: (Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes())
            )
            credentials = grpc.dynamic_ssl_server_credentials(
                self._certificate_configuration(key_cert),
                self._take_certificate,
                require_client_authentication=bool(tls.ca_file),
            )
            port = server.add_secure_port(self.listen, credentials)
        else:
            port = server.add_insecure_port(self.listen)
        if port == 0:
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        self._server = server
        return port

    def reload_tls(self) -> None:
        """Read the certificate and key files again (on SIGHUP): connections made from
        now on present them, open ones keep theirs. Files that do not load (unreadable,
        a key that does not match) are logged and the current certificate stays."""
        if self.tls is None:
            return
        try:
            server_context(self.tls)  # both files load and match, or this raises
            if self._ssl_context is not None:
                self._ssl_context.load_cert_chain(self.tls.cert_file, self.tls.key_file)
            else:
                key_cert = (
                    Path(self.tls.key_file).read_bytes(),
                    Path(self.tls.cert_file).read_bytes(),
                )
                self._next_certificate = self._certificate_configuration(key_cert)
        except (OSError, ssl.SSLError) as error:
            log.warning(
                "TLS certificate not reloaded, the current one stays",
                extra={"cert": self.tls.cert_file, "key": self.tls.key_file, "error": str(error)},
            )
            return
        log.info("TLS certificate reloaded", extra={"cert": self.tls.cert_file})

    def _certificate_configuration(self, key_cert: tuple[bytes, bytes]) -> Any:
        """grpcio's form of a key and certificate, with the client CA if there is one."""
        assert self.tls is not None
        ca = Path(self.tls.ca_file).read_bytes() if self.tls.ca_file else None
        return grpc.ssl_server_certificate_configuration([key_cert], root_certificates=ca)

    def _take_certificate(self) -> Any:
        """grpcio's fetcher (a handshake's thread): a reloaded certificate once, else None
        (keep the current one)."""
        taken, self._next_certificate = self._next_certificate, None
        return taken

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
