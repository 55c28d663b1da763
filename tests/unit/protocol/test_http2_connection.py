"""protocol.http2_connection: bytes in, events out; commands in, frames out. No sockets.

Two connections talk through their byte buffers (a client and a server, as
h2's own tests pair them), and raw frames built with protocol.http2 stand in
for peers that do what a well-behaved one never does.
"""

from __future__ import annotations

import hpack
import pytest

from protocol import http2
from protocol.http2_connection import Http2Connection
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

REQUEST = [(b":method", b"POST"), (b":path", b"/t.S/M"), (b"x-id", b"7")]
RESPONSE = [(b":status", b"200")]
TRAILERS = [(b"grpc-status", b"0")]


def _frames(data: bytes) -> list[http2.Frame]:
    buffer = bytearray(data)
    frames = http2.split_frames(buffer, http2.FRAME_BYTES_LIMIT)
    assert not buffer, "a partial frame was sent"
    return frames


def _server(**options: int) -> Http2Connection:
    """A server that has read a client's preface and empty SETTINGS."""
    server = Http2Connection(client_side=False, **options)
    server.initiate()
    assert server.receive_data(http2.PREFACE + http2.frame(http2.SETTINGS, 0, 0)) == [
        SettingsReceived([])
    ]
    server.data_to_send()
    return server


def _request(
    stream_id: int, end_stream: bool = False, encoder: hpack.Encoder | None = None
) -> bytes:
    block = (encoder or hpack.Encoder()).encode(REQUEST)
    flags = http2.END_HEADERS | (http2.END_STREAM if end_stream else 0)
    return http2.frame(http2.HEADERS, flags, stream_id, block)


def _pair(
    client_window: int = http2.DEFAULT_WINDOW, server_window: int = http2.DEFAULT_WINDOW
) -> tuple[Http2Connection, Http2Connection]:
    client = Http2Connection(client_side=True, window_bytes=client_window)
    server = Http2Connection(client_side=False, window_bytes=server_window)
    client.initiate()
    server.initiate()
    _exchange(client, server)
    return client, server


def _exchange(a: Http2Connection, b: Http2Connection) -> tuple[list[Event], list[Event]]:
    """Deliver both ways until neither has anything to send; each side's events."""
    a_events: list[Event] = []
    b_events: list[Event] = []
    while True:
        to_b, to_a = a.data_to_send(), b.data_to_send()
        if not to_a and not to_b:
            return a_events, b_events
        b_events += b.receive_data(to_b)
        a_events += a.receive_data(to_a)


def test_a_call_goes_both_ways_and_both_ends_forget_the_stream() -> None:
    client, server = _pair()
    stream_id = client.open_stream(http2.header_block(REQUEST))
    client.send_data(stream_id, b"request", end_stream=True)
    _, events = _exchange(client, server)
    assert events == [
        RequestReceived(stream_id, REQUEST, False),
        DataReceived(stream_id, b"request", True),
    ]
    server.send_headers(stream_id, http2.header_block(RESPONSE))
    server.send_data(stream_id, b"one")
    server.send_data(stream_id, b"two")
    server.send_headers(stream_id, http2.header_block(TRAILERS), end_stream=True)
    events, _ = _exchange(client, server)
    assert events == [
        ResponseReceived(stream_id, RESPONSE, False),
        DataReceived(stream_id, b"one", False),
        DataReceived(stream_id, b"two", False),
        TrailersReceived(stream_id, TRAILERS, True),
    ]
    assert client.open_streams == server.open_streams == 0
    assert client.open_stream(http2.header_block(REQUEST)) == stream_id + 2


def test_each_side_announces_its_settings_and_acknowledges_the_peers() -> None:
    client = Http2Connection(client_side=True, window_bytes=1 << 20, frame_bytes_max=1 << 18)
    client.initiate()
    sent = client.data_to_send()
    assert sent.startswith(http2.PREFACE)
    (settings, update) = _frames(sent[len(http2.PREFACE) :])
    assert settings[0] == http2.SETTINGS
    assert http2.parse_settings(settings[3]) == [
        (http2.SETTINGS_ENABLE_PUSH, 0),
        (http2.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
        (http2.SETTINGS_MAX_FRAME_SIZE, 1 << 18),
    ]
    assert update == (http2.WINDOW_UPDATE, 0, 0, http2.U32.pack((1 << 20) - 65_535))
    server = Http2Connection(client_side=False, max_concurrent_streams=7)
    server.initiate()
    (settings,) = _frames(server.data_to_send())  # the default window needs no update
    assert (http2.SETTINGS_MAX_CONCURRENT_STREAMS, 7) in http2.parse_settings(settings[3])
    events = server.receive_data(sent)
    assert events == [
        SettingsReceived(http2.parse_settings(_frames(sent[24:])[0][3])),
        WindowUpdated(0, (1 << 20) - 65_535),
    ]
    assert (http2.SETTINGS, http2.ACK, 0, b"") in _frames(server.data_to_send())
    assert client.receive_data(http2.frame(http2.SETTINGS, 0, 0)) == [SettingsReceived([])]
    assert client.receive_data(http2.frame(http2.SETTINGS, http2.ACK, 0)) == [
        SettingsAcknowledged()
    ]


def test_bytes_in_any_pieces_give_the_same_events() -> None:
    encoder = hpack.Encoder()
    data = (
        http2.PREFACE
        + http2.frame(http2.SETTINGS, 0, 0)
        + _request(1, encoder=encoder)
        + http2.frame(http2.DATA, http2.END_STREAM, 1, b"body")
        + http2.frame(http2.PING, 0, 0, b"12345678")
    )
    whole = Http2Connection(client_side=False).receive_data(data)
    for size in (1, 5, 9, 17):
        server = Http2Connection(client_side=False)
        events: list[Event] = []
        for start in range(0, len(data), size):
            events += server.receive_data(data[start : start + size])
        assert events == whole
    assert whole[1:] == [
        RequestReceived(1, REQUEST, False),
        DataReceived(1, b"body", True),
        PingReceived(b"12345678"),
    ]


def test_padding_priority_and_continuation_are_read() -> None:
    server = _server()
    block = hpack.Encoder().encode(REQUEST)
    first = bytes([3]) + b"\0\0\0\0\x10" + block[:4] + b"\0" * 3  # padded, with priority
    data = (
        http2.frame(http2.HEADERS, http2.PADDED | http2.PRIORITY, 1, first)
        + http2.frame(http2.CONTINUATION, 0, 1, block[4:6])
        + http2.frame(http2.CONTINUATION, http2.END_HEADERS, 1, block[6:])
        + http2.frame(http2.DATA, http2.PADDED | http2.END_STREAM, 1, b"\x02ab\0\0")
    )
    assert server.receive_data(data) == [
        RequestReceived(1, REQUEST, False),
        DataReceived(1, b"ab", True),
    ]


def test_a_ping_is_answered_and_an_unknown_frame_or_priority_ignored() -> None:
    server = _server()
    events = server.receive_data(
        http2.frame(0xEE, 0xFF, 0, b"whatever")
        + http2.frame(http2.PRIORITY_FRAME, 0, 9, b"\0\0\0\1\x10")
        + http2.frame(http2.PING, 0, 0, b"abcdefgh")
        + http2.frame(http2.PING, http2.ACK, 0, b"abcdefgh")  # we sent none: nothing to do
    )
    assert events == [PingReceived(b"abcdefgh")]
    assert _frames(server.data_to_send()) == [(http2.PING, http2.ACK, 0, b"abcdefgh")]


def test_bytes_beyond_the_peers_windows_wait_then_go_with_the_trailers_behind() -> None:
    server = _server()
    settings = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 10)])
    server.receive_data(http2.frame(http2.SETTINGS, 0, 0, settings) + _request(1))
    server.data_to_send()
    server.send_headers(1, b"\x88")
    server.send_data(1, b"a" * 25)
    server.send_data(1, b"b" * 5)
    server.send_headers(1, b"trailers", end_stream=True)
    sent = _frames(server.data_to_send())
    assert sent == [(http2.HEADERS, http2.END_HEADERS, 1, b"\x88"), (http2.DATA, 0, 1, b"a" * 10)]
    assert server.flow_blocked
    assert server.send_window(1) == 0
    events = server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(12)))
    assert events == [WindowUpdated(1, 12)]
    assert _frames(server.data_to_send()) == [(http2.DATA, 0, 1, b"a" * 12)]
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(100)))
    assert _frames(server.data_to_send()) == [
        (http2.DATA, 0, 1, b"aaabbbbb"),
        (http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, 1, b"trailers"),
        # answered before the request ended: the client may stop sending it
        (http2.RST_STREAM, 0, 1, http2.U32.pack(http2.NO_ERROR)),
    ]
    assert not server.flow_blocked
    assert server.open_streams == 0


def test_the_connection_window_is_shared_and_end_stream_waits_for_it() -> None:
    client, server = _pair()
    first = client.open_stream(http2.header_block(REQUEST), end_stream=True)
    second = client.open_stream(http2.header_block(REQUEST), end_stream=True)
    _exchange(client, server)
    for stream_id in (first, second):
        server.send_headers(stream_id, http2.header_block(RESPONSE))
    server.send_data(first, b"x" * 40_000, end_stream=True)
    server.send_data(second, b"y" * 40_000, end_stream=True)
    assert server.flow_blocked  # 80,000 bytes against a connection window of 65,535
    assert server.open_streams == 1
    events, _ = _exchange(client, server)  # the client's updates (half a window used) let it go
    received: dict[int, bytes] = {first: b"", second: b""}
    ended = []
    for event in events:
        if isinstance(event, DataReceived):
            received[event.stream_id] += event.data
            if event.end_stream:
                ended.append(event.stream_id)
    assert received == {first: b"x" * 40_000, second: b"y" * 40_000}
    assert ended == [first, second]
    assert server.open_streams == client.open_streams == 0


def test_the_peers_frame_size_and_window_setting_apply_to_waiting_and_open_streams() -> None:
    server = _server()
    server.receive_data(_request(1, end_stream=True))
    settings = http2.settings_payload(
        [(http2.SETTINGS_INITIAL_WINDOW_SIZE, 0), (http2.SETTINGS_MAX_FRAME_SIZE, 20_000)]
    )
    server.receive_data(http2.frame(http2.SETTINGS, 0, 0, settings))
    server.data_to_send()
    server.send_headers(1, b"\x88" + b"h" * 30_000)  # over the frame size: CONTINUATION
    server.send_data(1, b"d" * 50_000, end_stream=True)
    sent = _frames(server.data_to_send())
    assert [(kind, flags, len(payload)) for kind, flags, _, payload in sent] == [
        (http2.HEADERS, 0, 20_000),
        (http2.CONTINUATION, http2.END_HEADERS, 10_001),
    ]
    settings = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 60_000)])
    server.receive_data(http2.frame(http2.SETTINGS, 0, 0, settings))
    sent = _frames(server.data_to_send())
    assert [(kind, flags, len(payload)) for kind, flags, _, payload in sent] == [
        (http2.SETTINGS, http2.ACK, 0),
        (http2.DATA, 0, 20_000),
        (http2.DATA, 0, 20_000),
        (http2.DATA, http2.END_STREAM, 10_000),
    ]
    assert server.open_streams == 0


def test_received_data_is_given_back_once_half_a_window_is_used() -> None:
    server = _server(frame_bytes_max=1 << 16)
    encoder = hpack.Encoder()
    server.receive_data(_request(1, encoder=encoder) + _request(3, encoder=encoder))
    server.data_to_send()
    server.receive_data(http2.frame(http2.DATA, 0, 1, b"a" * 20_000))
    assert server.data_to_send() == b""
    server.receive_data(http2.frame(http2.DATA, 0, 1, b"a" * 13_000))  # 33,000: over half
    assert _frames(server.data_to_send()) == [
        (http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(33_000)),
        (http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(33_000)),
    ]
    # A stream that ends needs no update of its own; the connection's still comes.
    server.receive_data(http2.frame(http2.DATA, http2.END_STREAM, 3, b"b" * 40_000))
    assert _frames(server.data_to_send()) == [(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(40_000))]


def test_a_reset_stream_is_reported_and_what_waited_for_it_dropped() -> None:
    server = _server()
    server.receive_data(_request(1))
    settings = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 0)])
    server.receive_data(http2.frame(http2.SETTINGS, 0, 0, settings))
    server.send_headers(1, b"\x88")
    server.send_data(1, b"waits")
    assert server.flow_blocked
    events = server.receive_data(
        http2.frame(http2.RST_STREAM, 0, 1, http2.U32.pack(http2.CANCEL))
        + http2.frame(http2.DATA, 0, 1, b"late")  # dropped: the stream is closed
    )
    assert events == [StreamReset(1, http2.CANCEL)]
    assert not server.flow_blocked
    assert server.open_streams == 0
    server.send_data(1, b"more")  # a closed stream takes nothing, silently
    server.data_to_send()
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(100)))
    assert server.data_to_send() == b""


def test_our_reset_and_goaway_are_framed_and_streams_after_goaway_not_served() -> None:
    server = _server()
    encoder = hpack.Encoder()
    server.receive_data(_request(1, encoder=encoder))
    server.data_to_send()
    server.reset_stream(1, http2.CANCEL)
    server.close_connection(http2.NO_ERROR, "bye")
    server.close_connection(http2.PROTOCOL_ERROR)  # once only
    assert _frames(server.data_to_send()) == [
        (http2.RST_STREAM, 0, 1, http2.U32.pack(http2.CANCEL)),
        (http2.GOAWAY, 0, 0, http2.U32.pack(1) + http2.U32.pack(http2.NO_ERROR) + b"bye"),
    ]
    assert server.receive_data(_request(3, encoder=encoder)) == []


def test_a_graceful_goaway_names_no_stream_and_streams_crossing_it_are_served() -> None:
    server = _server()
    encoder = hpack.Encoder()
    server.receive_data(_request(1, encoder=encoder))
    server.data_to_send()
    server.announce_going_away()
    assert _frames(server.data_to_send()) == [
        (http2.GOAWAY, 0, 0, http2.U32.pack(0x7FFFFFFF) + http2.U32.pack(http2.NO_ERROR))
    ]
    crossing = server.receive_data(_request(3, encoder=encoder))
    assert [(type(e), e.stream_id) for e in crossing] == [(RequestReceived, 3)]  # type: ignore[union-attr]
    server.close_connection()  # the final GOAWAY names the last stream served
    assert _frames(server.data_to_send()) == [
        (http2.GOAWAY, 0, 0, http2.U32.pack(3) + http2.U32.pack(http2.NO_ERROR))
    ]
    server.announce_going_away()  # nothing after the final one
    assert server.data_to_send() == b""
    assert server.receive_data(_request(5, encoder=encoder)) == []


def test_the_peers_goaway_is_reported_and_no_stream_opens_after_it() -> None:
    client, _server_side = _pair()
    payload = http2.U32.pack(5) + http2.U32.pack(http2.NO_ERROR) + b"draining"
    events = client.receive_data(http2.frame(http2.GOAWAY, 0, 0, payload))
    assert events == [ConnectionTerminated(http2.NO_ERROR, 5, b"draining")]
    with pytest.raises(ValueError, match="going away"):
        client.open_stream(http2.header_block(REQUEST))


def test_streams_over_the_limit_are_refused_unreported() -> None:
    server = _server(max_concurrent_streams=2)
    encoder = hpack.Encoder()
    events = server.receive_data(
        _request(1, encoder=encoder) + _request(3, encoder=encoder) + _request(5, encoder=encoder)
    )
    assert [e.stream_id for e in events if isinstance(e, RequestReceived)] == [1, 3]
    assert _frames(server.data_to_send()) == [
        (http2.RST_STREAM, 0, 5, http2.U32.pack(http2.REFUSED_STREAM))
    ]


def test_using_the_api_wrongly_is_a_clear_error() -> None:
    server = _server()
    server.receive_data(_request(1))
    with pytest.raises(ValueError, match="data before headers"):
        server.send_data(1, b"x")
    with pytest.raises(ValueError, match="never opened"):
        server.send_headers(3, b"\x88")
    with pytest.raises(ValueError, match="no push"):
        server.open_stream(b"\x88")
    server.send_headers(1, b"\x88", end_stream=True)
    server.send_headers(1, b"\x88")  # closed now (answered, reset): nothing, silently
    client = Http2Connection(client_side=True)
    stream_id = client.open_stream(b"\x83")
    client.send_data(stream_id, b"", end_stream=True)
    with pytest.raises(ValueError, match="already ended"):
        client.send_data(stream_id, b"x")
    with pytest.raises(ValueError, match="already ended"):
        client.send_headers(stream_id, b"")
    blocked = _server()
    blocked.receive_data(
        _request(1) + http2.frame(http2.SETTINGS, 0, 0, b"\0\4\0\0\0\0")  # windows of 0
    )
    blocked.send_headers(1, b"\x88")
    blocked.send_data(1, b"waits")
    with pytest.raises(ValueError, match="headers after data must end"):
        blocked.send_headers(1, b"more headers")
    assert blocked.send_window(1) == 0
    blocked.reset_stream(1)
    assert blocked.send_window(1) == 0  # closed
    blocked.reset_stream(1)  # closed: nothing to do
    assert _frames(blocked.data_to_send())[-1] == (
        http2.RST_STREAM, 0, 1, http2.U32.pack(http2.CANCEL)
    )  # fmt: skip
    with pytest.raises(ValueError, match="outside"):
        Http2Connection(client_side=True, frame_bytes_max=1000)
    with pytest.raises(ValueError, match="outside"):
        Http2Connection(client_side=True, window_bytes=1000)
    with pytest.raises(ValueError, match="below 1"):
        Http2Connection(client_side=False, max_concurrent_streams=0)


_SETTINGS = http2.frame(http2.SETTINGS, 0, 0)
_PING = http2.frame(http2.PING, 0, 0, bytes(8))


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", http2.PROTOCOL_ERROR),
        (http2.frame(http2.PING, 0, 0, bytes(8)), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.HEADERS, http2.END_HEADERS, 2, b"\x82"),
         http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.CONTINUATION, http2.END_HEADERS, 1, b"\x82"),
         http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.HEADERS, 0, 1, b"\x82") + _PING, http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.DATA, 0, 0, b"x"), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.DATA, 0, 7, b"x"), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.DATA, http2.PADDED, 1, b"\x09abc"), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.PING, 0, 0, b"short"), http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.PING, 0, 1, bytes(8)), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, 0, 0, b"\0\5\0\0\0\1"), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, 0, 0, b"\0\4\x80\0\0\0"),
         http2.FLOW_CONTROL_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, 0, 0, b"\0\4"), http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, http2.ACK, 0, b"\0\4\0\0\0\1"),
         http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, b"\xff\xff\xff\xff"),
         http2.COMPRESSION_ERROR),
        (_SETTINGS + http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(http2.WINDOW_MAX)),
         http2.FLOW_CONTROL_ERROR),
        (_SETTINGS + http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(0)),
         http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.WINDOW_UPDATE, 0, 0, b"\0"), http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.RST_STREAM, 0, 0, bytes(4)), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.RST_STREAM, 0, 9, bytes(4)), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.GOAWAY, 0, 0, b"\0"), http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.PUSH_PROMISE, http2.END_HEADERS, 1, bytes(4)),
         http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.DATA, 0, 1, bytes(http2.DEFAULT_FRAME_BYTES + 1)),
         http2.FRAME_SIZE_ERROR),
        (_SETTINGS + _request(1, end_stream=True) + http2.frame(http2.DATA, 0, 1, b"x"),
         http2.STREAM_CLOSED),
        (b"PRI * HTTP/2.0\r\n\r\nXX", http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.HEADERS, http2.END_HEADERS, 0, b"\x82"),
         http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.HEADERS, 0, 1, b"\x82")
         + http2.frame(http2.CONTINUATION, 0, 1, bytes(16_384)) * 65, http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.GOAWAY, 0, 1, bytes(8)), http2.PROTOCOL_ERROR),
        (_SETTINGS + _request(1, end_stream=True) + _request(1), http2.STREAM_CLOSED),
        (_SETTINGS + _request(1)
         + http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(http2.WINDOW_MAX)),
         http2.FLOW_CONTROL_ERROR),
        (_SETTINGS + _request(1)
         + http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(http2.WINDOW_MAX - 65_535))
         + http2.frame(http2.SETTINGS, 0, 0, b"\0\4\0\1\0\0"), http2.FLOW_CONTROL_ERROR),
        (_SETTINGS + _request(1) + http2.frame(http2.RST_STREAM, 0, 1, bytes(3)),
         http2.FRAME_SIZE_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, 0, 1), http2.PROTOCOL_ERROR),
        (_SETTINGS + http2.frame(http2.SETTINGS, 0, 0, b"\0\2\0\0\0\2"), http2.PROTOCOL_ERROR),
    ],
    ids=[
        "not-a-preface", "first-frame-not-settings", "even-stream", "stray-continuation",
        "broken-off-block", "data-on-stream-0", "data-on-idle-stream", "padding-too-long",
        "short-ping", "ping-on-a-stream", "tiny-frame-size", "window-setting-too-large",
        "settings-not-6-bytes", "settings-ack-with-payload", "bad-hpack", "window-overflow",
        "window-update-of-0", "short-window-update", "reset-stream-0", "reset-idle-stream",
        "short-goaway", "push-promise", "frame-too-large", "data-after-end-stream",
        "bad-preface-start", "headers-on-stream-0", "header-block-too-large", "goaway-on-a-stream",
        "headers-after-end-stream", "stream-window-overflow", "settings-overflow-a-stream-window",
        "short-reset", "settings-on-a-stream", "enable-push-2",
    ],
)  # fmt: skip
def test_a_connection_error_queues_goaway_with_its_code_and_takes_no_more(
    data: bytes, code: int
) -> None:
    server = Http2Connection(client_side=False)
    server.initiate()
    server.data_to_send()
    preface = b"" if data.startswith((b"GET", b"PRI")) else http2.PREFACE
    with pytest.raises(http2.FrameError) as caught:
        server.receive_data(preface + data)
    assert caught.value.code == code
    ((kind, _flags, stream_id, payload),) = [
        f for f in _frames(server.data_to_send()) if f[0] == http2.GOAWAY
    ]
    assert (kind, stream_id) == (http2.GOAWAY, 0)
    assert http2.U32.unpack(payload[4:8])[0] == code
    assert payload[8:] == str(caught.value).encode()[:256]
    assert server.receive_data(_request(11)) == []


def test_data_beyond_our_window_is_a_flow_control_error() -> None:
    # Windows are given back as they are half used, so only a frame larger than what
    # is left of one (frames here may be larger than the window) can overrun it.
    server = _server(frame_bytes_max=1 << 20)  # windows of 65,535
    server.receive_data(_request(1))
    server.receive_data(http2.frame(http2.DATA, 0, 1, bytes(30_000)))  # under half: kept
    with pytest.raises(http2.FrameError) as caught:
        server.receive_data(http2.frame(http2.DATA, 0, 1, bytes(35_536)))  # 65,536 in all
    assert caught.value.code == http2.FLOW_CONTROL_ERROR
    assert "connection window" in str(caught.value)
    # The connection's window is given back by all streams' bytes, a stream's by its own.
    server = _server(frame_bytes_max=1 << 20)
    encoder = hpack.Encoder()
    server.receive_data(_request(1, encoder=encoder) + _request(3, encoder=encoder))
    server.receive_data(http2.frame(http2.DATA, 0, 3, bytes(30_000)))
    server.receive_data(http2.frame(http2.DATA, 0, 1, bytes(30_000)))  # the connection's back
    with pytest.raises(http2.FrameError) as caught:
        server.receive_data(http2.frame(http2.DATA, 0, 1, bytes(36_000)))
    assert caught.value.code == http2.FLOW_CONTROL_ERROR
    assert "window of stream 1" in str(caught.value)


def test_a_client_refuses_a_server_that_does_not_start_with_settings() -> None:
    client = Http2Connection(client_side=True)
    client.initiate()
    with pytest.raises(http2.FrameError) as caught:
        client.receive_data(http2.frame(http2.PING, 0, 0, bytes(8)))
    assert caught.value.code == http2.PROTOCOL_ERROR
    client = Http2Connection(client_side=True)
    client.receive_data(_SETTINGS)
    with pytest.raises(http2.FrameError, match="never opened"):  # a stream we did not open
        client.receive_data(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, b"\x88"))


def test_frames_for_a_stream_already_closed_are_dropped_silently() -> None:
    server = _server()
    encoder = hpack.Encoder()
    server.receive_data(_request(1, end_stream=True, encoder=encoder))
    server.send_headers(1, b"\x88", end_stream=True)  # answered: closed both ways
    server.data_to_send()
    late = (
        _request(1, encoder=encoder)  # decoded (the table follows), not reported
        + http2.frame(http2.RST_STREAM, 0, 1, http2.U32.pack(http2.CANCEL))
        + http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(10))
    )
    assert server.receive_data(late) == []
    assert server.receive_data(_request(3, encoder=encoder)) == [RequestReceived(3, REQUEST, False)]
    client, _server_side = _pair()
    stream_id = client.open_stream(http2.header_block(REQUEST))
    client.reset_stream(stream_id)
    block = http2.header_block(RESPONSE)
    assert client.receive_data(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, block)) == []


def test_a_connection_window_update_serves_blocked_streams_in_order_while_it_lasts() -> None:
    server = _server()
    encoder = hpack.Encoder()
    server.receive_data(
        _request(1, encoder=encoder) + _request(3, encoder=encoder) + _request(5, encoder=encoder)
    )
    for stream_id in (1, 3, 5):
        server.send_headers(stream_id, b"\x88")
    server.send_data(1, b"a" * 65_535)  # the whole connection window
    server.send_data(3, b"b" * 10)
    server.send_data(5, b"c" * 10)
    server.receive_data(http2.frame(http2.RST_STREAM, 0, 1, http2.U32.pack(http2.CANCEL)))
    shrink = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 0)])
    server.receive_data(http2.frame(http2.SETTINGS, 0, 0, shrink))  # streams 3 and 5: windows of 0
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 3, http2.U32.pack(4)))
    server.data_to_send()
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(6)))
    # Stream 3 takes its 4; stream 5 has no window of its own.
    assert [f for f in _frames(server.data_to_send()) if f[0] == http2.DATA] == [
        (http2.DATA, 0, 3, b"bbbb")
    ]
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 3, http2.U32.pack(100)))
    server.receive_data(http2.frame(http2.WINDOW_UPDATE, 0, 5, http2.U32.pack(100)))
    # The connection had 2 left: stream 3 takes them, and stream 5 waits for more.
    assert [f for f in _frames(server.data_to_send()) if f[0] == http2.DATA] == [
        (http2.DATA, 0, 3, b"bb")
    ]
    assert server.flow_blocked
