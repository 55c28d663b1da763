"""The nameserver's forecast policy as it runs live (``--placement forecast``): the
leader's load book takes the metadata's replicas each sweep, new groups go to the
nodes forecast lowest, and a joining node still takes its share of replicas when
there is no load history to go by. Seeded load histories."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping

from nameserver import commands as c
from nameserver.balancer import plan_placement
from nameserver.forecast import ForecastParams, LoadBook
from nameserver.forecast_placement import live_forecast_placement
from nameserver.placement import NodeLoad, ReplicaMove
from nameserver.state import MetadataState

PARAMS = ForecastParams(season_steps=24)


def _history(book: LoadBook, loads: dict[int, float], seed: int, days: int = 3) -> int:
    """Hourly samples of each group's load (group -> base msgs/s): a daily wave with
    seeded noise. Returns the last step."""
    rng = random.Random(seed)
    steps = 24 * days
    for step in range(steps):
        daily = 1.0 + 0.5 * math.sin(2 * math.pi * step / 24)
        book.observe(step, {g: base * daily * rng.uniform(0.9, 1.1) for g, base in loads.items()})
    return steps - 1


def _applied(
    assignment: Mapping[int, tuple[int, ...]], moves: list[ReplicaMove]
) -> dict[int, tuple[int, ...]]:
    result = dict(assignment)
    for move in moves:
        replicas = set(result[move.group_id]) - {move.from_node} | {move.to_node}
        result[move.group_id] = tuple(sorted(replicas))
    return result


def test_the_book_follows_the_metadata_replicas() -> None:
    book = LoadBook(PARAMS)
    step = _history(book, {1: 500.0, 2: 5.0}, seed=1)
    live_forecast_placement(book, {1: (1, 2, 3), 2: (4, 5, 6)}, step)
    hot = book.node_peak(1, step, 24)
    assert hot > 400 > book.node_peak(4, step, 24)
    # A finished move in the metadata moves the group's forecast with it.
    live_forecast_placement(book, {1: (2, 3, 4), 2: (4, 5, 6)}, step)
    assert book.node_peak(1, step, 24) == 0.0
    both = zip(book.group_profile(1, step, 24), book.group_profile(2, step, 24), strict=True)
    expected = [a + b for a, b in both]
    assert all(
        math.isclose(x, y) for x, y in zip(book.node_profile(4, step, 24), expected, strict=True)
    )
    assert book.node_peak(4, step, 24) > hot


def test_new_groups_of_a_cluster_go_to_the_nodes_forecast_lowest() -> None:
    state = MetadataState()
    state.apply(c.CreateCluster("c1", 6, 3))
    for node in range(1, 7):
        state.apply(c.StorageHeartbeat(node, "c1", f"127.0.0.1:{7700 + node}", 1))
    state.apply(
        c.SetReplicas((c.ReplicaAssignment(1, (1, 2, 3)), c.ReplicaAssignment(2, (4, 5, 6))))
    )
    book = LoadBook(PARAMS)
    step = _history(book, {1: 1000.0, 2: 10.0}, seed=7)
    assignment = {g.group_id: g.replicas for g in state.raft_groups("c1")}
    policy = live_forecast_placement(book, assignment, step)
    placed = plan_placement(state, "c1", policy)
    assert placed is not None
    first = placed.assignments[0]
    assert first.group_id == 3
    assert first.replicas == (4, 5, 6)  # the quiet nodes, not those of the busy group 1
    # The four new groups spread over both sides as their assumed load adds up.
    sides = Counter(n <= 3 for a in placed.assignments for n in a.replicas)
    assert sides[True] > 0
    assert sides[False] > sides[True]


def test_a_joining_node_takes_its_share_without_history() -> None:
    nodes = [NodeLoad(n) for n in range(1, 5)]
    assignment = dict.fromkeys(range(1, 25), (1, 2, 3))  # node 4 just joined
    policy = live_forecast_placement(LoadBook(PARAMS), assignment, 0, moves_max=64)
    moves = policy.plan_rebalance(assignment, nodes, 3)
    counts = Counter(n for replicas in _applied(assignment, moves).values() for n in replicas)
    # No load history: counts are evened exactly, as by the count-based policy.
    assert [counts[n] for n in range(1, 5)] == [18, 18, 18, 18]
    assert all(m.to_node == 4 for m in moves)


def test_with_history_a_joining_node_lowers_the_hottest_peak() -> None:
    nodes = [NodeLoad(n) for n in range(1, 5)]
    assignment = dict.fromkeys(range(1, 13), (1, 2, 3))
    book = LoadBook(PARAMS)
    rng = random.Random(3)
    step = _history(book, {g: rng.choice([1.0, 1000.0]) for g in assignment}, seed=3)
    policy = live_forecast_placement(book, assignment, step, moves_max=64)
    before = max(book.node_peak(n.node_id, step, 24) for n in nodes)
    moves = policy.plan_rebalance(assignment, nodes, 3)
    after = _applied(assignment, moves)
    live_forecast_placement(book, after, step)
    peaks = [book.node_peak(n.node_id, step, 24) for n in nodes]
    assert max(peaks) < 0.9 * before
    assert peaks[3] > 0  # node 4 carries load now, not only idle groups
    counts = Counter(n for replicas in after.values() for n in replicas)
    assert counts[4] >= math.floor(12 * 3 / 4 * 0.75)


def test_moves_are_bounded_per_plan() -> None:
    nodes = [NodeLoad(n) for n in range(1, 5)]
    assignment = dict.fromkeys(range(1, 41), (1, 2, 3))
    policy = live_forecast_placement(LoadBook(PARAMS), assignment, 0, moves_max=5)
    assert len(policy.plan_rebalance(assignment, nodes, 3)) == 5
