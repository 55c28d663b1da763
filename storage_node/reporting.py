"""What a storage node tells the nameserver about its groups' leaders, and when.

:class:`LeaderReporter` decides, from the node's current view of each hosted
group (leader, term), which views to send:

- a view is sent only when it names a leader (a view with no leader says
  nothing the nameserver can use: the leader it records stays until that
  node's reports or its failure change it);
- changed views are sent as soon as they are seen, but batches go out at
  most every ``coalesce_ms`` (an election storm becomes one report);
- every ``full_interval_ms`` every view is sent again, changed or not, so a
  report lost on the way (or refused by a nameserver that had not heard of
  the leader node yet) is repaired;
- a view counts as sent only once the caller confirms it (:meth:`sent`):
  a batch that failed goes out again on the next occasion.

Also the load figures a node reports in its heartbeats: :func:`rate_per_s`
(its message rate), :func:`group_rates_per_s` (the rate of each group it
leads) and :func:`percentile_us` (its fsync latency over the last interval).

PURE: time comes in as ``now_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

COALESCE_MS_DEFAULT = 200
NO_LEADER = 0


@dataclass(frozen=True, slots=True)
class LeaderView:
    """A node's view of one group: ``leader`` (NO_LEADER: none known) at ``term``."""

    group_id: int
    leader: int
    term: int


@dataclass(frozen=True, slots=True)
class ReportBatch:
    """Views to send now; ``full`` when it is the periodic full report."""

    views: tuple[LeaderView, ...]
    full: bool


class LeaderReporter:
    """Coalesces leader views into report batches (see the module docstring)."""

    def __init__(
        self, coalesce_ms: int = COALESCE_MS_DEFAULT, full_interval_ms: int = 5000
    ) -> None:
        """``coalesce_ms``: least time between two batches; ``full_interval_ms``: between
        full ones."""
        if coalesce_ms < 0 or full_interval_ms < 1:
            raise ValueError(
                f"coalesce_ms must be >= 0 and full_interval_ms >= 1, "
                f"got {coalesce_ms} and {full_interval_ms}"
            )
        self.coalesce_ms = coalesce_ms
        self.full_interval_ms = full_interval_ms
        self._sent: dict[int, tuple[int, int]] = {}
        self._last_batch_ms: int | None = None
        self._last_full_ms: int | None = None

    def due(self, now_ms: int, views: Mapping[int, tuple[int, int]]) -> ReportBatch | None:
        """The batch to send now for ``views`` (group -> (leader, term)), or None."""
        known = {g: v for g, v in views.items() if v[0] != NO_LEADER}
        if self._last_full_ms is None or now_ms - self._last_full_ms >= self.full_interval_ms:
            if not known:
                return None
            return ReportBatch(_views(known), full=True)
        if self._last_batch_ms is not None and now_ms - self._last_batch_ms < self.coalesce_ms:
            return None
        changed = {g: v for g, v in known.items() if self._sent.get(g) != v}
        if not changed:
            return None
        return ReportBatch(_views(changed), full=False)

    def sent(self, batch: ReportBatch, now_ms: int) -> None:
        """The nameserver answered ``batch`` (taken or stale: either way it was heard)."""
        for view in batch.views:
            self._sent[view.group_id] = (view.leader, view.term)
        self._last_batch_ms = now_ms
        if batch.full:
            self._last_full_ms = now_ms


def _views(views: Mapping[int, tuple[int, int]]) -> tuple[LeaderView, ...]:
    return tuple(LeaderView(g, leader, term) for g, (leader, term) in sorted(views.items()))


def rate_per_s(count_before: int, ms_before: int, count_now: int, ms_now: int) -> int:
    """The rate of a growing counter between two readings, per second (0 for no time)."""
    elapsed_ms = ms_now - ms_before
    if elapsed_ms <= 0 or count_now <= count_before:
        return 0
    return (count_now - count_before) * 1000 // elapsed_ms


def group_rates_per_s(
    counts_before: Mapping[int, int], ms_before: int, counts_now: Mapping[int, int], ms_now: int
) -> dict[int, int]:
    """Each group's rate between two readings of its growing counter (group ->
    count); a group absent before counts from 0. Groups at rate 0 are left out."""
    rates: dict[int, int] = {}
    for group_id, count in counts_now.items():
        rate = rate_per_s(counts_before.get(group_id, 0), ms_before, count, ms_now)
        if rate:
            rates[group_id] = rate
    return rates


def percentile_us(durations_ns: Sequence[int], fraction: float = 0.99) -> int:
    """The ``fraction`` percentile (nearest rank) of durations, in microseconds;
    0 for no durations (no figure: nothing was measured)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not durations_ns:
        return 0
    ordered = sorted(durations_ns)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1] // 1000
