"""The nameserver leader's duties (:func:`run_leader_duties`), a loop on every node
that acts while the node leads.

Create the configured cluster if it does not exist (and the ACL's super user
while no user exists), and propose ``Expire`` every ``expire_interval_ms`` so
silent storage nodes and brokers are marked down and leases expire (not before
this node has led for a storage-node timeout, and no broker before it has led
for a broker timeout: a node's silence counts from when this leader could hear
it, so a leader elected after an outage does not mark every node down); then
place the cluster's unplaced groups once enough storage nodes are alive
(``SetReplicas``), move replicas (:mod:`nameserver.moves`), and at most every
``LEADER_BALANCE_INTERVAL_MS`` plan leader transfers
(:mod:`nameserver.balancer`). Transfers are requests held in this leader's
memory (not in the log) and handed to the leading storage node in its next
heartbeat answer, once (``nameserver.cluster_service``); a new leader plans
afresh.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nameserver import commands as c
from nameserver.balancer import plan_leader_balance, plan_placement
from nameserver.cluster_service import ClusterCalls
from nameserver.errors import NameserverError
from nameserver.forecast_placement import PLACEMENT_FORECAST
from nameserver.move_throttle import MoveThrottle
from nameserver.moves import EVACUATE_AFTER_MS_DEFAULT, MOVES_MAX_DEFAULT, plan_moves
from nameserver.service_base import GROUP_ID
from protocol.acl import User

LEADER_BALANCE_INTERVAL_MS = 3000
"""Least time between two leader balancing plans (transfers and reports settle meanwhile)."""
log = logging.getLogger("nameserver.leader_duties")


_EXPIRES_NOBODY_MS = 1 << 62
"""A failure-detection timeout no node's silence reaches."""


async def run_leader_duties(
    impl: ClusterCalls,
    *,
    cluster: str,
    group_count: int,
    replication_factor: int,
    expire_interval_ms: int,
    storage_node_timeout_ms: int,
    broker_timeout_ms: int,
    evacuate_after_ms: int = EVACUATE_AFTER_MS_DEFAULT,
    moves_max: int = MOVES_MAX_DEFAULT,
    super_user: User | None = None,
    placement: str = PLACEMENT_FORECAST,
) -> None:
    """While this node leads: create ``cluster`` if missing (and ``super_user``, the
    ACL's first user, while no user exists), sweep with Expire, place groups, move
    replicas (:mod:`nameserver.moves`), balance leaders."""
    impl.evacuate_after_ms = evacuate_after_ms
    impl.moves_max = moves_max
    impl.monitor.throttle = MoveThrottle(moves_max)
    impl.placement = placement
    interval_s = expire_interval_ms / 1000
    # A new leader (after an election, or every nameserver restarted after an outage)
    # has heard no heartbeat yet: a node's silence counts only from when this leader
    # could hear it (else every node would be marked down, and evacuated, on its first
    # sweep). So it expires nothing until a storage-node timeout has passed under it,
    # and no broker until a broker timeout has.
    leading_since_ms: int | None = None
    while True:
        if impl.driver.host.node(GROUP_ID).is_leader():
            now_ms = impl.clock()
            if leading_since_ms is None:
                leading_since_ms = now_ms
            led_ms = now_ms - leading_since_ms
            if super_user is not None:
                await _maybe_create_super_user(impl, super_user)
            await _maybe_sweep(
                impl,
                cluster,
                group_count,
                replication_factor,
                storage_node_timeout_ms,
                broker_timeout_ms if led_ms >= broker_timeout_ms else _EXPIRES_NOBODY_MS,
                expire=led_ms >= storage_node_timeout_ms,
            )
        else:
            leading_since_ms = None
        await asyncio.sleep(interval_s)


async def _maybe_create_super_user(impl: ClusterCalls, user: User) -> None:
    """Create ``user`` (a super user) if the cluster has no user yet: once, when the
    cluster is first started with ACL on."""
    with contextlib.suppress(NameserverError):
        state = await impl.linearizable()
        if not state.acl_tables().users:
            log.info("creating the ACL super user %s", user.name)
            await impl.propose(c.CreateUser(user))


async def _maybe_sweep(
    impl: ClusterCalls,
    cluster: str,
    group_count: int,
    replication_factor: int,
    storage_node_timeout_ms: int,
    broker_timeout_ms: int,
    *,
    expire: bool = True,
) -> None:
    with contextlib.suppress(NameserverError):
        state = await impl.linearizable()
        if cluster and cluster not in {x.name for x in state.clusters()}:
            log.info("creating cluster %s with %d groups", cluster, group_count)
            await impl.propose(c.CreateCluster(cluster, group_count, replication_factor))
        if expire:
            await impl.propose(c.Expire(impl.clock(), storage_node_timeout_ms, broker_timeout_ms))
        if cluster:
            await _maybe_place(impl, cluster)


async def _maybe_place(impl: ClusterCalls, cluster: str) -> None:
    """Place unplaced groups; plan leader transfers when the last plan is old enough."""
    state = impl.machine.state
    before = impl.monitor.degraded
    throttle = impl.monitor.throttle
    budget = throttle.budget
    moving = any(g.joining or g.leaving for g in state.raft_groups(cluster))
    degraded = impl.monitor.tick(impl.clock(), moving)
    if throttle.budget != budget:
        log.info(
            "replica moves at once: %d (append p99 %.1f ms; baseline %.1f ms)",
            throttle.budget,
            throttle.last_us / 1000,
            (throttle.baseline_us or 0) / 1000,
        )
    if degraded != before:
        log.warning(
            "degraded storage nodes (fsync latency an outlier among peers): %s",
            sorted(degraded) or "none",
        )
    policy = impl.effective_policy()
    placement = plan_placement(state, cluster, policy)
    if placement is not None:
        log.info("placing %d groups of %s", len(placement.assignments), cluster)
        await impl.propose(placement)
        return
    now_ms = impl.clock()
    moves = plan_moves(
        state,
        cluster,
        policy,
        impl.leader_memberships(),
        now_ms,
        evacuate_after_ms=impl.evacuate_after_ms,
        moves_max=throttle.budget,
    )
    if moves is not None:
        log.info(
            "replica move steps in %s: %s",
            cluster,
            "; ".join(
                f"group {a.group_id} -> {list(a.replicas)}"
                + (f" +{list(a.joining)}" if a.joining else "")
                + (f" -{list(a.leaving)}" if a.leaving else "")
                for a in moves.assignments
            ),
        )
        await impl.propose(moves)
        state = impl.machine.state
    if now_ms - impl.last_balance_ms < LEADER_BALANCE_INTERVAL_MS:
        return
    impl.last_balance_ms = now_ms
    transfers = plan_leader_balance(state, cluster, policy)
    impl.pending_transfers = {}
    for transfer in transfers:
        impl.pending_transfers.setdefault(transfer.from_node, []).append(transfer)
    if transfers:
        log.info("asking for %d leader transfers in %s", len(transfers), cluster)
