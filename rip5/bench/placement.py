"""Seeded simulations of the nameserver's placement and unhealthy-node detection:
``rip5 bench placement [--nodes N --groups G --days D --seed S]``.

**Placement.** Hourly steps over D days. A cluster starts with 90% of N
storage nodes (the rest join at the start of day 2) and 60% of G raft
groups (3 replicas); the other groups are created at random hours over the
days that follow. Each group's load (msgs/s) is:

- skewed: a log-normal base rate (a few tenants carry most of the traffic);
- diurnal: ``1 + a * sin(2 pi (hour - phase) / 24)``, with an amplitude per
  group and a phase from one of four regions;
- bursty: now and then (0.4% of group-hours) a burst multiplies it by 3-10
  for 1-4 hours; the run is made once without bursts and once with them;
- noisy: +-10% per hour.

Every replica of a group carries its load (followers write too). Two
policies see the same loads: today's count-based placement
(:class:`~nameserver.placement.LoadBalancedPlacement`, current rates as
tie-break; after the join, its rebalance evens replica counts) and
:class:`~nameserver.forecast_placement.ForecastPlacement` (a Holt-Winters
forecast per group, placing and rebalancing by each node's forecast peak over
the next 24 hours, at most ``--moves-max`` moves every 6 hours). Reported,
from day 2 on: the ratio of the busiest node's load to the mean node load
(mean over hours and the worst hour) and the replica moves made.

**Detection.** N nodes report fsync p99 and RPC p99 every 10 s for 2 hours.
All nodes share a diurnal-like swing; every node has short spikes (a GC
pause, a compaction: one window, 1% of windows); at the half-way point one
node's disk becomes 3x slower for good. Three detectors are compared: a
fixed threshold (fsync p99 > 10 ms), median/MAD in each window alone, and
median/MAD with hysteresis (3 outlier windows mark, 6 normal ones clear:
:class:`~nameserver.anomaly.DegradationTracker`). Reported: time from the
slowdown to the slow node's mark, and false positives (healthy nodes ever
marked, and node-windows marked).

The figures are deterministic for a seed: a simulation, not a measurement.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from nameserver.anomaly import DegradationTracker, OutlierRule, outliers
from nameserver.forecast import ForecastParams, LoadBook
from nameserver.forecast_placement import ForecastPlacement
from nameserver.placement import LoadBalancedPlacement, NodeLoad, ReplicaMove
from nameserver.records import NO_NODE, StorageLoad

STEPS_PER_DAY = 24
REPLICATION_FACTOR = 3
REBALANCE_EVERY_STEPS = 6
REGION_PHASES_H = (0.0, 6.0, 9.0, 15.0)
BURST_CHANCE = 0.004  # per group and hour


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """One policy's figures over the measured hours."""

    policy: str
    peak_over_mean: float  # mean over hours of max node load / mean node load
    peak_over_mean_worst: float  # the worst hour
    moves: int


@dataclass(frozen=True, slots=True)
class DetectionResult:
    """One detector's figures."""

    detector: str
    detection_s: float | None  # None: the slow node was never marked
    false_nodes: int  # healthy nodes ever marked
    false_windows: int  # healthy node-windows marked


@dataclass(slots=True)
class _Group:
    base: float
    amplitude: float
    phase_h: float
    burst_left: int = 0
    burst_factor: float = 1.0


class _Loads:
    """The seeded load trace: one value per live group per hour."""

    def __init__(self, groups: int, rng: random.Random, burst_chance: float) -> None:
        self.rng = rng
        self.burst_chance = burst_chance
        self.groups = [
            _Group(
                base=rng.lognormvariate(3.0, 1.2),
                amplitude=rng.uniform(0.2, 0.9),
                phase_h=rng.choice(REGION_PHASES_H) + rng.uniform(-1.0, 1.0),
            )
            for _ in range(groups)
        ]

    def step(self, hour: int, live: Sequence[int]) -> dict[int, float]:
        rng = self.rng
        loads: dict[int, float] = {}
        for group_id in live:
            g = self.groups[group_id]
            if g.burst_left:
                g.burst_left -= 1
            elif rng.random() < self.burst_chance:
                g.burst_left = rng.randint(1, 4)
                g.burst_factor = rng.uniform(3.0, 10.0)
            burst = g.burst_factor if g.burst_left else 1.0
            diurnal = 1.0 + g.amplitude * math.sin(2 * math.pi * (hour - g.phase_h) / 24)
            loads[group_id] = g.base * diurnal * burst * rng.uniform(0.9, 1.1)
        return loads


class _Cluster:
    """One policy's assignment and moves."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.assignment: dict[int, tuple[int, ...]] = {}
        self.moves = 0
        self.ratios: list[float] = []

    def apply(self, moves: Sequence[ReplicaMove]) -> list[int]:
        changed = []
        for move in moves:
            replicas = set(self.assignment[move.group_id])
            if move.from_node != NO_NODE:
                replicas.discard(move.from_node)
            replicas.add(move.to_node)
            self.assignment[move.group_id] = tuple(sorted(replicas))
            changed.append(move.group_id)
        self.moves += len(moves)
        return changed

    def node_loads(self, nodes: Sequence[int], loads: dict[int, float]) -> dict[int, float]:
        per_node = dict.fromkeys(nodes, 0.0)
        for group_id, load in loads.items():
            for node_id in self.assignment[group_id]:
                per_node[node_id] += load
        return per_node


def simulate_placement(
    nodes: int, groups: int, days: int, seed: int, moves_max: int = 64, bursts: bool = True
) -> list[PlacementResult]:
    """Run both policies over the same seeded loads (module docstring)."""
    if nodes < 2 * REPLICATION_FACTOR or groups < 10 or days < 3:
        raise ValueError("need nodes >= 6, groups >= 10 and days >= 3")
    rng = random.Random(seed)
    trace = _Loads(groups, rng, BURST_CHANCE if bursts else 0.0)
    initial_nodes = list(range(1, nodes - nodes // 10 + 1))
    all_nodes = list(range(1, nodes + 1))
    steps = days * STEPS_PER_DAY
    initial_groups = groups * 6 // 10
    arrivals: dict[int, list[int]] = {}
    for group_id in range(initial_groups, groups):
        arrivals.setdefault(rng.randint(1, steps - STEPS_PER_DAY), []).append(group_id)
    params = ForecastParams()
    book = LoadBook(params)
    count_based = _Cluster("count-based (today)")
    forecast = _Cluster("forecast (Holt-Winters)")
    counter = LoadBalancedPlacement()
    live_groups = list(range(initial_groups))
    loads: dict[int, float] = {}
    for step in range(steps):
        members = all_nodes if step >= STEPS_PER_DAY else initial_nodes
        new = list(range(initial_groups)) if step == 0 else arrivals.get(step, [])
        if step > 0:
            live_groups += new
        # Placement of the hour's new groups, from what each policy knows.
        if new:
            current = count_based.node_loads(members, loads) if loads else {}
            weighted = [
                NodeLoad(n, StorageLoad(msgs_per_s=int(current.get(n, 0.0)))) for n in members
            ]
            count_based.assignment.update(counter.place_groups(new, weighted, REPLICATION_FACTOR))
            policy = ForecastPlacement(book, step, moves_max=moves_max)
            placed = policy.place_groups(new, [NodeLoad(n) for n in members], REPLICATION_FACTOR)
            for group_id, replicas in placed.items():
                forecast.assignment[group_id] = replicas
                book.set_replicas(group_id, replicas)
        # Rebalancing: count-based evens counts whenever they differ (a join);
        # forecast runs every few hours, bounded.
        plain = [NodeLoad(n) for n in members]
        count_based.apply(counter.plan_rebalance(count_based.assignment, plain, REPLICATION_FACTOR))
        if step % REBALANCE_EVERY_STEPS == 0 and step >= STEPS_PER_DAY:
            policy = ForecastPlacement(book, step, moves_max=moves_max)
            moved = forecast.apply(
                policy.plan_rebalance(forecast.assignment, plain, REPLICATION_FACTOR)
            )
            for group_id in moved:
                book.set_replicas(group_id, forecast.assignment[group_id])
        loads = trace.step(step, live_groups)
        book.observe(step, loads)
        if step >= STEPS_PER_DAY:
            for cluster in (count_based, forecast):
                per_node = cluster.node_loads(members, loads)
                mean = sum(per_node.values()) / len(per_node)
                cluster.ratios.append(max(per_node.values()) / mean)
    return [
        PlacementResult(c.name, sum(c.ratios) / len(c.ratios), max(c.ratios), c.moves)
        for c in (count_based, forecast)
    ]


def simulate_detection(nodes: int, seed: int, windows: int = 720) -> list[DetectionResult]:
    """Run the three detectors over the same seeded latency trace (module docstring)."""
    if nodes < 3 or windows < 20:
        raise ValueError("need nodes >= 3 and windows >= 20")
    window_s = 10.0
    rng = random.Random(seed)
    slow_node = rng.randint(1, nodes)
    slow_from = windows // 2
    speed = {n: rng.uniform(0.8, 1.25) for n in range(1, nodes + 1)}
    rule = OutlierRule()
    hysteresis = DegradationTracker(rule, mark_after=3, clear_after=6)
    marked: dict[str, list[frozenset[int]]] = {"fixed": [], "window": [], "hysteresis": []}
    for window in range(windows):
        swing = 1.0 + 0.8 * max(0.0, math.sin(2 * math.pi * window / (windows / 2)))
        fsync: dict[int, float] = {}
        rpc: dict[int, float] = {}
        for node_id in range(1, nodes + 1):
            spike = rng.uniform(3.0, 8.0) if rng.random() < 0.01 else 1.0
            slow = 3.0 if node_id == slow_node and window >= slow_from else 1.0
            fsync[node_id] = 2.0 * speed[node_id] * swing * spike * slow * rng.uniform(0.85, 1.15)
            rpc[node_id] = (1.0 + 0.2 * fsync[node_id]) * rng.uniform(0.9, 1.1)
        metrics = {"fsync_p99_ms": fsync, "rpc_p99_ms": rpc}
        marked["fixed"].append(frozenset(n for n, v in fsync.items() if v > 10.0))
        marked["window"].append(outliers(fsync, rule) | outliers(rpc, rule))
        marked["hysteresis"].append(hysteresis.window(metrics))
    names = {
        "fixed": "fixed threshold (fsync p99 > 10 ms)",
        "window": "median/MAD, each window alone",
        "hysteresis": "median/MAD + hysteresis (3 to mark, 6 to clear)",
    }
    results = []
    for key, per_window in marked.items():
        first = next((w for w in range(slow_from, windows) if slow_node in per_window[w]), None)
        detection = None if first is None else (first - slow_from + 1) * window_s
        healthy = [m - {slow_node} for m in per_window]
        results.append(
            DetectionResult(
                names[key],
                detection,
                len(frozenset().union(*healthy)),
                sum(len(m) for m in healthy),
            )
        )
    return results


def placement_table(results: Sequence[PlacementResult]) -> str:
    """The placement results as a markdown table."""
    lines = [
        "| policy | peak/mean node load (mean over hours) | peak/mean (worst hour) | moves |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r.policy} | {r.peak_over_mean:.2f} | {r.peak_over_mean_worst:.2f} | {r.moves:,} |"
        for r in results
    ]
    return "\n".join(lines)


def detection_table(results: Sequence[DetectionResult]) -> str:
    """The detection results as a markdown table."""
    lines = [
        "| detector | slow node marked after | healthy nodes ever marked | "
        "healthy node-windows marked |",
        "|---|---|---|---|",
    ]
    for r in results:
        when = "never" if r.detection_s is None else f"{r.detection_s:.0f} s"
        lines.append(f"| {r.detector} | {when} | {r.false_nodes} | {r.false_windows} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run both simulations and print their tables."""
    parser = argparse.ArgumentParser(prog="rip5 bench placement")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--moves-max", type=int, default=64, help="forecast moves per round")
    args = parser.parse_args(argv)
    print(
        f"placement: {args.nodes} nodes ({args.nodes // 10} join on day 2), "
        f"{args.groups:,} groups x {REPLICATION_FACTOR} replicas, {args.days} days, "
        f"seed {args.seed}"
    )
    for bursts in (False, True):
        loads = "skewed + diurnal + bursty" if bursts else "skewed + diurnal"
        print(f"loads: {loads}")
        results = simulate_placement(
            args.nodes, args.groups, args.days, args.seed, args.moves_max, bursts=bursts
        )
        print(placement_table(results))
    print()
    print(f"detection: {args.nodes} nodes, 720 windows of 10 s, seed {args.seed}")
    print(detection_table(simulate_detection(args.nodes, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
