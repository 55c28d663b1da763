"""How a node's driver exchanges raft batches with other nodes.

A transport moves opaque byte batches (encoded by :mod:`raft.host.wire`) between
node ids. Delivery is best effort and in order per node pair: a batch may be
lost (raft retransmits), never duplicated or reordered. ``send`` never
blocks; a transport queues or drops.

Implementations: :class:`MemoryTransport` (one process, for tests and the
simulation) and the Angelia-backed transport in raft/host/angelia_transport.py.

SHELL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

Receiver = Callable[[int, bytes], None]
"""Called with (from node id, batch bytes) for each batch that arrives."""


class RaftTransport(Protocol):
    """The driver's view of the network."""

    async def start(self, receive: Receiver) -> None:
        """Begin delivering incoming batches to ``receive`` (on the event loop)."""
        ...

    def send(self, to_node: int, data: bytes) -> None:
        """Queue one batch for ``to_node``; never blocks, may drop."""
        ...

    async def close(self) -> None:
        """Stop sending and receiving."""
        ...


class MemoryNetwork:
    """Connects MemoryTransports in one process; can cut links between nodes."""

    def __init__(self) -> None:
        """An empty network."""
        self._receivers: dict[int, Receiver] = {}
        self._cut: set[tuple[int, int]] = set()
        self.sent_batches = 0
        self.sent_bytes = 0

    def endpoint(self, node_id: int) -> MemoryTransport:
        """The transport of ``node_id``."""
        return MemoryTransport(self, node_id)

    def cut(self, a: int, b: int) -> None:
        """Drop everything between ``a`` and ``b`` (both directions)."""
        self._cut.add((a, b))
        self._cut.add((b, a))

    def isolate(self, node_id: int, others: list[int]) -> None:
        """Cut ``node_id`` from every node in ``others``."""
        for other in others:
            self.cut(node_id, other)

    def heal(self) -> None:
        """Restore every link."""
        self._cut.clear()

    def _register(self, node_id: int, receive: Receiver) -> None:
        self._receivers[node_id] = receive

    def _unregister(self, node_id: int) -> None:
        self._receivers.pop(node_id, None)

    def _send(self, from_node: int, to_node: int, data: bytes) -> None:
        if (from_node, to_node) in self._cut:
            return
        receive = self._receivers.get(to_node)
        if receive is None:
            return
        self.sent_batches += 1
        self.sent_bytes += len(data)
        asyncio.get_running_loop().call_soon(self._deliver, from_node, to_node, data)

    def _deliver(self, from_node: int, to_node: int, data: bytes) -> None:
        if (from_node, to_node) in self._cut:
            return
        receive = self._receivers.get(to_node)
        if receive is not None:
            receive(from_node, data)


class MemoryTransport:
    """A node's endpoint on a :class:`MemoryNetwork`: delivery on the next loop turn."""

    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        """Use :meth:`MemoryNetwork.endpoint`."""
        self._network = network
        self.node_id = node_id

    async def start(self, receive: Receiver) -> None:
        """Receive batches addressed to this node."""
        self._network._register(self.node_id, receive)

    def send(self, to_node: int, data: bytes) -> None:
        """Deliver ``data`` to ``to_node`` unless the link is cut or it is gone."""
        self._network._send(self.node_id, to_node, data)

    async def close(self) -> None:
        """Leave the network."""
        self._network._unregister(self.node_id)
