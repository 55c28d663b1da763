"""Reconcile: local replicas against the nameserver's assignment (storage_node.reconcile)."""

from __future__ import annotations

from storage_node.reconcile import ReconcilePlan, plan_reconcile

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


def test_membership_changes_and_unassigned_groups_are_noted_not_acted_on() -> None:
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
