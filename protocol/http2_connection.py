"""One HTTP/2 connection as a state machine: bytes in, events out; commands in, bytes out.

After python-hyper/h2's ``H2Connection``, cut down to what gRPC and
Angelia's tunnel use, and made cheap per call (see "Cost" below).
:meth:`Http2Connection.receive_data` takes what the socket read and returns
:mod:`protocol.http2_events`; :meth:`~Http2Connection.send_headers`,
:meth:`~Http2Connection.send_data` and :meth:`~Http2Connection.reset_stream`
append frames to an outbound buffer that :meth:`~Http2Connection.data_to_send`
hands to whoever owns the socket. No I/O, no clock: the shells
(``broker.grpc.http2``, ``angelia_rpc.transport.http2``) do that.

Contracts:

- Roles. A client (``client_side``) sends the preface, opens odd streams
  with :meth:`~Http2Connection.open_stream` and expects the server's first
  frame to be SETTINGS; a server expects the preface then SETTINGS, and
  reports each stream the client opens as :class:`RequestReceived`. Neither
  side pushes (a PUSH_PROMISE is a PROTOCOL_ERROR).
- Stream states (RFC 9113 5.1): a stream is open until both sides ended it
  (END_STREAM) or either reset it; then it is forgotten. A server that ends
  a stream before the client did resets it with NO_ERROR right after
  (RFC 9113 8.1: the client may stop sending a request that was answered).
  Frames for a stream that was closed are dropped (their DATA still counts
  against the connection window); frames for a stream that was never opened
  are a PROTOCOL_ERROR. A stream over ``max_concurrent_streams`` is refused
  with RST_STREAM REFUSED_STREAM and not reported; streams the client opens
  after a GOAWAY naming its last stream are not reported either (a graceful
  GOAWAY, :meth:`~Http2Connection.announce_going_away`, names none: the
  streams that cross it are still served).
- Header blocks. Received blocks are decoded with one
  :class:`protocol.hpack_decoder.HpackDecoder` (every
  block, whatever becomes of its stream, so its table stays in step with the
  peer's encoder), CONTINUATION frames joined (at most
  ``header_block_bytes_max`` bytes), padding and priority fields dropped.
  Blocks we send are given encoded and must not touch HPACK's dynamic table
  (``protocol.http2.literal``: literals without indexing), so no encoder
  state is kept and the peer's SETTINGS_HEADER_TABLE_SIZE needs nothing.
- Flow control, inbound: received DATA counts as consumed when it is
  reported; each window (the connection's and the stream's, both
  ``window_bytes``) is given back in one WINDOW_UPDATE once half of it is
  used, so one large request never stalls the other streams. A peer that
  sends beyond a window gets FLOW_CONTROL_ERROR.
- Flow control, outbound: :meth:`~Http2Connection.send_data` frames what the
  peer's windows and frame size allow, and keeps the rest, in order, with the
  stream's END_STREAM or trailers behind it; WINDOW_UPDATE and SETTINGS that
  widen a window frame what waited, during :meth:`receive_data`.
- Settings. Ours (``window_bytes``, ``frame_bytes_max``,
  ``max_concurrent_streams``) hold from the start: frames up to
  ``frame_bytes_max`` are taken before the peer acknowledges them. The
  peer's are applied and acknowledged as they arrive.
- Errors. A frame that breaks HTTP/2, a bad header block or a flow-control
  violation is a connection error: :meth:`receive_data` queues a GOAWAY with
  the error's code and reason, then raises :class:`protocol.http2.FrameError`;
  the connection takes no more bytes. A stream error is treated as a
  connection error (RFC 9113 5.4.1 allows it): these peers never cause one
  by accident. Using the API wrongly (data before headers, on a stream
  already ended, on a stream never opened) raises ValueError.

Cost (why not the h2 library, and what this keeps): the broker's server
exists because h2's state machine and events were most of its CPU per call.
Here the hot path is what the hand-written server did: frames split by
``protocol.http2.split_frames`` and dispatched by one comparison chain, one
small event per DATA frame or header block (the per-frame tuple is gone
from the shell instead), a DATA payload that fits the windows framed as is,
and streams that wait for a window kept apart so a WINDOW_UPDATE looks at
those only (thousands of long polls may sit on one connection).

PURE.
"""

from __future__ import annotations

from protocol.hpack_decoder import HEADER_LIST_BYTES_MAX, HpackDecoder
from protocol.http2 import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_BYTES,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_BYTES_LIMIT,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    STREAM_CLOSED,
    U32,
    WINDOW_MAX,
    WINDOW_UPDATE,
    FrameError,
    frame,
    header_fragment,
    header_frames,
    parse_settings,
    settings_payload,
    split_frames,
    unpadded,
)
from protocol.http2_events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    PingReceived,
    RequestReceived,
    ResponseReceived,
    SettingsAcknowledged,
    SettingsReceived,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)

HEADER_BLOCK_BYTES_MAX = 1024 * 1024
"""Default largest received header block (CONTINUATION frames joined)."""

MAX_CONCURRENT_STREAMS = 100
"""Default streams a peer may have open at once (RFC 9113 suggests no fewer than 100)."""

GOAWAY_REASON_BYTES_MAX = 256

STREAM_ID_MAX = 0x7FFFFFFF
"""The highest stream id (31 bits): a graceful GOAWAY's last stream."""


class _Stream:
    """One stream's state: its windows, which sides ended it, what waits to be sent."""

    __slots__ = (
        "end_after",
        "headers_received",
        "headers_sent",
        "local_closed",
        "pending",
        "remote_closed",
        "send_window",
        "stream_id",
        "trailers",
        "unacked",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.stream_id = stream_id
        self.send_window = send_window  # what the peer lets us send on it
        self.unacked = 0  # received bytes not yet given back to its window
        self.remote_closed = False  # the peer sent END_STREAM
        self.local_closed = False  # we sent END_STREAM
        self.headers_received = False  # a header block came (the next one is trailers)
        self.headers_sent = False
        # Bytes waiting for a window (a bytearray once there are any: later sends
        # append in place), then what follows them: END_STREAM on the last DATA frame
        # (end_after) or a trailer block. Never both.
        self.pending: bytes | bytearray = b""
        self.end_after = False
        self.trailers: bytes | None = None


class Http2Connection:
    """One HTTP/2 connection, either side. Not thread-safe; one owner drives it."""

    def __init__(
        self,
        *,
        client_side: bool,
        window_bytes: int = DEFAULT_WINDOW,
        frame_bytes_max: int = DEFAULT_FRAME_BYTES,
        max_concurrent_streams: int = MAX_CONCURRENT_STREAMS,
        header_block_bytes_max: int = HEADER_BLOCK_BYTES_MAX,
        header_list_bytes_max: int = HEADER_LIST_BYTES_MAX,
    ) -> None:
        """Nothing is queued until :meth:`initiate`.

        ``window_bytes`` is the inbound window of the connection and of each stream;
        ``frame_bytes_max`` the largest frame taken (SETTINGS_MAX_FRAME_SIZE);
        ``header_list_bytes_max`` the largest decoded header list (a connection error
        beyond: it bounds what one block may cost; an application with a smaller
        limit, as gRPC's, answers the stream itself).
        """
        if not DEFAULT_WINDOW <= window_bytes <= WINDOW_MAX:
            raise ValueError(f"window_bytes {window_bytes} is outside 65535..2**31-1")
        if not DEFAULT_FRAME_BYTES <= frame_bytes_max <= FRAME_BYTES_LIMIT:
            raise ValueError(f"frame_bytes_max {frame_bytes_max} is outside 16384..2**24-1")
        if max_concurrent_streams < 1:
            raise ValueError(f"max_concurrent_streams {max_concurrent_streams} is below 1")
        self.client_side = client_side
        self.window_bytes = window_bytes
        self.frame_bytes_max = frame_bytes_max
        self.max_concurrent_streams = max_concurrent_streams
        self.header_block_bytes_max = header_block_bytes_max
        self._update_at = window_bytes // 2  # give a window back once this much is used
        self._decoder = HpackDecoder(header_list_bytes_max=header_list_bytes_max)
        self._streams: dict[int, _Stream] = {}
        # The streams with bytes (and perhaps their end) waiting for a window: a
        # WINDOW_UPDATE looks at these only.
        self._blocked: dict[int, _Stream] = {}
        self._out: list[bytes] = []
        self._events: list[Event] = []
        self._inbound = bytearray()
        self._preface_pending = not client_side  # a server first reads the client's preface
        self._settings_pending = True  # the peer's first frame must be SETTINGS
        self._failed = False
        self.going_away = False  # we sent GOAWAY
        self.peer_going_away = False  # the peer sent GOAWAY
        self._last_peer_stream = 0  # the highest stream the peer opened
        self._next_stream_id = 1  # the next stream we open (a client's; odd)
        self._block = bytearray()  # a header block being received, CONTINUATION frames apart
        self._block_stream = 0
        self._block_flags = 0
        self._unacked = 0  # received bytes not yet given back to the connection window
        # The peer's: what we may still send on the connection, a new stream's
        # window, and the largest frame it takes.
        self._send_window = DEFAULT_WINDOW
        self._peer_stream_window = DEFAULT_WINDOW
        self._peer_frame_bytes = DEFAULT_FRAME_BYTES

    # -- state the shells read ------------------------------------------------------

    @property
    def open_streams(self) -> int:
        """Streams not yet closed by both sides or reset."""
        return len(self._streams)

    @property
    def flow_blocked(self) -> bool:
        """Some stream has bytes, or its end, waiting for the peer's window."""
        return bool(self._blocked)

    def send_window(self, stream_id: int) -> int:
        """What may be sent on ``stream_id`` now (0 for a closed stream)."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return 0
        return max(0, min(self._send_window, stream.send_window))

    # -- commands -------------------------------------------------------------------

    def initiate(self) -> None:
        """Queue this side's preface: the client's magic, our SETTINGS, and a
        WINDOW_UPDATE that opens the connection window to ``window_bytes``."""
        settings = [
            (SETTINGS_INITIAL_WINDOW_SIZE, self.window_bytes),
            (SETTINGS_MAX_FRAME_SIZE, self.frame_bytes_max),
        ]
        if self.client_side:
            settings.insert(0, (SETTINGS_ENABLE_PUSH, 0))
        else:
            settings.insert(0, (SETTINGS_MAX_CONCURRENT_STREAMS, self.max_concurrent_streams))
        out = self._out
        if self.client_side:
            out.append(PREFACE)
        out.append(frame(SETTINGS, 0, 0, settings_payload(settings)))
        if self.window_bytes > DEFAULT_WINDOW:
            increment = self.window_bytes - DEFAULT_WINDOW
            out.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(increment)))

    def open_stream(self, block: bytes, end_stream: bool = False) -> int:
        """A client's new stream, opened with the request header ``block``; its id."""
        if not self.client_side:
            raise ValueError("a server does not open streams (no push)")
        if self.peer_going_away or self.going_away:
            raise ValueError("the connection is going away: no new streams")
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        stream = _Stream(stream_id, self._peer_stream_window)
        self._streams[stream_id] = stream
        self.send_headers(stream_id, block, end_stream)
        return stream_id

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        """Queue a header block (HEADERS, then CONTINUATION frames past the peer's frame
        size). After the stream's data it must end the stream (trailers), and then it
        waits behind that data. A closed stream takes nothing."""
        stream = self._streams.get(stream_id)
        if stream is None:
            self._check_sendable(stream_id)
            return
        if stream.local_closed or stream.end_after or stream.trailers is not None:
            raise ValueError(f"stream {stream_id} already ended")
        if stream.pending:
            if not end_stream:
                raise ValueError(f"headers after data must end stream {stream_id}")
            stream.trailers = block
            return
        stream.headers_sent = True
        if len(block) <= self._peer_frame_bytes:  # one HEADERS frame, as nearly always
            flags = END_HEADERS | END_STREAM if end_stream else END_HEADERS
            self._out.append(frame(HEADERS, flags, stream_id, block))
        else:
            self._out.append(header_frames(stream_id, block, end_stream, self._peer_frame_bytes))
        if end_stream:
            self._end_local(stream)

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        """Queue ``data`` on ``stream_id`` (END_STREAM on its last frame if
        ``end_stream``): framed now as far as the windows allow, the rest when the peer
        widens them. A closed stream (reset by the peer) takes nothing."""
        stream = self._streams.get(stream_id)
        if stream is None:
            self._check_sendable(stream_id)
            return
        if not stream.headers_sent:
            raise ValueError(f"data before headers on stream {stream_id}")
        if stream.local_closed or stream.end_after or stream.trailers is not None:
            raise ValueError(f"stream {stream_id} already ended")
        if stream.pending:
            stream.pending += data
            stream.end_after = end_stream
            return
        self._frame_data(stream, data, end_stream)

    def reset_stream(self, stream_id: int, error_code: int = CANCEL) -> None:
        """Reset ``stream_id`` (RST_STREAM): what waits for it is dropped. A closed
        stream needs nothing."""
        stream = self._streams.get(stream_id)
        if stream is None:
            self._check_sendable(stream_id)
            return
        self._forget(stream_id)
        self._out.append(frame(RST_STREAM, 0, stream_id, U32.pack(error_code)))

    def announce_going_away(self) -> None:
        """Queue a graceful GOAWAY (RFC 9113 6.8: last stream 2**31-1, NO_ERROR): the
        peer opens no more streams, and the ones it opened before it heard this are
        still reported and served. :meth:`close_connection` later names the last
        stream served. Nothing after a GOAWAY that named one."""
        if self.going_away:
            return
        self._out.append(frame(GOAWAY, 0, 0, U32.pack(STREAM_ID_MAX) + U32.pack(NO_ERROR)))

    def close_connection(self, error_code: int = NO_ERROR, reason: str = "") -> None:
        """Queue GOAWAY (once): streams the peer opens after it are not served."""
        if self.going_away:
            return
        self.going_away = True
        payload = U32.pack(self._last_peer_stream) + U32.pack(error_code)
        text = reason.encode()[:GOAWAY_REASON_BYTES_MAX]
        self._out.append(frame(GOAWAY, 0, 0, payload + text))

    def data_to_send(self) -> bytes:
        """The frames queued since the last call, as one ``bytes`` (empty if none)."""
        out = self._out
        if not out:
            return b""
        self._out = []
        return out[0] if len(out) == 1 else b"".join(out)

    # -- receiving ------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Take bytes from the peer; the events of the whole frames among them, in order.

        Raises FrameError for a connection error, after queueing its GOAWAY; the
        connection then takes nothing more (later calls return no events).
        """
        if self._failed:
            return []
        inbound = self._inbound
        inbound += data
        events: list[Event] = []
        self._events = events
        try:
            if self._preface_pending and not self._read_preface(inbound):
                return events
            frames = split_frames(inbound, self.frame_bytes_max)
            if frames and self._settings_pending:
                if frames[0][0] != SETTINGS or frames[0][1] & ACK:
                    raise FrameError(PROTOCOL_ERROR, "the peer's first frame is not SETTINGS")
                self._settings_pending = False
            for kind, flags, stream_id, payload in frames:
                self._on_frame(kind, flags, stream_id, payload)
        except FrameError as exc:
            self._fail(exc.code, str(exc))
            raise
        return events

    def _read_preface(self, inbound: bytearray) -> bool:
        """Whether the client's preface has been read (and taken off ``inbound``)."""
        if len(inbound) < len(PREFACE):
            if not PREFACE.startswith(bytes(inbound)):
                raise FrameError(PROTOCOL_ERROR, "not an HTTP/2 preface")
            return False
        if not inbound.startswith(PREFACE):
            raise FrameError(PROTOCOL_ERROR, "not an HTTP/2 preface")
        del inbound[: len(PREFACE)]
        self._preface_pending = False
        return True

    def _fail(self, code: int, reason: str) -> None:
        self._failed = True
        self._inbound.clear()
        self.close_connection(code, reason)

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._block_stream and kind != CONTINUATION:
            raise FrameError(PROTOCOL_ERROR, "a header block broken off")
        if kind == DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == HEADERS:
            if stream_id == 0:
                raise FrameError(PROTOCOL_ERROR, "HEADERS on stream 0")
            fragment = header_fragment(flags, payload)
            if flags & END_HEADERS:
                self._on_header_block(stream_id, flags, fragment)
            else:
                self._block = bytearray(fragment)
                self._block_stream = stream_id
                self._block_flags = flags
        elif kind == CONTINUATION:
            if stream_id == 0 or stream_id != self._block_stream:
                raise FrameError(PROTOCOL_ERROR, "a CONTINUATION out of place")
            block = self._block
            block += payload
            if len(block) > self.header_block_bytes_max:
                raise FrameError(
                    PROTOCOL_ERROR,
                    f"a header block over {self.header_block_bytes_max} bytes",
                )
            if flags & END_HEADERS:
                self._block, self._block_stream = bytearray(), 0
                self._on_header_block(stream_id, self._block_flags, bytes(block))
        elif kind == WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == RST_STREAM:
            self._on_reset(stream_id, payload)
        elif kind == SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == PING:
            if stream_id != 0:
                raise FrameError(PROTOCOL_ERROR, "PING on a stream")
            if len(payload) != 8:
                raise FrameError(FRAME_SIZE_ERROR, "a PING payload is 8 bytes")
            if not flags & ACK:  # we send no PINGs: an ACK answers nothing
                self._out.append(frame(PING, ACK, 0, payload))
                self._events.append(PingReceived(payload))
        elif kind == GOAWAY:
            if stream_id != 0:
                raise FrameError(PROTOCOL_ERROR, "GOAWAY on a stream")
            if len(payload) < 8:
                raise FrameError(FRAME_SIZE_ERROR, "a GOAWAY payload is at least 8 bytes")
            self.peer_going_away = True
            last_stream_id = U32.unpack_from(payload)[0] & 0x7FFFFFFF
            code = U32.unpack_from(payload, 4)[0]
            self._events.append(ConnectionTerminated(code, last_stream_id, payload[8:]))
        elif kind == PUSH_PROMISE:
            raise FrameError(PROTOCOL_ERROR, "PUSH_PROMISE, with push disabled")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 allows.

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise FrameError(PROTOCOL_ERROR, "DATA on stream 0")
        # Flow control counts the whole payload, padding included.
        size = len(payload)
        self._unacked += size
        if self._unacked >= self._update_at:
            if self._unacked > self.window_bytes:
                raise FrameError(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
            self._out.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(self._unacked)))
            self._unacked = 0
        stream = self._streams.get(stream_id)
        if stream is None:
            self._check_closed(stream_id, "DATA")
            return  # a stream already closed or reset: dropped
        if stream.remote_closed:
            raise FrameError(STREAM_CLOSED, f"DATA after END_STREAM on stream {stream_id}")
        end_stream = bool(flags & END_STREAM)
        stream.unacked += size
        if stream.unacked >= self._update_at:
            if stream.unacked > self.window_bytes:
                raise FrameError(
                    FLOW_CONTROL_ERROR, f"DATA beyond the window of stream {stream_id}"
                )
            if not end_stream:
                update = U32.pack(stream.unacked)
                self._out.append(frame(WINDOW_UPDATE, 0, stream_id, update))
                stream.unacked = 0
        data = unpadded(flags, payload) if flags & PADDED else payload
        if end_stream:
            self._end_remote(stream)
        self._events.append(DataReceived(stream_id, data, end_stream))

    def _on_header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        # Decoded first, whatever becomes of the stream: the table follows the peer's.
        headers = self._decoder.decode(block)
        end_stream = bool(flags & END_STREAM)
        stream = self._streams.get(stream_id)
        if stream is not None:
            if stream.remote_closed:
                raise FrameError(STREAM_CLOSED, f"HEADERS after END_STREAM on stream {stream_id}")
            if end_stream:
                self._end_remote(stream)
            if stream.headers_received:
                self._events.append(TrailersReceived(stream_id, headers, end_stream))
            else:  # a client's response (a server's streams begin with their request)
                stream.headers_received = True
                self._events.append(ResponseReceived(stream_id, headers, end_stream))
            return
        if self.client_side or not stream_id & 1:
            self._check_closed(stream_id, "HEADERS")
            return  # a stream we closed
        if stream_id <= self._last_peer_stream:
            return  # a stream already answered or reset
        self._last_peer_stream = stream_id
        if self.going_away:
            return
        if len(self._streams) >= self.max_concurrent_streams:
            refused = U32.pack(REFUSED_STREAM)
            self._out.append(frame(RST_STREAM, 0, stream_id, refused))
            return
        stream = _Stream(stream_id, self._peer_stream_window)
        stream.headers_received = True
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream
        self._events.append(RequestReceived(stream_id, headers, end_stream))

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise FrameError(FRAME_SIZE_ERROR, "a WINDOW_UPDATE payload is 4 bytes")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        if increment == 0:
            raise FrameError(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > WINDOW_MAX:
                raise FrameError(FLOW_CONTROL_ERROR, "connection window overflow")
            if self._blocked:
                self._send_blocked()
        else:
            stream = self._streams.get(stream_id)
            if stream is None:
                self._check_closed(stream_id, "WINDOW_UPDATE")
                return
            stream.send_window += increment
            if stream.send_window > WINDOW_MAX:
                raise FrameError(FLOW_CONTROL_ERROR, f"window overflow on stream {stream_id}")
            if stream_id in self._blocked:
                self._send_blocked()
        self._events.append(WindowUpdated(stream_id, increment))

    def _on_reset(self, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise FrameError(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise FrameError(FRAME_SIZE_ERROR, "a RST_STREAM payload is 4 bytes")
        if stream_id not in self._streams:
            self._check_closed(stream_id, "RST_STREAM")
            return
        self._forget(stream_id)
        self._events.append(StreamReset(stream_id, U32.unpack(payload)[0]))

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise FrameError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise FrameError(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            self._events.append(SettingsAcknowledged())
            return
        settings = parse_settings(payload)
        widened = False
        for key, value in settings:
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > WINDOW_MAX:
                    raise FrameError(FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._peer_stream_window
                self._peer_stream_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > WINDOW_MAX:
                        raise FrameError(FLOW_CONTROL_ERROR, "a stream window overflows")
                widened = widened or delta > 0
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_BYTES <= value <= FRAME_BYTES_LIMIT:
                    raise FrameError(PROTOCOL_ERROR, f"max frame size {value}")
                self._peer_frame_bytes = value
            elif key == SETTINGS_ENABLE_PUSH and value > 1:
                raise FrameError(PROTOCOL_ERROR, f"enable push {value}")
        # SETTINGS_HEADER_TABLE_SIZE needs nothing: what we send never uses the table.
        self._out.append(frame(SETTINGS, ACK, 0))
        if widened and self._blocked:
            self._send_blocked()
        self._events.append(SettingsReceived(settings))

    def _check_closed(self, stream_id: int, what: str) -> None:
        """Raise PROTOCOL_ERROR if ``stream_id`` was never opened (RFC 9113 5.1: a frame
        on an idle stream); a closed one is the caller's to ignore."""
        if stream_id & 1 == int(self.client_side):  # the side that opens these is us
            idle = stream_id >= self._next_stream_id
        else:
            idle = stream_id > self._last_peer_stream
        if idle:
            raise FrameError(PROTOCOL_ERROR, f"{what} on stream {stream_id}, never opened")

    # -- sending --------------------------------------------------------------------

    def _check_sendable(self, stream_id: int) -> None:
        """ValueError if ``stream_id``, not open, was never opened either (a closed
        stream takes nothing, silently: the peer may have reset it)."""
        try:
            self._check_closed(stream_id, "sending")
        except FrameError as exc:
            raise ValueError(str(exc)) from None

    def _frame_data(self, stream: _Stream, data: bytes | bytearray, end_stream: bool) -> None:
        """Frame ``data`` as far as the windows allow; the rest waits in the stream."""
        size = len(data)
        stream_id = stream.stream_id
        window = min(self._send_window, stream.send_window)
        frame_bytes = self._peer_frame_bytes
        if size <= frame_bytes and (size <= window or not size):  # one frame, no copy
            self._send_window -= size
            stream.send_window -= size
            flags = END_STREAM if end_stream else 0
            self._out.append(frame(DATA, flags, stream_id, data))
            if end_stream:
                self._end_local(stream)
            return
        out = self._out
        offset = 0
        while offset < size and window > 0:
            chunk = min(window, frame_bytes, size - offset)
            end = offset + chunk
            flags = END_STREAM if end_stream and end == size else 0
            out.append(frame(DATA, flags, stream_id, data[offset:end]))
            offset = end
            window -= chunk
        self._send_window -= offset
        stream.send_window -= offset
        if offset < size:
            stream.pending = bytearray(memoryview(data)[offset:])
            stream.end_after = end_stream
            self._blocked[stream_id] = stream
        elif end_stream:
            self._end_local(stream)

    def _send_blocked(self) -> None:
        """Frame what waited for a window, stream by stream in the order they blocked."""
        for stream_id, stream in list(self._blocked.items()):
            if self._send_window <= 0:
                return
            if stream.send_window <= 0:
                continue
            del self._blocked[stream_id]
            data, stream.pending = stream.pending, b""
            trailers, stream.trailers = stream.trailers, None
            self._frame_data(stream, data, stream.end_after)
            if stream.pending:
                stream.trailers = trailers  # still waiting: the trailers stay behind
            elif trailers is not None:
                self._out.append(header_frames(stream_id, trailers, True, self._peer_frame_bytes))
                self._end_local(stream)

    # A stream ends on our side only once all its bytes went, so an ended stream is
    # never among the blocked ones: closing it needs the open streams only.

    def _end_local(self, stream: _Stream) -> None:
        """We sent END_STREAM on ``stream``."""
        stream.local_closed = True
        if stream.remote_closed:
            del self._streams[stream.stream_id]
        elif not self.client_side:
            # Answered before the request ended: the client may stop sending it.
            del self._streams[stream.stream_id]
            no_error = U32.pack(NO_ERROR)
            self._out.append(frame(RST_STREAM, 0, stream.stream_id, no_error))

    def _end_remote(self, stream: _Stream) -> None:
        """The peer sent END_STREAM on ``stream``."""
        stream.remote_closed = True
        if stream.local_closed:
            del self._streams[stream.stream_id]

    def _forget(self, stream_id: int) -> None:
        """Close ``stream_id`` at once (a reset): what waited for it is dropped."""
        self._streams.pop(stream_id, None)
        self._blocked.pop(stream_id, None)


__all__ = ["Http2Connection"]
