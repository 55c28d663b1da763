"""How many groups may move at once: replica moves throttled by the append latency.

A replica move copies a group's state and log to a new replica while the
group keeps taking appends; many at once can slow the appends of every group
on the nodes involved. The bound the operator is promised: while replicas
move, the cluster's append p99 stays within ``bound_ratio`` (2x) of what it
was before. :class:`MoveThrottle` holds the number of groups allowed to move
at once (its ``budget``, at most ``moves_max``) and adjusts it once per
latency window, by the figure of that window: the highest append p99 any
storage node reported in it (a move loads its source and its target, so the
worst node is the one that shows it).

- **Baseline.** A window in which no move was under way at any sweep is a
  quiet one; the baseline is the median figure of the last
  ``baseline_windows`` quiet windows, and at least ``baseline_floor_us`` (a
  1 ms baseline would turn scheduling noise into a throttle).
- **A rebalance starts slow.** After a quiet window the budget is one: the
  next rebalance starts with one group moving, not ``moves_max`` at once
  (which could break the bound before a window could tell).
- **While moves run** (a window with a move under way at some sweep): a
  figure above ``bound_ratio`` x baseline halves the budget; a figure at most
  ``ease_ratio`` x baseline raises it by one, up to ``moves_max``; in between
  it stays. Multiplicative decrease, additive increase: the budget settles at
  the most moves the nodes carry within the bound.
- The budget never goes below one: moves always progress (a dead node's
  replicas must be made again elsewhere, whatever the latency).
- No baseline yet (a new nameserver leader that has only seen moves): the
  budget is ``moves_max``, as without a throttle: there is nothing to compare
  with. A window with no figure (no append anywhere) changes nothing.

Soft state of the nameserver leader, like the load monitor that feeds it.

PURE.
"""

from __future__ import annotations

import statistics
from collections import deque

BOUND_RATIO_DEFAULT = 2.0
EASE_RATIO_DEFAULT = 1.5
BASELINE_WINDOWS_DEFAULT = 15
BASELINE_FLOOR_US_DEFAULT = 2_000


class MoveThrottle:
    """The number of groups allowed to move at once (module docstring)."""

    def __init__(
        self,
        moves_max: int,
        *,
        bound_ratio: float = BOUND_RATIO_DEFAULT,
        ease_ratio: float = EASE_RATIO_DEFAULT,
        baseline_windows: int = BASELINE_WINDOWS_DEFAULT,
        baseline_floor_us: int = BASELINE_FLOOR_US_DEFAULT,
    ) -> None:
        """Start with no baseline (``budget`` = ``moves_max`` until a quiet window)."""
        if moves_max < 1 or baseline_windows < 1 or baseline_floor_us < 0:
            raise ValueError(
                "moves_max and baseline_windows must be >= 1 and baseline_floor_us >= 0, got "
                f"{moves_max}, {baseline_windows}, {baseline_floor_us}"
            )
        if not 1.0 <= ease_ratio <= bound_ratio:
            raise ValueError(
                f"need 1 <= ease_ratio <= bound_ratio, got {ease_ratio} and {bound_ratio}"
            )
        self.moves_max = moves_max
        self.bound_ratio = bound_ratio
        self.ease_ratio = ease_ratio
        self.baseline_floor_us = baseline_floor_us
        self._budget = 1  # once there is a baseline
        self.last_us = 0  # the figure of the last window that had one
        self._quiet_us: deque[int] = deque(maxlen=baseline_windows)

    @property
    def baseline_us(self) -> int | None:
        """The append p99 the bound is judged against; None before a quiet window."""
        if not self._quiet_us:
            return None
        return max(self.baseline_floor_us, int(statistics.median(self._quiet_us)))

    @property
    def budget(self) -> int:
        """How many groups may be moving at once now (1 to ``moves_max``)."""
        return self.moves_max if not self._quiet_us else self._budget

    def window(self, append_p99_us: int, moving: bool) -> int:
        """Close one window: its figure (the highest append p99 reported in it, 0: none)
        and whether a move was under way in it. The budget after it."""
        if append_p99_us < 0:
            raise ValueError(f"an append p99 cannot be negative, got {append_p99_us}")
        if append_p99_us == 0:
            return self.budget
        self.last_us = append_p99_us
        if not moving:
            self._quiet_us.append(append_p99_us)
            self._budget = 1
            return self.budget
        baseline = self.baseline_us
        if baseline is None:
            return self.budget
        if append_p99_us > self.bound_ratio * baseline:
            self._budget = max(1, self._budget // 2)
        elif append_p99_us <= self.ease_ratio * baseline:
            self._budget = min(self.moves_max, self._budget + 1)
        return self.budget


__all__ = ["MoveThrottle"]
