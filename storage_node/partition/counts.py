"""Counts of values (multisets as dicts of value -> how many), kept by moves.

PURE.
"""

from __future__ import annotations


def move_count(counts: dict[int, int], old: int | None, new: int | None) -> bool:
    """One holder of ``old`` now holds ``new`` (None: nothing): ``old``'s count goes
    down (gone at 0), ``new``'s up. True if ``new`` was not counted before."""
    if old is not None:
        left = counts[old] - 1
        if left:
            counts[old] = left
        else:
            del counts[old]
    if new is None:
        return False
    had = counts.get(new, 0)
    counts[new] = had + 1
    return not had
