"""Angelia configuration: transport and codec are chosen per cluster, here.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from angelia_rpc.errors import LocalUsageError
from angelia_rpc.framing import FRAME_BYTES_MIN
from protocol import errors

TRANSPORT_NAMES = ("tcp", "grpc", "http2", "memory")
CODEC_NAMES = ("msgpack", "avro", "json")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS for a transport: this end's certificate and the CA that signs its peers'.

    A server presents ``cert_file``/``key_file``; a client verifies the server
    against ``ca_file`` and the name ``server_hostname``.
    """

    cert_file: str
    key_file: str
    ca_file: str
    server_hostname: str = "localhost"


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
    ``reconnect_backoff_max_ms``. ``tls`` is ignored by the in-process memory
    transport.
    """

    transport: str = "tcp"
    codec: str = "msgpack"
    tls: TlsConfig | None = None
    frame_bytes_max: int = 16 * 1024 * 1024
    call_timeout_ms: int = 5_000
    in_flight_max: int = 1024
    reconnect_backoff_min_ms: int = 10
    reconnect_backoff_max_ms: int = 2_000

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


def _bad(option: str, value: object, allowed: str) -> LocalUsageError:
    return LocalUsageError(errors.BAD_REQUEST, f"RpcConfig.{option}={value!r}: allowed {allowed}")
