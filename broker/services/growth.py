"""One watch per queue that long polls wait on, shared by every long poll.

A long poll that found nothing waits for a queue of its topic to grow. Each
waiting consumer asking the storage itself would cost calls per consumer;
asking every few milliseconds would cost calls while nothing happens.
Instead each queue that waiters care about has one watch task: it asks the
queue's storage leader for the end offset once it is above the lowest
baseline of those waiters (a long poll on the storage side, which answers
when the queue grows or after its wait), and wakes each waiter whose
baseline the answer passed. The task ends when no waiter cares about the
queue any more (its call in flight is dropped). While nothing happens, a
queue costs one call per storage wait; a growth wakes its waiters at once.

A waiter's baseline is what its own receive saw (so a message appended
between that receive and the wait is found at once); a queue whose end it
does not know (-1) takes its baseline from the watch's next answer, which
then comes without waiting. A failed call, or an answer without growth that
came sooner than ``retry_ms``, is followed by a pause of ``retry_ms`` (a
storage node that does not wait is asked no more often than that); the
waiter's own timeout bounds every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from broker.errors import BrokerError

log = logging.getLogger("broker.growth")

EndAbove = Callable[[str, int, int], Awaitable[int]]
"""``(topic, queue_id, above)``: the queue's end offset, once it is above ``above``
or when the store's wait ends (at once for ``above`` -1); raises BrokerError."""


@dataclass(slots=True)
class _Waiter:
    baseline: dict[int, int]  # queue id -> end offset seen (-1: take the next answer's)
    grown: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def look(self, queue_id: int, end: int) -> None:
        """Wake if ``queue_id`` passed its baseline; adopt it if it was unknown."""
        known = self.baseline.get(queue_id)
        if known is None:
            return
        if known < 0:
            self.baseline[queue_id] = end
        elif end > known and not self.grown.done():
            self.grown.set_result(True)


class GrowthWatch:
    """Waits for queue growth with one storage long poll per watched queue at a time."""

    def __init__(self, end_above: EndAbove, *, retry_ms: int) -> None:
        self._end_above = end_above
        self._retry_s = retry_ms / 1000
        self._waiters: dict[str, list[_Waiter]] = {}
        self._watches: dict[tuple[str, int], asyncio.Task[None]] = {}
        # The baseline each watch's call in flight waits to see passed.
        self._asking: dict[tuple[str, int], int] = {}

    async def wait(
        self, topic: str, known_end_offsets: Mapping[int, int], timeout_s: float
    ) -> bool:
        """True once a queue of ``known_end_offsets`` grows past it; False after ``timeout_s``."""
        waiter = _Waiter(dict(known_end_offsets))
        self._waiters.setdefault(topic, []).append(waiter)
        for queue_id, known in waiter.baseline.items():
            key = (topic, queue_id)
            watch = self._watches.get(key)
            if watch is not None and known < self._asking.get(key, -1):
                # Its call waits for more growth than this waiter needs: ask again.
                watch.cancel()
                watch = None
                self._asking.pop(key, None)
            if watch is None:
                self._watches[key] = asyncio.create_task(self._watch(topic, queue_id))
        try:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(waiter.grown, timeout_s)
            return False
        finally:
            waiters = self._waiters.get(topic, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(topic, None)
            for queue_id in waiter.baseline:
                # A queue nobody waits on any more: its call in flight is dropped, and
                # the watch forgotten now (a waiter arriving before the task ends
                # starts a new one).
                key = (topic, queue_id)
                watch = self._watches.get(key)
                if watch is not None and not self._interested(topic, queue_id):
                    watch.cancel()
                    del self._watches[key]
                    self._asking.pop(key, None)

    def watching(self, topic: str) -> int:
        """Long polls of ``topic`` waiting now."""
        return len(self._waiters.get(topic, ()))

    def _interested(self, topic: str, queue_id: int) -> list[_Waiter]:
        return [
            w for w in self._waiters.get(topic, ()) if queue_id in w.baseline and not w.grown.done()
        ]

    async def _watch(self, topic: str, queue_id: int) -> None:
        loop = asyncio.get_running_loop()
        key = (topic, queue_id)
        try:
            while waiters := self._interested(topic, queue_id):
                lowest = max(min(w.baseline[queue_id] for w in waiters), -1)
                asked = loop.time()
                self._asking[key] = lowest
                try:
                    end = await self._end_above(topic, queue_id, lowest)
                except BrokerError:
                    end = None
                except Exception:  # the watch outlives one bad call
                    log.exception("waiting for %s:%d to grow failed", topic, queue_id)
                    end = None
                if end is not None:
                    for waiter in self._interested(topic, queue_id):
                        waiter.look(queue_id, end)
                    if lowest < 0 or end > lowest:
                        continue
                pause_s = self._retry_s - (loop.time() - asked)
                if pause_s > 0:
                    await asyncio.sleep(pause_s)
        finally:
            if self._watches.get(key) is asyncio.current_task():  # not replaced meanwhile
                del self._watches[key]
                self._asking.pop(key, None)
