"""Angelia configuration: transport and codec are chosen per cluster, here.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from angelia_rpc.errors import LocalUsageError
from angelia_rpc.framing import FRAME_BYTES_MIN
from protocol import errors

TRANSPORT_NAMES = ("tcp", "grpc", "http2", "memory")
CODEC_NAMES = ("msgpack", "avro", "json")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS for a transport: this end's certificate and the CA that signs its peers'.

    A server presents ``cert_file``/``key_file``; a client verifies the server
    against ``ca_file`` and the name ``server_hostname``. ``mutual``: the client
    presents ``cert_file``/``key_file`` too and the server refuses a client whose
    certificate ``ca_file`` does not sign (TLS between the roles of a cluster).
    """

    cert_file: str
    key_file: str
    ca_file: str
    server_hostname: str = "localhost"
    mutual: bool = False


RECONNECT_JITTER_MAX = 0.5
"""A reconnect backoff is stretched by a random fraction up to this (clients that
lost one server together do not reconnect together)."""


@dataclass(frozen=True, slots=True)
class RpcConfig:
    """How the processes of one cluster talk; every peer must agree on transport and codec.

    ``frame_bytes_max`` bounds one frame (request, response or stream message
    with its envelope). ``call_timeout_ms`` is the deadline of a unary call
    that names none. ``in_flight_max`` bounds the calls a client has open on
    one connection (more wait for a slot within their deadline: backpressure)
    and the calls a server runs for one connection (it stops reading until one
    finishes). A lost connection is re-established by the next call, after a
    backoff that doubles from ``reconnect_backoff_min_ms`` to
    ``reconnect_backoff_max_ms``, each wait stretched by up to
    ``RECONNECT_JITTER_MAX`` (:attr:`reconnect_wait_max_ms` is the longest). ``tls``
    is ignored by the in-process memory transport.
    """

    transport: str = "tcp"
    codec: str = "msgpack"
    tls: TlsConfig | None = None
    frame_bytes_max: int = 16 * 1024 * 1024
    call_timeout_ms: int = 5_000
    in_flight_max: int = 1024
    reconnect_backoff_min_ms: int = 10
    reconnect_backoff_max_ms: int = 2_000

    @property
    def reconnect_wait_max_ms(self) -> int:
        """The longest a client waits between two connect attempts to a peer that came
        back: how long after a server starts its clients may still be reconnecting."""
        return int(self.reconnect_backoff_max_ms * (1 + RECONNECT_JITTER_MAX))

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORT_NAMES:
            raise _bad("transport", self.transport, ", ".join(TRANSPORT_NAMES))
        if self.codec not in CODEC_NAMES:
            raise _bad("codec", self.codec, ", ".join(CODEC_NAMES))
        if self.frame_bytes_max < FRAME_BYTES_MIN or self.frame_bytes_max > 2**31:
            raise _bad("frame_bytes_max", self.frame_bytes_max, f"{FRAME_BYTES_MIN} .. 2**31")
        if self.call_timeout_ms <= 0:
            raise _bad("call_timeout_ms", self.call_timeout_ms, "a positive number")
        if self.in_flight_max <= 0:
            raise _bad("in_flight_max", self.in_flight_max, "a positive number")
        if not 0 < self.reconnect_backoff_min_ms <= self.reconnect_backoff_max_ms:
            raise _bad(
                "reconnect_backoff_min_ms",
                self.reconnect_backoff_min_ms,
                "positive and at most reconnect_backoff_max_ms",
            )


@dataclass(frozen=True)
class RpcOptions:
    """The internal-RPC options every role takes (``--rpc-transport``, ``--rpc-codec``,
    ``--rpc-tls-*``); role configs inherit them. Every process of a cluster must be
    given the same transport and codec: a peer configured otherwise is refused at
    connect time, naming both sides' choices."""

    rpc_transport: str = field(
        default="tcp",
        metadata={
            "help": "transport of the internal RPC between the roles (same on every process)",
            "choices": ("tcp", "grpc", "http2"),
        },
    )
    rpc_codec: str = field(
        default="msgpack",
        metadata={
            "help": "payload codec of the internal RPC (same on every process)",
            "choices": CODEC_NAMES,
        },
    )
    rpc_tls_cert: str = field(
        default="",
        metadata={"help": "mutual TLS between the roles: this process's certificate (PEM)"},
    )
    rpc_tls_key: str = field(
        default="",
        metadata={"help": "mutual TLS between the roles: this process's private key (PEM)"},
    )
    rpc_tls_ca: str = field(
        default="",
        metadata={
            "help": "mutual TLS between the roles: the CA certificate that signs every "
            "process's certificate (peers are verified against it, as servers and clients)"
        },
    )

    def rpc_config(self) -> RpcConfig:
        """The :class:`RpcConfig` of these options; ValueError naming the options if the
        TLS files are not given all three or none."""
        given = [bool(self.rpc_tls_cert), bool(self.rpc_tls_key), bool(self.rpc_tls_ca)]
        if any(given) and not all(given):
            raise ValueError(
                "--rpc-tls-cert, --rpc-tls-key and --rpc-tls-ca go together: give all three "
                "(mutual TLS between the roles) or none"
            )
        tls = (
            TlsConfig(self.rpc_tls_cert, self.rpc_tls_key, self.rpc_tls_ca, mutual=True)
            if all(given)
            else None
        )
        return RpcConfig(transport=self.rpc_transport, codec=self.rpc_codec, tls=tls)

    @property
    def rpc_flags(self) -> tuple[str, ...]:
        """These options as command-line flags (for the children of ``rip5 dev``); the
        defaults are left out."""
        flags: tuple[str, ...] = ()
        if self.rpc_transport != "tcp":
            flags += ("--rpc-transport", self.rpc_transport)
        if self.rpc_codec != "msgpack":
            flags += ("--rpc-codec", self.rpc_codec)
        if self.rpc_tls_cert:
            flags += ("--rpc-tls-cert", self.rpc_tls_cert, "--rpc-tls-key", self.rpc_tls_key)
            flags += ("--rpc-tls-ca", self.rpc_tls_ca)
        return flags


def _bad(option: str, value: object, allowed: str) -> LocalUsageError:
    return LocalUsageError(errors.BAD_REQUEST, f"RpcConfig.{option}={value!r}: allowed {allowed}")
