"""The membership configuration and the per-member progress and votes.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft.core.progress import Inflights, Progress
from raft.core.quorum import VoteResult, joint_committed, joint_vote
from raft.types import ConfState


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Who votes and who only learns.

    ``voters_outgoing`` is non-empty only in a joint configuration.
    Invariant: learners are disjoint from both voter sets.
    """

    voters: frozenset[int] = frozenset()
    learners: frozenset[int] = frozenset()
    voters_outgoing: frozenset[int] = frozenset()
    # Outgoing voters that turn into learners when the joint config is left.
    learners_next: frozenset[int] = frozenset()
    auto_leave: bool = False

    @classmethod
    def from_conf_state(cls, conf_state: ConfState) -> MembershipConfig:
        """The configuration a ConfState describes."""
        return cls(
            conf_state.voters,
            conf_state.learners,
            conf_state.voters_outgoing,
            conf_state.learners_next,
            conf_state.auto_leave,
        )

    def to_conf_state(self) -> ConfState:
        """This configuration as the ConfState the host persists."""
        return ConfState(
            self.voters, self.learners, self.voters_outgoing, self.learners_next, self.auto_leave
        )

    def is_joint(self) -> bool:
        """True inside a joint configuration."""
        return bool(self.voters_outgoing)

    def members(self) -> frozenset[int]:
        """Every id that receives the log."""
        return self.voters | self.voters_outgoing | self.learners

    def is_voter(self, node_id: int) -> bool:
        """True if ``node_id`` votes in either half of the configuration."""
        return node_id in self.voters or node_id in self.voters_outgoing


class ProgressTracker:
    """The current configuration, one Progress per member, and election votes."""

    __slots__ = ("config", "inflight_bytes_max", "inflight_count_max", "progress", "votes")

    def __init__(self, inflight_count_max: int, inflight_bytes_max: int = 0) -> None:
        self.config = MembershipConfig()
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}
        self.inflight_count_max = inflight_count_max
        self.inflight_bytes_max = inflight_bytes_max

    def new_progress(
        self, next_index: int, *, match: int = 0, is_learner: bool = False
    ) -> Progress:
        """A fresh Progress with this tracker's flow-control window."""
        return Progress(
            next_index,
            Inflights(self.inflight_count_max, self.inflight_bytes_max),
            match=match,
            is_learner=is_learner,
        )

    def is_singleton(self) -> bool:
        """True for a configuration of exactly one voter (no joint half)."""
        return len(self.config.voters) == 1 and not self.config.voters_outgoing

    def committed(self) -> int:
        """The largest index a quorum of voters holds."""
        progress = self.progress

        def match(node_id: int) -> int:
            pr = progress.get(node_id)
            return pr.match if pr is not None else 0

        return joint_committed(self.config.voters, self.config.voters_outgoing, match)

    def reset_votes(self) -> None:
        """Forget the votes of the last election."""
        self.votes = {}

    def record_vote(self, node_id: int, granted: bool) -> None:
        """Record ``node_id``'s answer; only its first answer counts."""
        self.votes.setdefault(node_id, granted)

    def vote_result(self, votes: dict[int, bool]) -> VoteResult:
        """The outcome of a yes/no poll of the voters."""
        return joint_vote(self.config.voters, self.config.voters_outgoing, votes)

    def quorum_active(self) -> bool:
        """True if a quorum of voters was heard from recently."""
        votes = {node_id: pr.recent_active for node_id, pr in self.progress.items()}
        return self.vote_result(votes) == VoteResult.WON

    def voter_ids(self) -> list[int]:
        """Every voter id (both halves), sorted."""
        return sorted(self.config.voters | self.config.voters_outgoing)
