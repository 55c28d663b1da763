"""What an HTTP/2 connection reports from the bytes it receives (after h2's events).

:meth:`protocol.http2_connection.Http2Connection.receive_data` returns these,
in the order of the frames they come from. They are values: the connection
keeps no reference to them and reads nothing back from them. Flow control,
SETTINGS acknowledgements and PING answers are the connection's own work;
their events only tell the application what happened.

The classes are plain slotted dataclasses, not frozen ones: one is made per
received DATA frame or header block, and a frozen dataclass costs three times
as much to build.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

Headers = list[tuple[bytes, bytes]]
"""Decoded header fields, names and values as received (bytes)."""


@dataclass(slots=True)
class HeadersReceived:
    """A header block on ``stream_id``; which one it is, its subclass says."""

    stream_id: int
    headers: Headers
    end_stream: bool
    """The peer's side of the stream is closed with it (END_STREAM)."""


class RequestReceived(HeadersReceived):
    """A server's peer opened ``stream_id`` with a request header block."""

    __slots__ = ()


class ResponseReceived(HeadersReceived):
    """A client's stream got its response header block."""

    __slots__ = ()


class TrailersReceived(HeadersReceived):
    """A header block after the first on an open stream (gRPC's trailers)."""

    __slots__ = ()


@dataclass(slots=True)
class DataReceived:
    """Body bytes of ``stream_id``, without padding (``data`` may be empty when
    ``end_stream`` is all the frame says). The bytes already count as consumed:
    the connection gives the windows back itself."""

    stream_id: int
    data: bytes
    end_stream: bool


@dataclass(slots=True)
class StreamReset:
    """The peer reset ``stream_id`` (RST_STREAM with ``error_code``); it is closed and
    whatever was queued for it is dropped."""

    stream_id: int
    error_code: int


@dataclass(slots=True)
class WindowUpdated:
    """The peer widened a send window (``stream_id`` 0: the connection's); bytes
    that waited for it have been framed."""

    stream_id: int
    increment: int


@dataclass(slots=True)
class SettingsReceived:
    """The peer's SETTINGS, applied and acknowledged, as (identifier, value) pairs."""

    settings: list[tuple[int, int]]


@dataclass(slots=True)
class SettingsAcknowledged:
    """The peer acknowledged our SETTINGS."""


@dataclass(slots=True)
class PingReceived:
    """The peer's PING, answered already."""

    payload: bytes


@dataclass(slots=True)
class ConnectionTerminated:
    """The peer sent GOAWAY: it opens no more streams and serves none above
    ``last_stream_id``."""

    error_code: int
    last_stream_id: int
    reason: bytes


Event = (
    RequestReceived
    | ResponseReceived
    | TrailersReceived
    | DataReceived
    | StreamReset
    | WindowUpdated
    | SettingsReceived
    | SettingsAcknowledged
    | PingReceived
    | ConnectionTerminated
)
