"""The grpc transport: grpc.aio with a generic bytes handler, one tunnel call per connection.

An Angelia connection is one bidirectional gRPC call, ``/angelia.Tunnel/Open``,
on its own gRPC channel; each gRPC message carries one or more whole Angelia
frames. Angelia (not gRPC) multiplexes calls, applies deadlines and flow
control and carries errors, so this transport behaves exactly like tcp; gRPC
contributes HTTP/2, its proxies and TLS. A unary gRPC call per Angelia call
would cost ~250 µs of grpc.aio CPU on each side (see the baselines), the
tunnel pays that per batch of frames instead.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from angelia_rpc.config import TlsConfig
from angelia_rpc.transport.base import LinkHandler

METHOD = "/angelia.Tunnel/Open"
CHUNK_BYTES = 1 << 20
HIGH_WATER_BYTES = 4 << 20


def _options(frame_bytes_max: int) -> list[tuple[str, Any]]:
    size = max(frame_bytes_max, CHUNK_BYTES) + 1024
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
        ("grpc.so_reuseport", 0),
    ]


async def _ready_or_refused(channel: grpc.aio.Channel, address: str) -> None:
    """Wait for ``channel`` to be ready; ConnectionRefusedError at its first failure to
    connect (one attempt, as the other transports make: the channel retries itself)."""
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.READY:
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise ConnectionRefusedError(f"grpc channel to {address} failed to connect")
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


class _TunnelLink:
    """Queues writes for a writer task; reads are delivered by a reader loop."""

    def __init__(self, handler: LinkHandler, peer: str) -> None:
        self.handler = handler
        self.peer = peer
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()
        self._readable = asyncio.Event()
        self._readable.set()
        self._closing = False
        self._paused_writer = False

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        self._queue.append(data)
        self._queued_bytes += len(data)
        self._wakeup.set()
        if self._queued_bytes > HIGH_WATER_BYTES and not self._paused_writer:
            self._paused_writer = True
            self.handler.pause_writing()

    def close(self) -> None:
        self._closing = True
        self._wakeup.set()

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    async def run_writer(self, write: Callable[[bytes], Any]) -> None:
        """Send queued frames, batched up to CHUNK_BYTES per gRPC message, until closed."""
        queue = self._queue
        while True:
            if not queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            parts = [queue.popleft()]
            size = len(parts[0])
            while queue and size + len(queue[0]) <= CHUNK_BYTES:
                part = queue.popleft()
                parts.append(part)
                size += len(part)
            self._queued_bytes -= size
            await write(parts[0] if len(parts) == 1 else b"".join(parts))
            if self._paused_writer and self._queued_bytes < HIGH_WATER_BYTES // 2:
                self._paused_writer = False
                self.handler.resume_writing()

    async def run_reader(self, read: Callable[[], Any]) -> str:
        """Deliver messages until the stream ends; the reason it ended."""
        while True:
            await self._readable.wait()
            chunk = await read()
            if chunk is grpc.aio.EOF or chunk is None:
                return "closed by the peer"
            self.handler.data_received(chunk)


async def _run_both(
    link: _TunnelLink, read: Callable[[], Any], write: Callable[[bytes], Any]
) -> str:
    reader = asyncio.ensure_future(link.run_reader(read))
    writer = asyncio.ensure_future(link.run_writer(write))
    try:
        done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        if reader in done:
            return reader.result()
        writer.result()
        return "closed by this end"
    except grpc.aio.AioRpcError as exc:
        return f"gRPC {exc.code().name}: {exc.details()}"
    finally:
        reader.cancel()
        writer.cancel()
        await asyncio.gather(reader, writer, return_exceptions=True)


class _GrpcListener:
    def __init__(self, server: grpc.aio.Server, address: str) -> None:
        self.server = server
        self.address = address

    async def close(self) -> None:
        await self.server.stop(grace=None)


class GrpcTransport:
    """Angelia frames tunnelled through one grpc.aio bidirectional call per connection."""

    name = "grpc"

    def __init__(self, tls: TlsConfig | None, frame_bytes_max: int) -> None:
        self.tls = tls
        self.options = _options(frame_bytes_max)
        # read once here, not inside the event loop
        self._ca = Path(tls.ca_file).read_bytes() if tls else b""
        self._key_cert = (
            (Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes()) if tls else None
        )

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        options = list(self.options)
        if self.tls:
            key, cert = self._key_cert if self.tls.mutual and self._key_cert else (None, None)
            credentials = grpc.ssl_channel_credentials(
                root_certificates=self._ca, private_key=key, certificate_chain=cert
            )
            options.append(("grpc.ssl_target_name_override", self.tls.server_hostname))
            channel = grpc.aio.secure_channel(address, credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(address, options=options)
        try:
            async with asyncio.timeout(timeout_s):
                await _ready_or_refused(channel, address)
        except BaseException:
            await channel.close(grace=None)
            raise
        call = channel.stream_stream(METHOD)()
        link = _TunnelLink(handler, address)
        handler.link_made(link)

        async def run() -> None:
            reason = "closed"
            try:
                reason = await _run_both(link, call.read, call.write)
            finally:
                call.cancel()
                await channel.close(grace=None)
                handler.link_lost(reason)

        task = asyncio.ensure_future(run())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> _GrpcListener:
        """See :class:`angelia_rpc.transport.base.Transport`."""

        async def tunnel(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
            handler = new_handler()
            link = _TunnelLink(handler, context.peer())
            handler.link_made(link)
            reason = "closed"
            try:
                reason = await _run_both(link, context.read, context.write)
            finally:
                handler.link_lost(reason)

        server = grpc.aio.server(options=self.options)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "angelia.Tunnel", {"Open": grpc.stream_stream_rpc_method_handler(tunnel)}
                ),
            )
        )
        if self._key_cert is not None:
            mutual = self.tls is not None and self.tls.mutual
            credentials = grpc.ssl_server_credentials(
                [self._key_cert],
                root_certificates=self._ca if mutual else None,
                require_client_auth=mutual,
            )
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        await server.start()
        host = address.rpartition(":")[0]
        return _GrpcListener(server, f"{host}:{port}")


_TASKS: set[asyncio.Future[None]] = set()
