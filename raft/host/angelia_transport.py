"""The raft transport over Angelia: one long-lived stream per ordered node pair.

Node A sends its batches to node B on a bidirectional Angelia call
``raft.batches`` that A opened to B's server; B never answers on it (its own
batches to A go on the stream B opened to A). One sender task per peer
drains a bounded queue into the stream: ``send`` never blocks, and while a
peer is unreachable the oldest queued batches are dropped (raft resends what
matters). A failed stream is reopened after a backoff. While that task is
idle (its queue empty, its stream open), ``send`` writes a batch that fits
one frame straight into the stream when the stream can take it without
waiting, instead of waking the task: order is kept, since the task holds no
batch then.

A batch larger than one frame allows (a snapshot carrying a group's message
bodies) goes as consecutive parts of at most ``part_bytes`` on the stream;
the receiver joins them and delivers the whole batch, or nothing if the
stream breaks before the last part (a new stream starts with no parts held).

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from angelia_rpc import AngeliaError, Bidi, CallContext, Peers, RpcConfig, Service
from angelia_rpc.service import BidiCall
from raft.host.transport import Receiver

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RaftBatchFrame:
    """One raft batch (raft.host.wire bytes) from ``from_node``."""

    from_node: int
    data: bytes
    more: bool = False
    """True: ``data`` is one part of a batch that continues in the next frame."""


@dataclass(frozen=True, slots=True)
class RaftBatchAck:
    """Never sent: the stream is one-way. Declared because a Bidi needs a response type."""

    received: int


class RaftPeerService(Service, name="raft"):
    """What a node serves to its peers."""

    batches = Bidi(RaftBatchFrame, RaftBatchAck)


class _RaftPeerImpl:
    def __init__(self, transport: AngeliaTransport) -> None:
        self._transport = transport

    async def batches(
        self, requests: AsyncIterator[RaftBatchFrame], context: CallContext
    ) -> AsyncIterator[RaftBatchAck]:
        transport = self._transport
        parts: list[bytes] = []
        held_bytes = 0
        discarding = False  # the rest of an oversized batch: skipped up to its last part
        async for frame in requests:
            if frame.more or parts or discarding:
                held_bytes += len(frame.data)
                if not discarding and held_bytes > transport.batch_bytes_max:
                    _log.error(
                        "raft batch from node %d exceeds %d bytes: dropped",
                        frame.from_node,
                        transport.batch_bytes_max,
                    )
                    parts, discarding = [], True
                if not discarding:
                    parts.append(frame.data)
                if frame.more:
                    continue
                data = b"".join(parts)
                parts, held_bytes = [], 0
                if discarding:
                    discarding = False
                    continue
            else:
                data = frame.data
            transport._deliver(frame.from_node, data)
        return
        yield  # an async generator that never answers


class AngeliaTransport:
    """A :class:`raft.host.transport.RaftTransport` over Angelia streams."""

    def __init__(
        self,
        node_id: int,
        addresses: Mapping[int, str],
        config: RpcConfig | None = None,
        *,
        queue_batches_max: int = 4096,
        reconnect_backoff_max_ms: int = 500,
        part_bytes: int = 4 << 20,
        batch_bytes_max: int = 1 << 30,
    ) -> None:
        """``addresses``: the Angelia server address of every peer node.

        ``part_bytes``: batches are sent in parts of at most this many bytes
        (capped at half the frame limit); ``batch_bytes_max``: a received
        batch larger than this is dropped (and logged) instead of joined.
        """
        self.node_id = node_id
        self.addresses = dict(addresses)
        config = config or RpcConfig()
        self._peers = Peers(config)
        self.part_bytes = max(1, min(part_bytes, config.frame_bytes_max // 2))
        self.batch_bytes_max = batch_bytes_max
        self._queue_batches_max = queue_batches_max
        self._backoff_max_s = reconnect_backoff_max_ms / 1000
        self._receive: Receiver | None = None
        self._queues: dict[int, deque[bytes]] = {}
        self._ready: dict[int, asyncio.Event] = {}
        self._pumps: dict[int, asyncio.Task[None]] = {}
        # The stream of each peer whose sender task is idle: its queue is empty and
        # it holds no batch, so a batch written here directly keeps the order.
        self._idle_calls: dict[int, BidiCall[RaftBatchFrame, RaftBatchAck]] = {}
        self.dropped_batches = 0

    def binding(self) -> Mapping[str, Any]:
        """The dispatch table to add to this node's Angelia server."""
        return RaftPeerService.bind(_RaftPeerImpl(self))

    async def start(self, receive: Receiver) -> None:
        """Deliver incoming batches to ``receive`` (the server must serve :meth:`binding`)."""
        self._receive = receive

    def _deliver(self, from_node: int, data: bytes) -> None:
        if self._receive is not None:
            self._receive(from_node, data)

    def send(self, to_node: int, data: bytes) -> None:
        """Queue a batch for ``to_node``; the oldest is dropped if the queue is full."""
        call = self._idle_calls.get(to_node)
        if (
            call is not None
            and len(data) <= self.part_bytes
            and call.try_send_nowait(RaftBatchFrame(self.node_id, data))
        ):
            return
        queue = self._queues.get(to_node)
        if queue is None:
            if to_node not in self.addresses:
                return
            queue = self._queues[to_node] = deque(maxlen=self._queue_batches_max)
            self._ready[to_node] = asyncio.Event()
            self._pumps[to_node] = asyncio.create_task(
                self._pump(to_node), name=f"raft-send-{self.node_id}-to-{to_node}"
            )
        # Queued: the task is no longer idle; later batches queue behind this one.
        self._idle_calls.pop(to_node, None)
        if len(queue) == queue.maxlen:
            self.dropped_batches += 1
        queue.append(data)
        self._ready[to_node].set()

    async def _pump(self, to_node: int) -> None:
        queue = self._queues[to_node]
        ready = self._ready[to_node]
        stub = RaftPeerService(self._peers.channel(self.addresses[to_node]))
        backoff_s = 0.02
        while True:
            call = stub.batches()
            try:
                while True:
                    while not queue:
                        ready.clear()
                        self._idle_calls[to_node] = call
                        try:
                            await ready.wait()
                        finally:
                            self._idle_calls.pop(to_node, None)
                    data = queue.popleft()
                    step = self.part_bytes
                    if len(data) <= step:
                        await call.send(RaftBatchFrame(self.node_id, data))
                    else:
                        view = memoryview(data)
                        for start in range(0, len(data), step):
                            more = start + step < len(data)
                            part = bytes(view[start : start + step])
                            await call.send(RaftBatchFrame(self.node_id, part, more))
                    backoff_s = 0.02
            except asyncio.CancelledError:
                call.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - the pump must outlive any failure
                # The batch in hand is lost (raft resends); the stream is reopened.
                level = logging.DEBUG if isinstance(exc, AngeliaError) else logging.WARNING
                _log.log(level, "raft stream %d->%d failed: %r", self.node_id, to_node, exc)
                call.cancel()
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, self._backoff_max_s)

    async def close(self) -> None:
        """Stop the sender tasks and close the channels."""
        for task in self._pumps.values():
            task.cancel()
        for task in self._pumps.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pumps.clear()
        await self._peers.close()
