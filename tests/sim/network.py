"""The simulated network: seeded drop, delay, duplication, reordering, partitions.

Every fate is drawn from the run's single ``random.Random`` in the order
messages are sent, so a seed fixes the whole history of the network.
Reordering comes from independent random delays (and an occasional long
"tail" delay); partitions cut directed links and are checked both when a
message is sent and when it would arrive.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tests.sim.events import EventLoop


@dataclass(slots=True)
class LinkFaults:
    """Per-message fault rates of the network; all zero means a perfect network."""

    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    delay_min_ms: int = 1
    delay_max_ms: int = 5
    tail_rate: float = 0.0  # chance of a much longer delay: the main source of reordering
    tail_delay_max_ms: int = 200

    @classmethod
    def perfect(cls) -> LinkFaults:
        """No drops, no duplicates, short delays: the network after faults stop."""
        return cls()


@dataclass(slots=True)
class NetworkStats:
    """Counters for the run summary."""

    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    cut: int = 0


class SimNetwork:
    """Delivers payloads between endpoints (node and client ids) through the event loop."""

    def __init__(
        self,
        loop: EventLoop,
        rng: random.Random,
        deliver: Callable[[int, int, object], None],
        faults: LinkFaults | None = None,
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._deliver = deliver
        self.faults = faults if faults is not None else LinkFaults()
        self._cut: set[tuple[int, int]] = set()
        self.stats = NetworkStats()

    # -- partitions ----------------------------------------------------------

    def cut(self, src: int, dst: int) -> None:
        """Drop everything from ``src`` to ``dst`` until healed (one-way)."""
        self._cut.add((src, dst))

    def partition(self, side: set[int], others: set[int], one_way: bool = False) -> None:
        """Cut ``side`` from ``others``; both ways unless ``one_way`` (side -> others only)."""
        for a in sorted(side):
            for b in sorted(others):
                self.cut(a, b)
                if not one_way:
                    self.cut(b, a)

    def heal(self) -> None:
        """Restore every link."""
        self._cut.clear()

    def is_cut(self, src: int, dst: int) -> bool:
        """Whether the link ``src`` -> ``dst`` is currently cut."""
        return (src, dst) in self._cut

    # -- sending ---------------------------------------------------------------

    def send(self, src: int, dst: int, payload: object, may_duplicate: bool = True) -> None:
        """Send ``payload``; it may be dropped, delayed, duplicated or cut.

        Client traffic passes ``may_duplicate=False``: a client request is a
        stream call, resent only by the client itself (as a new operation).
        """
        self.stats.sent += 1
        if (src, dst) in self._cut:
            self.stats.cut += 1
            return
        faults = self.faults
        rng = self._rng
        if faults.drop_rate and rng.random() < faults.drop_rate:
            self.stats.dropped += 1
            return
        copies = 1
        if may_duplicate and faults.duplicate_rate and rng.random() < faults.duplicate_rate:
            copies = 2
            self.stats.duplicated += 1
        for _ in range(copies):
            delay_ms = rng.randint(faults.delay_min_ms, faults.delay_max_ms)
            if faults.tail_rate and rng.random() < faults.tail_rate:
                delay_ms += rng.randint(0, faults.tail_delay_max_ms)
            self._loop.call_later(delay_ms, lambda: self._arrive(src, dst, payload))

    def _arrive(self, src: int, dst: int, payload: object) -> None:
        if (src, dst) in self._cut:
            self.stats.cut += 1
            return
        self.stats.delivered += 1
        self._deliver(src, dst, payload)
