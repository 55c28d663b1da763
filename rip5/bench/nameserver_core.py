"""The nameserver's pure core, measured without raft or RPC:
``python -m rip5.bench.nameserver_core [--groups G --nodes N --topics T --runs R]``.

One cluster of G groups placed over N storage nodes (3 replicas each), T
topics of 8 queues, 100 consumer groups, 10 brokers. Measured, each as the
median [min-max] of R runs of CPU time (one core, pure Python, no I/O):

- apply/s of heartbeats (decode + apply of a log entry: the steady load of a
  nameserver; soft state, no change event) and of leader reports that change
  a leader (an event each);
- route(topic) latency (8 queues);
- snapshot and restore time and snapshot size;
- placement: place G groups, plan the rebalance after one node joins, plan
  leader transfers from all groups led by their first replica.

``rip5 bench nameserver`` (the replicated service over Angelia) is a
separate, later bench.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

from nameserver import commands as c
from nameserver.placement import LoadBalancedPlacement, NodeLoad
from nameserver.state import MetadataState


def build(groups: int, nodes: int, topics: int) -> MetadataState:
    """A state with one placed cluster, its nodes, brokers, topics and groups."""
    state = MetadataState()
    state.apply(c.CreateCluster("bench", groups))
    for node in range(1, nodes + 1):
        state.apply(c.StorageHeartbeat(node, "bench", f"10.0.0.{node}:7701", 0))
    for broker in range(10):
        state.apply(c.BrokerHeartbeat(f"b{broker}", "bench", f"10.0.1.{broker}:8081", 0))
    first = state.cluster("bench").first_group_id
    placed = LoadBalancedPlacement().place_groups(
        range(first, first + groups), [NodeLoad(n) for n in range(1, nodes + 1)], 3
    )
    state.apply(c.SetReplicas(tuple(c.ReplicaAssignment(g, r) for g, r in placed.items())))
    for topic in range(topics):
        state.apply(c.CreateTopic(f"topic{topic}", "bench", 8))
    for group in range(100):
        state.apply(c.CreateConsumerGroup(f"GID_{group}", "bench"))
    return state


def _timed(action: Callable[[], object]) -> float:
    """CPU seconds of one call (process time: steadier than wall time on a shared machine)."""
    started = time.process_time()
    action()
    return time.process_time() - started


def _summary(values: list[float], unit: str, scale: float = 1.0) -> str:
    scaled = [v * scale for v in values]
    return f"{statistics.median(scaled):,.1f} {unit} [{min(scaled):,.1f}-{max(scaled):,.1f}]"


def main(argv: list[str]) -> int:
    """Run the bench and print one line per figure."""
    parser = argparse.ArgumentParser(prog="python -m rip5.bench.nameserver_core")
    parser.add_argument("--groups", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20_000, help="applies per run")
    args = parser.parse_args(argv)

    state = build(args.groups, args.nodes, args.topics)
    first = state.cluster("bench").first_group_id
    heartbeats = [
        c.encode(
            c.StorageHeartbeat(1 + i % args.nodes, "bench", f"10.0.0.{1 + i % args.nodes}:7701", i)
        )
        for i in range(args.ops)
    ]
    term = [0]

    def reports() -> list[bytes]:
        term[0] += 1
        return [
            c.encode(
                c.ReportLeaders(
                    1,
                    (c.LeaderReport(first + i % args.groups, 1 + i % args.nodes, term[0] + i),),
                )
            )
            for i in range(args.ops)
        ]

    def apply_all(entries: list[bytes]) -> None:
        for entry in entries:
            state.apply(c.decode(entry))

    heartbeat_rates, report_rates, route_us = [], [], []
    snapshot_ms, restore_ms, place_ms, rebalance_ms, leaders_ms = [], [], [], [], []
    policy = LoadBalancedPlacement()
    nodes = [NodeLoad(n) for n in range(1, args.nodes + 1)]
    group_ids = range(first, first + args.groups)
    placed = policy.place_groups(group_ids, nodes, 3)
    leaders = {g: replicas[0] for g, replicas in placed.items()}
    joined = [*nodes, NodeLoad(args.nodes + 1)]
    for _ in range(args.runs):
        heartbeat_rates.append(args.ops / _timed(lambda: apply_all(heartbeats)))
        batch = reports()
        term[0] += args.ops
        report_rates.append(args.ops / _timed(partial(apply_all, batch)))
        route_us.append(
            _timed(lambda: [state.route(f"topic{args.topics // 2}") for _ in range(1000)]) / 1000
        )
        snapshot = state.snapshot()
        snapshot_ms.append(_timed(state.snapshot))
        restore_ms.append(_timed(partial(MetadataState.restore, snapshot)))
        place_ms.append(_timed(lambda: policy.place_groups(group_ids, nodes, 3)))
        rebalance_ms.append(_timed(partial(policy.plan_rebalance, placed, joined, 3)))
        leaders_ms.append(_timed(lambda: policy.plan_leaders(placed, leaders, nodes)))

    print(
        f"nameserver core: groups={args.groups} nodes={args.nodes} topics={args.topics} "
        f"runs={args.runs} (median [min-max])"
    )
    print(f"  heartbeat decode+apply   {_summary(heartbeat_rates, 'ops/s')}")
    print(f"  leader report (changes)  {_summary(report_rates, 'ops/s')}")
    print(f"  route(8 queues)          {_summary(route_us, 'us', 1e6)}")
    print(
        f"  snapshot                 {_summary(snapshot_ms, 'ms', 1e3)}, "
        f"{len(state.snapshot()):,} bytes"
    )
    print(f"  restore                  {_summary(restore_ms, 'ms', 1e3)}")
    print(f"  place {args.groups} groups        {_summary(place_ms, 'ms', 1e3)}")
    print(f"  rebalance plan (+1 node) {_summary(rebalance_ms, 'ms', 1e3)}")
    print(f"  leader plan              {_summary(leaders_ms, 'ms', 1e3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
