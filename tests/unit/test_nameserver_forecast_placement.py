"""nameserver.forecast_placement: nodes judged by their forecast peak; no leaders on
degraded nodes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import pytest

from nameserver.forecast import ForecastParams, LoadBook
from nameserver.forecast_placement import ForecastPlacement, plan_leaders_avoiding
from nameserver.placement import NodeLoad, PlacementPolicy, ReplicaMove
from nameserver.records import NO_NODE

PARAMS = ForecastParams(season_steps=24)
NODES = [NodeLoad(n) for n in range(1, 7)]


def wave(step: int, base: float, phase: int) -> float:
    return base * (1.0 + 0.9 * math.sin(2 * math.pi * (step - phase) / 24))


def book_with(
    loads: Mapping[int, tuple[float, int]], assignment: Mapping[int, tuple[int, ...]]
) -> LoadBook:
    """A book that watched each group (group -> (base, phase)) for three days."""
    book = LoadBook(PARAMS)
    for group_id, replicas in assignment.items():
        book.set_replicas(group_id, replicas)
    for step in range(72):
        book.observe(step, {g: wave(step, base, phase) for g, (base, phase) in loads.items()})
    return book


def node_peaks(book: LoadBook, assignment: Mapping[int, tuple[int, ...]]) -> dict[int, float]:
    for group_id, replicas in assignment.items():
        book.set_replicas(group_id, replicas)
    return {n.node_id: book.node_peak(n.node_id, 71, 24) for n in NODES}


def apply(
    assignment: Mapping[int, tuple[int, ...]], moves: list[ReplicaMove]
) -> dict[int, tuple[int, ...]]:
    result = dict(assignment)
    for move in moves:
        replicas = set(result[move.group_id])
        replicas.discard(move.from_node)
        replicas.add(move.to_node)
        result[move.group_id] = tuple(sorted(replicas))
    return result


def test_it_is_a_placement_policy() -> None:
    policy: PlacementPolicy = ForecastPlacement(LoadBook(PARAMS), 0)
    assert policy.place_groups([1], NODES, 3)[1] == (1, 2, 3)


def test_new_groups_avoid_the_nodes_forecast_busiest() -> None:
    assignment = {1: (1, 2, 3), 2: (4, 5, 6)}
    book = book_with({1: (1000.0, 0), 2: (10.0, 0)}, assignment)
    placed = ForecastPlacement(book, 71).place_groups([3], NODES, 3)
    assert placed == {3: (4, 5, 6)}


def test_many_new_groups_spread_as_their_assumed_load_adds_up() -> None:
    assignment = {1: (1, 2, 3), 2: (4, 5, 6)}
    book = book_with({1: (100.0, 0), 2: (100.0, 0)}, assignment)
    placed = ForecastPlacement(book, 71, new_group_peak=50.0).place_groups(range(3, 9), NODES, 3)
    counts = Counter(n for replicas in placed.values() for n in replicas)
    assert set(counts.values()) == {3}
    assert all(len(set(r)) == 3 for r in placed.values())


def test_rebalance_pairs_opposite_phases_and_lowers_the_highest_peak() -> None:
    # Four groups peaking together sit on nodes 1-3; nodes 4-6 hold four whose peaks
    # are 12 hours apart: as many replicas, a lower peak.
    assignment = dict.fromkeys(range(1, 5), (1, 2, 3)) | dict.fromkeys(range(5, 9), (4, 5, 6))
    loads = dict.fromkeys(range(1, 7), (100.0, 0)) | dict.fromkeys(range(7, 9), (100.0, 12))
    book = book_with(loads, assignment)
    before = node_peaks(book, assignment)
    moves = ForecastPlacement(book, 71, count_slack=0.5).plan_rebalance(assignment, NODES, 3)
    assert moves
    after = node_peaks(book, apply(assignment, moves))
    assert max(after.values()) < 0.8 * max(before.values())
    for replicas in apply(assignment, moves).values():
        assert len(set(replicas)) == 3


def test_rebalance_tops_up_and_stops_when_balanced_or_out_of_moves() -> None:
    assignment = {1: (1, 2), 2: (3, 4, 5)}
    book = book_with({1: (10.0, 0), 2: (10.0, 0)}, assignment)
    moves = ForecastPlacement(book, 71, moves_max=1).plan_rebalance(assignment, NODES, 3)
    assert moves[0].from_node == NO_NODE
    assert moves[0].group_id == 1
    assert moves[0].to_node == 6  # holds nothing: the lowest forecast
    balanced = {1: (1, 2, 3), 2: (4, 5, 6)}
    book = book_with({1: (10.0, 0), 2: (10.0, 0)}, balanced)
    assert ForecastPlacement(book, 71).plan_rebalance(balanced, NODES, 3) == []


def test_evacuation_empties_the_leaving_node_onto_the_least_loaded() -> None:
    assignment = {1: (1, 2, 3), 2: (1, 4, 5), 3: (2, 3, 6)}
    book = book_with({1: (10.0, 0), 2: (10.0, 0), 3: (500.0, 0)}, assignment)
    moves = ForecastPlacement(book, 71).plan_evacuation(assignment, NODES, frozenset({1}))
    after = apply(assignment, moves)
    assert all(1 not in replicas for replicas in after.values())
    # Group 1 avoids node 6 (it carries the heavy group 3); group 2 has only 2, 3 and 6
    # left, and 6 forecasts least of them.
    assert moves == [ReplicaMove(1, 1, 4), ReplicaMove(2, 1, 6)]


def test_degraded_nodes_get_no_new_replicas_while_enough_healthy_ones_exist() -> None:
    policy = ForecastPlacement(LoadBook(PARAMS), 0, degraded=frozenset({1, 2}))
    placed = policy.place_groups(range(1, 5), NODES, 3)
    assert all(set(r).isdisjoint({1, 2}) for r in placed.values())
    crowded = ForecastPlacement(LoadBook(PARAMS), 0, degraded=frozenset({1, 2, 3, 4}))
    assert len(crowded.place_groups([1], NODES, 3)[1]) == 3


def test_leaders_leave_a_degraded_node_and_stay_balanced_elsewhere() -> None:
    assignment = dict.fromkeys(range(1, 7), (1, 2, 3))
    leaders = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
    nodes = [NodeLoad(n) for n in (1, 2, 3)]
    transfers = plan_leaders_avoiding(assignment, leaders, nodes, frozenset({1}))
    final = dict(leaders) | {t.group_id: t.to_node for t in transfers}
    assert all(t.from_node == leaders[t.group_id] for t in transfers)
    assert 1 not in final.values()
    assert sorted(Counter(final.values()).values()) == [3, 3]


def test_a_group_with_no_healthy_replica_keeps_its_leader() -> None:
    transfers = plan_leaders_avoiding({1: (1, 2, 3)}, {1: 1}, [NodeLoad(1)], frozenset({1}))
    assert transfers == []


def test_bad_options_and_node_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="horizon_steps"):
        ForecastPlacement(LoadBook(PARAMS), 0, horizon_steps=0)
    with pytest.raises(ValueError, match="distinct"):
        ForecastPlacement(LoadBook(PARAMS), 0).place_groups([1], [NodeLoad(1), NodeLoad(1)], 1)
    with pytest.raises(ValueError, match="replication_factor"):
        ForecastPlacement(LoadBook(PARAMS), 0).place_groups([1], NODES, 0)
