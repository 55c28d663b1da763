"""What grpc-python itself costs per RocketMQ call shape, with no broker logic.

Run: ``python -m rip5.bench.grpc_stream [--seconds S] [--in-flight N]``.

A server process answers, with pre-built bytes and nothing else:

- ``receive``: a server-streaming call of ``1 + messages + 1`` responses of
  the size of a ReceiveMessageResponse carrying a 1 KiB message (the shape of
  ReceiveMessage: status, one response per message, delivery timestamp);
- ``send``: a unary call whose request carries ``messages`` x 1 KiB (the
  shape of a batched SendMessage) and whose response is small.

The server is grpc.aio, or with ``--server h2`` the broker's own HTTP/2 server
(``broker.grpc.http2``, which sends a call's responses together). One client
process (grpc.aio, uvloop) keeps ``in_flight`` calls open. The
figures are the server's and the client's CPU per message (from /proc), so
they bound what any gRPC v2 broker written on grpcio can reach on a machine:
at C microseconds of server CPU per message, one core serves at most
1,000,000 / C messages per second before doing any work of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import time
from collections.abc import AsyncIterator

import grpc
import uvloop

from broker.grpc.http2 import Http2GrpcServer
from broker.grpc.server import INBOUND_BYTES_MAX

RESPONSE_BYTES = 1_200  # a ReceiveMessageResponse with a 1 KiB body and its properties
MESSAGE_BYTES = 1_100  # one message of a SendMessageRequest


def _identity(data: bytes) -> bytes:
    return data


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(
    port: int, messages: int, ready: multiprocessing.synchronize.Event, kind: str = "grpcio"
) -> None:
    response = b"r" * RESPONSE_BYTES

    async def receive(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(messages + 2):
            yield response

    async def send(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b"ok"

    async def main() -> None:
        handlers = grpc.method_handlers_generic_handler(
            "bench.Stream",
            {
                "Receive": grpc.unary_stream_rpc_method_handler(receive, _identity, _identity),
                "Send": grpc.unary_unary_rpc_method_handler(send, _identity, _identity),
            },
        )
        if kind == "h2":
            h2_server = Http2GrpcServer(inbound_bytes_max=INBOUND_BYTES_MAX)
            h2_server.add_generic_rpc_handlers((handlers,))
            await h2_server.start("127.0.0.1", port)
            ready.set()
            await asyncio.Event().wait()
        server = grpc.aio.server()  # only here: it starts grpc's own threads
        server.add_generic_rpc_handlers((handlers,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    uvloop.run(main())


async def _load(port: int, shape: str, messages: int, in_flight: int, seconds: float) -> int:
    """Calls completed in ``seconds``."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        receive = channel.unary_stream("/bench.Stream/Receive", _identity, _identity)
        send = channel.unary_unary("/bench.Stream/Send", _identity, _identity)
        request = b"m" * (MESSAGE_BYTES * messages)
        end = time.perf_counter() + seconds
        calls = 0

        async def worker() -> None:
            nonlocal calls
            while time.perf_counter() < end:
                if shape == "receive":
                    async for _ in receive(b"q"):
                        pass
                else:
                    await send(request)
                calls += 1

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return calls


def main() -> None:
    """Print server and client CPU per message for each call shape."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--messages", type=int, default=32, help="messages per call")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument(
        "--server",
        choices=("grpcio", "h2"),
        default="grpcio",
        help="grpcio: grpc.aio; h2: the broker's own server (broker.grpc.http2)",
    )
    args = parser.parse_args()
    port = args.port
    if port == 0:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, args.messages, ready, args.server))
    server.start()
    try:
        if not ready.wait(30):
            raise SystemExit("the grpc server did not start")
        print(
            f"# gRPC cost per message, {os.cpu_count()} cores, server {args.server}, "
            f"client grpc.aio (grpcio {grpc.__version__})"
        )
        for shape in ("send", "receive"):
            assert server.pid is not None
            server_before, client_before = _cpu_s(server.pid), time.process_time()
            started = time.perf_counter()
            calls = uvloop.run(_load(port, shape, args.messages, args.in_flight, args.seconds))
            elapsed = time.perf_counter() - started
            server_s = _cpu_s(server.pid) - server_before
            client_s = time.process_time() - client_before
            messages = calls * args.messages
            server_us, client_us = 1e6 * server_s / messages, 1e6 * client_s / messages
            print(
                f"{shape:8s} {calls / elapsed:8,.0f} calls/s {messages / elapsed:9,.0f} msgs/s  "
                f"server {server_us:6.1f} us/msg ({100 * server_s / elapsed:3.0f}%)  "
                f"client {client_us:6.1f} us/msg ({100 * client_s / elapsed:3.0f}%)"
            )
    finally:
        server.terminate()
        server.join(10)


if __name__ == "__main__":
    main()
