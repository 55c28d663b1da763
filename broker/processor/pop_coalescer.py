"""Coalescing concurrent pops of one queue for one consumer group into one store pop.

Many consumers of a group receiving at once reach the same queues: each pop
is one storage receive (one raft entry applied on every replica), and a
store pays mostly per call, not per message. While a pop of a queue is in
flight, further pops of it with the same terms (group, invisible duration,
filter) wait; when it returns, the waiting ones go to the store as one pop
of their summed batch sizes (at most ``messages_max``), and its messages are
dealt out in offset order: each caller, in arrival order, takes up to its
own batch size. A queue with nothing in flight is popped at once, so an idle
broker adds no latency.

A caller that takes fewer than it asked for (or none) sees a short pop, as
from an emptier queue, and goes on to its next queue. FIFO groups are never
coalesced: a message group's messages must reach one consumer in order.

Queue choice: a receive tries first the queues it can join, those with a pop
of its terms in flight whose next pop still has room for its batch
(``joining_first``). The store pays per pop, not per message: with many
consumers spread over many queues, each pop would otherwise carry about one
consumer's batch. Joining gathers them into fewer, fuller pops, and the
number of queues being popped at once follows the demand (a queue whose next
pop is full turns the next receive to another queue).

Cancellation: a caller that gave up takes nothing, and its share goes to the
callers after it in the same pop; what nobody is left to take stays
invisible until the invisible duration ends (then it is redelivered),
exactly as when a client goes away in the middle of an uncoalesced pop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from broker.domain import GroupInfo, PopResult, QueueRef
from broker.services.base import MessageStore
from broker.waiting import fail_waiting
from protocol.filters import MessageFilter

POP_MESSAGES_MAX = 128
"""The most messages one coalesced pop asks the store for."""

_Key = tuple[GroupInfo, QueueRef, int, MessageFilter]  # group, queue, invisible ms, filter


@dataclass(slots=True)
class _Waiting:
    batch_size: int
    done: asyncio.Future[PopResult]


class PopCoalescer:
    """Group pops per (group, queue, terms); see the module docstring."""

    def __init__(self, store: MessageStore, *, messages_max: int = POP_MESSAGES_MAX) -> None:
        self._store = store
        self._messages_max = messages_max
        self._waiting: dict[_Key, list[_Waiting]] = {}
        self._poppers: dict[_Key, asyncio.Task[None]] = {}

    async def pop(
        self,
        group: GroupInfo,
        queue: QueueRef,
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> PopResult:
        """Up to ``batch_size`` messages of ``queue`` for ``group`` (as ``MessageStore.pop``)."""
        if group.fifo:
            return await self._store.pop(
                group,
                queue,
                batch_size=batch_size,
                invisible_ms=invisible_ms,
                message_filter=message_filter,
            )
        key = (group, queue, invisible_ms, message_filter)
        done: asyncio.Future[PopResult] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(_Waiting(batch_size, done))
        if key not in self._poppers:
            self._poppers[key] = asyncio.create_task(self._run(key, message_filter))
        return await done

    def joining_first(
        self,
        group: GroupInfo,
        topic: str,
        queue_ids: Sequence[int],
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> list[int]:
        """``queue_ids`` reordered, stably, so that the queues a pop of ``batch_size``
        with these terms would join (see the module docstring) come first."""
        if not self._poppers:  # nothing in flight (FIFO pops never are)
            return list(queue_ids)
        joining: list[int] = []
        rest: list[int] = []
        for queue_id in queue_ids:
            key = (group, QueueRef(topic, queue_id), invisible_ms, message_filter)
            (joining if self._has_room(key, batch_size) else rest).append(queue_id)
        return joining + rest

    def _has_room(self, key: _Key, batch_size: int) -> bool:
        """A pop of ``key`` is in flight and its next one can take ``batch_size`` more."""
        if key not in self._poppers:
            return False
        wanted = sum(item.batch_size for item in self._waiting.get(key, ()) if not item.done.done())
        return wanted + batch_size <= self._messages_max

    def waiting(self, queue: QueueRef) -> int:
        """Pops of ``queue`` waiting for the next store pop (not counting one in flight)."""
        return sum(len(items) for key, items in self._waiting.items() if key[1] == queue)

    def _take(self, key: _Key) -> list[_Waiting]:
        waiting = self._waiting.get(key, [])
        taken: list[_Waiting] = []
        wanted = 0
        while waiting and (not taken or wanted + waiting[0].batch_size <= self._messages_max):
            head = waiting.pop(0)
            if head.done.done():  # gave up before its turn
                continue
            taken.append(head)
            wanted += head.batch_size
        return taken

    async def _run(self, key: _Key, message_filter: MessageFilter) -> None:
        group, queue, invisible_ms, _filter = key
        try:
            while taken := self._take(key):
                try:
                    result = await self._store.pop(
                        group,
                        queue,
                        batch_size=sum(item.batch_size for item in taken),
                        invisible_ms=invisible_ms,
                        message_filter=message_filter,
                    )
                except Exception as error:  # noqa: BLE001 - handed to every waiting caller
                    fail_waiting((item.done for item in taken), error)
                    continue
                start = 0
                for item in taken:
                    if item.done.done():  # gave up while in flight: its share goes on
                        continue
                    share = result.messages[start : start + item.batch_size]
                    start += len(share)
                    item.done.set_result(
                        PopResult(share, result.end_offset, result.next_visible_ms, result.leased)
                    )
        finally:
            del self._poppers[key]
            if not self._waiting.get(key):
                self._waiting.pop(key, None)
