"""The options of one Raft replica.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft.errors import InvalidConfig
from raft.types import NONE


@dataclass(frozen=True, slots=True)
class Config:
    """How one replica behaves. Times are in ticks (the host decides a tick's length)."""

    id: int
    # A follower that hears no leader for a randomized [election_tick,
    # 2 * election_tick) ticks starts an election. Must exceed heartbeat_tick.
    election_tick: int = 10
    # The leader heartbeats every heartbeat_tick ticks.
    heartbeat_tick: int = 1
    # The last index the host applied before a restart (entries after it are
    # handed out again); 0 for a new replica.
    applied: int = 0
    # Run a pre-vote round before a real election, so that a replica that
    # was partitioned away does not disrupt the group by raising the term.
    pre_vote: bool = True
    # The leader steps down when it has not heard from a quorum for an
    # election timeout; followers then ignore vote requests while they hear
    # from a leader (the leader lease).
    check_quorum: bool = True
    # The data bytes of entries in one append message (at least one entry).
    max_size_per_msg_bytes: int = 1 << 20
    # The data bytes of committed entries handed out in one Ready.
    max_committed_size_per_ready_bytes: int = 16 << 20
    # Appends in flight to one follower in the replicate state.
    max_inflight_msgs: int = 256
    # Payload bytes in flight to one follower (0: unlimited).
    max_inflight_bytes: int = 0
    # Proposals are dropped while the leader's uncommitted entries exceed this
    # many data bytes (0: unlimited).
    max_uncommitted_entries_bytes: int = 0
    # This replica's node lost its durable state (a damaged WAL set aside): its
    # term, its vote and entries it acknowledged may be gone. While set, it
    # neither grants votes (pre-votes included) nor campaigns, so it can neither
    # vote twice in a term nor help elect a leader that lacks an entry committed
    # with its help. The host lifts it (RawNode.lift_data_lost) once the group
    # re-admitted the node (removed it, caught it up as a learner, promoted it).
    data_lost: bool = False
    # True: when the commit index moves, the leader tells every follower at once
    # (an append without entries if it has none to send), as etcd/raft does.
    # False: followers learn it from the next append or heartbeat, so an entry
    # costs one message and one answer fewer per follower; a follower applies
    # (and serves follower reads) up to a heartbeat later when nothing follows.
    # Either way the leader quiesces only once every follower was told its
    # last index is committed (RawNode.quiesce_point).
    eager_commit_news: bool = True

    def validate(self) -> None:
        """Raise InvalidConfig naming the first option that cannot work."""
        if self.id == NONE or self.id < 0:
            raise InvalidConfig(f"id must be positive, got {self.id}")
        if self.heartbeat_tick <= 0:
            raise InvalidConfig(f"heartbeat_tick must be positive, got {self.heartbeat_tick}")
        if self.election_tick <= self.heartbeat_tick:
            raise InvalidConfig(
                f"election_tick ({self.election_tick}) must exceed heartbeat_tick "
                f"({self.heartbeat_tick})"
            )
        if self.max_inflight_msgs <= 0:
            raise InvalidConfig(f"max_inflight_msgs must be positive, got {self.max_inflight_msgs}")
        if self.max_size_per_msg_bytes <= 0:
            raise InvalidConfig(
                f"max_size_per_msg_bytes must be positive, got {self.max_size_per_msg_bytes}"
            )
        if self.max_committed_size_per_ready_bytes <= 0:
            raise InvalidConfig(
                "max_committed_size_per_ready_bytes must be positive, got "
                f"{self.max_committed_size_per_ready_bytes}"
            )
        if min(self.applied, self.max_inflight_bytes, self.max_uncommitted_entries_bytes) < 0:
            raise InvalidConfig("applied and the byte limits must not be negative")
