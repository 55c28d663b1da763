"""Statistics shared by the benchmarks and the chaos checkers.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of the sorted values (nearest rank); NaN if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
