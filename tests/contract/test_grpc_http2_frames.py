"""The broker's gRPC server (broker.grpc.http2) fed HTTP/2 frames by hand.

grpc's own clients never send some of what HTTP/2 allows (padding,
CONTINUATION frames, a tiny window); a client of another stack may, so these
are written frame by frame, and so are the protocol errors the server must
answer with GOAWAY.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import grpc
import hpack
import pytest

from broker.grpc.http2 import Http2GrpcServer
from protocol import http2

LIMIT = 1024 * 1024


async def _size(request: bytes, context: Any) -> bytes:
    return b"%d" % len(request)


async def _chunks(request: bytes, context: Any) -> AsyncIterator[bytes]:
    size, count = (int(v) for v in request.split(b"x"))
    for i in range(count):
        yield bytes([65 + i % 26]) * size


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = Http2GrpcServer(inbound_bytes_max=LIMIT)
    server.add_registered_method_handlers(
        "t.S",
        {
            "Size": grpc.unary_unary_rpc_method_handler(_size),
            "Chunks": grpc.unary_stream_rpc_method_handler(_chunks),
        },
    )
    bound = await server.start("127.0.0.1", 0)
    try:
        yield bound
    finally:
        for client in RawClient.opened:
            client.writer.close()
            await client.writer.wait_closed()
        RawClient.opened.clear()
        await server.stop(1.0)


class RawClient:
    """A client that writes frames as given and reads the server's one by one."""

    opened: ClassVar[list[RawClient]] = []  # closed by the fixture

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = bytearray()
        self.pending: list[http2.Frame] = []

    @classmethod
    async def connect(cls, port: int, settings: bytes = b"") -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        cls.opened.append(client)
        client.send(http2.PREFACE + http2.frame(http2.SETTINGS, 0, 0, settings))
        return client

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def request_block(self, method: str) -> bytes:
        return bytes(
            self.encoder.encode(
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", method),
                    (":authority", "x"),
                    ("content-type", "application/grpc"),
                ]
            )
        )

    async def next_frame(self) -> http2.Frame:
        """The server's next frame other than SETTINGS and WINDOW_UPDATE on the connection."""
        while True:
            while not self.pending:
                data = await asyncio.wait_for(self.reader.read(65536), 10)
                assert data, "the server closed the connection"
                self.buffer += data
                self.pending = http2.split_frames(self.buffer, 1 << 24)
            frame = self.pending.pop(0)
            kind, stream_id = frame[0], frame[2]
            if kind == http2.SETTINGS or (kind == http2.WINDOW_UPDATE and stream_id == 0):
                continue
            return frame

    async def answer(self, stream_id: int) -> tuple[bytes, dict[bytes, bytes]]:
        """The DATA bytes of ``stream_id`` and its trailers, read up to END_STREAM."""
        data = b""
        while True:
            kind, flags, frame_stream, payload = await self.next_frame()
            assert frame_stream == stream_id, (kind, frame_stream)
            if kind == http2.DATA:
                data += payload
            elif kind == http2.HEADERS:
                fields = dict(self.decoder.decode(payload, raw=True))
                if flags & http2.END_STREAM:
                    return data, fields

    async def closed_with(self) -> int:
        """The error code of the GOAWAY the server sends before it hangs up."""
        while True:
            try:
                kind, _flags, _stream, payload = await self.next_frame()
            except AssertionError:
                raise AssertionError("closed without GOAWAY") from None
            if kind == http2.GOAWAY:
                assert await asyncio.wait_for(self.reader.read(), 10) == b""
                return http2.U32.unpack(payload[4:8])[0]


def _message(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


async def test_padding_priority_and_continuation_make_one_ordinary_call(port: int) -> None:
    client = await RawClient.connect(port)
    block = client.request_block("/t.S/Size")
    first = bytes([4]) + b"\0\0\0\0\x10" + block[:3] + b"\0" * 4  # padded, with priority
    client.send(http2.frame(http2.HEADERS, http2.PADDED | http2.PRIORITY, 1, first))
    client.send(http2.frame(http2.CONTINUATION, http2.END_HEADERS, 1, block[3:]))
    body = _message(b"x" * 300)
    client.send(http2.frame(http2.DATA, http2.PADDED, 1, bytes([20]) + body[:100] + b"\0" * 20))
    client.send(http2.frame(http2.DATA, http2.END_STREAM, 1, body[100:]))
    data, trailers = await client.answer(1)
    assert trailers[b"grpc-status"] == b"0"
    assert data == _message(b"300")


async def test_a_ping_is_answered_and_unknown_frames_are_ignored(port: int) -> None:
    client = await RawClient.connect(port)
    client.send(http2.frame(0xEE, 0xFF, 0, b"whatever"))
    client.send(http2.frame(http2.PRIORITY_FRAME, 0, 9, b"\0\0\0\1\x10"))
    client.send(http2.frame(http2.PING, 0, 0, b"12345678"))
    assert await client.next_frame() == (http2.PING, http2.ACK, 0, b"12345678")
    client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, client.request_block("/t.S/Size")))
    client.send(http2.frame(http2.DATA, http2.END_STREAM, 1, _message(b"ab")))
    assert (await client.answer(1))[0] == _message(b"2")


async def test_a_small_client_window_holds_the_answer_back_until_a_window_update(
    port: int,
) -> None:
    settings = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 10)])
    client = await RawClient.connect(port, settings)
    client.send(
        http2.frame(http2.HEADERS, http2.END_HEADERS, 1, client.request_block("/t.S/Chunks"))
    )
    client.send(http2.frame(http2.DATA, http2.END_STREAM, 1, _message(b"50x3")))
    received = 0
    while received < 10:  # the window's worth, never more
        kind, flags, stream_id, payload = await client.next_frame()
        assert stream_id == 1
        assert not flags & http2.END_STREAM
        if kind == http2.DATA:
            received += len(payload)
        assert received <= 10
    client.send(http2.frame(http2.WINDOW_UPDATE, 0, 1, http2.U32.pack(1000)))
    rest, trailers = await client.answer(1)
    assert trailers[b"grpc-status"] == b"0"
    assert received + len(rest) == 3 * (5 + 50)


async def test_an_answer_before_the_request_ends_resets_the_stream_and_serves_on(
    port: int,
) -> None:
    client = await RawClient.connect(port)
    client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, client.request_block("/t.S/Size")))
    client.send(http2.frame(http2.DATA, 0, 1, b"\0" + (LIMIT + 1).to_bytes(4, "big")))
    _data, trailers = await client.answer(1)
    assert trailers[b"grpc-status"] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]).encode()
    assert await client.next_frame() == (
        http2.RST_STREAM, 0, 1, http2.U32.pack(http2.NO_ERROR)
    )  # fmt: skip
    client.send(http2.frame(http2.DATA, http2.END_STREAM, 1, b"late bytes are dropped"))
    client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, 3, client.request_block("/t.S/Size")))
    client.send(http2.frame(http2.DATA, http2.END_STREAM, 3, _message(b"abc")))
    assert (await client.answer(3))[0] == _message(b"3")


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([http2.frame(http2.HEADERS, http2.END_HEADERS, 2, b"\x82")], http2.PROTOCOL_ERROR),
        ([http2.frame(http2.CONTINUATION, http2.END_HEADERS, 1, b"\x82")], http2.PROTOCOL_ERROR),
        ([http2.frame(http2.HEADERS, 0, 1, b"\x82"), http2.frame(http2.PING, 0, 0, bytes(8))],
         http2.PROTOCOL_ERROR),
        ([http2.frame(http2.DATA, 0, 0, b"x")], http2.PROTOCOL_ERROR),
        ([http2.frame(http2.PING, 0, 0, b"short")], http2.FRAME_SIZE_ERROR),
        ([http2.frame(http2.SETTINGS, 0, 0, b"\0\5\0\0\0\1")], http2.PROTOCOL_ERROR),
        ([http2.frame(http2.HEADERS, http2.END_HEADERS, 1, b"\xff\xff\xff\xff")],
         http2.COMPRESSION_ERROR),
        ([http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(http2.WINDOW_MAX))],
         http2.FLOW_CONTROL_ERROR),
    ],
    ids=[
        "even-stream", "stray-continuation", "broken-off-block", "data-on-stream-0",
        "short-ping", "tiny-frame-size", "bad-hpack", "window-overflow",
    ],
)  # fmt: skip
async def test_a_protocol_error_gets_goaway_and_other_connections_serve_on(
    port: int, frames: list[bytes], code: int
) -> None:
    client = await RawClient.connect(port)
    client.send(b"".join(frames))
    assert await client.closed_with() == code
    other = await RawClient.connect(port)
    other.send(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, other.request_block("/t.S/Size")))
    other.send(http2.frame(http2.DATA, http2.END_STREAM, 1, _message(b"")))
    assert (await other.answer(1))[0] == _message(b"0")
