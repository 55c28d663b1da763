"""The nameserver's Angelia service: metadata writes go through the raft group,
reads are linearizable, watchers get every change in revision order.

Contracts:

- Writes (topics, consumer groups, clusters, heartbeats, leader reports,
  leases) become commands stamped by THIS node's clock (``now_ms``) and are
  proposed to the nameserver's one raft group; the call answers once the
  command is committed and applied here, with the state machine's answer or
  its error (bad input changes nothing). Only the leader proposes: a follower
  answers NOT_LEADER with the leader's address as the hint.
- Reads (route, cluster status, topics, groups) are served by the leader
  after a ReadIndex round (``Driver.read_index``): they see every write
  acknowledged before they were asked.
- A watch streams batches of changes after the asked revision, oldest first,
  with nothing skipped; a watcher too far behind gets one batch with
  ``resync_required`` and the stream goes on from the current revision.
- Leader duties (:func:`run_leader_duties`): create the configured cluster if
  it does not exist, and propose ``Expire`` every ``expire_interval_ms`` so
  silent storage nodes and brokers are marked down and leases expire (not
  before this node has led for a storage-node timeout, and no broker before it
  has led for a broker timeout: a node's silence counts from when this leader
  could hear it, so a leader elected after an outage does not mark every node
  down); then
  place the cluster's unplaced groups once enough storage nodes are alive
  (``SetReplicas``), and at most every ``LEADER_BALANCE_INTERVAL_MS`` plan
  leader transfers (:mod:`nameserver.balancer`). Transfers are requests held
  in this leader's memory (not in the log) and handed to the leading storage
  node in its next heartbeat answer, once; a new leader plans afresh.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, TypeVar

from angelia_rpc import CallContext
from nameserver import commands as c
from nameserver import records as r
from nameserver.api_convert import (
    cluster_info,
    cluster_status_response,
    consumer_group_info,
    lease_info,
    raft_group_info,
    retry_policy,
    route_response,
    topic_info,
    watch_batch_info,
)
from nameserver.balancer import plan_leader_balance, plan_placement
from nameserver.control_commands import ForgetNameserver, SetNameserverAddress, is_control
from nameserver.control_commands import decode as decode_control
from nameserver.control_state import ControlState, unwrap_snapshot, wrap_snapshot
from nameserver.errors import BadRequest, NameserverError, NameserverNotLeader
from nameserver.forecast_placement import AvoidingNodes
from nameserver.load_monitor import LoadMonitor
from nameserver.moves import (
    EVACUATE_AFTER_MS_DEFAULT,
    MOVES_MAX_DEFAULT,
    Membership,
    plan_moves,
)
from nameserver.placement import LeaderTransfer, LoadBalancedPlacement, PlacementPolicy
from nameserver.state import Applied, MetadataState
from protocol import nameserver_api as api
from protocol.acl import Action, Forbidden, ResourceType, Unauthenticated, User, UserType
from protocol.acl_signature import DATE_TIME_HEADER, SKEW_MS_DEFAULT, Credential, verify
from protocol.acl_wire import acl_of, tables_response, user_of, user_type_of
from protocol.vocabulary import MessageType, Permission
from raft.errors import RaftError, RaftNotLeader
from raft.host.driver import Driver
from raft.types import Entry, Snapshot

_InCluster = TypeVar("_InCluster", r.Topic, r.ConsumerGroup)

GROUP_ID = 1
"""The nameserver's raft group id (the raft WAL reserves 0)."""

READ_TIMEOUT_MS = 2000
WATCH_IDLE_MS = 3000
"""A watch quiet this long re-confirms (ReadIndex) and sends an empty batch: a
stream whose replica lost touch with its group's leader ends instead of
staying silently open, so a watcher can bound how stale its view is."""
LEADER_BALANCE_INTERVAL_MS = 3000
"""Least time between two leader balancing plans (transfers and reports settle meanwhile)."""
log = logging.getLogger("nameserver.service")


class MetadataMachine:
    """The raft state machine of the nameserver group: a :class:`MetadataState`.

    ``apply`` returns the :class:`Applied` answer, or the command's
    :class:`NameserverError` (as a value: every replica refuses the same
    command, and the driver must go on). ``changed`` is woken after every
    command that bumped the revision.

    Control commands (:mod:`nameserver.control_commands`: nameserver addresses,
    the RIP-44 controller) share the log and go to ``control``;
    ``on_addresses`` is called with the ensemble's recorded addresses after
    each one and after a snapshot is restored.
    """

    def __init__(self) -> None:
        """An empty state."""
        self.state = MetadataState()
        self.control = ControlState()
        self.on_addresses: Callable[[dict[int, str]], None] | None = None
        self._changed = asyncio.Event()

    def apply(self, entry: Entry) -> object:
        """Apply one committed command."""
        if is_control(entry.data):
            return self._apply_control(entry.data)
        try:
            applied = self.state.apply(c.decode(entry.data))
        except NameserverError as exc:
            return exc
        if applied.changes:
            self._wake()
        return applied

    def _apply_control(self, data: bytes) -> object:
        try:
            command = decode_control(data)
            answer = self.control.apply(command)
        except NameserverError as exc:
            return exc
        if self.on_addresses is not None and isinstance(
            command, SetNameserverAddress | ForgetNameserver
        ):
            self.on_addresses(dict(self.control.addresses))
        return answer

    def restore(self, snapshot: Snapshot) -> None:
        """Take a snapshot's state."""
        self.control, metadata = unwrap_snapshot(snapshot.data)
        self.state = MetadataState.restore(metadata)
        if self.on_addresses is not None:
            self.on_addresses(dict(self.control.addresses))
        self._wake()

    def snapshot_data(self) -> bytes:
        """The state's snapshot bytes."""
        return wrap_snapshot(self.control, self.state.snapshot())

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        """An event set at the next change (take it BEFORE reading the state)."""
        return self._changed


def wall_ms() -> int:
    """The leader's clock for commands (wall time: it must mean the same on every node)."""
    return int(time.time() * 1000)


class NameserverImpl:
    """The server side of :class:`NameserverService` on one node."""

    def __init__(
        self,
        driver: Driver,
        machine: MetadataMachine,
        addresses: Mapping[int, str],
        clock: Callable[[], int] = wall_ms,
        policy: PlacementPolicy | None = None,
    ) -> None:
        """``addresses``: node id -> Angelia address of every nameserver (for hints)."""
        self.driver = driver
        self.machine = machine
        self.addresses = dict(addresses)
        self.clock = clock
        self.policy: PlacementPolicy = policy or LoadBalancedPlacement()
        # Leader transfers planned by this node while leader, by the node asked to transfer.
        self.pending_transfers: dict[int, list[LeaderTransfer]] = {}
        self.last_balance_ms = 0
        # Soft: group -> (reporting node, the membership that node applied as its leader).
        self.memberships: dict[int, tuple[int, Membership]] = {}
        self.evacuate_after_ms = EVACUATE_AFTER_MS_DEFAULT
        self.moves_max = MOVES_MAX_DEFAULT
        # Soft: latency outliers (degraded nodes) and per-group load history.
        self.monitor = LoadMonitor()

    def effective_policy(self) -> PlacementPolicy:
        """The placement policy, kept off the nodes degraded or draining now (no new
        replica, no leadership)."""
        draining = {n.node_id for n in self.machine.state.storage_nodes() if n.draining}
        avoided = self.monitor.degraded | draining
        return AvoidingNodes(self.policy, avoided) if avoided else self.policy

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

    # -- plumbing --------------------------------------------------------------------

    def _not_leader(self) -> NameserverNotLeader:
        leader = self.driver.leader_of(GROUP_ID)
        hint = self.addresses.get(leader, "") if leader != self.driver.node_id else ""
        where = f"; the leader is {hint}" if hint else "; no leader is known yet"
        return NameserverNotLeader(
            f"nameserver {self.driver.node_id} is not the leader{where}", hint
        )

    async def propose(self, command: c.Command) -> Applied:
        """Commit ``command`` through raft and return what applying it did here."""
        if not self.driver.host.node(GROUP_ID).is_leader():
            raise self._not_leader()
        try:
            result = await self.driver.propose(GROUP_ID, c.encode(command))
        except RaftNotLeader:
            raise self._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(f"the write was not committed ({exc}); retry", "") from None
        if isinstance(result, NameserverError):
            raise result
        assert isinstance(result, Applied)
        return result

    async def linearizable(self) -> MetadataState:
        """The state, once it reflects every write acknowledged before this call."""
        try:
            await self.driver.read_index(GROUP_ID, READ_TIMEOUT_MS)
        except RaftNotLeader:
            raise self._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(f"leadership not confirmed ({exc}); retry", "") from None
        return self.machine.state

    # -- topics ----------------------------------------------------------------------

    async def create_cluster(
        self, request: api.CreateClusterRequest, context: CallContext
    ) -> api.ClusterResponse:
        """Create a cluster."""
        applied = await self.propose(
            c.CreateCluster(request.name, request.group_count, request.replication_factor)
        )
        assert isinstance(applied.value, r.Cluster)
        return api.ClusterResponse(cluster_info(applied.value), applied.revision)

    async def create_topic(
        self, request: api.CreateTopicRequest, context: CallContext
    ) -> api.TopicResponse:
        """Create a topic."""
        self._authenticate_admin(request.signed, Action.CREATE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(
            c.CreateTopic(
                request.name,
                request.cluster,
                request.queue_count,
                _enum(MessageType, request.message_type, "message_type"),
                request.retention_ms or r.RETENTION_MS_DEFAULT,
                _enum(Permission, request.permission, "permission"),
                request.retention_bytes,
                request.local_retention_ms,
                request.local_retention_bytes,
            )
        )
        assert isinstance(applied.value, r.Topic)
        return api.TopicResponse(topic_info(applied.value), applied.revision)

    async def update_topic(
        self, request: api.UpdateTopicRequest, context: CallContext
    ) -> api.TopicResponse:
        """Change a topic."""
        self._authenticate_admin(request.signed, Action.UPDATE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(
            c.UpdateTopic(
                request.name,
                request.queue_count,
                None
                if request.message_type is None
                else _enum(MessageType, request.message_type, "message_type"),
                request.retention_ms,
                None
                if request.permission is None
                else _enum(Permission, request.permission, "permission"),
                request.retention_bytes,
                request.local_retention_ms,
                request.local_retention_bytes,
            )
        )
        assert isinstance(applied.value, r.Topic)
        return api.TopicResponse(topic_info(applied.value), applied.revision)

    async def delete_topic(
        self, request: api.NameRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Delete a topic."""
        self._authenticate_admin(request.signed, Action.DELETE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(c.DeleteTopic(request.name))
        return api.RevisionResponse(applied.revision)

    async def get_topic(self, request: api.NameRequest, context: CallContext) -> api.TopicResponse:
        """One topic (linearizable)."""
        state = await self.linearizable()
        return api.TopicResponse(topic_info(state.topic(request.name)), state.revision)

    async def list_topics(
        self, request: api.ListRequest, context: CallContext
    ) -> api.TopicListResponse:
        """Topics, of one cluster or all (linearizable)."""
        state = await self.linearizable()
        topics = _of_cluster(state, request.cluster, state.topics())
        return api.TopicListResponse(list(map(topic_info, topics)), state.revision)

    # -- consumer groups -------------------------------------------------------------

    async def create_consumer_group(
        self, request: api.CreateConsumerGroupRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """Create a consumer group."""
        self._authenticate_admin(request.signed, Action.CREATE, (ResourceType.GROUP, request.name))
        retry = r.RETRY_DEFAULT if request.retry is None else retry_policy(request.retry)
        applied = await self.propose(
            c.CreateConsumerGroup(
                request.name, request.cluster, request.fifo, request.max_delivery_attempts, retry
            )
        )
        assert isinstance(applied.value, r.ConsumerGroup)
        return api.ConsumerGroupResponse(consumer_group_info(applied.value), applied.revision)

    async def update_consumer_group(
        self, request: api.UpdateConsumerGroupRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """Change a consumer group."""
        self._authenticate_admin(request.signed, Action.UPDATE, (ResourceType.GROUP, request.name))
        retry = None if request.retry is None else retry_policy(request.retry)
        applied = await self.propose(
            c.UpdateConsumerGroup(request.name, request.fifo, request.max_delivery_attempts, retry)
        )
        assert isinstance(applied.value, r.ConsumerGroup)
        return api.ConsumerGroupResponse(consumer_group_info(applied.value), applied.revision)

    async def delete_consumer_group(
        self, request: api.NameRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Delete a consumer group."""
        self._authenticate_admin(request.signed, Action.DELETE, (ResourceType.GROUP, request.name))
        applied = await self.propose(c.DeleteConsumerGroup(request.name))
        return api.RevisionResponse(applied.revision)

    async def get_consumer_group(
        self, request: api.NameRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """One consumer group (linearizable)."""
        state = await self.linearizable()
        group = state.consumer_group(request.name)
        return api.ConsumerGroupResponse(consumer_group_info(group), state.revision)

    async def list_consumer_groups(
        self, request: api.ListRequest, context: CallContext
    ) -> api.ConsumerGroupListResponse:
        """Consumer groups, of one cluster or all (linearizable)."""
        state = await self.linearizable()
        groups = _of_cluster(state, request.cluster, state.consumer_groups())
        return api.ConsumerGroupListResponse(list(map(consumer_group_info, groups)), state.revision)

    # -- access control (ACL 2.0) ---------------------------------------------------------
    # Writes are authenticated once any user exists (``protocol.acl_signature``, within
    # the signature's skew of our clock): users and policies by a super user, topics
    # and consumer groups by a user allowed Create, Update or Delete on them (brokers
    # that auto-create sign as their --acl-inner-user-file's user).

    def _authenticate_admin(
        self,
        signed: api.SignedBy,
        action: Action | None = None,
        resource: tuple[ResourceType, str] | None = None,
    ) -> None:
        """Once any user exists, refuse a write not signed by a super user, or (given
        ``action`` and ``resource``) by a user whose policy allows it."""
        user = self._signer(signed)
        if user is None:
            return  # no user yet: the cluster is open (ACL off); the first may be created
        tables = self.machine.state.acl_tables()
        if resource is not None and action is not None:
            tables.check(user, (resource,), action)
        elif user.user_type is not UserType.SUPER:
            raise Forbidden(
                f"user {user.name!r} may not change users or policies: not a super user"
            )

    def _signer(self, signed: api.SignedBy) -> User | None:
        """The user whose valid signature ``signed`` is (None while no user exists);
        Unauthenticated if it is not one."""
        tables = self.machine.state.acl_tables()
        if not tables.users:
            return None
        if not signed.access_key:
            raise Unauthenticated("ACL is on: sign the request (rip5 admin --ak/--sk)")
        user = tables.user(signed.access_key)
        if user is None:
            raise Unauthenticated(f"user {signed.access_key!r} does not exist")
        credential = Credential(signed.access_key, (DATE_TIME_HEADER,), signed.signature)
        verify(credential, user.secret, signed.date_time, self.clock(), SKEW_MS_DEFAULT)
        return user

    async def authenticate(
        self, request: api.AuthenticateRequest, context: CallContext
    ) -> api.AuthenticateResponse:
        """Who signed ``request`` (a login); Unauthenticated if no user did."""
        user = self._signer(request.signed)
        if user is None:
            return api.AuthenticateResponse("", 0)
        return api.AuthenticateResponse(user.name, int(user.user_type))

    async def create_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Add a user."""
        self._authenticate_admin(request.signed)
        applied = await self.propose(c.CreateUser(user_of(request.user)))
        return api.RevisionResponse(applied.revision)

    async def update_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Change a user's secret and/or type ("" and 0 keep them)."""
        self._authenticate_admin(request.signed)
        info = request.user
        user_type = user_type_of(info.user_type) if info.user_type else None
        applied = await self.propose(c.UpdateUser(info.name, info.secret or None, user_type))
        return api.RevisionResponse(applied.revision)

    async def delete_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Remove a user and its policy."""
        self._authenticate_admin(request.signed)
        applied = await self.propose(c.DeleteUser(request.user.name))
        return api.RevisionResponse(applied.revision)

    async def create_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Give a user its policy (refused if it has one)."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        applied = await self.propose(c.PutAcl(acl.subject, acl.entries, create=True))
        return api.RevisionResponse(applied.revision)

    async def update_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Add or replace entries of a user's policy, by resource."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        applied = await self.propose(c.PutAcl(acl.subject, acl.entries))
        return api.RevisionResponse(applied.revision)

    async def delete_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Remove the entries for the given resources (none: the whole policy)."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        resources = tuple(entry.resource for entry in acl.entries)
        applied = await self.propose(c.DeleteAcl(acl.subject, resources))
        return api.RevisionResponse(applied.revision)

    async def acl_tables(
        self, request: api.AclTablesRequest, context: CallContext
    ) -> api.AclTablesResponse:
        """Every user and policy (linearizable); brokers cache them."""
        state = await self.linearizable()
        return tables_response(state.acl_tables(), state.revision)

    # -- routes and status -------------------------------------------------------------

    async def route(self, request: api.NameRequest, context: CallContext) -> api.RouteResponse:
        """The route of a topic (linearizable)."""
        state = await self.linearizable()
        return route_response(state.route(request.name))

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
            )
            for n in response.storage_nodes
        ]
        return dataclasses.replace(response, storage_nodes=nodes)

    # -- membership --------------------------------------------------------------------

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

    # -- leases ----------------------------------------------------------------------

    async def acquire_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.LeaseResponse:
        """Take a lease (free, expired or ours)."""
        applied = await self.propose(
            c.AcquireLease(request.name, request.owner, self.clock(), request.ttl_ms)
        )
        assert isinstance(applied.value, r.Lease)
        return api.LeaseResponse(lease_info(applied.value), applied.revision)

    async def renew_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.LeaseResponse:
        """Extend a lease we hold."""
        applied = await self.propose(
            c.RenewLease(request.name, request.owner, self.clock(), request.ttl_ms)
        )
        assert isinstance(applied.value, r.Lease)
        return api.LeaseResponse(lease_info(applied.value), applied.revision)

    async def release_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Give a lease up."""
        applied = await self.propose(c.ReleaseLease(request.name, request.owner))
        return api.RevisionResponse(applied.revision)

    # -- watch -----------------------------------------------------------------------

    async def watch(
        self, request: api.WatchRequest, context: CallContext
    ) -> AsyncIterator[api.WatchBatchInfo]:
        """Every change after ``request.revision``, in batches, oldest first.

        Starts on the leader (after a ReadIndex, so the stream begins from a
        state that has every acknowledged write); it then follows this node's
        applied log, which only ever holds committed commands in log order.
        The first batch comes at once (possibly with no changes): it confirms
        the subscription, so a client can bound how long it waits for it.
        After ``WATCH_IDLE_MS`` without a change the stream is confirmed again
        the same way (a ReadIndex round, then an empty batch): on a replica
        that cannot reach its group's leader the stream ends with NOT_LEADER.
        """
        kinds = frozenset(r.ChangeKind(k) for k in request.kinds) if request.kinds else None
        await self.linearizable()
        revision = request.revision
        confirm = True
        while True:
            changed = self.machine.changed()
            batch = self.machine.state.changes_since(revision, kinds)
            if confirm or batch.resync_required or batch.changes:
                confirm = False
                yield watch_batch_info(batch)
            revision = batch.revision
            try:
                await asyncio.wait_for(changed.wait(), WATCH_IDLE_MS / 1000)
            except TimeoutError:
                await self.linearizable()
                confirm = True


def _of_cluster(
    state: MetadataState, cluster: str, items: Iterable[_InCluster]
) -> list[_InCluster]:
    """``items`` of ``cluster`` (all of them when it is empty); an unknown cluster is an error."""
    if not cluster:
        return list(items)
    state.cluster(cluster)  # raises when the cluster is unknown
    return [item for item in items if item.cluster == cluster]


def _enum(kind: type[Any], number: int, what: str) -> Any:
    try:
        return kind(number)
    except ValueError:
        names = ", ".join(f"{m.value} ({m.name})" for m in kind)
        raise BadRequest(f"{what} {number} is not one of {names}") from None


_EXPIRES_NOBODY_MS = 1 << 62
"""A failure-detection timeout no node's silence reaches."""


async def run_leader_duties(
    impl: NameserverImpl,
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
) -> None:
    """While this node leads: create ``cluster`` if missing (and ``super_user``, the
    ACL's first user, while no user exists), sweep with Expire, place groups, move
    replicas (:mod:`nameserver.moves`), balance leaders."""
    impl.evacuate_after_ms = evacuate_after_ms
    impl.moves_max = moves_max
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


async def _maybe_create_super_user(impl: NameserverImpl, user: User) -> None:
    """Create ``user`` (a super user) if the cluster has no user yet: once, when the
    cluster is first started with ACL on."""
    with contextlib.suppress(NameserverError):
        state = await impl.linearizable()
        if not state.acl_tables().users:
            log.info("creating the ACL super user %s", user.name)
            await impl.propose(c.CreateUser(user))


async def _maybe_sweep(
    impl: NameserverImpl,
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


async def _maybe_place(impl: NameserverImpl, cluster: str) -> None:
    """Place unplaced groups; plan leader transfers when the last plan is old enough."""
    state = impl.machine.state
    before = impl.monitor.degraded
    degraded = impl.monitor.tick(impl.clock())
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
        moves_max=impl.moves_max,
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
