"""Fault proxies that know who is talking: one TCP relay in front of each server process.

Angelia's :class:`~angelia_rpc.transport.faults.FaultProxy` applies a fault to
every connection it relays. A partition needs more: node A must lose node B
while it still reaches node C, through the same listening address. So each
relayed connection here is named by its two ends: the target is the process
this proxy fronts, the source is found when the connection is accepted,
from the kernel's socket table (``/proc/net/tcp``: the client socket's
inode, then the process holding it), and mapped to a process name by the
caller's ``name_of_pid``. A connection from no known process is the
``client`` (the chaos runner's own producers and consumers).

Faults, all changed at any time by the runner:

- a cut between a and b (``cuts``): nothing passes between them, both ways,
  while the connections stay open (a partition without resets, like
  ``iptables -j DROP``): the relay stops reading, so senders stall as
  behind a DROP rule, and what was held goes on once healed (as TCP
  retransmits it; dropping bytes of a stream would break its framing);
  ``heal()`` lifts all cuts.
- ``delay(target, ms, jitter_ms)``: every chunk into ``target`` waits
  ms +- jitter (order kept), as ``tc netem delay`` would.
- ``loss(target, rate)``: a chunk into ``target`` is, with probability
  ``rate``, held 200-400 ms before it goes on: what TCP makes of dropped
  packets (a retransmission), since a relay of a byte stream cannot drop
  bytes without breaking the stream's framing.

SHELL: asyncio sockets, /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from angelia_rpc.transport.base import split_address

CLIENT = "client"
LOSS_HOLD_MS = (200.0, 400.0)


def _socket_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the IPv4 TCP socket from ``local_port`` to ``remote_port`` on loopback."""
    wanted = (f":{local_port:04X}", f":{remote_port:04X}")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    if fields[1].endswith(wanted[0]) and fields[2].endswith(wanted[1]):
                        return int(fields[9])
        except OSError:
            continue
    return None


def pid_holding(inode: int, pids: list[int]) -> int | None:
    """Which of ``pids`` holds the socket ``inode`` open."""
    target = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
    return None


@dataclass
class Faults:
    """What every proxy of a cluster applies now (one object, shared by all proxies).

    Change cuts only through :meth:`cut` and :meth:`heal`: relays held by a
    cut wait for :meth:`changed`.
    """

    cuts: set[frozenset[str]] = field(default_factory=set)
    delays_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    loss_rates: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def cut_between(self, a: str, b: str) -> bool:
        """Whether traffic between processes ``a`` and ``b`` is held."""
        return frozenset((a, b)) in self.cuts

    def cut(self, a: str, b: str) -> None:
        """Hold all traffic between ``a`` and ``b``, both ways."""
        self.cuts.add(frozenset((a, b)))

    def heal(self) -> None:
        """No cut, delay or loss anywhere; held relays go on."""
        self.cuts.clear()
        self.delays_ms.clear()
        self.loss_rates.clear()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed(self) -> None:
        """Wait until the next :meth:`heal`."""
        await self._changed.wait()


class NamedProxy:
    """A relay in front of process ``target``; see the module docstring."""

    def __init__(
        self,
        target: str,
        upstream: str,
        faults: Faults,
        name_of_pid: Callable[[int], str | None],
        pids: Callable[[], list[int]],
        seed: int,
    ) -> None:
        """Relay to ``upstream`` (the process's real address); ``pids``: candidate sources."""
        self.target = target
        self.upstream = upstream
        self.faults = faults
        self._name_of_pid = name_of_pid
        self._pids = pids
        self._random = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.address = ""

    async def start(self, listen: str = "127.0.0.1:0") -> str:
        """Listen; the address to tell the cluster."""
        host, port = split_address(listen)
        self._server = await asyncio.start_server(self._accept, host, port)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        return self.address

    async def stop(self) -> None:
        """Close the listener and every relayed connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def source_of(self, writer: asyncio.StreamWriter) -> str:
        """The process name at the other end of an accepted connection."""
        peer, own = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        if not peer or not own:  # closed already
            return CLIENT
        inode = _socket_inode(peer[1], own[1])
        if inode is None:
            return CLIENT
        pid = pid_holding(inode, self._pids())
        return (self._name_of_pid(pid) if pid is not None else None) or CLIENT

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        source = self.source_of(writer)
        host, port = split_address(self.upstream)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.transport.abort()
            self._tasks.discard(task)
            return
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, source, self.target)),
            asyncio.ensure_future(self._pump(up_reader, writer, self.target, source)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            writer.transport.abort()
            up_writer.transport.abort()
            self._tasks.discard(task)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str, to: str
    ) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while data := await reader.read(65536):
            faults = self.faults
            # Cut: hold this chunk and read no more until healed (the kernel's buffers
            # fill and the sender stalls, as behind a DROP rule; no byte is lost, so
            # the stream's framing survives the partition as TCP's would).
            while faults.cut_between(source, to):
                await faults.changed()
            wait_ms = 0.0
            delay = faults.delays_ms.get(to)
            if delay is not None:
                wait_ms += max(0.0, self._random.uniform(delay[0] - delay[1], delay[0] + delay[1]))
            rate = faults.loss_rates.get(to, 0.0)
            if rate and self._random.random() < rate:
                wait_ms += self._random.uniform(*LOSS_HOLD_MS)
            if wait_ms or last > loop.time():
                last = max(loop.time() + wait_ms / 1000, last)
                await asyncio.sleep(last - loop.time())
            writer.write(data)
            await writer.drain()
