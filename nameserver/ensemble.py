"""The nameserver's control service: its own membership, and the RIP-44 controller.

Membership changes are raft membership changes of the nameserver's group,
one node at a time, on the leader:

- add: the new node's address is committed first (a control command, so every
  replica, and one restarted later with its original ``--peers``, can reach
  it); then it joins as a learner (it must be running, started with
  ``--join``: it waits empty for the leader's snapshot); once its log matches
  the leader's commit index it is promoted to voter. Adding a voter already
  there with the same address answers the members (a retried add is safe).
- remove: the leader never removes itself: it hands leadership to the most
  caught-up other voter and answers NOT_LEADER naming it, so the caller's
  failover (:mod:`angelia_rpc.failover`) retries there. The last voter
  cannot be removed.

Controller: the groups' records (:mod:`nameserver.controller`) are read after
a ReadIndex round like any read; a SyncStateSet change is a control command.
A storage node's read names it: the leader keeps when it last heard each
node (in memory: a new leader counts every node alive for ``dead_after_ms``
after a grace of the longest reconnect wait, since the nodes that lost the
old leader, or this one restarting, may still be backing off).
:func:`run_controller_duties` places the records of a controller-mode
cluster's groups once they are placed, and elects a master
(:func:`nameserver.controller.elect_master`) for a group whose master has
been silent for ``dead_after_ms``.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import cast

from angelia_rpc import CallContext
from nameserver import control_commands as cc
from nameserver import controller
from nameserver.control_state import replica_set_info
from nameserver.controller import ReplicaSet
from nameserver.errors import BadRequest, NameserverError, NameserverNotLeader, NotFound
from nameserver.service import NameserverImpl
from nameserver.service_base import GROUP_ID
from protocol import control_api as ctl
from protocol import errors
from raft.core.node import RawNode
from raft.errors import RaftError, RaftNotLeader
from raft.types import ConfChange, ConfChangeType

log = logging.getLogger("nameserver.ensemble")

CATCH_UP_TIMEOUT_MS = 20_000
"""How long an added learner may take to reach the leader's commit index."""
CATCH_UP_POLL_MS = 50


class MemberNotReady(NameserverError):
    """An added nameserver did not catch up in time (not running, or not with --join)."""

    code = errors.UNAVAILABLE


class ControlImpl:
    """The server side of ``ControlService`` on one nameserver."""

    def __init__(self, impl: NameserverImpl) -> None:
        """Serves beside ``impl`` (its driver, state machine and addresses)."""
        self.impl = impl
        self._changing = asyncio.Lock()  # one membership change at a time
        # Controller liveness, on the leader: storage node -> when its last read came
        # (this process's monotonic clock, ms).
        self.heard_ms: dict[int, int] = {}

    # -- plumbing --------------------------------------------------------------------

    def _raft(self) -> RawNode:
        return cast(RawNode, self.impl.driver.host.node(GROUP_ID))

    def _require_leader(self) -> None:
        if not self._raft().is_leader():
            raise self.impl._not_leader()

    async def propose(self, command: cc.ControlCommand) -> object:
        """Commit a control command; what applying it answered here (errors raised)."""
        self._require_leader()
        try:
            result = await self.impl.driver.propose(GROUP_ID, cc.encode(command))
        except RaftNotLeader:
            raise self.impl._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(f"the change was not committed ({exc}); retry", "") from None
        if isinstance(result, NameserverError):
            raise result
        return result

    async def _conf_change(self, change_type: ConfChangeType, node_id: int) -> None:
        self._require_leader()
        future = self.impl.driver.propose_conf_change_nowait(
            GROUP_ID, ConfChange(change_type, node_id)
        )
        try:
            await future
        except RaftNotLeader:
            raise self.impl._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(
                f"membership change {change_type.name} {node_id} failed ({exc}); retry", ""
            ) from None
        log.info("membership change applied", extra={"change": change_type.name, "node": node_id})

    def _members(self) -> ctl.MembersResponse:
        conf = self._raft().conf_state()
        leader = self.impl.driver.leader_of(GROUP_ID)
        addresses = self.impl.addresses
        members = [
            ctl.NameserverMemberInfo(
                n,
                addresses.get(n, ""),
                ctl.ROLE_VOTER if n in conf.voters else ctl.ROLE_LEARNER,
                n == leader,
            )
            for n in sorted(conf.voters | conf.learners)
        ]
        return ctl.MembersResponse(members)

    # -- membership --------------------------------------------------------------------

    async def members(
        self, request: ctl.MembersRequest, context: CallContext
    ) -> ctl.MembersResponse:
        """The group's members (linearizable: the leader answers after a ReadIndex)."""
        await self.impl.linearizable()
        return self._members()

    async def add_member(
        self, request: ctl.AddMemberRequest, context: CallContext
    ) -> ctl.MembersResponse:
        """Add a running nameserver (started with ``--join``) as a voter."""
        node_id, address = request.node_id, request.address.strip()
        host, sep, port = address.rpartition(":")
        if node_id <= 0 or not sep or not host or not port.isdigit():
            raise BadRequest(
                f"a nameserver to add needs a positive node id and a host:port "
                f"(got {node_id}, {address!r})"
            )
        async with self._changing:
            self._require_leader()
            conf = self._raft().conf_state()
            known = self.impl.addresses.get(node_id)
            if node_id in conf.voters:
                if known == address:
                    return self._members()
                raise BadRequest(f"nameserver {node_id} is a member already, at {known}")
            await self.propose(cc.SetNameserverAddress(node_id, address))
            if node_id not in conf.learners:
                await self._conf_change(ConfChangeType.ADD_LEARNER, node_id)
            await self._wait_caught_up(node_id, address)
            await self._conf_change(ConfChangeType.ADD_VOTER, node_id)
            return self._members()

    async def _wait_caught_up(self, node_id: int, address: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_TIMEOUT_MS / 1000
        while True:
            self._require_leader()
            status = self._raft().status()
            progress = status.progress.get(node_id)
            if progress is not None and progress.match >= status.commit:
                return
            if loop.time() >= deadline:
                raise MemberNotReady(
                    f"nameserver {node_id} at {address} did not catch up within "
                    f"{CATCH_UP_TIMEOUT_MS} ms (it stays a learner): is it running, "
                    "started with --join?"
                )
            await asyncio.sleep(CATCH_UP_POLL_MS / 1000)

    async def remove_member(
        self, request: ctl.RemoveMemberRequest, context: CallContext
    ) -> ctl.MembersResponse:
        """Remove a nameserver from the group (the leader first hands leadership away)."""
        node_id = request.node_id
        async with self._changing:
            self._require_leader()
            conf = self._raft().conf_state()
            if node_id not in conf.voters | conf.learners:
                raise NotFound(f"nameserver {node_id} is not a member")
            if conf.voters == {node_id}:
                raise BadRequest(f"nameserver {node_id} is the last voter: it cannot be removed")
            me = self.impl.driver.node_id
            if node_id == me:
                status = self._raft().status()
                others = sorted(n for n in conf.voters if n != me)
                to = max(others, key=lambda n: status.progress[n].match)
                self.impl.driver.transfer_leader(GROUP_ID, to)
                hint = self.impl.addresses.get(to, "")
                raise NameserverNotLeader(
                    f"nameserver {me} hands leadership to {to} before leaving; retry there", hint
                )
            await self._conf_change(ConfChangeType.REMOVE_NODE, node_id)
            await self.propose(cc.ForgetNameserver(node_id))
            return self._members()

    # -- controller --------------------------------------------------------------------

    async def replica_sets(
        self, request: ctl.ReplicaSetsRequest, context: CallContext
    ) -> ctl.ReplicaSetsResponse:
        """The controller's groups (linearizable); a storage node's read is its heartbeat."""
        await self.impl.linearizable()
        if request.node_id:
            self.heard_ms[request.node_id] = monotonic_ms()
        control = self.impl.machine.control
        wanted = request.group_ids or sorted(control.replica_sets)
        return ctl.ReplicaSetsResponse([replica_set_info(control.replica_set(g)) for g in wanted])

    async def alter_sync_state_set(
        self, request: ctl.AlterSyncStateSetRequest, context: CallContext
    ) -> ctl.ReplicaSetResponse:
        """A master changes its SyncStateSet (refused NOT_LEADER if it is fenced)."""
        group = await self.propose(
            cc.AlterSyncStateSet(
                request.group_id,
                request.master,
                request.epoch,
                request.sync_state_set_epoch,
                tuple(request.sync_state_set),
            )
        )
        assert isinstance(group, ReplicaSet)
        return ctl.ReplicaSetResponse(replica_set_info(group))


DEAD_AFTER_MS_DEFAULT = 1000
CONTROLLER_INTERVAL_MS = 100


def monotonic_ms() -> int:
    """The leader's clock for liveness (never stamped into a command)."""
    return int(time.monotonic() * 1000)


async def run_controller_duties(
    control: ControlImpl,
    cluster: str,
    *,
    grace_ms: int,
    dead_after_ms: int = DEAD_AFTER_MS_DEFAULT,
    interval_ms: int = CONTROLLER_INTERVAL_MS,
) -> None:
    """While this node leads: record the placed groups of ``cluster`` for the
    controller, and elect a master for each group whose master went silent.

    For ``grace_ms`` after this node began to lead, every node counts as just
    heard: a node may be that long in its reconnect backoff (it lost the old
    leader, or this node while it restarted) before its first read arrives
    (``RpcConfig.reconnect_wait_max_ms``)."""
    leading_since_ms: int | None = None
    while True:
        await asyncio.sleep(interval_ms / 1000)
        if not control._raft().is_leader():
            leading_since_ms = None
            continue
        now_ms = monotonic_ms()
        if leading_since_ms is None:
            leading_since_ms = now_ms
        with contextlib.suppress(NameserverError):
            await _controller_round(
                control, cluster, dead_after_ms, leading_since_ms + grace_ms, now_ms
            )


async def _controller_round(
    control: ControlImpl, cluster: str, dead_after_ms: int, heard_at_least_ms: int, now_ms: int
) -> None:
    impl = control.impl
    state = impl.machine.state
    records = impl.machine.control.replica_sets
    if cluster in {c.name for c in state.clusters()}:
        for group in state.raft_groups(cluster):
            if group.replicas and group.group_id not in records:
                await control.propose(cc.PlaceReplicaSet(group.group_id, tuple(group.replicas)))
    for record in list(records.values()):
        alive = controller.alive(
            record.replicas, control.heard_ms, heard_at_least_ms, now_ms, dead_after_ms
        )
        if not controller.needs_election(record, alive):
            continue
        elected = await control.propose(cc.ElectMaster(record.group_id, tuple(sorted(alive))))
        assert isinstance(elected, ReplicaSet)
        log.info(
            "master elected",
            extra={
                "group": elected.group_id,
                "master": elected.master,
                "epoch": elected.epoch,
                "was": record.master,
                "alive": sorted(alive),
            },
        )
