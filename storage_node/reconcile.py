"""Reconcile: which local replicas a storage node starts and stops, and the
membership changes a group's leader makes, from the nameserver's assignment.

:func:`plan_reconcile` compares the replicas a node hosts (group -> voters of
its raft configuration) with what the nameserver assigns to it (group ->
replicas) and says what to do:

- ``start``: assigned groups not hosted yet, with the members to bootstrap
  them with: the assignment's replicas for a new group, or none when this
  node is *joining* an existing group (a replica move: it starts empty and
  waits for the leader to add it as a learner and catch it up by snapshot
  and log). A replica whose WAL already holds the group keeps the
  configuration recorded there. Starting is idempotent: a group is started
  at most once per process, and a group already hosted is never started
  again.
- ``membership_differs``: hosted groups assigned with other replicas; the
  group's leader changes the raft membership step by step
  (:func:`plan_membership_step`).
- ``unassigned``: hosted groups no longer assigned here (moved away). The
  shell stops and deletes such a replica, unless it leads the group: then
  it waits until its leadership has been handed to a replica that stays.
- ``refused``: assignments that cannot be served (group ids outside the
  cluster's range, or replicas that do not include this node), with the
  reason, so the shell can log them: bad input is named, never fatal.
- ``unknown_nodes``: replica nodes of groups to start whose address this node
  does not know yet (the shell reads the nameserver's node list first).

:func:`removal_confirmed` decides whether an unassigned replica whose own
membership still names it may delete itself on its group leader's word.
:class:`Readmission` follows a replica whose node lost its data back into its
group (``storage_node.data_loss``).

PURE.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    """What a node does to match an assignment (see the module docstring)."""

    start: tuple[tuple[int, tuple[int, ...]], ...] = ()
    membership_differs: tuple[int, ...] = ()
    unassigned: tuple[int, ...] = ()
    refused: tuple[tuple[int, str], ...] = ()
    unknown_nodes: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        """Whether the node already matches the assignment (nothing to start or note)."""
        return not (self.start or self.membership_differs or self.unassigned or self.refused)


def plan_reconcile(
    node_id: int,
    hosted: Mapping[int, Collection[int]],
    assigned: Mapping[int, Collection[int]],
    groups: range,
    known_nodes: Collection[int],
    joining: Mapping[int, Collection[int]] | None = None,
) -> ReconcilePlan:
    """What ``node_id`` does to host ``assigned`` (group -> replicas) given ``hosted``
    (group -> current voters); ``groups`` is the cluster's group id range and
    ``known_nodes`` the nodes whose address is known; ``joining``: group ->
    replicas that join an existing group (a move in progress)."""
    start: list[tuple[int, tuple[int, ...]]] = []
    differs: list[int] = []
    refused: list[tuple[int, str]] = []
    unknown: set[int] = set()
    valid: set[int] = set()
    for group_id in sorted(assigned):
        replicas = tuple(sorted(set(assigned[group_id])))
        if group_id not in groups:
            refused.append(
                (group_id, f"group {group_id} is outside the cluster's ids {_span(groups)}")
            )
            continue
        if node_id not in replicas:
            refused.append(
                (group_id, f"group {group_id} is assigned to {list(replicas)}, not to {node_id}")
            )
            continue
        valid.add(group_id)
        voters = hosted.get(group_id)
        if voters is None:
            if joining is not None and node_id in joining.get(group_id, ()):
                start.append((group_id, ()))  # the leader adds it as a learner
                continue
            start.append((group_id, replicas))
            unknown.update(n for n in replicas if n != node_id and n not in known_nodes)
        elif set(voters) != set(replicas):
            differs.append(group_id)
    unassigned = tuple(g for g in sorted(hosted) if g not in valid)
    return ReconcilePlan(
        tuple(start), tuple(differs), unassigned, tuple(refused), tuple(sorted(unknown))
    )


class StepKind(enum.Enum):
    """One raft membership change, or a leadership hand-over before one."""

    ADD_LEARNER = "add_learner"
    PROMOTE = "promote"
    REMOVE = "remove"
    TRANSFER_LEADER = "transfer_leader"


@dataclass(frozen=True, slots=True)
class MembershipStep:
    """What a group's leader does next about ``node_id``."""

    kind: StepKind
    node_id: int


@dataclass(frozen=True, slots=True)
class LeaderView:
    """What a group's leader knows of its membership and its members' logs.

    ``joint``: the configuration is joint (changes wait until it is left).
    ``match``: member -> highest log index known to be on it. ``commit``:
    the leader's commit index.
    """

    node_id: int
    voters: frozenset[int]
    learners: frozenset[int]
    joint: bool
    match: Mapping[int, int]
    commit: int


PROMOTE_LAG_ENTRIES_MAX = 64
"""A learner is caught up (may be promoted) when it holds the log up to this many
entries below the leader's commit index (under load it never matches exactly)."""


def membership_settled(
    voters: Collection[int], learners: Collection[int], joint: bool, assigned: Collection[int]
) -> bool:
    """Whether a group's membership is exactly its assignment: ``assigned`` (not empty)
    are its voters, it has no learners and is not joint.

    Then :func:`plan_membership_step` has no step, whatever the logs' progress:
    a leader checks this first, from the configuration alone, and builds a
    :class:`LeaderView` only for the groups it says False for.
    """
    wanted = frozenset(assigned)
    return bool(wanted) and not joint and not learners and frozenset(voters) == wanted


def plan_membership_step(
    view: LeaderView,
    assigned: Collection[int],
    lag_entries_max: int = PROMOTE_LAG_ENTRIES_MAX,
    lost: Collection[int] = (),
) -> MembershipStep | None:
    """The leader's next step toward voters == ``assigned``, or None (done, or waiting).

    Order, one change at a time (raft allows one pending change per group):
    first remove members in ``lost`` (nodes that lost their replica's data and
    asked to be re-admitted: removing them makes the leader forget what they
    acknowledged before, and their replicas join again as learners below);
    remove learners that are not assigned; add assigned nodes as learners;
    promote caught-up learners; only once every assigned node is a voter,
    remove voters that are not assigned (so the group never has fewer
    voters than it is meant to). The leader itself is never removed by its
    own step: it hands leadership to the most caught-up assigned voter first.
    """
    wanted = frozenset(assigned)
    if view.joint or not wanted:
        return None
    gone = sorted((view.voters | view.learners) & frozenset(lost) - {view.node_id})
    if gone:
        return MembershipStep(StepKind.REMOVE, gone[0])
    stray = sorted(view.learners - wanted)
    if stray:
        return MembershipStep(StepKind.REMOVE, stray[0])
    missing = sorted(wanted - view.voters - view.learners)
    if missing:
        return MembershipStep(StepKind.ADD_LEARNER, missing[0])
    waiting = False
    for node_id in sorted(view.learners & wanted):
        match = view.match.get(node_id, 0)
        if match > 0 and match + lag_entries_max >= view.commit:
            return MembershipStep(StepKind.PROMOTE, node_id)
        waiting = True
    if waiting:
        return None
    extra = sorted(view.voters - wanted)
    if not extra:
        return None
    if view.node_id in extra:
        others = [n for n in sorted(wanted & view.voters) if n != view.node_id]
        if not others:
            return None
        best = max(others, key=lambda n: (view.match.get(n, 0), -n))
        return MembershipStep(StepKind.TRANSFER_LEADER, best)
    return MembershipStep(StepKind.REMOVE, extra[0])


@dataclass(frozen=True, slots=True)
class ReplicaMark:
    """A replica's raft position at one moment: its term, last log index and commit."""

    term: int
    last_index: int
    commit: int


@dataclass(frozen=True, slots=True)
class LeaderMembership:
    """A group leader's answer: who answered, in which term, and every node its applied
    (committed) membership names (voters, learners, outgoing voters, next learners),
    as of its applied index ``applied_index``."""

    leader: int
    term: int
    members: frozenset[int]
    applied_index: int = 0


def removal_confirmed(
    node_id: int, asked: ReplicaMark, now: ReplicaMark, answer: LeaderMembership
) -> bool:
    """Whether ``node_id``'s replica may delete itself: its assignment no longer lists
    it, its own membership still names it, and it asked the group's leader (when its
    position was ``asked``; ``now`` is its position as the answer arrived).

    The leader stops replicating to a node once the change removing it is
    applied, so the removed replica may never learn that the change committed
    and never apply its own removal. The leader's answer settles it when:

    - it comes from another node, and names members (a leader always has);
    - its membership, applied after the leader's read barrier (so it covers
      every change committed before the leader's term), does not name this node;
    - its term is not below this replica's term when it asked: a deposed
      leader of an older term may answer a stale membership, while a newer
      leader (which could have added this node back) would have raised this
      replica's term when it sent it anything;
    - this replica's position did not move while it asked: nothing was
      appended or committed, no term began. So it acknowledged nothing during
      the question, and what it acknowledged before was under a membership no
      newer than the answer's (the previous rule).

    Otherwise the replica keeps its data and asks again later: deletion errs on
    the side of keeping data, and an assignment alone never deletes.
    """
    return (
        answer.leader not in (0, node_id)
        and bool(answer.members)
        and node_id not in answer.members
        and answer.term >= asked.term
        and now == asked
    )


@dataclass(frozen=True, slots=True)
class Readmission:
    """A replica whose node lost its data, on its way back into its group.

    ``removed_at``: the applied index at which a leader reported this node absent
    from the group's membership (-1: not yet; the replica keeps asking).
    ``learner_at``: the index of a membership this replica applied, after
    ``removed_at``, naming it a learner (-1: not yet). ``readmitted``: it then
    applied, at a later index, a membership naming it a voter.

    Why this order proves the node was re-admitted: a membership after the
    removal that names it again was made by the leader adding it back as a
    fresh learner (its acknowledgements from before the loss forgotten), then
    promoting it once it caught up from the leader's snapshot and log; a
    membership naming it a voter straight away would be one from before the
    removal (a stale snapshot), which proves nothing.
    """

    removed_at: int = -1
    learner_at: int = -1
    readmitted: bool = False

    def heard(self, node_id: int, asked_term: int, answer: LeaderMembership) -> Readmission:
        """After a leader's answer to this replica's request (asked in ``asked_term``):
        removed once another node, leading in a term not below it, reports a
        membership without this node."""
        if (
            self.removed_at >= 0
            or answer.leader in (0, node_id)
            or not answer.members
            or node_id in answer.members
            or answer.term < asked_term
        ):
            return self
        return Readmission(answer.applied_index)

    def applied(
        self, node_id: int, index: int, voters: Collection[int], learners: Collection[int]
    ) -> Readmission:
        """After this replica applied a membership (a change or a snapshot) at ``index``."""
        if self.readmitted or self.removed_at < 0 or index <= self.removed_at:
            return self
        if self.learner_at < 0:
            if node_id in learners:
                return Readmission(self.removed_at, index)
            return self
        if node_id in voters and index > self.learner_at:
            return Readmission(self.removed_at, self.learner_at, True)
        return self


def _span(groups: range) -> str:
    return f"{groups.start}..{groups.stop - 1}" if groups else "(none)"
