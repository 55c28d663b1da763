"""Where raft groups live and which replica leads them: placement policies.

The nameserver leader asks its policy for a plan and proposes the result as
commands (``SetReplicas`` for placements, one step of a move at a time; leader
transfers are requests to storage nodes, whose leader reports then update the
state). The state machine never calls a policy, so replicas never depend on
which policy, or which version of one, the leader ran.

:class:`LoadBalancedPlacement` is the policy today: replica counts first (so
placement is even), load as the tie-break, node id last (so plans are
deterministic). A forecasting policy can replace it behind
:class:`PlacementPolicy`.

Guarantees of :class:`LoadBalancedPlacement`, for the nodes it is given:

- anti-affinity: a group's replicas are distinct nodes; a group gets
  ``min(replication_factor, len(nodes))`` replicas (fewer than the factor
  only while the cluster has fewer nodes; :meth:`plan_rebalance` tops such
  groups up as nodes join);
- after :meth:`place_groups` or :meth:`plan_rebalance`, the replica counts of
  any two given nodes differ by at most one;
- after :meth:`plan_leaders`, the leader counts of any two given nodes differ
  by at most one whenever the replica placement allows it (it always does
  after the two calls above), with as few transfers as the search finds.

Replicas on nodes not given (down, or being drained) are left where they are
and not counted: replacing the replicas of a node down for good, or draining
one before ``RemoveStorageNode``, is a separate decision, planned with
:meth:`LoadBalancedPlacement.plan_evacuation`.

PURE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from nameserver.records import NO_LOAD, NO_NODE, StorageLoad


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A candidate storage node as placement sees it."""

    node_id: int
    load: StorageLoad = NO_LOAD


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """Move a group's replica from ``from_node`` to ``to_node``; ``from_node`` is
    NO_NODE when a replica is added (an under-replicated group). The service
    carries it out as: add ``to_node`` as a learner, promote it, remove
    ``from_node``."""

    group_id: int
    from_node: int
    to_node: int


@dataclass(frozen=True, slots=True)
class LeaderTransfer:
    """Ask ``from_node``, the group's leader, to hand leadership to ``to_node``."""

    group_id: int
    from_node: int
    to_node: int


class PlacementPolicy(Protocol):
    """Decides replica placement and leader balance. Implementations are pure
    and deterministic: the same arguments give the same plan."""

    def place_groups(
        self, group_ids: Sequence[int], nodes: Sequence[NodeLoad], replication_factor: int
    ) -> dict[int, tuple[int, ...]]:
        """Replicas for new groups (a new cluster), spread over ``nodes``."""
        ...

    def plan_rebalance(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        replication_factor: int,
    ) -> list[ReplicaMove]:
        """Moves that top up under-replicated groups and even out replica counts
        (after a node joins). Applied in order, they reach a balanced state."""
        ...

    def plan_evacuation(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        leaving: frozenset[int],
    ) -> list[ReplicaMove]:
        """Moves that take every replica off the ``leaving`` nodes (a node being
        removed, or one down for good) onto the given ``nodes``."""
        ...

    def plan_leaders(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        leaders: Mapping[int, int],
        nodes: Sequence[NodeLoad],
    ) -> list[LeaderTransfer]:
        """Transfers that make each node lead about as many groups as the others."""
        ...


class LoadBalancedPlacement:
    """Count-balanced placement with load as the tie-break (see module docstring)."""

    def place_groups(
        self, group_ids: Sequence[int], nodes: Sequence[NodeLoad], replication_factor: int
    ) -> dict[int, tuple[int, ...]]:
        """Each group in turn takes the ``replication_factor`` least-used nodes."""
        check_replication_factor(replication_factor)
        counts = {n.node_id: 0 for n in nodes}
        weight = _weights(nodes)
        placed: dict[int, tuple[int, ...]] = {}
        for group_id in sorted(group_ids):
            chosen = sorted(counts, key=lambda n: (counts[n], weight[n], n))[:replication_factor]
            for node_id in chosen:
                counts[node_id] += 1
            placed[group_id] = tuple(sorted(chosen))
        return placed

    def plan_rebalance(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        replication_factor: int,
    ) -> list[ReplicaMove]:
        """Top-ups first, then moves from the fullest to the emptiest node."""
        check_replication_factor(replication_factor)
        weight = _weights(nodes)
        replicas = {g: set(r) for g, r in assignment.items()}
        counts = {n.node_id: 0 for n in nodes}
        for group in replicas.values():
            for node_id in group:
                if node_id in counts:
                    counts[node_id] += 1
        moves: list[ReplicaMove] = []
        target = min(replication_factor, len(counts))
        for group_id in sorted(replicas):
            group = replicas[group_id]
            while len(group) < target:
                to_node = min(
                    (n for n in counts if n not in group),
                    key=lambda n: (counts[n], weight[n], n),
                )
                group.add(to_node)
                counts[to_node] += 1
                moves.append(ReplicaMove(group_id, NO_NODE, to_node))
        while counts:
            # Fullest node (heaviest load first), emptiest node (lightest first).
            from_node = max(counts, key=lambda n: (counts[n], weight[n], -n))
            to_node = min(counts, key=lambda n: (counts[n], weight[n], n))
            if counts[from_node] - counts[to_node] <= 1:
                break
            # Exists: from_node holds >= 2 more groups than to_node, so at
            # least two of its groups lack to_node.
            group_id = min(
                g for g, group in replicas.items() if from_node in group and to_node not in group
            )
            replicas[group_id].remove(from_node)
            replicas[group_id].add(to_node)
            counts[from_node] -= 1
            counts[to_node] += 1
            moves.append(ReplicaMove(group_id, from_node, to_node))
        return moves

    def plan_evacuation(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        nodes: Sequence[NodeLoad],
        leaving: frozenset[int],
    ) -> list[ReplicaMove]:
        """Each replica on a leaving node moves to the least-used given node the
        group does not have yet (in group id order). A group with no such node
        left keeps that replica: the plan cannot empty the leaving node without
        breaking anti-affinity (more nodes are needed)."""
        weight = _weights(nodes)
        counts = dict.fromkeys(weight, 0)
        for replicas in assignment.values():
            for node_id in replicas:
                if node_id in counts:
                    counts[node_id] += 1
        moves: list[ReplicaMove] = []
        for group_id in sorted(assignment):
            group = set(assignment[group_id])
            for from_node in sorted(group & leaving):
                candidates = [n for n in counts if n not in group and n not in leaving]
                if not candidates:
                    continue
                to_node = min(candidates, key=lambda n: (counts[n], weight[n], n))
                group.discard(from_node)
                group.add(to_node)
                counts[to_node] += 1
                if from_node in counts:
                    counts[from_node] -= 1
                moves.append(ReplicaMove(group_id, from_node, to_node))
        return moves

    def plan_leaders(
        self,
        assignment: Mapping[int, tuple[int, ...]],
        leaders: Mapping[int, int],
        nodes: Sequence[NodeLoad],
    ) -> list[LeaderTransfer]:
        """Shift leadership along chains of groups from the node leading most to
        the node leading least, until no chain lowers the spread.

        Only groups with a known leader among the given nodes are balanced; a
        group in an election is left to it and balanced on a later round.
        """
        weight = _weights(nodes)
        led: dict[int, int] = {}  # group -> planned leader
        for group_id, leader in leaders.items():
            if leader in weight and leader in assignment.get(group_id, ()):
                led[group_id] = leader
        counts = dict.fromkeys(weight, 0)
        for leader in led.values():
            counts[leader] += 1
        while (chain := _improving_chain(assignment, led, counts)) is not None:
            source = led[chain[0][0]]
            for group_id, to_node in chain:
                led[group_id] = to_node
            counts[source] -= 1
            counts[chain[-1][1]] += 1
        return [
            LeaderTransfer(group_id, leaders[group_id], led[group_id])
            for group_id in sorted(led)
            if led[group_id] != leaders[group_id]
        ]


def _improving_chain(
    assignment: Mapping[int, tuple[int, ...]], led: Mapping[int, int], counts: Mapping[int, int]
) -> list[tuple[int, int]] | None:
    """The shortest chain of leadership hand-overs (group, new leader) that takes
    one leadership from a node leading the most to a node leading at least two
    fewer, every node in between keeping its count; None if there is none.

    Each such chain strictly lowers the sum of squared leader counts, so
    repeating it ends; when none is left the spread is as small as the
    replica placement allows.
    """
    groups_led: dict[int, list[int]] = {n: [] for n in counts}
    for group_id in sorted(led):
        groups_led[led[group_id]].append(group_id)
    for source in sorted(counts, key=lambda n: (-counts[n], n)):
        # Breadth-first over nodes; via[node] = (group, previous node).
        via: dict[int, tuple[int, int]] = {}
        frontier = deque([source])
        seen = {source}
        while frontier:
            node = frontier.popleft()
            for group_id in groups_led[node]:
                for replica in sorted(assignment[group_id]):
                    if replica in seen or replica not in counts:
                        continue
                    seen.add(replica)
                    via[replica] = (group_id, node)
                    if counts[replica] <= counts[source] - 2:
                        return _unwind(via, source, replica)
                    frontier.append(replica)
    return None


def _unwind(via: Mapping[int, tuple[int, int]], source: int, target: int) -> list[tuple[int, int]]:
    chain: list[tuple[int, int]] = []
    node = target
    while node != source:
        group_id, previous = via[node]
        chain.append((group_id, node))
        node = previous
    chain.reverse()
    return chain


def _weights(nodes: Sequence[NodeLoad]) -> dict[int, tuple[int, int, int]]:
    """A node's load as a sort key: less used first (bytes, traffic, then more
    free disk). Node ids must be distinct and not NO_NODE."""
    weights: dict[int, tuple[int, int, int]] = {}
    for node in nodes:
        if node.node_id == NO_NODE or node.node_id in weights:
            raise ValueError(f"node ids must be distinct and non-zero, got {node.node_id}")
        load = node.load
        weights[node.node_id] = (load.bytes, load.msgs_per_s, -load.disk_free_bytes)
    return weights


def check_replication_factor(replication_factor: int) -> None:
    """Refuse a replication factor below 1."""
    if replication_factor < 1:
        raise ValueError(f"replication_factor must be >= 1, got {replication_factor}")
