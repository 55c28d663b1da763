"""Placement by forecast load, and no leaders on degraded nodes.

:class:`ForecastPlacement` is a :class:`~nameserver.placement.PlacementPolicy`
that judges nodes by the *peak of their forecast load* over a horizon (the
next day, say), read from a :class:`~nameserver.forecast.LoadBook` at one
step, instead of by replica counts:

- new groups (``place_groups``) go, one at a time, to the
  ``replication_factor`` healthy nodes with the lowest forecast peak; a new
  group has no history, so it is assumed to carry ``new_group_peak`` (by
  default the median forecast peak of the groups the book follows), and each
  placement raises its nodes' estimates by that much;
- ``plan_rebalance`` tops up under-replicated groups, then moves one replica
  at a time from the node with the highest forecast peak to the one with the
  lowest, choosing the group whose move lowers the higher of the two new
  peaks most; it stops when the highest peak is within ``tolerance`` of the
  mean, when no move lowers it, or after ``moves_max`` moves. Replica counts
  stay within ``count_slack`` of the mean (a node cannot collect thousands of
  idle groups because they forecast zero), and are brought back within it (a
  joining node takes the lightest groups of the fullest nodes); with no
  forecast load at all (no history yet) counts are evened exactly, as the
  count-based policy does. Diurnal loads with different
  phases complement each other: the peak of a sum, not the sum of peaks, is
  what is compared;
- ``plan_evacuation`` sends each leaving replica to the lowest-forecast
  node the group does not use yet;
- ``plan_leaders`` hands every group led by a ``degraded`` node to one of its
  healthy replicas (the one leading fewest), then balances leader counts over
  the healthy nodes as :class:`~nameserver.placement.LoadBalancedPlacement`
  does. Degraded nodes also get no new replicas while enough healthy nodes
  are given.

The book's replicas must be the assignment the policy is asked about (the
caller records placements and finished moves in the book); node forecasts are
then O(horizon) each. Plans are deterministic: ties go to fewer replicas,
then the lower node id.

:class:`AvoidingNodes` wraps any policy (the count-based one by default
in the nameserver) with the same treatment of degraded nodes, and of
draining ones.

PURE.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from nameserver.anomaly import median
from nameserver.forecast import LoadBook
from nameserver.placement import (
    LeaderTransfer,
    LoadBalancedPlacement,
    MovePlan,
    NodeLoad,
    PlacementPolicy,
    ReplicaMove,
    check_replication_factor,
    node_ids_of,
)

PLACEMENT_COUNT = "count"
PLACEMENT_FORECAST = "forecast"
PLACEMENTS = (PLACEMENT_COUNT, PLACEMENT_FORECAST)
"""The nameserver's placement choices (``rip5 nameserver --placement``): replica
counts (``LoadBalancedPlacement``) or forecast load (``live_forecast_placement``)."""
HORIZON_STEPS_DEFAULT = 24
TOLERANCE_DEFAULT = 0.10
MOVES_MAX_DEFAULT = 64
COUNT_SLACK_DEFAULT = 0.25


class ForecastPlacement:
    """Forecast-peak placement over a :class:`LoadBook` at ``step`` (module docstring)."""

    def __init__(
        self,
        book: LoadBook,
        step: int,
        *,
        horizon_steps: int = HORIZON_STEPS_DEFAULT,
        tolerance: float = TOLERANCE_DEFAULT,
        moves_max: int = MOVES_MAX_DEFAULT,
        count_slack: float = COUNT_SLACK_DEFAULT,
        new_group_peak: float | None = None,
        degraded: frozenset[int] = frozenset(),
    ) -> None:
        """See the module docstring for each option."""
        if horizon_steps < 1 or tolerance < 0 or moves_max < 0 or count_slack < 0:
            raise ValueError(
                "horizon_steps must be >= 1 and tolerance, moves_max, count_slack >= 0, got "
                f"{horizon_steps}, {tolerance}, {moves_max}, {count_slack}"
            )
        self.book = book
        self.step = step
        self.horizon_steps = horizon_steps
        self.tolerance = tolerance
        self.moves_max = moves_max
        self.count_slack = count_slack
        self.degraded = degraded
        self._new_group_peak = new_group_peak

    def new_group_peak(self) -> float:
        """The load assumed for a group with no history."""
        if self._new_group_peak is not None:
            return self._new_group_peak
        peaks = [self.book.group_peak(g, self.step, self.horizon_steps) for g in self.book.groups()]
        return median(peaks) if peaks else 0.0

    # -- PlacementPolicy ----------------------------------------------------------

    def place_groups(
        self, group_ids: Sequence[int], nodes: Sequence[NodeLoad], replication_factor: int
    ) -> dict[int, tuple[int, ...]]:
        """Each group in turn takes the healthy nodes with the lowest forecast peak."""
        check_replication_factor(replication_factor)
        ids = node_ids_of(nodes)
        candidates = self._healthy(ids, replication_factor)
        estimate = {n: self.book.node_peak(n, self.step, self.horizon_steps) for n in candidates}
        counts = MovePlan(
            {g: self.book.replicas(g) for g in self.book.groups()}, candidates
        ).counts()
        prior = self.new_group_peak()
        placed: dict[int, tuple[int, ...]] = {}
        for group_id in sorted(group_ids):
            chosen = sorted(candidates, key=lambda n: (estimate[n], counts[n], n))
            for node_id in chosen[:replication_factor]:
                estimate[node_id] += prior
                counts[node_id] += 1
            placed[group_id] = tuple(sorted(chosen[:replication_factor]))
        return placed

    def plan_rebalance(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        replication_factor: int,
    ) -> list[ReplicaMove]:
        """Top-ups, then peak-lowering moves (module docstring)."""
        check_replication_factor(replication_factor)
        ids = node_ids_of(nodes)
        given = set(ids)
        plan = MovePlan({g: [n for n in r if n in given] for g, r in assignment.items()}, ids)
        profile = {n: self.book.node_profile(n, self.step, self.horizon_steps) for n in ids}
        target = min(replication_factor, len(ids))
        for group_id in sorted(plan.replicas):
            group = plan.replicas[group_id]
            while len(group) < target:
                candidates = [n for n in self._healthy(ids, target) if n not in group]
                if not candidates:
                    candidates = [n for n in ids if n not in group]
                to_node = min(candidates, key=lambda n: (max(profile[n]), plan.count(n), n))
                _add(profile[to_node], self._group_profile(group_id))
                plan.add(group_id, to_node)
        if len(ids) < 2:
            return plan.moves
        count_mean = sum(plan.counts().values()) / len(ids)
        # With no forecast load anywhere (no history yet) the forecast says nothing:
        # counts are evened as the count-based policy does.
        slack = self.count_slack if any(max(p) > 0.0 for p in profile.values()) else 0.0
        count_max = math.ceil(count_mean * (1.0 + slack))
        count_min = math.floor(count_mean * (1.0 - slack))
        profiles: dict[int, list[float]] = {}
        healthy = self._healthy(ids, 2)
        while len(plan.moves) < self.moves_max:
            peaks = {n: max(0.0, *profile[n]) for n in ids}
            mean = sum(peaks.values()) / len(ids)
            hot = max(ids, key=lambda n: (peaks[n], plan.count(n), -n))
            if peaks[hot] <= (1.0 + self.tolerance) * mean or plan.count(hot) <= count_min:
                break
            cold_nodes = sorted(
                (n for n in healthy if n != hot and plan.count(n) < count_max),
                key=lambda n: (peaks[n], plan.count(n), n),
            )
            best: tuple[float, int, int] | None = None  # (new max peak, group, to node)
            for cold in cold_nodes[:4]:
                for group_id in sorted(plan.hosted[hot] - plan.hosted[cold]):
                    load = profiles.get(group_id)
                    if load is None:
                        load = profiles[group_id] = self._group_profile(group_id)
                    # The higher of the two nodes' new peaks if the group moved.
                    worse = max(
                        *(a - b for a, b in zip(profile[hot], load, strict=True)),
                        *(a + b for a, b in zip(profile[cold], load, strict=True)),
                    )
                    if best is None or worse < best[0]:
                        best = (worse, group_id, cold)
            if best is None or best[0] >= peaks[hot] - 1e-9:
                break
            _, group_id, cold = best
            load = profiles[group_id]
            _add(profile[hot], [-x for x in load])
            _add(profile[cold], load)
            plan.move(group_id, hot, cold)
        self._even_counts(plan, profile, healthy, count_min, count_max)
        return plan.moves

    def _even_counts(
        self,
        plan: MovePlan,
        profile: dict[int, list[float]],
        healthy: Sequence[int],
        count_min: int,
        count_max: int,
    ) -> None:
        """Bring replica counts within ``count_slack`` of the mean: a healthy node below
        it (one that just joined) takes, one at a time, the group forecast lightest
        from the node holding most, which keeps the forecast peaks as they were as
        far as counts allow; a node above it gives its lightest group to the healthy
        node holding fewest. Bounded by ``moves_max`` with the moves made before."""
        while len(plan.moves) < self.moves_max:
            counts = plan.counts()
            short = [n for n in healthy if counts[n] < count_min]
            over = [n for n in counts if counts[n] > count_max]
            if short:
                to_node = min(short, key=lambda n: (counts[n], n))
                donors = sorted(counts, key=lambda n: (-counts[n], n))
            elif over:
                donors = sorted(over, key=lambda n: (-counts[n], n))
                to_node = min(healthy, key=lambda n: (counts[n], n))
            else:
                return
            move = self._lightest_move(plan, donors, to_node)
            if move is None:
                return
            group_id, from_node = move
            load = self._group_profile(group_id)
            _add(profile[from_node], [-x for x in load])
            _add(profile[to_node], load)
            plan.move(group_id, from_node, to_node)

    def _lightest_move(
        self, plan: MovePlan, donors: Sequence[int], to_node: int
    ) -> tuple[int, int] | None:
        """(group, from node): the donor's group with the lowest forecast peak that
        ``to_node`` does not hold, from the first donor that has one."""
        for from_node in donors:
            if from_node == to_node or plan.count(from_node) <= plan.count(to_node) + 1:
                continue
            movable = sorted(plan.hosted[from_node] - plan.hosted[to_node])
            if movable:
                lightest = min(movable, key=lambda g: (self._group_peak(g), g))
                return lightest, from_node
        return None

    def _group_peak(self, group_id: int) -> float:
        return self.book.group_peak(group_id, self.step, self.horizon_steps)

    def plan_evacuation(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        leaving: frozenset[int],
    ) -> list[ReplicaMove]:
        """Each leaving replica goes to the lowest-forecast node the group lacks; a
        group with no such node keeps it (more nodes are needed)."""
        ids = [n for n in node_ids_of(nodes) if n not in leaving]
        profile = {n: self.book.node_profile(n, self.step, self.horizon_steps) for n in ids}
        plan = MovePlan(assignment, ids)
        healthy = set(self._healthy(ids, 1))
        for group_id in sorted(assignment):
            group = plan.replicas[group_id]
            for from_node in sorted(group & leaving):
                candidates = [n for n in ids if n not in group]
                if not candidates:
                    continue
                to_node = min(
                    candidates,
                    key=lambda n: (n not in healthy, max(profile[n]), plan.count(n), n),
                )
                _add(profile[to_node], self._group_profile(group_id))
                plan.move(group_id, from_node, to_node)
        return plan.moves

    def plan_leaders(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        leaders: Mapping[int, int],
        nodes: Sequence[NodeLoad],
    ) -> list[LeaderTransfer]:
        """Leadership off degraded nodes, then even leader counts over healthy ones."""
        return plan_leaders_avoiding(assignment, leaders, nodes, self.degraded)

    # -- helpers --------------------------------------------------------------------

    def _healthy(self, ids: Sequence[int], needed: int) -> list[int]:
        """The given nodes minus degraded ones, unless that leaves fewer than ``needed``."""
        healthy = [n for n in ids if n not in self.degraded]
        return healthy if len(healthy) >= needed else list(ids)

    def _group_profile(self, group_id: int) -> list[float]:
        return self.book.group_profile(group_id, self.step, self.horizon_steps)


def plan_leaders_avoiding(
    assignment: Mapping[int, tuple[int, ...]],
    leaders: Mapping[int, int],
    nodes: Sequence[NodeLoad],
    degraded: frozenset[int],
) -> list[LeaderTransfer]:
    """Transfers that take leadership off ``degraded`` nodes (each such group to
    its healthy given replica leading fewest groups; a group with none stays),
    then balance leader counts over the healthy nodes."""
    healthy = [n for n in nodes if n.node_id not in degraded]
    healthy_ids = {n.node_id for n in healthy}
    planned = dict(leaders)
    counts = dict.fromkeys(healthy_ids, 0)
    for leader in planned.values():
        if leader in counts:
            counts[leader] += 1
    for group_id in sorted(planned):
        if planned[group_id] not in degraded:
            continue
        options = [r for r in assignment.get(group_id, ()) if r in healthy_ids]
        if options:
            to_node = min(options, key=lambda n: (counts[n], n))
            planned[group_id] = to_node
            counts[to_node] += 1
    healthy_assignment = {
        g: tuple(r for r in replicas if r in healthy_ids) for g, replicas in assignment.items()
    }
    for transfer in LoadBalancedPlacement().plan_leaders(healthy_assignment, planned, healthy):
        planned[transfer.group_id] = transfer.to_node
    return [
        LeaderTransfer(group_id, leaders[group_id], planned[group_id])
        for group_id in sorted(planned)
        if planned[group_id] != leaders[group_id]
    ]


def _add(into: list[float], values: Sequence[float]) -> None:
    for i, value in enumerate(values):
        into[i] += value


class AvoidingNodes:
    """Another policy's plans, kept off some nodes (degraded or draining ones): they
    get no new replicas (while enough other nodes are given) and no leadership
    (:func:`plan_leaders_avoiding`). Replicas already on them stay (a slow node
    still holds data safely; a draining one is emptied by evacuation moves)."""

    def __init__(self, base: PlacementPolicy, avoided: frozenset[int]) -> None:
        """Wrap ``base``; ``avoided``: the nodes to keep new work off now."""
        self.base = base
        self.avoided = avoided

    def _healthy(self, nodes: Sequence[NodeLoad], needed: int) -> Sequence[NodeLoad]:
        healthy = [n for n in nodes if n.node_id not in self.avoided]
        return healthy if len(healthy) >= needed else nodes

    def place_groups(
        self, group_ids: Sequence[int], nodes: Sequence[NodeLoad], replication_factor: int
    ) -> dict[int, tuple[int, ...]]:
        """The base placement over the healthy nodes."""
        healthy = self._healthy(nodes, replication_factor)
        return self.base.place_groups(group_ids, healthy, replication_factor)

    def plan_rebalance(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        replication_factor: int,
    ) -> list[ReplicaMove]:
        """The base rebalance, without moves onto avoided nodes."""
        moves = self.base.plan_rebalance(assignment, nodes, replication_factor)
        return [m for m in moves if m.to_node not in self.avoided]

    def plan_evacuation(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        leaving: frozenset[int],
    ) -> list[ReplicaMove]:
        """The base evacuation onto the healthy nodes (all given ones if too few)."""
        return self.base.plan_evacuation(assignment, self._healthy(nodes, 1), leaving)

    def plan_leaders(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        leaders: Mapping[int, int],
        nodes: Sequence[NodeLoad],
    ) -> list[LeaderTransfer]:
        """Leadership off avoided nodes, then balanced over the others."""
        return plan_leaders_avoiding(assignment, leaders, nodes, self.avoided)


def live_forecast_placement(
    book: LoadBook,
    assignment: Mapping[int, Sequence[int]],
    step: int,
    *,
    moves_max: int = MOVES_MAX_DEFAULT,
    degraded: frozenset[int] = frozenset(),
) -> ForecastPlacement:
    """The nameserver leader's forecast policy for one sweep: ``book`` (its load
    history) first takes ``assignment`` (group -> replicas, every group of the
    cluster as the metadata records them) as the groups' replicas, so the node
    forecasts sum what each node holds now; only groups whose replicas changed
    are touched. Groups the book follows that ``assignment`` lacks stay (another
    cluster's, or history of a group not placed yet)."""
    for group_id, replicas in assignment.items():
        if book.replicas(group_id) != replicas:  # the metadata's are sorted: mostly equal
            book.set_replicas(group_id, replicas)
    return ForecastPlacement(book, step, moves_max=moves_max, degraded=degraded)
