"""The remoting TCP server: frames in, requests served concurrently, answers by opaque.

Each connection reads frames with the sans-IO decoder
(``protocol/remoting/frames.py``) and serves every request in its own task,
so a slow request (a long poll) never holds back the ones behind it; the
answers go out in whatever order they finish, matched by their opaque. A
oneway request gets no answer.

Bad input, and what the connection does after it:

- a frame whose header cannot be read: answered SYSTEM_ERROR (with the
  opaque if it could be recovered) and the connection goes on;
- a frame length that cannot be trusted (below 4, above the maximum): answered
  SYSTEM_ERROR with opaque 0, then the connection is closed (nothing after it
  can be framed);
- the stream ending inside a frame: answered the same way if the peer still
  reads, then closed.

Answers to requests already in flight are still written before a connection
closes (the peer may have only shut down its sending side).

Writes are coalesced: the frames a connection's tasks write in one event-loop
turn go out in one write (one system call for the answers of a batch of
requests that storage completed together). A frame is written in the turn
after it was queued, and before the connection closes.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

from broker.remoting.service import Connection, RemotingService
from broker.remoting.status import (
    busy_answer,
    code_of,
    frame_error_answer,
    malformed_answer,
    remark_of,
)
from protocol.remoting.codes import ResponseCode
from protocol.remoting.errors import FrameError
from protocol.remoting.frames import (
    FRAME_BYTES_MAX,
    FrameDecoder,
    Malformed,
    RemotingCommand,
    encode,
)

log = logging.getLogger("broker.remoting")

READ_BYTES = 256 * 1024
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
REQUESTS_IN_FLIGHT_MAX = 1024
"""Requests one connection may have in flight; more are answered SYSTEM_BUSY at once."""


class Outbox:
    """A connection's frames queued in one event-loop turn, written together at its end.

    Invariant: ``_frames`` is non-empty exactly while a flush is scheduled.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._frames: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    @property
    def closing(self) -> bool:
        """Whether the connection is closing (nothing more can be written)."""
        return self.writer.is_closing()

    def write(self, frame: bytes) -> None:
        """Queue ``frame``; it goes out at the end of this turn (unless closing by then)."""
        if not self._frames:
            self._loop.call_soon(self.flush)
        self._frames.append(frame)

    def flush(self) -> None:
        """Write what is queued (a no-op when nothing is)."""
        if not self._frames:
            return
        frames, self._frames = self._frames, []
        if not self.writer.is_closing():
            self.writer.writelines(frames)

    def close(self) -> None:
        """Write what is queued, then close the connection."""
        self.flush()
        self.writer.close()


class RemotingServer:
    """Serves ``service`` on ``listen`` (host:port, port 0 = any)."""

    def __init__(
        self, service: RemotingService, listen: str, *, frame_bytes_max: int = FRAME_BYTES_MAX
    ) -> None:
        self.service = service
        self.listen = listen
        self.frame_bytes_max = frame_bytes_max
        self.port: int | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # Open connections: their outboxes and the requests each has in flight.
        self._open: dict[int, tuple[Outbox, set[asyncio.Task[None]]]] = {}
        self._ids = itertools.count(1)

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        host, _, port = self.listen.rpartition(":")
        self._server = await asyncio.start_server(
            self._serve, host.strip("[]") or None, int(port), limit=READ_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop accepting; requests in flight get ``grace_s`` to be answered, then every
        connection is closed."""
        if self._server is not None:
            self._server.close()
        in_flight = [request for _, requests in self._open.values() for request in requests]
        if in_flight:
            await asyncio.wait(in_flight, timeout=grace_s)
        for outbox, _ in self._open.values():
            outbox.close()  # the connection's read ends; it cleans up and finishes
        if self._connections:
            _done, pending = await asyncio.wait(self._connections, timeout=grace_s)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection_id = next(self._ids)
        peer = writer.get_extra_info("peername")
        connection = Connection(
            connection_id, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        )
        requests: set[asyncio.Task[None]] = set()
        decoder = FrameDecoder(self.frame_bytes_max)
        outbox = Outbox(writer)

        def write(command: RemotingCommand) -> bool:
            """Send a request of the broker's own (a check-back) on this connection."""
            if outbox.closing:
                return False
            outbox.write(encode(command))
            return True

        self.service.connected(connection_id, write)
        self._open[connection_id] = (outbox, requests)
        try:
            while True:
                data = await reader.read(READ_BYTES)
                if not data:
                    error = decoder.end_of_stream()
                    if error is not None:
                        self._answer_frame_error(outbox, connection, error)
                    break
                decoder.receive(data)
                try:
                    while (item := decoder.next_command()) is not None:
                        if isinstance(item, Malformed):
                            self._answer_malformed(outbox, connection, item)
                        elif item.is_response:
                            log.debug(
                                "unexpected response %d from %s", item.opaque, connection.peer
                            )
                        elif len(requests) >= REQUESTS_IN_FLIGHT_MAX:
                            if not item.is_oneway:
                                outbox.write(encode(busy_answer(item, REQUESTS_IN_FLIGHT_MAX)))
                        else:
                            request = asyncio.create_task(
                                self._serve_request(outbox, item, connection)
                            )
                            requests.add(request)
                            request.add_done_callback(requests.discard)
                except FrameError as error:
                    self._answer_frame_error(outbox, connection, error)
                    break
                if writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
                    await writer.drain()
            if requests:  # answer what is in flight before closing
                await asyncio.wait(requests)
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            log.debug("remoting connection %s broke: %s", connection.peer, error)
        finally:
            for request in requests:
                request.cancel()
            self.service.closed(connection_id)
            self._open.pop(connection_id, None)
            outbox.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            self._connections.discard(task)

    async def _serve_request(
        self, outbox: Outbox, request: RemotingCommand, connection: Connection
    ) -> None:
        response = await self.service.handle(request, connection)
        if request.is_oneway and response.code != ResponseCode.SUCCESS:
            # Nobody hears the answer: the log is the only place the failure shows.
            log.warning(
                "oneway request %d from %s failed (%d): %s",
                request.code,
                connection.peer,
                response.code,
                response.remark,
            )
        if request.is_oneway or outbox.closing:
            return
        try:
            frame = encode(response)
        except ValueError as error:  # e.g. a header beyond the 24-bit length
            frame = encode(request.reply(code_of(error), remark_of(error)))
        outbox.write(frame)

    def _answer_malformed(self, outbox: Outbox, connection: Connection, item: Malformed) -> None:
        log.warning("malformed remoting command from %s: %s", connection.peer, item.reason)
        if not item.is_oneway:
            outbox.write(encode(malformed_answer(item)))

    def _answer_frame_error(
        self, outbox: Outbox, connection: Connection, error: FrameError
    ) -> None:
        log.warning("remoting connection %s closed: %s", connection.peer, error)
        if not outbox.closing:
            outbox.write(encode(frame_error_answer(error)))
