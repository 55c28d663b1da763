"""Offset reads for pull consumers: which entries of a queue a filtered read returns.

A pull reads a queue by offset and changes no state: no lease, no consumer
offset. With a filter, the entries that do not match are skipped (not
returned), and the read reports where the next read continues, past every
entry it looked at, so a consumer never looks at a skipped entry twice.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.filters import TagFilter
from storage_node.partition.queues import QueueEntry


def matching(
    entries: Sequence[QueueEntry], first_offset: int, tag_filter: TagFilter, count_max: int
) -> tuple[list[int], list[QueueEntry], int]:
    """The offsets and entries of ``entries`` (consecutive, the first at ``first_offset``)
    that ``tag_filter`` matches, at most ``count_max``, and the offset after the last
    entry looked at: after the ``count_max``-th match, else after the last entry."""
    offsets: list[int] = []
    kept: list[QueueEntry] = []
    if tag_filter.matches_all:
        kept = list(entries[:count_max])
        offsets = list(range(first_offset, first_offset + len(kept)))
        return offsets, kept, first_offset + len(kept)
    for offset, entry in enumerate(entries, first_offset):
        if tag_filter.matches(entry.tag):
            offsets.append(offset)
            kept.append(entry)
            if len(kept) >= count_max:
                return offsets, kept, offset + 1
    return offsets, kept, first_offset + len(entries)
