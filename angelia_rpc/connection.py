"""One Angelia connection over a transport link: the half shared by client and server.

It decodes frames, coalesces outgoing frames into one link write per event
loop turn (many calls in flight share a write), tracks streams and their
flow-control credit, and fails every open call once when the link is lost.
:class:`angelia_rpc.channel.ClientConnection` and
:class:`angelia_rpc.server.ServerConnection` add the two roles.
"""

from __future__ import annotations

import asyncio
from collections import deque

from angelia_rpc.codec.base import Codec
from angelia_rpc.errors import AngeliaError, cancelled, from_wire, to_wire, unavailable
from angelia_rpc.framing import (
    CANCEL,
    CREDIT,
    END,
    ERROR,
    MESSAGE,
    Frame,
    FrameDecoder,
    encode_frame,
    encode_json,
)
from angelia_rpc.transport.base import Link, fail_future
from protocol import errors
from protocol.errors import WireError

# Every stream starts with this many messages of credit in each direction;
# a receiver grants more (CREDIT) as its reader consumes half of it.
STREAM_WINDOW = 256
# Frames queued in one loop turn that are written without waiting for its end.
FLUSH_FRAMES = 16


class Connection:
    """Frame I/O shared by both ends. Subclasses implement ``on_frame``."""

    def __init__(self, codec: Codec, frame_bytes_max: int, transport_name: str) -> None:
        self.codec = codec
        self.codec_id = codec.codec_id
        self.transport_name = transport_name
        self.frame_bytes_max = frame_bytes_max
        self.send_bytes_max = frame_bytes_max
        self.decoder = FrameDecoder(frame_bytes_max)
        self.link: Link | None = None
        self.peer = "?"
        self.closed = False
        self.close_reason = ""
        self.streams: dict[int, StreamState] = {}
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._write_paused = False
        self._writable: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._encode_error = codec.encoder(WireError)
        self._decode_error = codec.decoder(WireError)

    # -- link events ----------------------------------------------------------------
    def link_made(self, link: Link) -> None:
        """The transport's link is up."""
        self.link = link
        self.peer = link.peer

    def data_received(self, data: bytes) -> None:
        """Decode and dispatch; a framing violation closes the connection."""
        if self.closed:
            return
        try:
            frames = self.decoder.feed(data)
        except AngeliaError as exc:
            self.protocol_failed(exc)
            return
        for frame in frames:
            self.on_frame(frame)
            if self.closed:
                return

    def link_lost(self, reason: str) -> None:
        """The link is gone: fail everything still open."""
        if not self.closed:
            self.closed = True
            self.close_reason = reason
        self.failed(unavailable(f"connection to {self.peer} lost: {self.close_reason or reason}"))

    def pause_writing(self) -> None:
        """Backpressure from the link."""
        self._write_paused = True

    def resume_writing(self) -> None:
        """The link drained."""
        self._write_paused = False
        waiter = self._writable
        if waiter is not None:
            self._writable = None
            if not waiter.done():
                waiter.set_result(None)

    # -- to override --------------------------------------------------------------
    def on_frame(self, frame: Frame) -> None:
        """Handle one decoded frame."""
        raise NotImplementedError

    def failed(self, error: AngeliaError) -> None:
        """Fail every open call with ``error`` (the connection is closed)."""
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.fail(error)
        if self._writable is not None:
            fail_future(self._writable, error)

    def protocol_failed(self, error: AngeliaError) -> None:
        """The peer broke the protocol: tell it why (best effort), then close."""
        if self.closed:
            return
        self.send_raw(
            encode_json(
                ERROR,
                0,
                {"code": error.code.number, "message": error.message},
                self.frame_bytes_max,
            )
        )
        self.close(f"{error.code.name}: {error.message}")
        self.failed(error)

    # -- sending ------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        """Queue whole frames; they go out in one write at the end of this loop turn.

        A turn that queues ``FLUSH_FRAMES`` frames writes them at once, so the
        peer starts on the first responses of a large batch while this side
        still produces the rest (both processes busy instead of taking turns).
        """
        out = self._out
        out.append(data)
        if len(out) >= FLUSH_FRAMES:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self.link is None:
            return
        self._out = []
        data = out[0] if len(out) == 1 else b"".join(out)
        try:
            self.link.write(data)
        except RuntimeError:
            # The transport closed between the queueing and this flush (uvloop
            # raises where asyncio only logs). The frames are lost with the
            # connection; its link_lost fails the calls that wait on them.
            return

    async def drain(self) -> None:
        """Wait while the link's send buffer is full."""
        while self._write_paused and not self.closed:
            if self._writable is None:
                self._writable = self._loop.create_future()
            await asyncio.shield(self._writable)

    def close(self, reason: str) -> None:
        """Flush, then close the link; open calls fail when it is lost."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self._flush()
        if self.link is not None:
            self.link.close()

    def send_error(self, call_id: int, error: AngeliaError) -> None:
        """An ERROR frame for one call."""
        payload = self._encode_error(to_wire(error))
        self.send_raw(
            encode_frame(
                ERROR, call_id, payload, codec_id=self.codec_id, frame_bytes_max=self.send_bytes_max
            )
        )

    def decode_error(self, frame: Frame) -> AngeliaError:
        """The error an ERROR frame carries."""
        wire: WireError = self._decode_error(frame.payload)
        return from_wire(wire)


class StreamState:
    """Both directions of one stream call on one end: inbound queue and outbound credit."""

    __slots__ = (
        "_consumed",
        "_credit",
        "_credit_waiter",
        "_inbound",
        "_waiter",
        "call_id",
        "connection",
        "end_closes_call",
        "error",
        "inbound_ended",
        "outbound_ended",
    )

    def __init__(self, connection: Connection, call_id: int, end_closes_call: bool = False) -> None:
        self.connection = connection
        self.call_id = call_id
        # On the client, the server's END finishes the whole call (its handler
        # returned): later sends fail instead of waiting for credit forever.
        self.end_closes_call = end_closes_call
        self._inbound: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._credit = STREAM_WINDOW
        self._credit_waiter: asyncio.Future[None] | None = None
        self._consumed = 0
        self.inbound_ended = False
        self.outbound_ended = False
        self.error: AngeliaError | None = None

    # -- from the peer ------------------------------------------------------------
    def on_frame(self, frame: Frame) -> None:
        """MESSAGE, END, CREDIT or ERROR for this call."""
        kind = frame.kind
        if kind == MESSAGE:
            self._inbound.append(frame.payload)
            self._wake()
        elif kind == CREDIT:
            self._credit += int.from_bytes(frame.payload, "big")
            self._wake_sender()
        elif kind == END:
            self.inbound_ended = True
            self._wake()
            if self.end_closes_call:
                self.outbound_ended = True
                self._wake_sender()
        elif kind == ERROR:
            self.fail(self.connection.decode_error(frame))

    def fail(self, error: AngeliaError) -> None:
        """End the call with ``error`` in both directions (first error wins)."""
        if self.error is None:
            self.error = error
        self._wake()
        self._wake_sender()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _wake_sender(self) -> None:
        waiter = self._credit_waiter
        if waiter is not None:
            self._credit_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- for the local reader and writer ---------------------------------------------
    async def next_payload(self) -> bytes | None:
        """The next message's payload; None when the peer ended its side; raises the error."""
        while True:
            if self._inbound:
                payload = self._inbound.popleft()
                self._consumed += 1
                if self._consumed >= STREAM_WINDOW // 2 and self.error is None:
                    self.connection.send_raw(
                        encode_frame(
                            CREDIT,
                            self.call_id,
                            self._consumed.to_bytes(4, "big"),
                            frame_bytes_max=self.connection.send_bytes_max,
                        )
                    )
                    self._consumed = 0
                return payload
            if self.error is not None:
                raise self.error
            if self.inbound_ended:
                return None
            self._waiter = self.connection._loop.create_future()
            await self._waiter

    def may_send_now(self) -> bool:
        """Whether a message can go without waiting; if so, its credit is taken."""
        if (
            self._credit > 0
            and self.error is None
            and not self.outbound_ended
            and not self.connection._write_paused
        ):
            self._credit -= 1
            return True
        return False

    async def send_payload(self, frame: bytes) -> None:
        """Send one MESSAGE frame once credit allows and the link is writable."""
        while self._credit <= 0 and self.error is None and not self.outbound_ended:
            self._credit_waiter = self.connection._loop.create_future()
            await self._credit_waiter
        if self.error is not None:
            raise self.error
        if self.outbound_ended:
            if self.end_closes_call and self.inbound_ended:
                raise AngeliaError(errors.UNAVAILABLE, "the server ended the stream")
            raise AngeliaError(errors.BAD_REQUEST, "send after this side of the stream ended")
        self._credit -= 1
        self.connection.send_raw(frame)
        if self.connection._write_paused:
            await self.connection.drain()

    def end(self) -> None:
        """End this side of the stream (END frame), once."""
        if self.outbound_ended or self.error is not None or self.connection.closed:
            return
        self.outbound_ended = True
        self.connection.send_raw(
            encode_frame(END, self.call_id, frame_bytes_max=self.connection.send_bytes_max)
        )

    def cancel(self, error: AngeliaError | None = None) -> None:
        """Client side: tell the server to stop; local waiters fail with ``error`` (CANCELLED)."""
        if self.error is None:
            if not self.connection.closed:
                self.connection.send_raw(
                    encode_frame(
                        CANCEL, self.call_id, frame_bytes_max=self.connection.send_bytes_max
                    )
                )
            self.fail(error or cancelled("the caller cancelled the stream"))
        self.connection.streams.pop(self.call_id, None)


def message_frame(call_id: int, payload: bytes, codec_id: int, limit: int) -> bytes:
    """A MESSAGE frame."""
    return encode_frame(MESSAGE, call_id, payload, codec_id=codec_id, frame_bytes_max=limit)


__all__ = ["STREAM_WINDOW", "Connection", "StreamState", "WireError", "message_frame"]
