"""The leader's placement duties, as pure decisions over the metadata state.

The nameserver leader calls these on every sweep and proposes (or hands out)
what they return; they never change the state themselves:

- :func:`plan_placement`: once a cluster has at least ``replication_factor``
  live storage nodes, its groups without replicas are placed by the policy
  (anti-affinity: distinct nodes) and recorded with one ``SetReplicas``.
  With fewer live nodes nothing is placed: a group placed on fewer nodes
  than the factor could not be topped up without a membership change.
- :func:`plan_leader_balance`: once every placed group of a cluster has a
  known leader (elections settled), the transfers that make each live node
  lead about G/N groups. They go to the leading nodes as requests (in their
  heartbeat answers); the leader map follows their later reports.

PURE.
"""

from __future__ import annotations

from nameserver import commands as c
from nameserver.placement import LeaderTransfer, NodeLoad, PlacementPolicy
from nameserver.records import NO_NODE
from nameserver.state import MetadataState


def live_nodes(state: MetadataState, cluster: str) -> list[NodeLoad]:
    """The live storage nodes of ``cluster`` with their load, by id."""
    return [
        NodeLoad(n.node_id, n.load)
        for n in state.storage_nodes()
        if n.cluster == cluster and n.alive
    ]


def plan_placement(
    state: MetadataState, cluster: str, policy: PlacementPolicy
) -> c.SetReplicas | None:
    """Replicas for the groups of ``cluster`` that have none, or None (nothing to do yet)."""
    found = state.cluster(cluster)
    unplaced = [g.group_id for g in state.raft_groups(cluster) if not g.replicas]
    nodes = live_nodes(state, cluster)
    if not unplaced or len(nodes) < found.replication_factor:
        return None
    placed = policy.place_groups(unplaced, nodes, found.replication_factor)
    return c.SetReplicas(
        tuple(c.ReplicaAssignment(g, replicas) for g, replicas in sorted(placed.items()))
    )


def plan_leader_balance(
    state: MetadataState, cluster: str, policy: PlacementPolicy
) -> list[LeaderTransfer]:
    """Leader transfers that even out leadership in ``cluster``; [] while any placed
    group has no known leader (an election is under way: wait for it)."""
    placed = [g for g in state.raft_groups(cluster) if g.replicas]
    if not placed or any(g.leader == NO_NODE for g in placed):
        return []
    # Only replicas that stay and are voters can take leadership (not joining learners).
    assignment = {
        g.group_id: tuple(r for r in g.replicas if r not in g.joining and r not in g.leaving)
        for g in placed
    }
    leaders = {g.group_id: g.leader for g in placed}
    return policy.plan_leaders(assignment, leaders, live_nodes(state, cluster))
