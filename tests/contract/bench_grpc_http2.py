"""Benchmark: CPU per call of the broker's HTTP/2 gRPC server, in one process, no sockets.

Drives one server connection (``broker.grpc.http2``) from pre-built client
bytes: a client that pipelines ``--in-flight`` calls in one read, waits until
the server has answered them all, and repeats. What is timed is the server's
side only: frames and HPACK in, the generated-handler plumbing, framing and
flow control out (the answer goes to a transport that only counts bytes).
The handlers answer with pre-built bytes, as in ``rip5.bench.grpc_stream``.

Shapes (those of ``rip5.bench.grpc_stream``, plus the smallest call):

- ``unary``: a few bytes in, a few bytes out;
- ``send``: a unary call whose request carries 32 x 1.1 KB (a batched SendMessage);
- ``receive``: a server-streaming call of 34 responses of 1.2 KB (a ReceiveMessage of 32).

Not a test: run it by hand, e.g.::

    .venv/bin/python -m tests.contract.bench_grpc_http2 --calls 20000 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import hpack
import uvloop

from broker.grpc import http2 as server_http2
from broker.grpc.http2 import Http2GrpcServer
from protocol import http2

RESPONSE_BYTES = 1_200
MESSAGE_BYTES = 1_100
MESSAGES = 32


class _CountingTransport(asyncio.Transport):
    """Takes the server's writes and keeps only their size."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _identity(data: bytes) -> bytes:
    return data


def _server() -> Http2GrpcServer:
    response = b"r" * RESPONSE_BYTES

    async def unary(request: bytes, context: Any) -> bytes:
        return b"ok"

    async def receive(request: bytes, context: Any) -> AsyncIterator[bytes]:
        for _ in range(MESSAGES + 2):
            yield response

    server = Http2GrpcServer(inbound_bytes_max=64 * 1024 * 1024)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.S",
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(unary, _identity, _identity),
                    "Send": grpc.unary_unary_rpc_method_handler(unary, _identity, _identity),
                    "Receive": grpc.unary_stream_rpc_method_handler(receive, _identity, _identity),
                },
            ),
        )
    )
    return server


def _client_bytes(shape: str, calls: int, in_flight: int) -> tuple[bytes, list[bytes]]:
    """The connection preface, then one chunk per round of ``in_flight`` calls."""
    encoder = hpack.Encoder()
    path = {"unary": "Unary", "send": "Send", "receive": "Receive"}[shape]
    body = {"unary": b"q" * 20, "send": b"m" * (MESSAGE_BYTES * MESSAGES), "receive": b"q" * 60}
    message = b"\0" + len(body[shape]).to_bytes(4, "big") + body[shape]
    settings = http2.settings_payload(
        [
            (http2.SETTINGS_INITIAL_WINDOW_SIZE, http2.WINDOW_MAX),
            (http2.SETTINGS_MAX_FRAME_SIZE, 1 << 20),
        ]
    )
    preface = (
        http2.PREFACE
        + http2.frame(http2.SETTINGS, 0, 0, settings)
        + http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(http2.WINDOW_MAX - 65_535))
        + http2.frame(http2.SETTINGS, http2.ACK, 0)
    )
    # The fixed fields go through HPACK's table as a client's encoder puts them (the
    # first block adds them, later blocks index them); the request id, different in
    # every call, is a literal that leaves the table alone, so blocks are cheap to build.
    fixed = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/bench.S/{path}"),
        (":authority", "127.0.0.1:8081"),
        ("te", "trailers"),
        ("content-type", "application/grpc"),
        ("user-agent", "grpc-java-netty/1.60.0"),
        ("grpc-accept-encoding", "gzip"),
        ("grpc-timeout", "2999m"),
        ("x-mq-client-id", "host@1234#5678"),
        ("x-mq-language", "JAVA"),
        ("x-mq-protocol", "v2"),
    ]
    first, indexed = encoder.encode(fixed), encoder.encode(fixed)
    rounds: list[bytes] = []
    stream_id = 1
    for start in range(0, calls, in_flight):
        chunk = bytearray()
        for n in range(start, min(calls, start + in_flight)):
            request_id = http2.literal(b"x-mq-request-id", b"%032x" % n)
            block = (first if n == 0 else indexed) + request_id
            chunk += http2.frame(http2.HEADERS, http2.END_HEADERS, stream_id, block)
            chunk += http2.frame(http2.DATA, http2.END_STREAM, stream_id, message)
            stream_id += 2
        rounds.append(bytes(chunk))
    return preface, rounds


async def _run(shape: str, calls: int, in_flight: int) -> float:
    """Seconds of CPU per call."""
    preface, rounds = _client_bytes(shape, calls, in_flight)
    connection = server_http2._Connection(_server())
    transport = _CountingTransport()
    connection.connection_made(transport)
    connection.data_received(preface)
    started = time.process_time()
    for chunk in rounds:
        connection.data_received(chunk)
        await connection.drained.wait()
    cpu_s = time.process_time() - started
    assert transport.written > calls * 20, "the server did not answer"
    return cpu_s / calls


def main() -> None:
    """Print the server's CPU per call of each shape, each run and the median."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shapes", default="unary,send,receive")
    args = parser.parse_args()
    for shape in args.shapes.split(","):
        figures = [
            1e6 * uvloop.run(_run(shape, args.calls, args.in_flight)) for _ in range(args.runs)
        ]
        runs = " ".join(f"{f:.1f}" for f in figures)
        print(f"{shape:8s} median {statistics.median(figures):6.1f} us/call  (runs: {runs})")


if __name__ == "__main__":
    main()
