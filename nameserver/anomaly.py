"""Unhealthy storage nodes: latency outliers against their peers, with hysteresis.

Each window (e.g. every few seconds) every live node reports a latency
figure per metric (fsync p99, RPC p99, in ms). :func:`outliers` finds the
nodes whose figure is far above their peers' by robust statistics: the
median and the median absolute deviation (MAD), which one slow node cannot
drag along as it would a mean and standard deviation. A node is an outlier
when both hold:

- its modified z-score ``0.6745 * (x - median) / MAD`` is above
  ``z_threshold`` (3.5 is the usual cut);
- it is at least ``ratio_min`` times the median and ``absolute_min_ms``
  above it, so a tight, healthy cluster (a tiny MAD) does not flag a node
  that is slower by a fraction of a millisecond.

With fewer than ``peers_min`` reporting nodes there are no peers to judge
against and nothing is flagged.

:class:`DegradationTracker` turns windows of outliers into a *degraded*
mark with hysteresis: a node is marked after ``mark_after`` consecutive
outlier windows and cleared after ``clear_after`` consecutive normal ones,
so a single slow fsync or a GC pause (one window) never marks a node.
Metrics are judged independently; an outlier in any metric counts for the
window.

PURE: windows come in as calls; no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAD_SCALE = 0.6745  # makes the MAD of a normal distribution comparable to its sigma


@dataclass(frozen=True, slots=True)
class OutlierRule:
    """When a figure counts as an outlier (module docstring)."""

    z_threshold: float = 3.5
    ratio_min: float = 2.0
    absolute_min_ms: float = 2.0
    peers_min: int = 3

    def __post_init__(self) -> None:
        if self.z_threshold <= 0 or self.ratio_min < 1.0 or self.absolute_min_ms < 0:
            raise ValueError(
                "z_threshold must be > 0, ratio_min >= 1 and absolute_min_ms >= 0, got "
                f"{self.z_threshold}, {self.ratio_min}, {self.absolute_min_ms}"
            )
        if self.peers_min < 3:
            raise ValueError(f"peers_min must be >= 3, got {self.peers_min}")


def median(values: list[float]) -> float:
    """The median of a non-empty list."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def outliers(figures: Mapping[int, float], rule: OutlierRule) -> frozenset[int]:
    """The nodes (node -> figure) whose figure is an outlier above their peers."""
    if len(figures) < rule.peers_min:
        return frozenset()
    values = list(figures.values())
    center = median(values)
    mad = median([abs(v - center) for v in values])
    flagged: set[int] = set()
    for node_id, value in figures.items():
        excess = value - center
        if excess < rule.absolute_min_ms or value < rule.ratio_min * center:
            continue
        # A MAD of 0 (most nodes identical) makes any clear excess an outlier.
        if mad == 0.0 or MAD_SCALE * excess / mad > rule.z_threshold:
            flagged.add(node_id)
    return frozenset(flagged)


class DegradationTracker:
    """Degraded marks from windows of latency figures, with hysteresis."""

    def __init__(
        self, rule: OutlierRule | None = None, mark_after: int = 3, clear_after: int = 6
    ) -> None:
        """``mark_after``/``clear_after``: consecutive outlier/normal windows that
        mark/clear a node (both >= 1)."""
        if mark_after < 1 or clear_after < 1:
            raise ValueError(
                f"mark_after and clear_after must be >= 1, got {mark_after}, {clear_after}"
            )
        self.rule = rule or OutlierRule()
        self.mark_after = mark_after
        self.clear_after = clear_after
        self._streak: dict[int, int] = {}  # > 0: outlier windows in a row; < 0: normal ones
        self._degraded: set[int] = set()

    @property
    def degraded(self) -> frozenset[int]:
        """The nodes marked degraded now."""
        return frozenset(self._degraded)

    def window(self, metrics: Mapping[str, Mapping[int, float]]) -> frozenset[int]:
        """Judge one window (metric -> node -> figure) and return the degraded nodes.

        A node absent from every metric this window (down, or silent) keeps
        its streak and mark: absence is the failure detector's business.
        """
        reporting: set[int] = set()
        flagged: set[int] = set()
        for figures in metrics.values():
            reporting.update(figures)
            flagged |= outliers(figures, self.rule)
        for node_id in reporting:
            streak = self._streak.get(node_id, 0)
            if node_id in flagged:
                streak = max(streak, 0) + 1
                if streak >= self.mark_after:
                    self._degraded.add(node_id)
            else:
                streak = min(streak, 0) - 1
                if -streak >= self.clear_after:
                    self._degraded.discard(node_id)
            self._streak[node_id] = streak
        return self.degraded

    def forget(self, node_id: int) -> None:
        """Drop ``node_id``'s history (removed from the cluster)."""
        self._streak.pop(node_id, None)
        self._degraded.discard(node_id)
