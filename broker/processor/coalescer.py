"""Coalescing concurrent sends to one queue into one append call.

While an append to a queue is in flight, further sends to that queue wait in
a pending list; when it returns, everything pending goes to the store in the
next single call (group commit). A queue with nothing in flight is appended
at once, so an idle broker adds no latency.

A batch holds whole sends only, at most ``batch_messages_max`` messages and
``batch_bytes_max`` body bytes (a single larger send goes alone).

Ordering: messages of one call keep their order and calls to one queue are
appended in arrival order. A send to a queue with nothing in flight appends in
its caller's own task (no task or future of its own: with many queues and a
message or two each, that is nearly every send); sends that come meanwhile
are flushed, in order, by a task of the queue's own once it returns, so a
caller that gives up (cancellation) never strands the others.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from broker.domain import Message, QueueRef, SendResult
from broker.services.base import MessageStore
from broker.waiting import deal_out, fail_waiting

_body = operator.attrgetter("body")

BATCH_BYTES_MAX = 4 << 20
"""The most body bytes one append may carry (the storage node's limit: one log entry)."""


@dataclass(slots=True)
class _Pending:
    messages: Sequence[Message]
    done: asyncio.Future[list[SendResult]]


class AppendCoalescer:
    """Group commit of sends per queue (see the module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        *,
        batch_messages_max: int = 1024,
        batch_bytes_max: int = BATCH_BYTES_MAX,
    ) -> None:
        self._store = store
        self._batch_messages_max = batch_messages_max
        self._batch_bytes_max = batch_bytes_max
        # Invariant: a queue has pending sends only while it is in _flushers (an append
        # of it is in flight: a caller's own, None, or its flusher task's).
        self._pending: dict[QueueRef, list[_Pending]] = {}
        self._flushers: dict[QueueRef, asyncio.Task[None] | None] = {}

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        """Append ``messages`` to ``queue``, possibly in one store call with other senders."""
        if queue not in self._flushers:  # nothing in flight: append at once, in this task
            self._flushers[queue] = None
            try:
                return await self._store.append(queue, messages)
            finally:
                self._hand_over(queue)
        done: asyncio.Future[list[SendResult]] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(queue, []).append(_Pending(messages, done))
        return await done

    def _hand_over(self, queue: QueueRef) -> None:
        """A caller's own append to ``queue`` ended: the sends that came meanwhile go
        next, in a task of the queue's, or nothing of it is in flight."""
        if self._pending.get(queue):
            self._flushers[queue] = asyncio.create_task(self._flush(queue))
        else:
            del self._flushers[queue]
            self._pending.pop(queue, None)

    def pending_messages(self, queue: QueueRef) -> int:
        """Messages waiting for the next append to ``queue`` (not counting the one in flight)."""
        return sum(len(item.messages) for item in self._pending.get(queue, ()))

    def _take(self, queue: QueueRef) -> list[_Pending]:
        pending = self._pending.get(queue, [])
        batch: list[_Pending] = []
        count = 0
        size = 0
        while pending:
            head = pending[0]
            head_size = sum(map(len, map(_body, head.messages)))
            if batch and (
                count + len(head.messages) > self._batch_messages_max
                or size + head_size > self._batch_bytes_max
            ):
                break
            item = pending.pop(0)
            if item.done.done():  # the sender gave up before its turn: append nothing for it
                continue
            batch.append(item)
            count += len(item.messages)
            size += head_size
        return batch

    async def _flush(self, queue: QueueRef) -> None:
        try:
            while batch := self._take(queue):
                messages = [message for item in batch for message in item.messages]
                try:
                    results = await self._store.append(queue, messages)
                except Exception as error:  # noqa: BLE001 - handed to every waiting sender
                    fail_waiting((item.done for item in batch), error)
                    continue
                deal_out(((len(item.messages), item.done) for item in batch), results)
        finally:
            del self._flushers[queue]
            if not self._pending.get(queue):
                self._pending.pop(queue, None)
