"""Benchmark of the sans-IO Raft core alone: committed entries per CPU second.

Every replica of every group runs in this one process on MemoryLogs, so the
figure is the core's whole-cluster cost on one core (no WAL, no transport):
each round proposes a batch on every leader, then hands Readys and messages
around until every replica has applied the batch.

Run: ``python -m rip5.bench.raft_core [--groups 64] [--batch 64] [--rounds 60]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from raft.core.memory_log import MemoryLog
from raft.core.node import Config, RawNode
from raft.types import ConfState, Message


class _Cluster:
    def __init__(self, groups: int, replicas: int, seed: int) -> None:
        rng = random.Random(seed)
        ids = list(range(1, replicas + 1))
        conf = ConfState(frozenset(ids))
        self.groups: list[dict[int, tuple[RawNode, MemoryLog]]] = []
        for _ in range(groups):
            group = {}
            for node_id in ids:
                log = MemoryLog(conf)
                group[node_id] = (RawNode(Config(id=node_id), log, rng.randrange), log)
            self.groups.append(group)
        for group in self.groups:
            group[1][0].campaign()
        self.settle()

    def settle(self) -> int:
        """Process Readys and messages until quiet; the entries applied."""
        applied = 0
        busy = True
        while busy:
            busy = False
            for group in self.groups:
                inbox: list[Message] = []
                for node, log in group.values():
                    if not node.has_ready():
                        continue
                    busy = True
                    ready = node.ready()
                    if ready.snapshot is not None:
                        log.apply_snapshot(ready.snapshot)
                    log.append(ready.entries)
                    if ready.hard_state is not None:
                        log.set_hard_state(ready.hard_state)
                    inbox.extend(ready.messages)
                    applied += len(ready.committed_entries)
                    node.advance(ready)
                for message in inbox:
                    group[message.to][0].step(message)
        return applied

    def round(self, payloads: list[bytes]) -> int:
        for group in self.groups:
            group[1][0].propose_batch(payloads)
        return self.settle()

    def compact(self) -> None:
        """Keep the logs short, as a host would after applying."""
        for group in self.groups:
            for node, log in group.values():
                applied = node.status().applied
                if applied > log.first_index() + 1024:
                    _, conf = log.initial_state()
                    log.create_snapshot(applied, conf, b"")
                    log.compact(applied)


def run(groups: int, batch: int, rounds: int, entry_bytes: int, seed: int) -> float:
    """Committed entries per CPU second (counted once per group, at commit)."""
    cluster = _Cluster(groups, 3, seed)
    payloads = [bytes(entry_bytes) for _ in range(batch)]
    committed = 0
    start = time.process_time()
    for i in range(rounds):
        applied = cluster.round(payloads)
        committed += applied // 3  # every replica applies each entry once
        if i % 16 == 15:
            cluster.compact()
    return committed / (time.process_time() - start)


def main() -> None:
    """Print the median of several runs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64, help="proposals per group per round")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--entry-bytes", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rates = [
        run(args.groups, args.batch, args.rounds, args.entry_bytes, seed)
        for seed in range(args.runs)
    ]
    print(
        f"raft core, {args.groups} groups x 3 replicas in one process, "
        f"{args.entry_bytes} B entries, {args.batch} per proposal round: "
        f"median {statistics.median(rates):,.0f} committed entries per CPU second "
        f"(runs: {', '.join(f'{r:,.0f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
