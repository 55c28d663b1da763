"""Transports by name: tcp (default), grpc, http2, memory."""

from __future__ import annotations

from angelia_rpc.config import RpcConfig
from angelia_rpc.errors import LocalUsageError
from angelia_rpc.transport.base import Link, LinkHandler, Listener, Transport
from protocol import errors


def transport_for(config: RpcConfig) -> Transport:
    """The transport ``config`` names. The memory transport needs a network: pass it explicitly."""
    if config.transport == "tcp":
        from angelia_rpc.transport.tcp import TcpTransport  # noqa: PLC0415 - like the others

        return TcpTransport(config.tls)
    if config.transport == "grpc":
        from angelia_rpc.transport.grpc import GrpcTransport  # noqa: PLC0415 - grpc loads only if used

        return GrpcTransport(config.tls, config.frame_bytes_max)
    if config.transport == "http2":
        from angelia_rpc.transport.http2 import Http2Transport  # noqa: PLC0415 - loads only if used

        return Http2Transport(config.tls, config.frame_bytes_max)
    raise LocalUsageError(
        errors.BAD_REQUEST,
        "the memory transport needs its network: pass transport=MemoryNetwork(...).transport(name)",
    )


__all__ = ["Link", "LinkHandler", "Listener", "Transport", "transport_for"]
