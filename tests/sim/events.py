"""The simulated clock and the discrete-event queue that drives a run.

Time is an integer count of simulated milliseconds. Events at the same time
run in the order they were scheduled (a sequence number breaks ties), so a
run depends only on its seed, never on the wall clock or hash order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True, slots=True)
class _Event:
    at_ms: int
    seq: int
    action: Callable[[], None] = field(compare=False)


class EventLoop:
    """A priority queue of actions keyed by simulated time."""

    def __init__(self) -> None:
        self._queue: list[_Event] = []
        self._seq = 0
        self.now_ms = 0
        self.steps = 0

    def call_at(self, at_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` at simulated time ``at_ms`` (never earlier than now)."""
        self._seq += 1
        heapq.heappush(self._queue, _Event(max(at_ms, self.now_ms), self._seq, action))

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay_ms`` after now."""
        self.call_at(self.now_ms + delay_ms, action)

    def run_until(self, end_ms: int, after_step: Callable[[], None] | None = None) -> None:
        """Run every event due at or before ``end_ms``; the clock ends at ``end_ms``."""
        queue = self._queue
        while queue and queue[0].at_ms <= end_ms:
            event = heapq.heappop(queue)
            self.now_ms = event.at_ms
            self.steps += 1
            event.action()
            if after_step is not None:
                after_step()
        self.now_ms = max(self.now_ms, end_ms)

    def pending(self) -> int:
        """How many events are scheduled."""
        return len(self._queue)
