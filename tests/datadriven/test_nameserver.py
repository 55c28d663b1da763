"""Nameserver scenarios: the metadata state machine and placement, driven by
the files in tests/datadriven/nameserver/ (``pytest --rewrite`` regenerates
their expected output; review the diff)."""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from pathlib import Path

import pytest

from nameserver import commands as c
from nameserver.errors import NameserverError
from nameserver.placement import LoadBalancedPlacement, NodeLoad, ReplicaMove
from nameserver.records import (
    MAX_DELIVERY_ATTEMPTS_DEFAULT,
    NO_NODE,
    RETRY_DEFAULT,
    Change,
    ChangeKind,
    Endpoint,
    RetryPolicy,
    StorageLoad,
)
from nameserver.state import MetadataState
from protocol.vocabulary import MessageType, Permission
from tests._datadriven import TestData, run_file

SCENARIOS = sorted((Path(__file__).parent / "nameserver").glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, rewrite: bool) -> None:
    run_file(path, Scenario().handle, rewrite=rewrite)


def fmt(value: object) -> str:
    """Compact text of a record: fields as key=value, enums by name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [f"{f.name}={_nested(getattr(value, f.name))}" for f in dataclasses.fields(value)]
        return " ".join(parts)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return "(" + ",".join(fmt(v) for v in value) + ")"
    if value is None:
        return "-"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _nested(value: object) -> str:
    text = fmt(value)
    return "{" + text + "}" if dataclasses.is_dataclass(value) else text


def fmt_change(change: Change) -> str:
    body = "deleted" if change.value is None else fmt(change.value)
    return f"r{change.revision} {change.kind.name.lower()} {change.key}: {body}"


def fmt_node(node: Endpoint | None) -> str:
    if node is None:
        return "-"
    return f"{node.node_id}{'' if node.alive else '(down)'}"


class Scenario:
    """One file's state: a MetadataState and a placement policy."""

    def __init__(self) -> None:
        self.state = MetadataState(history_max=8)
        self.policy = LoadBalancedPlacement()

    def handle(self, d: TestData) -> str:
        try:
            command = self.command(d)
            if command is not None:
                applied = self.state.apply(command)
                lines = [fmt_change(x) for x in applied.changes]
                if isinstance(applied.value, tuple):
                    lines.append("taken " + fmt(applied.value))
                return "\n".join(lines) or f"no change (r{applied.revision})"
            return getattr(self, "q_" + d.cmd.replace("-", "_"))(d)
        except NameserverError as error:
            return f"error {error.code.name}: {error}"

    # -- commands ------------------------------------------------------------

    def command(self, d: TestData) -> c.Command | None:
        if d.cmd == "create-cluster":
            return c.CreateCluster(d.arg("name"), d.int_arg("groups"), d.int_arg("rf", 3))
        if d.cmd == "storage-heartbeat":
            load = StorageLoad(
                bytes=d.int_arg("bytes", 0), disk_free_bytes=d.int_arg("disk_free", 0)
            )
            return c.StorageHeartbeat(
                d.int_arg("node"), d.arg("cluster", "c1"), d.arg("addr"), d.int_arg("now"), load
            )
        if d.cmd == "broker-heartbeat":
            return c.BrokerHeartbeat(
                d.arg("id"),
                d.arg("cluster", "c1"),
                d.arg("addr"),
                d.int_arg("now"),
                tuple(d.arg_values("producers")),
                d.arg("remoting", ""),
            )
        if d.cmd == "create-topic":
            return c.CreateTopic(
                d.arg("name"),
                d.arg("cluster", "c1"),
                d.int_arg("queues"),
                MessageType[d.arg("type", "NORMAL")],
                d.int_arg("retention_ms", 86_400_000),
                Permission[d.arg("perm", "READ_WRITE")],
                read_replicas=d.arg("read_replicas", "false") == "true",
            )
        if d.cmd == "update-topic":
            return c.UpdateTopic(
                d.arg("name"),
                int(d.arg("queues")) if d.has_arg("queues") else None,
                MessageType[d.arg("type")] if d.has_arg("type") else None,
                int(d.arg("retention_ms")) if d.has_arg("retention_ms") else None,
                Permission[d.arg("perm")] if d.has_arg("perm") else None,
                read_replicas=d.arg("read_replicas") == "true"
                if d.has_arg("read_replicas")
                else None,
            )
        if d.cmd == "delete-topic":
            return c.DeleteTopic(d.arg("name"))
        if d.cmd in ("create-group", "update-group"):
            retry = None
            if d.has_arg("backoff"):
                initial, maximum, multiplier = d.arg_values("backoff")
                retry = RetryPolicy(int(initial), int(maximum), float(multiplier))
            fifo = d.arg("fifo") == "true" if d.has_arg("fifo") else None
            attempts = int(d.arg("attempts")) if d.has_arg("attempts") else None
            if d.cmd == "update-group":
                return c.UpdateConsumerGroup(d.arg("name"), fifo, attempts, retry)
            return c.CreateConsumerGroup(
                d.arg("name"),
                d.arg("cluster", "c1"),
                bool(fifo),
                MAX_DELIVERY_ATTEMPTS_DEFAULT if attempts is None else attempts,
                RETRY_DEFAULT if retry is None else retry,
            )
        if d.cmd == "delete-group":
            return c.DeleteConsumerGroup(d.arg("name"))
        if d.cmd == "set-replicas":
            # input lines: "group: node node node"
            assignments = []
            for row in d.input.splitlines():
                group, _, nodes = row.partition(":")
                replicas = tuple(int(n) for n in nodes.split())
                assignments.append(c.ReplicaAssignment(int(group), replicas))
            return c.SetReplicas(tuple(assignments))
        if d.cmd == "report-leaders":
            # input lines: "group leader term"
            reports = tuple(c.LeaderReport(*map(int, row.split())) for row in d.input.splitlines())
            return c.ReportLeaders(d.int_arg("node"), reports)
        if d.cmd == "expire":
            return c.Expire(
                d.int_arg("now"), d.int_arg("storage_timeout"), d.int_arg("broker_timeout")
            )
        if d.cmd == "acquire-lease":
            return c.AcquireLease(d.arg("name"), d.arg("owner"), d.int_arg("now"), d.int_arg("ttl"))
        if d.cmd == "renew-lease":
            return c.RenewLease(d.arg("name"), d.arg("owner"), d.int_arg("now"), d.int_arg("ttl"))
        if d.cmd == "release-lease":
            return c.ReleaseLease(d.arg("name"), d.arg("owner"))
        if d.cmd == "remove-broker":
            return c.RemoveBroker(d.arg("id"))
        if d.cmd == "remove-storage-node":
            return c.RemoveStorageNode(d.int_arg("node"))
        return None

    # -- queries ---------------------------------------------------------------

    def q_route(self, d: TestData) -> str:
        route = self.state.route(d.arg("topic"))
        lines = [f"{fmt(route.topic)} (r{route.revision})"]
        for q in route.queues:
            followers = ",".join(fmt_node(f) for f in q.followers)
            lines.append(
                f"queue {q.queue_id} -> group {q.group_id} term {q.term} "
                f"leader {fmt_node(q.leader)} followers ({followers})"
            )
        return "\n".join(lines)

    def q_groups(self, d: TestData) -> str:
        return "\n".join(
            f"group {g.group_id}: replicas {fmt(g.replicas)} leader {g.leader} term {g.term}"
            for g in self.state.raft_groups(d.arg("cluster", "c1"))
        )

    def q_node_groups(self, d: TestData) -> str:
        groups = self.state.groups_of_node(d.int_arg("node"))
        return "groups " + fmt(tuple(g.group_id for g in groups))

    def q_status(self, d: TestData) -> str:
        status = self.state.cluster_status(d.arg("cluster", "c1"))
        lines = [f"{fmt(status.cluster)} (r{status.revision})"]
        lines += [f"storage {fmt(n)}" for n in status.storage_nodes]
        lines += [f"broker {fmt(b)}" for b in status.brokers]
        leaderless = [g.group_id for g in status.groups if g.leader == NO_NODE]
        lines.append(f"groups {len(status.groups)} leaderless {fmt(tuple(leaderless))}")
        lines.append(f"topics {status.topic_count} consumer groups {status.consumer_group_count}")
        return "\n".join(lines)

    def q_topics(self, d: TestData) -> str:
        return "\n".join(fmt(t) for t in self.state.topics()) or "none"

    def q_consumer_groups(self, d: TestData) -> str:
        return "\n".join(fmt(g) for g in self.state.consumer_groups()) or "none"

    def q_leases(self, d: TestData) -> str:
        return "\n".join(fmt(x) for x in self.state.leases()) or "none"

    def q_producer_group(self, d: TestData) -> str:
        brokers = self.state.brokers_for_producer_group(d.arg("name"))
        return "brokers " + fmt(tuple(b.broker_id for b in brokers))

    def q_changes(self, d: TestData) -> str:
        kinds = frozenset(ChangeKind[k.upper()] for k in d.arg_values("kinds")) or None
        batch = self.state.changes_since(d.int_arg("since"), kinds)
        if batch.resync_required:
            return f"resync required (now r{batch.revision})"
        return "\n".join(fmt_change(x) for x in batch.changes) or f"none (now r{batch.revision})"

    def q_snapshot(self, d: TestData) -> str:
        """Replace the state with its restored snapshot (later blocks run on the copy)."""
        data = self.state.snapshot()
        restored = MetadataState.restore(data, history_max=8)
        assert restored.snapshot() == data
        self.state = restored
        return f"restored r{restored.revision}"

    # -- placement -----------------------------------------------------------------

    def _live_nodes(self, cluster: str) -> list[NodeLoad]:
        return [
            NodeLoad(n.node_id, n.load)
            for n in self.state.storage_nodes()
            if n.cluster == cluster and n.alive
        ]

    def q_place(self, d: TestData) -> str:
        """Place the cluster's unplaced groups and apply the result as SetReplicas."""
        cluster = d.arg("cluster", "c1")
        group_ids = [g.group_id for g in self.state.raft_groups(cluster) if not g.replicas]
        rf = self.state.cluster(cluster).replication_factor
        placed = self.policy.place_groups(group_ids, self._live_nodes(cluster), rf)
        assignments = tuple(c.ReplicaAssignment(g, r) for g, r in sorted(placed.items()))
        self.state.apply(c.SetReplicas(assignments))
        return self._replica_counts(cluster)

    def q_rebalance(self, d: TestData) -> str:
        """Plan replica moves and apply each as one SetReplicas."""
        cluster = d.arg("cluster", "c1")
        assignment = {g.group_id: g.replicas for g in self.state.raft_groups(cluster)}
        rf = self.state.cluster(cluster).replication_factor
        moves = self.policy.plan_rebalance(assignment, self._live_nodes(cluster), rf)
        return self._carry_out(cluster, assignment, moves)

    def _carry_out(
        self, cluster: str, assignment: dict[int, tuple[int, ...]], moves: list[ReplicaMove]
    ) -> str:
        lines = []
        for move in moves:
            replicas = [n for n in assignment[move.group_id] if n != move.from_node]
            assignment[move.group_id] = (*replicas, move.to_node)
            self.state.apply(
                c.SetReplicas((c.ReplicaAssignment(move.group_id, assignment[move.group_id]),))
            )
            lines.append(f"move group {move.group_id}: {move.from_node} -> {move.to_node}")
        lines.append(self._replica_counts(cluster))
        return "\n".join(lines)

    def q_evacuate(self, d: TestData) -> str:
        """Plan moves off the given nodes and apply each as one SetReplicas."""
        cluster = d.arg("cluster", "c1")
        assignment = {g.group_id: g.replicas for g in self.state.raft_groups(cluster)}
        leaving = frozenset(int(n) for n in d.arg_values("nodes"))
        moves = self.policy.plan_evacuation(assignment, self._live_nodes(cluster), leaving)
        return self._carry_out(cluster, assignment, moves)

    def q_balance_leaders(self, d: TestData) -> str:
        """Plan leader transfers; storage nodes carry them out and report term+1."""
        cluster = d.arg("cluster", "c1")
        groups = self.state.raft_groups(cluster)
        transfers = self.policy.plan_leaders(
            {g.group_id: g.replicas for g in groups},
            {g.group_id: g.leader for g in groups if g.leader != NO_NODE},
            self._live_nodes(cluster),
        )
        lines = [f"transfer group {t.group_id}: {t.from_node} -> {t.to_node}" for t in transfers]
        for t in transfers:
            term = self.state.raft_group(t.group_id).term + 1
            self.state.apply(
                c.ReportLeaders(t.to_node, (c.LeaderReport(t.group_id, t.to_node, term),))
            )
        counts = Counter(g.leader for g in self.state.raft_groups(cluster) if g.leader)
        lines.append("leaders " + " ".join(f"{n}:{counts[n]}" for n in sorted(counts)))
        return "\n".join(lines)

    def _replica_counts(self, cluster: str) -> str:
        counts = Counter(n for g in self.state.raft_groups(cluster) for n in g.replicas)
        return "replicas " + (" ".join(f"{n}:{counts[n]}" for n in sorted(counts)) or "none")
