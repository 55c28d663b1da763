"""What the leader knows about each follower's log, and how it may send to it.

A :class:`Progress` is in one of three states (etcd-io/raft's design):

- PROBE: the leader does not know where the follower's log ends. It sends
  at most one append per heartbeat interval and waits for the answer, moving
  ``next`` back on rejections (by the follower's conflict hint).
- REPLICATE: the follower accepted the last append; the leader streams
  appends optimistically (``next`` advances as it sends), capped by the
  :class:`Inflights` window.
- SNAPSHOT: the entries the follower needs are compacted; a snapshot is on
  its way and nothing else is sent until the host reports the outcome or the
  follower acknowledges an index at or past the snapshot.

Invariant: 0 <= match < next.

PURE.
"""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.IntEnum):
    """How the leader replicates to one follower."""

    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Inflights:
    """The appends sent to one follower and not yet acknowledged.

    Holds the last index of each in-flight append and its payload bytes.
    Full when ``count_max`` appends or ``bytes_max`` payload bytes (0: no
    byte limit) are in flight.
    """

    __slots__ = ("_bytes", "_indexes", "_sizes", "bytes_max", "count_max")

    def __init__(self, count_max: int, bytes_max: int = 0) -> None:
        self.count_max = count_max
        self.bytes_max = bytes_max
        self._indexes: deque[int] = deque()
        self._sizes: deque[int] = deque()
        self._bytes = 0

    def add(self, index: int, size_bytes: int) -> None:
        """Record an append whose last entry is ``index`` (indexes only grow)."""
        self._indexes.append(index)
        self._sizes.append(size_bytes)
        self._bytes += size_bytes

    def free_le(self, index: int) -> None:
        """Forget every append whose last index is <= ``index`` (acknowledged)."""
        indexes = self._indexes
        sizes = self._sizes
        while indexes and indexes[0] <= index:
            indexes.popleft()
            self._bytes -= sizes.popleft()

    def full(self) -> bool:
        """True when no further append may be sent."""
        return len(self._indexes) >= self.count_max or (
            self.bytes_max > 0 and self._bytes >= self.bytes_max
        )

    def count(self) -> int:
        """How many appends are in flight."""
        return len(self._indexes)

    def reset(self) -> None:
        """Forget everything in flight."""
        self._indexes.clear()
        self._sizes.clear()
        self._bytes = 0


class Progress:
    """The leader's view of one member (voter or learner), itself included."""

    __slots__ = (
        "inflights",
        "is_learner",
        "match",
        "msg_app_flow_paused",
        "next",
        "pending_snapshot",
        "recent_active",
        "sent_commit",
        "state",
    )

    def __init__(
        self,
        next_index: int,
        inflights: Inflights,
        *,
        match: int = 0,
        is_learner: bool = False,
        recent_active: bool = False,
    ) -> None:
        self.match = match
        self.next = next_index
        self.state = ProgressState.PROBE
        # PROBE: an append was sent and its answer not yet received.
        # REPLICATE: the in-flight window filled up; a heartbeat response
        # clears it so that one empty append can probe a stalled window.
        self.msg_app_flow_paused = False
        # SNAPSHOT only: the index of the snapshot being sent.
        self.pending_snapshot = 0
        # Heard from since the last check-quorum round (or since becoming leader).
        self.recent_active = recent_active
        self.is_learner = is_learner
        self.inflights = inflights
        # The highest commit index sent to this member (appends, heartbeats).
        self.sent_commit = 0

    def _reset_state(self, state: ProgressState) -> None:
        self.msg_app_flow_paused = False
        self.pending_snapshot = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        """Probe from the last known match (or just past a snapshot that was sent)."""
        if self.state == ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        """Stream appends from just past the match."""
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        """Stop appends while a snapshot at ``snapshot_index`` is sent."""
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def sent_entries(self, last_index: int, size_bytes: int) -> None:
        """Account for a non-empty append ending at ``last_index``."""
        if self.state == ProgressState.REPLICATE:
            self.next = last_index + 1
            self.inflights.add(last_index, size_bytes)
            self.msg_app_flow_paused = self.inflights.full()
        else:
            # PROBE: one append per round trip (or per heartbeat).
            self.msg_app_flow_paused = True

    def maybe_update(self, index: int) -> bool:
        """The follower holds the log up to ``index``; True if ``match`` advanced."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.msg_app_flow_paused = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """The follower rejected an append at ``rejected``; False if that is stale.

        ``match_hint`` is the largest index at which the follower's log may
        still match the leader's (its conflict hint).
        """
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.msg_app_flow_paused = False
        return True

    def is_paused(self) -> bool:
        """True when the leader must not send an append now."""
        if self.state == ProgressState.SNAPSHOT:
            return True
        return self.msg_app_flow_paused

    def can_send_entries(self) -> bool:
        """False while a full window allows only empty (probing) appends."""
        return self.state != ProgressState.REPLICATE or not self.inflights.full()
