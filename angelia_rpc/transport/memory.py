"""The memory transport: in-process links for simulation, with seeded faults.

A :class:`MemoryNetwork` connects named endpoints in one event loop. Every
write is delivered whole (the connection writes whole frames), in order per
direction, after a delay drawn from the network's seeded random source, or
dropped:

- ``drop_rate``: the chance that one write (one or more whole frames) is lost;
- ``delay_ms_min`` / ``delay_ms_max``: the delivery delay range (order is
  kept: a write is never delivered before an earlier one on the same link);
- ``partition(a, b)``: everything between a and b is silently lost (both
  ways) and new connections between them time out, until ``heal(a, b)``;
- ``cut(a, b)``: close every link between a and b now (both ends see the
  connection lost); new connections are allowed.

The same seed and the same sequence of writes give the same faults.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from angelia_rpc.transport.base import LinkHandler


@dataclass
class Faults:
    """The network's fault settings; change them at any time."""

    drop_rate: float = 0.0
    delay_ms_min: float = 0.0
    delay_ms_max: float = 0.0


class _MemoryLink:
    def __init__(self, network: MemoryNetwork, local: str, peer: str, handler: LinkHandler) -> None:
        self.network = network
        self.local = local
        self.peer = peer
        self.handler = handler
        self.other: _MemoryLink | None = None
        self.closed = False
        self._paused = False
        self._held: list[bytes] = []
        self._last_delivery = 0.0
        self._in_flight: deque[bytes | None] = deque()

    def write(self, data: bytes) -> None:
        other = self.other
        if self.closed or other is None:
            return
        network = self.network
        if network.is_partitioned(self.local, self.peer):
            return
        faults = network.faults
        if faults.drop_rate and network.random.random() < faults.drop_rate:
            return
        loop = asyncio.get_running_loop()
        # A link is a byte stream: writes arrive in order. Delivery times never
        # decrease, but timers due at the same instant may fire in any order,
        # so each timer delivers the oldest write in flight, not its own.
        self._in_flight.append(data)
        if faults.delay_ms_max > 0:
            delay = network.random.uniform(faults.delay_ms_min, faults.delay_ms_max) / 1000
            self._last_delivery = max(loop.time() + delay, self._last_delivery)
        if self._last_delivery > loop.time():
            loop.call_at(self._last_delivery, self._deliver_next, other)
        else:
            loop.call_soon(self._deliver_next, other)

    def _deliver_next(self, other: _MemoryLink | None) -> None:
        data = self._in_flight.popleft()
        if data is not None:
            if other is not None:
                other._deliver(data)
            return
        self._lose("closed by this end")
        if other is not None:
            other._lose("closed by the peer")

    def _deliver(self, data: bytes) -> None:
        if self.closed:
            return
        if self._paused:
            self._held.append(data)
            return
        self.handler.data_received(data)

    def close(self) -> None:
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        # The close travels behind the writes in flight (None marks it).
        self._in_flight.append(None)
        loop.call_at(max(loop.time(), self._last_delivery), self._deliver_next, self.other)

    def _lose(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.network.links.discard(self)
        self.handler.link_lost(reason)

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        held, self._held = self._held, []
        for data in held:
            if self.closed:
                return
            self.handler.data_received(data)


class _MemoryListener:
    def __init__(self, network: MemoryNetwork, address: str) -> None:
        self.network = network
        self.address = address

    async def close(self) -> None:
        self.network.listeners.pop(self.address, None)
        for link in list(self.network.links):
            if link.local == self.address:
                link.close()


class MemoryNetwork:
    """Named endpoints in one process, with seeded drops, delays and partitions."""

    def __init__(self, seed: int = 0, faults: Faults | None = None) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.faults = faults or Faults()
        self.listeners: dict[str, Callable[[], LinkHandler]] = {}
        self.links: set[_MemoryLink] = set()
        self._partitions: set[frozenset[str]] = set()
        self._client_names = itertools.count(1)

    def transport(self, name: str = "") -> MemoryTransport:
        """A transport whose connections come from endpoint ``name`` (a fresh name if empty)."""
        return MemoryTransport(self, name or f"client-{next(self._client_names)}")

    def is_partitioned(self, a: str, b: str) -> bool:
        """Whether traffic between ``a`` and ``b`` is being lost."""
        return bool(self._partitions) and frozenset((a, b)) in self._partitions

    def partition(self, a: str, b: str) -> None:
        """Lose everything between ``a`` and ``b``, both ways, until :meth:`heal`."""
        self._partitions.add(frozenset((a, b)))

    def heal(self, a: str, b: str) -> None:
        """End a partition."""
        self._partitions.discard(frozenset((a, b)))

    def cut(self, a: str, b: str) -> None:
        """Close every link between ``a`` and ``b`` now."""
        for link in list(self.links):
            if {link.local, link.peer} == {a, b}:
                link.close()


class MemoryTransport:
    """One endpoint's view of a :class:`MemoryNetwork`."""

    name = "memory"

    def __init__(self, network: MemoryNetwork, local: str) -> None:
        self.network = network
        self.local = local

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        network = self.network
        if network.is_partitioned(self.local, address):
            await asyncio.sleep(timeout_s)
            raise TimeoutError(f"{address} is unreachable from {self.local} (partitioned)")
        new_handler = network.listeners.get(address)
        if new_handler is None:
            raise ConnectionRefusedError(f"nothing listens on {address!r} in the memory network")
        client = _MemoryLink(network, self.local, address, handler)
        server = _MemoryLink(network, address, self.local, new_handler())
        client.other, server.other = server, client
        network.links.update((client, server))
        server.handler.link_made(server)
        handler.link_made(client)

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> _MemoryListener:
        """Listen on ``address``: the endpoint name (empty: this transport's own name)."""
        name = address or self.local
        if name in self.network.listeners:
            raise OSError(f"{name!r} is already listening in the memory network")
        self.network.listeners[name] = new_handler
        return _MemoryListener(self.network, name)
