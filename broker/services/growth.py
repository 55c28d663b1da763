"""One watch per topic over its queues' end offsets, shared by every long poll.

A long poll that found nothing waits for a queue of its topic to grow. Each
waiting consumer looking at the end offsets itself would cost one storage
call per queue every check interval per consumer (64 idle consumers of a
16-queue topic: 20,000 calls/s while nothing happens). Instead a topic with
waiters has one watch task: every ``check_ms`` it reads the end offsets of
the queues its waiters care about, once, and wakes each waiter whose
baseline a queue passed. The task ends when the last waiter leaves.

A waiter's baseline is what its own receive saw (so a message appended
between that receive and the wait is found at the watch's next look); a
queue whose end it does not know (-1) takes its baseline from the first look
after the waiter arrived. A failed look wakes nobody and is retried at the
next interval (the waiter's own timeout bounds the wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.errors import BrokerError

log = logging.getLogger("broker.growth")

EndOffsets = Callable[[str, Sequence[int]], Awaitable[dict[int, int]]]
"""Reads the end offsets of some queues of a topic (raises BrokerError on failure)."""


@dataclass(slots=True)
class _Waiter:
    baseline: dict[int, int]  # queue id -> end offset seen (-1: take the next look's)
    grown: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def look(self, ends: Mapping[int, int]) -> None:
        """Wake if a queue passed its baseline; adopt the unknown baselines."""
        for queue_id, known in self.baseline.items():
            end = ends.get(queue_id, -1)
            if known < 0:
                self.baseline[queue_id] = end
            elif end > known:
                if not self.grown.done():
                    self.grown.set_result(True)
                return


class GrowthWatch:
    """Waits for queue growth with one end-offset look per topic and interval."""

    def __init__(self, end_offsets: EndOffsets, *, check_ms: int) -> None:
        self._end_offsets = end_offsets
        self._check_s = check_ms / 1000
        self._waiters: dict[str, list[_Waiter]] = {}
        self._watches: dict[str, asyncio.Task[None]] = {}

    async def wait(
        self, topic: str, known_end_offsets: Mapping[int, int], timeout_s: float
    ) -> bool:
        """True once a queue of ``known_end_offsets`` grows past it; False after ``timeout_s``."""
        waiter = _Waiter(dict(known_end_offsets))
        self._waiters.setdefault(topic, []).append(waiter)
        if topic not in self._watches:
            self._watches[topic] = asyncio.create_task(self._watch(topic))
        try:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(waiter.grown, timeout_s)
            return False
        finally:
            waiters = self._waiters.get(topic, [])
            if waiter in waiters:
                waiters.remove(waiter)

    def watching(self, topic: str) -> int:
        """Long polls of ``topic`` waiting now."""
        return len(self._waiters.get(topic, ()))

    async def _watch(self, topic: str) -> None:
        try:
            while waiters := self._waiters.get(topic):
                queue_ids = sorted({q for waiter in waiters for q in waiter.baseline})
                try:
                    ends = await self._end_offsets(topic, queue_ids)
                except BrokerError:
                    ends = None
                except Exception:  # the watch outlives one bad look
                    log.exception("looking at the end offsets of %r failed", topic)
                    ends = None
                if ends is not None:
                    for waiter in list(self._waiters.get(topic, ())):
                        waiter.look(ends)
                await asyncio.sleep(self._check_s)
        finally:
            del self._watches[topic]
            if not self._waiters.get(topic):
                self._waiters.pop(topic, None)
