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
from collections.abc import Iterable, Mapping, Sequence
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


class MovePlan:
    """The books a policy keeps while it plans replica moves over an assignment, one
    at a time (the policy chooses each move; this records it).

    ``replicas``: group -> its nodes, as the moves so far leave them (nodes not
    given included); ``hosted``: given node -> the groups it holds, likewise
    (nodes not given are not counted); ``moves``: the plan, in order.
    """

    def __init__(self, assignment: Mapping[int, Iterable[int]], node_ids: Iterable[int]) -> None:
        """Start from ``assignment``; ``node_ids``: the nodes the plan counts."""
        self.replicas = {group_id: set(nodes) for group_id, nodes in assignment.items()}
        self.hosted: dict[int, set[int]] = {node_id: set() for node_id in node_ids}
        for group_id, group in self.replicas.items():
            for node_id in group:
                if node_id in self.hosted:
                    self.hosted[node_id].add(group_id)
        self.moves: list[ReplicaMove] = []

    def count(self, node_id: int) -> int:
        """How many replicas given node ``node_id`` holds now."""
        return len(self.hosted[node_id])

    def counts(self) -> dict[int, int]:
        """Given node -> how many replicas it holds now."""
        return {node_id: len(groups) for node_id, groups in self.hosted.items()}

    def add(self, group_id: int, to_node: int) -> None:
        """Plan a new replica of the group on ``to_node`` (a top-up)."""
        self._place(group_id, to_node)
        self.moves.append(ReplicaMove(group_id, NO_NODE, to_node))

    def move(self, group_id: int, from_node: int, to_node: int) -> None:
        """Plan the group's replica on ``from_node`` to move to ``to_node``."""
        self.replicas[group_id].discard(from_node)
        if from_node in self.hosted:
            self.hosted[from_node].discard(group_id)
        self._place(group_id, to_node)
        self.moves.append(ReplicaMove(group_id, from_node, to_node))

    def _place(self, group_id: int, to_node: int) -> None:
        self.replicas[group_id].add(to_node)
        self.hosted[to_node].add(group_id)


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
        plan = MovePlan(assignment, weight)
        target = min(replication_factor, len(weight))
        for group_id in sorted(plan.replicas):
            group = plan.replicas[group_id]
            while len(group) < target:
                to_node = min(
                    (n for n in plan.hosted if n not in group),
                    key=lambda n: (plan.count(n), weight[n], n),
                )
                plan.add(group_id, to_node)
        while plan.hosted:
            # Fullest node (heaviest load first), emptiest node (lightest first).
            from_node = max(plan.hosted, key=lambda n: (plan.count(n), weight[n], -n))
            to_node = min(plan.hosted, key=lambda n: (plan.count(n), weight[n], n))
            if plan.count(from_node) - plan.count(to_node) <= 1:
                break
            # Exists: from_node holds >= 2 more groups than to_node, so at
            # least two of its groups lack to_node.
            plan.move(min(plan.hosted[from_node] - plan.hosted[to_node]), from_node, to_node)
        return plan.moves

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
        plan = MovePlan(assignment, weight)
        for group_id in sorted(assignment):
            group = plan.replicas[group_id]
            for from_node in sorted(group & leaving):
                candidates = [n for n in plan.hosted if n not in group and n not in leaving]
                if not candidates:
                    continue
                to_node = min(candidates, key=lambda n: (plan.count(n), weight[n], n))
                plan.move(group_id, from_node, to_node)
        return plan.moves

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


def node_ids_of(nodes: Sequence[NodeLoad]) -> list[int]:
    """The ids of ``nodes``, sorted; ValueError unless they are distinct and none is
    NO_NODE."""
    ids = [node.node_id for node in nodes]
    if len(set(ids)) != len(ids) or NO_NODE in ids:
        raise ValueError(f"node ids must be distinct and non-zero, got {ids}")
    return sorted(ids)


def _weights(nodes: Sequence[NodeLoad]) -> dict[int, tuple[int, int, int]]:
    """A node's load as a sort key: less used first (bytes, traffic, then more
    free disk). Node ids must be distinct and not NO_NODE (:func:`node_ids_of`)."""
    node_ids_of(nodes)
    return {
        node.node_id: (node.load.bytes, node.load.msgs_per_s, -node.load.disk_free_bytes)
        for node in nodes
    }


def check_replication_factor(replication_factor: int) -> None:
    """Refuse a replication factor below 1."""
    if replication_factor < 1:
        raise ValueError(f"replication_factor must be >= 1, got {replication_factor}")
