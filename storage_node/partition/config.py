"""The constants of a partition that every replica of its raft group shares.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """Constants every replica of a group must share (they travel in snapshots)."""

    group_id: int = 0
    """This raft group's id: the queue id of its dead-letter queues."""
    dedup_window_ms: int = 2 * 60_000
    """How long a stored message id is remembered for idempotent retries (the
    official clients retry at once, so minutes suffice)."""
    dedup_entries_max: int = 100_000
    """At most this many message ids are remembered (oldest dropped first)."""
    receive_scan_max: int = 4096
    """A receive looks at no more than this many offsets past a group's cursor."""
