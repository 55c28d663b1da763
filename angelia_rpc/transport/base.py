"""What a transport provides: ordered, reliable byte links between two processes.

Every transport (tcp, grpc, http2, memory) only moves bytes; Angelia's
framing, multiplexing, deadlines, flow control and errors live above it in
:mod:`angelia_rpc.connection`, so all transports behave the same and pass
one conformance suite.

Contract of a link:

- ``write`` takes whole frames (the connection never splits a frame across
  writes) and never blocks; when the link's buffer is high it calls the
  handler's ``pause_writing`` and later ``resume_writing``.
- ``data_received`` gets bytes in order, with arbitrary boundaries.
- ``link_lost`` is called exactly once, after which nothing else is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol


def fail_future(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail ``future`` with ``error`` unless it is done, marked retrieved: a connection
    fails its handshake, calls and waiters whether or not anybody still awaits them
    (an awaiter still gets ``error``; nobody left, and asyncio logs nothing)."""
    if not future.done():
        future.set_exception(error)
        future.exception()


class Link(Protocol):
    """This end of one connection's byte pipe."""

    peer: str

    def write(self, data: bytes) -> None:
        """Queue ``data`` (whole frames) for the peer."""
        ...

    def close(self) -> None:
        """Send what is queued, then close; the handler's ``link_lost`` follows."""
        ...

    def pause_reading(self) -> None:
        """Stop delivering data until :meth:`resume_reading` (server backpressure)."""
        ...

    def resume_reading(self) -> None:
        """Deliver data again."""
        ...


class LinkHandler(Protocol):
    """The connection on top of a link."""

    def link_made(self, link: Link) -> None:
        """The link is up; ``link`` may be written from now on."""
        ...

    def data_received(self, data: bytes) -> None:
        """Bytes from the peer, in order."""
        ...

    def link_lost(self, reason: str) -> None:
        """The link is gone (``reason`` says why, for error messages)."""
        ...

    def pause_writing(self) -> None:
        """The link's send buffer is full: stop producing stream messages."""
        ...

    def resume_writing(self) -> None:
        """The link's send buffer drained."""
        ...


class Listener(Protocol):
    """A listening server endpoint."""

    address: str

    async def close(self) -> None:
        """Stop accepting and close every link accepted here."""
        ...


class Transport(Protocol):
    """Connects and listens; one instance per configuration."""

    name: str

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """Open a link to ``address``; calls ``handler.link_made`` before returning.

        Raises OSError (or TimeoutError) if the peer cannot be reached.
        """
        ...

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> Listener:
        """Accept links on ``address`` (``host:port``; port 0 picks one)."""
        ...


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` as (host, port); raises ValueError naming the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)
