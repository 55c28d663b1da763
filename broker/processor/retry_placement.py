"""Where recent sends that named no queue went, so that a retry goes to the same queue.

A send naming no queue (no message group, no queue id) goes to the topic's
current queue, which moves on. A client retrying a send that failed or
timed out resends the same message ids; if the retry went to another queue
than the first attempt, a first attempt that was stored after all would be
stored twice, since the storage node's dedup window is per raft group. The
broker remembers, per (topic, first message id of the request), the queue
the request went to, for as long as the storage dedup window lasts
(``window_ms``, 2 minutes) and for at most ``entries_max`` requests; a
retry to the same broker within that time goes to the same queue. (A retry
to another broker, or to this one after it restarted, is not covered.)

PURE: time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections import OrderedDict

WINDOW_MS = 2 * 60_000
"""How long a placement is remembered: the storage node's dedup window."""
ENTRIES_MAX = 200_000
"""The most placements remembered (about 30 MB at most)."""


class RetryPlacements:
    """(topic, first message id) -> queue id of recent sends, oldest first."""

    def __init__(self, window_ms: int = WINDOW_MS, entries_max: int = ENTRIES_MAX) -> None:
        """Remember placements for ``window_ms``, at most ``entries_max`` of them."""
        self.window_ms = window_ms
        self.entries_max = entries_max
        self._placed: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._placed)

    def queue_of(self, topic: str, first_message_id: str, now_ms: int) -> int | None:
        """The queue a request with this first message id went to, if still remembered."""
        placed = self._placed.get((topic, first_message_id))
        if placed is None or placed[1] < now_ms - self.window_ms:
            return None
        return placed[0]

    def remember(self, topic: str, first_message_id: str, queue_id: int, now_ms: int) -> None:
        """Note where a request went; forget what fell out of the window or the bound."""
        key = (topic, first_message_id)
        self._placed.pop(key, None)
        self._placed[key] = (queue_id, now_ms)
        horizon = now_ms - self.window_ms
        while self._placed:
            _, (_, placed_ms) = next(iter(self._placed.items()))
            if placed_ms >= horizon and len(self._placed) <= self.entries_max:
                break
            self._placed.popitem(last=False)
