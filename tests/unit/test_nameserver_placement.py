"""nameserver.placement: anti-affinity always, counts within one after balancing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.placement import (
    LoadBalancedPlacement,
    MovePlan,
    NodeLoad,
    PlacementPolicy,
    ReplicaMove,
    node_ids_of,
)
from nameserver.records import NO_NODE, StorageLoad

POLICY: PlacementPolicy = LoadBalancedPlacement()


def loads(node_ids: range, seed: int) -> list[NodeLoad]:
    """Nodes with varied, seed-derived loads (so load tie-breaks are exercised)."""
    return [
        NodeLoad(n, StorageLoad(bytes=(n * 7919 + seed) % 13, disk_free_bytes=(n * seed) % 5))
        for n in node_ids
    ]


def replica_counts(
    assignment: Mapping[int, tuple[int, ...]], nodes: list[NodeLoad]
) -> Counter[int]:
    counts: Counter[int] = Counter({n.node_id: 0 for n in nodes})
    for replicas in assignment.values():
        counts.update(r for r in replicas if r in counts)
    return counts


def spread(counts: Counter[int]) -> int:
    return max(counts.values()) - min(counts.values())


def check_anti_affinity(assignment: Mapping[int, tuple[int, ...]], rf: int, n: int) -> None:
    for group_id, replicas in assignment.items():
        assert len(set(replicas)) == len(replicas), (group_id, replicas)
        assert len(replicas) == min(rf, n), (group_id, replicas)


def apply_moves(assignment: dict[int, tuple[int, ...]], moves: list) -> dict[int, tuple[int, ...]]:
    result = dict(assignment)
    for move in moves:
        replicas = result[move.group_id]
        if move.from_node == NO_NODE:
            assert move.to_node not in replicas
        else:
            assert move.from_node in replicas
            assert move.to_node not in replicas
        result[move.group_id] = (*(r for r in replicas if r != move.from_node), move.to_node)
        assert len(set(result[move.group_id])) == len(result[move.group_id])
    return result


@settings(deadline=None)
@given(
    groups=st.integers(1, 200),
    nodes=st.integers(1, 12),
    rf=st.integers(1, 5),
    seed=st.integers(0, 1000),
)
def test_initial_placement_is_balanced_with_distinct_replicas(
    groups: int, nodes: int, rf: int, seed: int
) -> None:
    node_loads = loads(range(1, nodes + 1), seed)
    placed = POLICY.place_groups(range(100, 100 + groups), node_loads, rf)
    assert sorted(placed) == list(range(100, 100 + groups))
    check_anti_affinity(placed, rf, nodes)
    assert spread(replica_counts(placed, node_loads)) <= 1
    assert POLICY.place_groups(range(100, 100 + groups), node_loads, rf) == placed


@settings(max_examples=150, deadline=None)
@given(
    groups=st.integers(1, 120),
    first=st.integers(1, 6),
    joined=st.integers(1, 6),
    rf=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_nodes_joining_get_a_fair_share(
    groups: int, first: int, joined: int, rf: int, seed: int
) -> None:
    before = loads(range(1, first + 1), seed)
    after = loads(range(1, first + joined + 1), seed)
    placed = POLICY.place_groups(range(groups), before, rf)
    moves = POLICY.plan_rebalance(placed, after, rf)
    rebalanced = apply_moves(placed, moves)
    check_anti_affinity(rebalanced, rf, len(after))
    assert spread(replica_counts(rebalanced, after)) <= 1
    # Top-ups only where the group was short; otherwise pure moves.
    additions = Counter(m.group_id for m in moves if m.from_node == NO_NODE)
    for group_id, added in additions.items():
        assert added == min(rf, len(after)) - len(placed[group_id])
    assert POLICY.plan_rebalance(rebalanced, after, rf) == []


@settings(max_examples=150, deadline=None)
@given(
    groups=st.integers(1, 120),
    nodes=st.integers(1, 9),
    rf=st.integers(1, 3),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_leaders_are_balanced_over_a_balanced_placement(
    groups: int, nodes: int, rf: int, seed: int, data: st.DataObject
) -> None:
    node_loads = loads(range(1, nodes + 1), seed)
    placed = POLICY.place_groups(range(groups), node_loads, rf)
    # Any leaders the elections may have produced, possibly all on one node.
    leaders = {
        g: data.draw(st.sampled_from(sorted(replicas)), label=f"leader of {g}")
        for g, replicas in placed.items()
    }
    transfers = POLICY.plan_leaders(placed, leaders, node_loads)
    final = dict(leaders)
    for transfer in transfers:
        assert transfer.from_node == leaders[transfer.group_id]
        assert transfer.to_node in placed[transfer.group_id]
        assert transfer.to_node != transfer.from_node
        final[transfer.group_id] = transfer.to_node
    assert len({t.group_id for t in transfers}) == len(transfers)
    counts = Counter({n.node_id: 0 for n in node_loads})
    counts.update(final.values())
    assert spread(counts) <= 1, counts
    assert POLICY.plan_leaders(placed, final, node_loads) == []


@settings(max_examples=150, deadline=None)
@given(
    groups=st.integers(1, 80),
    nodes=st.integers(2, 8),
    rf=st.integers(1, 3),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_evacuation_empties_the_leaving_nodes(
    groups: int, nodes: int, rf: int, seed: int, data: st.DataObject
) -> None:
    node_loads = loads(range(1, nodes + 1), seed)
    placed = POLICY.place_groups(range(groups), node_loads, rf)
    leaving = frozenset(
        data.draw(st.sets(st.integers(1, nodes), min_size=1, max_size=nodes - 1), label="leaving")
    )
    moves = POLICY.plan_evacuation(placed, node_loads, leaving)
    evacuated = apply_moves(placed, moves)
    staying = [n for n in node_loads if n.node_id not in leaving]
    for group_id, replicas in evacuated.items():
        assert len(replicas) == len(placed[group_id])
        if len(staying) >= len(replicas):
            assert not leaving & set(replicas), (group_id, replicas)
    if len(staying) >= min(rf, nodes):
        rebalanced = apply_moves(evacuated, POLICY.plan_rebalance(evacuated, staying, rf))
        check_anti_affinity(rebalanced, rf, len(staying))
        assert spread(replica_counts(rebalanced, staying)) <= 1


def test_leaderless_groups_and_leaders_elsewhere_are_left_alone() -> None:
    nodes = loads(range(1, 4), 0)
    placed = {1: (1, 2, 3), 2: (1, 2, 3), 3: (1, 2, 3), 4: (1, 2, 3)}
    # Group 2 has no leader; group 3's leader (9) is not a given node.
    transfers = POLICY.plan_leaders(placed, {1: 1, 3: 9, 4: 1}, nodes)
    assert [(t.group_id, t.from_node) for t in transfers] == [(1, 1)]


def test_fewer_nodes_than_the_factor_give_fewer_replicas() -> None:
    placed = POLICY.place_groups([1, 2], loads(range(1, 3), 0), 3)
    assert placed == {1: (1, 2), 2: (1, 2)}
    assert POLICY.place_groups([1, 2], [], 3) == {1: (), 2: ()}


def test_load_breaks_ties() -> None:
    nodes = [
        NodeLoad(1, StorageLoad(bytes=500)),
        NodeLoad(2, StorageLoad(bytes=10)),
        NodeLoad(3, StorageLoad(bytes=10, disk_free_bytes=99)),
    ]
    assert POLICY.place_groups([7], nodes, 1) == {7: (3,)}
    assert POLICY.place_groups([7], nodes, 2) == {7: (2, 3)}


def test_replicas_on_nodes_not_given_stay_and_do_not_count() -> None:
    # Node 4 is down: its replica of group 1 stays; nothing is planned for it.
    moves = POLICY.plan_rebalance({1: (1, 4), 2: (2, 3)}, loads(range(1, 4), 0), 2)
    assert moves == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: POLICY.place_groups([1], [NodeLoad(1), NodeLoad(1)], 1),
        lambda: POLICY.place_groups([1], [NodeLoad(NO_NODE)], 1),
        lambda: POLICY.place_groups([1], [NodeLoad(1)], 0),
        lambda: POLICY.plan_rebalance({}, [NodeLoad(1)], 0),
    ],
)
def test_bad_arguments_are_refused(call: object) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match="must be"):
        call()


def test_a_move_plan_keeps_replicas_and_counts_of_the_given_nodes() -> None:
    # Node 9 is not given: its replica stays in the group but is not counted.
    plan = MovePlan({1: (1, 2), 2: (2, 9)}, [1, 2, 3])
    assert plan.counts() == {1: 1, 2: 2, 3: 0}
    plan.add(1, 3)
    plan.move(2, 2, 1)
    plan.move(2, 9, 3)
    assert plan.replicas == {1: {1, 2, 3}, 2: {1, 3}}
    assert plan.hosted == {1: {1, 2}, 2: {1}, 3: {1, 2}}
    assert [plan.count(n) for n in (1, 2, 3)] == [2, 1, 2]
    assert plan.moves == [ReplicaMove(1, NO_NODE, 3), ReplicaMove(2, 2, 1), ReplicaMove(2, 9, 3)]


def test_node_ids_must_be_distinct_and_not_no_node() -> None:
    assert node_ids_of([NodeLoad(3), NodeLoad(1)]) == [1, 3]
    for ids in ((1, 1), (NO_NODE, 2)):
        with pytest.raises(ValueError, match="distinct and non-zero"):
            node_ids_of([NodeLoad(n) for n in ids])
