"""Coalescing appends to different queues into one call per storage node.

The broker's per-queue coalescer (``broker.processor.coalescer``) joins the
sends to ONE queue; with many queues and a message or two each, every
message would still be its own storage call, whose fixed cost (framing,
codec, the service method, its future, on both sides) is most of an
append's. :class:`NodeAppends` joins the appends to DIFFERENT queues bound
for one storage node into one ``storage.append_queues`` call:

- group commit per node: at most ``calls_in_flight_max`` calls to a node
  are in flight; appends that come while they all are wait, and go together
  in the next call. A node with a free slot gets an append at once, so an
  idle broker adds no latency;
- a call carries at most ``appends_max`` appends and ``bytes_max`` packed
  record bytes (one larger append goes alone);
- each append has its own outcome: one group's NOT_LEADER (or any error of
  one append) fails only that append, raised to its caller as the
  :class:`angelia_rpc.RemoteError` a single append would have raised, so the
  caller fails over as after a single append. A failure of the whole call
  (the node unreachable, the deadline) fails every append of it;
- a node that does not serve ``append_queues`` (UNKNOWN_METHOD: an older
  storage node during a rolling upgrade) is sent single appends from then on.

Ordering: the caller keeps at most one append of a queue in flight (the
per-queue coalescer does), so a call never carries a queue twice; calls to a
node are made in the order their appends came.

SHELL: event loop tasks and futures.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from angelia_rpc import AngeliaError
from angelia_rpc.errors import from_wire
from broker.waiting import fail_waiting
from protocol import errors as codes
from protocol import storage_api as st

CALLS_IN_FLIGHT_MAX = 1
"""Calls in flight to one storage node: the rest wait and go together (group commit)."""
APPENDS_MAX = 1024
"""The most appends one call carries."""
BYTES_MAX = 4 << 20
"""The most packed record bytes one call carries (well under Angelia's frame limit)."""

CallQueues = Callable[[str, st.AppendQueuesRequest, int], Awaitable[st.AppendQueuesResponse]]
"""``(address, request, timeout_ms)``: one ``append_queues`` call to a storage node."""
CallSingle = Callable[[str, st.AppendRequest, int], Awaitable[st.AppendResponse]]
"""``(address, request, timeout_ms)``: one ``append`` call to a storage node."""


@dataclass(slots=True)
class _Waiting:
    request: st.AppendRequest
    timeout_ms: int
    done: asyncio.Future[st.AppendResponse]


@dataclass(slots=True)
class _Node:
    waiting: deque[_Waiting]
    calls: int = 0  # in flight


class NodeAppends:
    """Group commit of appends per storage node (see the module docstring)."""

    def __init__(
        self,
        call_queues: CallQueues,
        call_single: CallSingle,
        *,
        calls_in_flight_max: int = CALLS_IN_FLIGHT_MAX,
        appends_max: int = APPENDS_MAX,
        bytes_max: int = BYTES_MAX,
    ) -> None:
        if calls_in_flight_max < 1 or appends_max < 1:
            raise ValueError(
                "calls_in_flight_max and appends_max must be at least 1, not "
                f"{calls_in_flight_max} and {appends_max}"
            )
        self._call_queues = call_queues
        self._call_single = call_single
        self._calls_in_flight_max = calls_in_flight_max
        self._appends_max = appends_max
        self._bytes_max = bytes_max
        self._nodes: dict[str, _Node] = {}
        self._single_only: set[str] = set()
        self._flushers: set[asyncio.Task[None]] = set()  # held: a loop keeps weak references
        self.calls = 0
        """``append_queues`` calls made (with :attr:`appends`: appends per call)."""
        self.appends = 0
        """Appends sent in ``append_queues`` calls."""

    async def append(
        self, address: str, request: st.AppendRequest, timeout_ms: int
    ) -> st.AppendResponse:
        """Append ``request`` on the storage node at ``address``, possibly in one call with
        appends to other queues; raises the append's own error (see the module)."""
        if address in self._single_only:
            return await self._call_single(address, request, timeout_ms)
        done: asyncio.Future[st.AppendResponse] = asyncio.get_running_loop().create_future()
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = _Node(deque())
        node.waiting.append(_Waiting(request, timeout_ms, done))
        if node.calls < self._calls_in_flight_max:
            node.calls += 1
            flusher = asyncio.create_task(self._flush(address, node))
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        return await done

    def _take(self, node: _Node) -> list[_Waiting]:
        waiting = node.waiting
        batch: list[_Waiting] = []
        size = 0
        while waiting and len(batch) < self._appends_max:
            head = waiting[0]
            head_size = len(head.request.records)
            if batch and size + head_size > self._bytes_max:
                break
            waiting.popleft()
            if head.done.done():  # its caller gave up before its turn: not sent
                continue
            batch.append(head)
            size += head_size
        return batch

    async def _flush(self, address: str, node: _Node) -> None:
        """One of the node's call slots: calls while appends wait, then frees itself."""
        try:
            while batch := self._take(node):
                await self._send(address, batch)
        finally:
            node.calls -= 1
            if not node.calls and not node.waiting:
                self._nodes.pop(address, None)

    async def _send(self, address: str, batch: list[_Waiting]) -> None:
        request = st.AppendQueuesRequest([item.request for item in batch])
        timeout_ms = max(item.timeout_ms for item in batch)
        self.calls += 1
        self.appends += len(batch)
        try:
            response = await self._call_queues(address, request, timeout_ms)
        except Exception as error:  # noqa: BLE001 - handed to every waiting caller
            if isinstance(error, AngeliaError) and error.code is codes.UNKNOWN_METHOD:
                self._single_only.add(address)
                await asyncio.gather(*(self._alone(address, item) for item in batch))
                return
            fail_waiting((item.done for item in batch), error)
            return
        outcomes = response.outcomes
        if len(outcomes) != len(batch):
            fail_waiting(
                (item.done for item in batch),
                AngeliaError(
                    codes.INTERNAL,
                    f"storage node {address} answered {len(outcomes)} outcomes "
                    f"for {len(batch)} appends",
                ),
            )
            return
        for item, outcome in zip(batch, outcomes, strict=True):
            if item.done.done():
                continue
            if outcome.response is not None:
                item.done.set_result(outcome.response)
            elif outcome.failure is not None:
                item.done.set_exception(from_wire(outcome.failure))
            else:
                item.done.set_exception(
                    AngeliaError(
                        codes.INTERNAL, f"storage node {address} left an append unanswered"
                    )
                )

    async def _alone(self, address: str, item: _Waiting) -> None:
        try:
            response = await self._call_single(address, item.request, item.timeout_ms)
        except Exception as error:  # noqa: BLE001 - handed to its caller
            fail_waiting((item.done,), error)
            return
        if not item.done.done():
            item.done.set_result(response)


__all__ = ["NodeAppends"]
