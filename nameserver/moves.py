"""Replica moves: the nameserver leader's plan, one membership step per group at a time.

A move takes a group's replica from one storage node to another (or adds one,
for an under-replicated group). It is recorded in the replicated state, so a
nameserver failover resumes it, and runs in two ``SetReplicas`` steps:

1. **add**: ``to_node`` joins ``replicas`` and is recorded as ``joining``
   (``from_node``, if any, as ``leaving``). The group's storage leader adds
   it as a raft learner (it starts the replica empty and is caught up by
   snapshot and log), then promotes it to voter once caught up.
2. **drop**: once the group's leader reports every joining replica among its
   voters, ``leaving`` replicas leave ``replicas`` and both marks are
   cleared. The storage leader removes them from the raft configuration
   (handing leadership away first if it is leaving itself); a node that is
   no longer assigned a group stops and deletes its replica.

A move whose joining node goes down is cancelled (the joining replica is
dropped again), so a dead target never blocks a group.

Which moves (:func:`plan_moves`), each sweep:

- evacuation: replicas on storage nodes down for at least
  ``evacuate_after_ms`` (judged by the leader's ``now_ms`` against the last
  heartbeat), and on nodes marked draining (``DrainStorageNode``, alive or
  not), are moved to live nodes that are not draining
  (``PlacementPolicy.plan_evacuation``);
- otherwise, once no down node holds replicas, a rebalance over the live
  nodes (``PlacementPolicy.plan_rebalance``): under-replicated groups are
  topped up and replica counts evened out (a joined node gets its share);
- a group starts a move only when it is settled: no move recorded, a known,
  alive leader, and its leader's reported membership equal to its replicas
  (no learner, no pending removal); at most ``moves_max`` groups are moving
  at once (a group counts until its leader reports the final membership).

Memberships are soft state: each storage node sends, in its heartbeats, the
raft membership of the groups it leads; the service keeps the latest one per
group and passes those of the recorded leaders here.

PURE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nameserver import commands as c
from nameserver.placement import NodeLoad, PlacementPolicy, ReplicaMove
from nameserver.records import NO_NODE, RaftGroup
from nameserver.state import MetadataState

EVACUATE_AFTER_MS_DEFAULT = 30_000
MOVES_MAX_DEFAULT = 8


@dataclass(frozen=True, slots=True)
class Membership:
    """A group's raft configuration as its leader applied it."""

    voters: frozenset[int]
    learners: frozenset[int] = frozenset()


def is_settled(group: RaftGroup, membership: Membership | None) -> bool:
    """Whether ``group`` has no move under way: none recorded, and its leader's
    membership is exactly its replicas, all voters."""
    return (
        not group.joining
        and not group.leaving
        and membership is not None
        and not membership.learners
        and membership.voters == frozenset(group.replicas)
    )


def plan_moves(
    state: MetadataState,
    cluster: str,
    policy: PlacementPolicy,
    memberships: Mapping[int, Membership],
    now_ms: int,
    *,
    evacuate_after_ms: int = EVACUATE_AFTER_MS_DEFAULT,
    moves_max: int = MOVES_MAX_DEFAULT,
) -> c.SetReplicas | None:
    """The next move steps of ``cluster`` as one command, or None (nothing to do).

    ``memberships``: group -> membership reported by its recorded leader.
    """
    groups = state.raft_groups(cluster)
    if not groups or any(not g.replicas for g in groups):
        return None  # initial placement comes first
    nodes = [n for n in state.storage_nodes() if n.cluster == cluster]
    alive = {n.node_id for n in nodes if n.alive}
    steps: list[c.ReplicaAssignment] = []
    busy = 0
    for group in groups:
        membership = memberships.get(group.group_id)
        if group.joining or group.leaving:
            busy += 1
            step = _next_step(group, membership, alive)
            if step is not None:
                steps.append(step)
        elif not is_settled(group, membership):
            busy += int(membership is not None)  # its leader is still converging
    budget = moves_max - busy
    if budget > 0:
        steps += _start_moves(state, cluster, policy, memberships, now_ms, evacuate_after_ms)[
            :budget
        ]
    if not steps:
        return None
    return c.SetReplicas(tuple(sorted(steps, key=lambda a: a.group_id)))


def _next_step(
    group: RaftGroup, membership: Membership | None, alive: set[int]
) -> c.ReplicaAssignment | None:
    """Step 2 of a recorded move once its joining replicas are voters; its
    cancellation if a joining replica's node is down; else None (wait)."""
    if any(n not in alive for n in group.joining):
        kept = tuple(r for r in group.replicas if r not in group.joining)
        return c.ReplicaAssignment(group.group_id, kept)
    if membership is not None and set(group.joining) <= membership.voters:
        kept = tuple(r for r in group.replicas if r not in group.leaving)
        return c.ReplicaAssignment(group.group_id, kept)
    return None


def _start_moves(
    state: MetadataState,
    cluster: str,
    policy: PlacementPolicy,
    memberships: Mapping[int, Membership],
    now_ms: int,
    evacuate_after_ms: int,
) -> list[c.ReplicaAssignment]:
    """Step 1 of the policy's moves of settled groups, one per group, in plan order."""
    groups = {g.group_id: g for g in state.raft_groups(cluster)}
    nodes = [n for n in state.storage_nodes() if n.cluster == cluster]
    live = [NodeLoad(n.node_id, n.load) for n in nodes if n.alive and not n.draining]
    hosting = {r for g in groups.values() for r in g.replicas}
    down = [n for n in nodes if not n.alive and n.node_id in hosting]
    expired = frozenset(
        n.node_id for n in down if now_ms - n.last_heartbeat_ms >= evacuate_after_ms
    ) | frozenset(n.node_id for n in nodes if n.draining and n.node_id in hosting)
    target = {
        g.group_id: tuple(r for r in g.replicas if r not in g.leaving) for g in groups.values()
    }
    moves: list[ReplicaMove]
    if expired:
        moves = policy.plan_evacuation(target, live, expired)
    elif not down:
        moves = policy.plan_rebalance(target, live, state.cluster(cluster).replication_factor)
    else:
        return []  # a node is down but not for long: wait for it or its evacuation
    alive = {n.node_id for n in nodes if n.alive}  # a draining leader still runs its moves
    started: list[c.ReplicaAssignment] = []
    seen: set[int] = set()
    for move in moves:
        group = groups[move.group_id]
        if move.group_id in seen or not _can_start(group, memberships, alive):
            continue
        seen.add(move.group_id)
        replicas = tuple(sorted({*group.replicas, move.to_node}))
        leaving = () if move.from_node == NO_NODE else (move.from_node,)
        started.append(c.ReplicaAssignment(move.group_id, replicas, (move.to_node,), leaving))
    return started


def _can_start(group: RaftGroup, memberships: Mapping[int, Membership], alive: set[int]) -> bool:
    return group.leader in alive and is_settled(group, memberships.get(group.group_id))
