"""Fault injection for tests with real processes: drop, delay, cut a link both ways.

Two tools:

- :class:`FaultProxy`: a TCP relay placed between two processes (point the
  client at the proxy, the proxy at the server). It works for every socket
  transport (tcp, grpc, http2, with or without TLS: it relays bytes) and is
  controlled by the test process while the peers run unchanged:
  ``delay_ms`` (both ways, order kept), ``blackhole()`` (drop everything both
  ways while connections stay open, like a partition without resets),
  ``cut()`` (close every connection both ways and refuse new ones until
  ``heal()``).
- :class:`FaultyTransport`: wraps any transport inside a process; it drops
  whole writes (whole Angelia frames: a lossy message network) with a seeded
  probability, delays them (order kept) and can cut every link or refuse new
  ones. Use it where the test owns the process (a sim, or a test role).

Randomness comes from a seed, so a failing run replays.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from angelia_rpc.transport.base import Link, LinkHandler, Listener, Transport, split_address


@dataclass
class FaultPlan:
    """What a :class:`FaultyTransport` does to traffic; change it at any time."""

    drop_rate: float = 0.0
    delay_ms_min: float = 0.0
    delay_ms_max: float = 0.0
    refuse_new: bool = False
    seed: int = 0
    random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)


class _FaultyLink:
    """Sits between a connection and the real link, both directions."""

    def __init__(self, transport: FaultyTransport, handler: LinkHandler) -> None:
        self.transport = transport
        self.handler = handler
        self.inner: Link | None = None
        self.peer = "?"
        self._last_delivery = 0.0

    # the handler side (what the real link calls)
    def link_made(self, link: Link) -> None:
        self.inner = link
        self.peer = link.peer
        self.transport.links.add(self)
        self.handler.link_made(self)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def link_lost(self, reason: str) -> None:
        self.transport.links.discard(self)
        self.handler.link_lost(reason)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    # the link side (what the connection calls)
    def write(self, data: bytes) -> None:
        plan = self.transport.plan
        if plan.drop_rate and plan.random.random() < plan.drop_rate:
            return
        inner = self.inner
        assert inner is not None
        if plan.delay_ms_max <= 0 and self._last_delivery == 0.0:
            inner.write(data)
            return
        loop = asyncio.get_running_loop()
        delay = plan.random.uniform(plan.delay_ms_min, plan.delay_ms_max) / 1000
        when = max(loop.time() + delay, self._last_delivery)
        self._last_delivery = when
        loop.call_at(when, inner.write, data)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()

    def pause_reading(self) -> None:
        if self.inner is not None:
            self.inner.pause_reading()

    def resume_reading(self) -> None:
        if self.inner is not None:
            self.inner.resume_reading()


class FaultyTransport:
    """Any transport, with the faults of a :class:`FaultPlan` applied to its links."""

    def __init__(self, inner: Transport, plan: FaultPlan | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.plan = plan or FaultPlan()
        self.links: set[_FaultyLink] = set()

    def cut(self) -> None:
        """Close every link now (both ends see the connection lost)."""
        for link in list(self.links):
            link.close()

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """See :class:`angelia_rpc.transport.base.Transport`; refused while ``refuse_new``."""
        if self.plan.refuse_new:
            raise ConnectionRefusedError(f"fault injection refuses connections to {address}")
        await self.inner.connect(address, _FaultyLink(self, handler), timeout_s)

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> Listener:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        return await self.inner.listen(address, lambda: _FaultyLink(self, new_handler()))


class FaultProxy:
    """A TCP relay from ``listen`` to ``target`` that delays, drops or cuts, both ways."""

    def __init__(self, target: str, listen: str = "127.0.0.1:0", seed: int = 0) -> None:
        self.target = target
        self.listen = listen
        self.address = ""
        self.delay_ms_min = 0.0
        self.delay_ms_max = 0.0
        self.dropping = False
        self.refusing = False
        self.random = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        """Start relaying; the address to point clients at."""
        host, port = split_address(self.listen)
        self._server = await asyncio.start_server(self._accept, host, port)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        return self.address

    def delay(self, ms_min: float, ms_max: float | None = None) -> None:
        """Delay every chunk by a seeded random time in [ms_min, ms_max] (order is kept)."""
        self.delay_ms_min = ms_min
        self.delay_ms_max = ms_min if ms_max is None else ms_max

    def blackhole(self, on: bool = True) -> None:
        """Drop all traffic both ways (connections stay open) until called with False."""
        self.dropping = on

    def cut(self) -> None:
        """Close every relayed connection both ways and refuse new ones until :meth:`heal`."""
        self.refusing = True
        for writer in list(self._writers):
            writer.transport.abort()
        for pipe in list(self._pipes):
            pipe.cancel()

    def heal(self) -> None:
        """Accept and relay again, without drops or delays."""
        self.refusing = False
        self.dropping = False
        self.delay_ms_min = self.delay_ms_max = 0.0

    async def stop(self) -> None:
        """Close everything."""
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._pipes:
            await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        host, port = split_address(self.target)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        pipes = [
            asyncio.ensure_future(self._pump(reader, up_writer)),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes.difference_update(pipes)
            for each in (writer, up_writer):
                self._writers.discard(each)
                each.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while data := await reader.read(65536):
            if self.dropping:
                continue
            if self.delay_ms_max > 0:
                delay = self.random.uniform(self.delay_ms_min, self.delay_ms_max) / 1000
                last = max(loop.time() + delay, last)
                await asyncio.sleep(last - loop.time())
            writer.write(data)
            await writer.drain()
