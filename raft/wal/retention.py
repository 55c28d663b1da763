"""Which compactions free WAL segments: a segment goes once no group has a live entry in it.

PURE: reads the groups' indexes (:class:`raft.wal.group_index.GroupIndex`) only.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from raft.wal.group_index import GroupIndex


def compaction_targets(
    groups: Iterable[GroupIndex], segment_seqs: Sequence[int], keep_segments: int
) -> dict[int, int]:
    """What frees every live segment (``segment_seqs``, oldest first) but the newest
    ``keep_segments``.

    For each group with entries in those older segments: the index of its
    last entry there. Compacting each group up to its target (after a
    snapshot covering it) lets the store's garbage collection
    (:meth:`raft.wal.logstore.LogStore.maybe_collect_garbage`) recycle them.
    """
    if len(segment_seqs) <= keep_segments:
        return {}
    bound = segment_seqs[-max(1, keep_segments)]
    targets: dict[int, int] = {}
    for g in groups:
        locs = g.locs
        if locs and locs[0][1] < bound:
            below = bisect.bisect_left(locs, bound, key=_loc_segment)
            targets[g.group_id] = g.first + below - 1
    return targets


def compaction_unpins(g: GroupIndex, index: int) -> bool:
    """Whether compacting ``g`` up to ``index`` releases a segment it holds.

    True when the group would keep no entry, or its first kept entry lies
    in a later segment than its first entry does now; False when nothing
    would be discarded or the group would still hold the same segments.
    """
    if not g.locs or index < g.first:
        return False
    kept = index + 1 - g.first
    if kept >= len(g.locs):
        return True
    return _loc_segment(g.locs[kept]) > _loc_segment(g.locs[0])


def _loc_segment(loc: tuple[int, int, int, int, int]) -> int:
    return loc[1]
