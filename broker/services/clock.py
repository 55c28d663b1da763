"""Clocks for the ports: the system clock (shell) and a manual one (tests, simulation)."""

from __future__ import annotations

import time


class SystemClock:
    """Wall-clock epoch milliseconds."""

    def now_ms(self) -> int:
        """The current time."""
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        """The current (set) time."""
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        """Move time forward by ``delta_ms``."""
        if delta_ms < 0:
            raise ValueError("time never goes backwards")
        self._now_ms += delta_ms
