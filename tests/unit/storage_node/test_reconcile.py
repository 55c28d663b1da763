"""Reconcile: local replicas against the nameserver's assignment (storage_node.reconcile)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage_node.reconcile import (
    LeaderMembership,
    LeaderView,
    MembershipStep,
    Readmission,
    ReconcilePlan,
    ReplicaMark,
    StepKind,
    membership_settled,
    plan_membership_step,
    plan_reconcile,
    removal_confirmed,
)

GROUPS = range(1, 9)


def test_assigned_groups_not_hosted_are_started_with_their_replicas() -> None:
    plan = plan_reconcile(1, {}, {2: (3, 1, 2), 5: (1, 4, 2)}, GROUPS, known_nodes={1, 2, 3})
    assert plan.start == ((2, (1, 2, 3)), (5, (1, 2, 4)))
    assert plan.unknown_nodes == (4,)
    assert not plan.refused


def test_reconcile_is_idempotent() -> None:
    assigned = {2: (1, 2, 3)}
    plan = plan_reconcile(1, {2: {1, 2, 3}}, assigned, GROUPS, known_nodes={1, 2, 3})
    assert plan == ReconcilePlan()
    assert plan.is_empty()


def test_membership_changes_and_unassigned_groups_are_planned() -> None:
    plan = plan_reconcile(
        1, {2: {1, 2, 3}, 3: {1, 2, 3}}, {2: (1, 2, 4)}, GROUPS, known_nodes={1, 2, 3, 4}
    )
    assert plan.start == ()
    assert plan.membership_differs == (2,)
    assert plan.unassigned == (3,)
    assert not plan.is_empty()


def test_bad_assignments_are_refused_with_a_reason() -> None:
    plan = plan_reconcile(1, {}, {99: (1, 2, 3), 4: (2, 3, 5)}, GROUPS, known_nodes={1})
    assert plan.start == ()
    reasons = dict(plan.refused)
    assert "outside the cluster's ids 1..8" in reasons[99]
    assert "not to 1" in reasons[4]


def test_a_node_joining_an_existing_group_starts_it_empty() -> None:
    plan = plan_reconcile(
        4,
        {},
        {2: (1, 2, 3, 4), 3: (2, 3, 4)},
        GROUPS,
        known_nodes={1, 2, 3, 4},
        joining={2: (4,)},
    )
    # Group 2: a move adds node 4 (the leader adds it as a learner); group 3: a new group.
    assert plan.start == ((2, ()), (3, (2, 3, 4)))


def _view(
    voters: set[int],
    learners: set[int] | None = None,
    match: dict[int, int] | None = None,
    commit: int = 100,
    me: int = 1,
    joint: bool = False,
) -> LeaderView:
    learning = learners or set()
    members = voters | learning
    return LeaderView(
        me,
        frozenset(voters),
        frozenset(learning),
        joint,
        match if match is not None else dict.fromkeys(members, commit),
        commit,
    )


def test_a_move_is_learner_then_promotion_then_removal() -> None:
    wanted = (1, 2, 4)
    # The new replica first joins as a learner.
    step = plan_membership_step(_view({1, 2, 3}), wanted)
    assert step == MembershipStep(StepKind.ADD_LEARNER, 4)
    # It is promoted only once caught up (within the lag bound of the commit index).
    lagging = _view({1, 2, 3}, {4}, match={1: 100, 2: 100, 3: 100, 4: 0})
    assert plan_membership_step(lagging, wanted) is None
    behind = _view({1, 2, 3}, {4}, match={1: 100, 2: 100, 3: 100, 4: 10})
    assert plan_membership_step(behind, wanted, lag_entries_max=64) is None
    close = _view({1, 2, 3}, {4}, match={1: 100, 2: 100, 3: 100, 4: 40})
    assert plan_membership_step(close, wanted, lag_entries_max=64) == MembershipStep(
        StepKind.PROMOTE, 4
    )
    # Then the old voter goes; then nothing is left to do.
    assert plan_membership_step(_view({1, 2, 3, 4}), wanted) == MembershipStep(StepKind.REMOVE, 3)
    assert plan_membership_step(_view({1, 2, 4}), wanted) is None


def test_voters_are_removed_only_once_every_assigned_node_is_a_voter() -> None:
    # Node 3 is not assigned any more, but node 4 is still a learner: wait.
    view = _view({1, 2, 3}, {4}, match={1: 100, 2: 100, 3: 100, 4: 0})
    assert plan_membership_step(view, (1, 2, 4)) is None


def test_a_leaving_leader_hands_leadership_over_first() -> None:
    view = _view({1, 2, 3, 4}, match={1: 100, 2: 90, 3: 100, 4: 100}, me=1)
    # The leader (1) is the one leaving: it transfers to the most caught-up staying voter.
    assert plan_membership_step(view, (2, 3, 4)) == MembershipStep(StepKind.TRANSFER_LEADER, 3)


def test_stray_learners_go_and_joint_configurations_wait() -> None:
    assert plan_membership_step(_view({1, 2, 3}, {5}), (1, 2, 3)) == MembershipStep(
        StepKind.REMOVE, 5
    )
    assert plan_membership_step(_view({1, 2, 3}, joint=True), (1, 2, 4)) is None
    assert plan_membership_step(_view({1, 2, 3}), ()) is None


def test_a_membership_is_settled_only_when_it_is_exactly_the_assignment() -> None:
    assert membership_settled({1, 2, 3}, set(), False, (3, 2, 1))
    assert not membership_settled({1, 2, 3}, set(), False, (1, 2, 4))
    assert not membership_settled({1, 2, 3}, {4}, False, (1, 2, 3))
    assert not membership_settled({1, 2, 3}, set(), True, (1, 2, 3))
    assert not membership_settled({1, 2, 3, 4}, set(), False, (1, 2, 3))
    assert not membership_settled(set(), set(), False, ())


_NODES = st.frozensets(st.integers(1, 5), max_size=5)


@given(
    voters=_NODES,
    learners=_NODES,
    joint=st.booleans(),
    assigned=_NODES,
    match=st.dictionaries(st.integers(1, 5), st.integers(0, 200)),
    commit=st.integers(0, 200),
)
def test_a_settled_membership_has_no_step_whatever_the_logs(
    voters: frozenset[int],
    learners: frozenset[int],
    joint: bool,
    assigned: frozenset[int],
    match: dict[int, int],
    commit: int,
) -> None:
    view = LeaderView(1, voters, learners, joint, match, commit)
    if membership_settled(voters, learners, joint, assigned):
        assert plan_membership_step(view, assigned) is None


# -- an unassigned replica asks its group's leader whether its removal committed

_AT = ReplicaMark(term=5, last_index=120, commit=118)
_REMOVED = LeaderMembership(leader=1, term=5, members=frozenset({1, 2, 4}))


def test_a_leader_whose_committed_membership_excludes_the_replica_confirms_its_removal() -> None:
    assert removal_confirmed(3, _AT, _AT, _REMOVED)
    # A leader of a later term confirms too (this replica never heard of that term).
    assert removal_confirmed(3, _AT, _AT, LeaderMembership(2, 7, frozenset({1, 2, 4})))


def test_a_membership_that_names_the_replica_keeps_it() -> None:
    # Named as a voter, a learner or in a joint configuration's halves: the shell
    # passes every node the leader's membership names.
    for members in ({1, 2, 3}, {1, 2, 3, 4}):
        assert not removal_confirmed(3, _AT, _AT, LeaderMembership(1, 5, frozenset(members)))
    # A leader always has members: an empty membership proves nothing.
    assert not removal_confirmed(3, _AT, _AT, LeaderMembership(1, 5, frozenset()))


def test_only_another_node_that_leads_may_answer() -> None:
    assert not removal_confirmed(3, _AT, _AT, LeaderMembership(0, 5, frozenset({1, 2, 4})))
    assert not removal_confirmed(3, _AT, _AT, LeaderMembership(3, 5, frozenset({1, 2, 4})))


def test_a_leader_of_an_older_term_than_the_replica_is_not_believed() -> None:
    # A deposed leader may answer a stale membership; a newer leader that added this
    # node back would have raised its term.
    assert not removal_confirmed(3, _AT, _AT, LeaderMembership(1, 4, frozenset({1, 2, 4})))


def test_a_replica_that_moved_while_it_asked_keeps_its_data_and_asks_again() -> None:
    appended = ReplicaMark(5, 121, 118)
    committed = ReplicaMark(5, 120, 119)
    new_term = ReplicaMark(6, 120, 118)
    for now in (appended, committed, new_term):
        assert not removal_confirmed(3, _AT, now, _REMOVED)


# -- a data-lost node is removed, added back as a learner and promoted


def test_a_leader_removes_lost_members_before_any_other_step() -> None:
    view = LeaderView(1, frozenset({1, 2, 3}), frozenset(), False, {2: 50, 3: 50}, 50)
    assert plan_membership_step(view, [1, 2, 3], lost={3}) == MembershipStep(StepKind.REMOVE, 3)
    # A lost learner too (the leader's record of what it holds is stale).
    view = LeaderView(1, frozenset({1, 2}), frozenset({3}), False, {2: 50, 3: 50}, 50)
    assert plan_membership_step(view, [1, 2, 3], lost={3}) == MembershipStep(StepKind.REMOVE, 3)
    # Once removed it is assigned but missing: it joins again as a fresh learner.
    view = LeaderView(1, frozenset({1, 2}), frozenset(), False, {2: 50}, 50)
    assert plan_membership_step(view, [1, 2, 3], lost={3}) == MembershipStep(
        StepKind.ADD_LEARNER, 3
    )
    # The leader never removes itself for it, and a joint configuration waits.
    view = LeaderView(1, frozenset({1, 2, 3}), frozenset(), False, {2: 50, 3: 50}, 50)
    assert plan_membership_step(view, [1, 2, 3], lost={1}) is None
    joint = LeaderView(1, frozenset({1, 2, 3}), frozenset(), True, {}, 50)
    assert plan_membership_step(joint, [1, 2, 3], lost={3}) is None


def _leader(members: set[int], term: int = 5, leader: int = 1) -> LeaderMembership:
    return LeaderMembership(leader, term, frozenset(members), applied_index=40)


def test_readmission_is_removal_then_learner_then_voter_in_that_order() -> None:
    state = Readmission()
    # Nothing counts before a leader reported the removal.
    assert state.applied(3, 45, {1, 2}, {3}) == state
    assert state.heard(3, 5, _leader({1, 2, 3})) == state  # still a member: asked again
    state = state.heard(3, 5, _leader({1, 2}))
    assert state == Readmission(removed_at=40)
    assert state.heard(3, 5, _leader({1, 2, 3})) == state  # a later answer changes nothing
    # A membership from before the removal (a stale snapshot) proves nothing.
    assert state.applied(3, 39, {1, 2}, {3}) == state
    assert state.applied(3, 45, {1, 2, 3}, set()) == state  # a voter without being a learner
    state = state.applied(3, 45, {1, 2}, {3})
    assert state == Readmission(40, 45)
    assert not state.readmitted
    state = state.applied(3, 46, {1, 2, 3}, set())
    assert state.readmitted


def test_only_another_leader_of_a_term_not_below_the_asking_one_reports_a_removal() -> None:
    state = Readmission()
    assert state.heard(3, 6, _leader({1, 2}, term=5)) == state  # deposed leader, older term
    assert state.heard(3, 5, _leader({1, 2}, leader=3)) == state  # itself
    assert state.heard(3, 5, _leader({1, 2}, leader=0)) == state  # no leader
    assert state.heard(3, 5, _leader(set())) == state  # no membership
    assert state.heard(3, 5, _leader({1, 2}, term=7)).removed_at == 40
