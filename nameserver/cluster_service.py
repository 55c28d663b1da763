"""The nameserver's cluster calls: storage nodes and brokers register and refresh
(heartbeats), storage nodes report their groups' leaders, an admin drains or
removes a storage node, and the cluster's status is read.

Besides the replicated state, the leader keeps soft state here, in memory and
rebuilt by a new leader from the next heartbeats: each group's membership as its
leading node applied it, the latency outliers and per-group load
(:class:`LoadMonitor`), and the leader transfers planned by the leader duties
(``nameserver.leader_duties``), each handed once to the leading storage node
in its next heartbeat answer.

SHELL.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from angelia_rpc import CallContext
from nameserver import commands as c
from nameserver import records as r
from nameserver.api_convert import cluster_status_response, raft_group_info
from nameserver.errors import BadRequest, NameserverError
from nameserver.forecast_placement import (
    PLACEMENT_FORECAST,
    AvoidingNodes,
    live_forecast_placement,
)
from nameserver.load_monitor import LoadMonitor
from nameserver.moves import EVACUATE_AFTER_MS_DEFAULT, MOVES_MAX_DEFAULT, Membership
from nameserver.placement import LeaderTransfer, LoadBalancedPlacement, PlacementPolicy
from nameserver.service_base import ServiceBase
from protocol import nameserver_api as api


@dataclass(eq=False)
class ClusterCalls(ServiceBase):
    """The cluster calls of ``NameserverService`` and the leader's soft state they feed.

    ``policy``: where replicas and leaders go (default: load-balanced).
    """

    policy: PlacementPolicy = field(default_factory=LoadBalancedPlacement)
    # Leader transfers planned by this node while leader, by the node asked to transfer.
    pending_transfers: dict[int, list[LeaderTransfer]] = field(default_factory=dict, init=False)
    last_balance_ms: int = field(default=0, init=False)
    # Soft: group -> (reporting node, the membership that node applied as its leader).
    memberships: dict[int, tuple[int, Membership]] = field(default_factory=dict, init=False)
    evacuate_after_ms: int = field(default=EVACUATE_AFTER_MS_DEFAULT, init=False)
    moves_max: int = field(default=MOVES_MAX_DEFAULT, init=False)
    # Soft: latency outliers (degraded nodes) and per-group load history.
    monitor: LoadMonitor = field(default_factory=LoadMonitor, init=False)
    # PLACEMENT_FORECAST: plan with the forecast of the monitor's load history instead
    # of ``policy``; PLACEMENT_COUNT: with ``policy`` (``rip5 nameserver --placement``).
    placement: str = field(default=PLACEMENT_FORECAST, init=False)

    def effective_policy(self) -> PlacementPolicy:
        """The placement policy, kept off the nodes degraded or draining now (no new
        replica, no leadership)."""
        state = self.machine.state
        draining = {n.node_id for n in state.storage_nodes() if n.draining}
        avoided = self.monitor.degraded | draining
        policy = self.policy
        if self.placement == PLACEMENT_FORECAST:
            policy = live_forecast_placement(
                self.monitor.book,
                {
                    g.group_id: g.replicas
                    for k in state.clusters()
                    for g in state.raft_groups(k.name)
                },
                self.clock() // self.monitor.step_ms,
                moves_max=self.moves_max,
                degraded=self.monitor.degraded,
            )
        return AvoidingNodes(policy, avoided) if avoided else policy

    def leader_memberships(self) -> dict[int, Membership]:
        """Group -> membership, as reported by the node the state records as its leader."""
        state = self.machine.state
        trusted: dict[int, Membership] = {}
        for group_id, (node_id, membership) in self.memberships.items():
            try:
                leader = state.raft_group(group_id).leader
            except NameserverError:
                continue
            if leader == node_id:
                trusted[group_id] = membership
        return trusted

    async def cluster_status(
        self, request: api.NameRequest, context: CallContext
    ) -> api.ClusterStatusResponse:
        """Everything known about a cluster (linearizable)."""
        state = await self.linearizable()
        response = cluster_status_response(state.cluster_status(request.name))
        degraded = self.monitor.degraded
        nodes = [
            dataclasses.replace(
                n,
                degraded=n.node_id in degraded,
                fsync_p99_us=self.monitor.fsync_p99_us(n.node_id),
                append_p99_us=self.monitor.append_p99_us(n.node_id),
            )
            for n in response.storage_nodes
        ]
        throttle = self.monitor.throttle
        return dataclasses.replace(
            response,
            storage_nodes=nodes,
            moves_budget=throttle.budget,
            append_baseline_us=throttle.baseline_us or 0,
        )

    async def storage_heartbeat(
        self, request: api.StorageHeartbeatRequest, context: CallContext
    ) -> api.StorageHeartbeatResponse:
        """Register or refresh a storage node; answer the groups it should host."""
        load = r.StorageLoad(
            request.groups,
            request.leaders,
            request.bytes,
            request.msgs_per_s,
            request.disk_free_bytes,
        )
        applied = await self.propose(
            c.StorageHeartbeat(
                request.node_id, request.cluster, request.address, self.clock(), load
            )
        )
        try:
            self.monitor.heartbeat(
                request.node_id,
                self.clock(),
                request.fsync_p99_us,
                {g.group_id: g.msgs_per_s for g in request.group_loads},
                request.data_lost,
                request.append_p99_us,
            )
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        for info in request.memberships:
            self.memberships[info.group_id] = (
                request.node_id,
                Membership(frozenset(info.voters), frozenset(info.learners)),
            )
        groups = self.machine.state.groups_of_node(request.node_id)
        transfers = [
            api.LeaderTransferInfo(t.group_id, t.to_node)
            for t in self.pending_transfers.pop(request.node_id, [])
        ]
        return api.StorageHeartbeatResponse(
            [raft_group_info(g) for g in groups], applied.revision, transfers
        )

    async def broker_heartbeat(
        self, request: api.BrokerHeartbeatRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Register or refresh a broker."""
        applied = await self.propose(
            c.BrokerHeartbeat(
                request.broker_id,
                request.cluster,
                request.address,
                self.clock(),
                tuple(request.producer_groups),
                request.remoting_address,
            )
        )
        return api.RevisionResponse(applied.revision)

    async def drain_storage_node(
        self, request: api.StorageNodeRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Start (``draining``) or stop moving every replica and leadership off a
        storage node; the leader's sweeps carry the moves out (:mod:`nameserver.moves`)."""
        applied = await self.propose(c.DrainStorageNode(request.node_id, request.draining))
        return api.RevisionResponse(applied.revision)

    async def remove_storage_node(
        self, request: api.StorageNodeRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Forget a storage node that is down and hosts no replica (drain it, stop
        it, then remove it: a live one would register again with its next heartbeat)."""
        state = await self.linearizable()
        if state.storage_node(request.node_id).alive:
            raise BadRequest(
                f"storage node {request.node_id} is alive: stop it first "
                "(it would register again with its next heartbeat)"
            )
        applied = await self.propose(c.RemoveStorageNode(request.node_id))
        self.monitor.forget(request.node_id)
        return api.RevisionResponse(applied.revision)

    async def report_leaders(
        self, request: api.ReportLeadersRequest, context: CallContext
    ) -> api.ReportLeadersResponse:
        """Take a storage node's leader reports (stale ones are ignored)."""
        reports = tuple(c.LeaderReport(x.group_id, x.leader, x.term) for x in request.reports)
        applied = await self.propose(c.ReportLeaders(request.node_id, reports))
        taken = applied.value
        assert isinstance(taken, tuple)
        return api.ReportLeadersResponse([bool(t) for t in taken], applied.revision)
