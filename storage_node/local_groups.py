"""The raft groups a storage node hosts, and how their membership changes.

:class:`LocalGroups` starts this node's replicas, all at once (static
placement) or as the nameserver assigns them (reconcile: idempotent, peer
addresses from the nameserver's node list); stops and deletes the ones moved
away; on the groups this node leads, carries out replica moves as raft
membership changes (:meth:`LocalGroups.run_memberships`; the protocol is in
docs/storage-node.md, "Replica moves"); and follows the leader transfers the
nameserver asks for. ``storage_node.server`` wires it into the process.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Set
from pathlib import Path
from typing import cast

from angelia_rpc import AngeliaError, Peers
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader
from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as api
from protocol.storage_api import GroupMembershipRequest, GroupMembershipResponse, ReadmitRequest
from raft.core.node import RawNode
from raft.errors import RaftError
from raft.host.angelia_transport import AngeliaTransport
from raft.types import ConfChange, ConfChangeType, ConfState
from storage_node import data_loss
from storage_node.controlled_node import ControlledNode
from storage_node.reconcile import (
    LeaderMembership,
    LeaderView,
    MembershipStep,
    Readmission,
    ReconcilePlan,
    ReplicaMark,
    StepKind,
    membership_settled,
    plan_membership_step,
    plan_reconcile,
    removal_confirmed,
)
from storage_node.registration import CALL_TIMEOUT_MS
from storage_node.replica import GroupReplica
from storage_node.service import FIRST_GROUP_ID, StorageNode
from storage_node.store.base import BodyStore

_log = logging.getLogger(__name__)

MEMBERSHIP_CHECK_MS = 100
"""How often the groups this node leads are checked for a membership step to take."""
TRANSFER_RETRY_MS = 2000
"""Least time between two leadership hand-overs asked for one leaving group."""
REMOVAL_ASK_MS = 2000
"""Least time between two questions to a group's leader about one unassigned replica."""
REMOVAL_ASK_DEADLINE_MS = 3000
"""How long one such question may take, failovers included (then it is asked later)."""
_REMOVAL_ASK_POLICY = FailoverPolicy(0.0, 0.0, call_timeout_ms=1000, passes_max=1)
READMIT_CALL_MS = 5000
"""The timeout of one re-admission request (the leader answers within 3 s)."""
_READMIT_POLICY = FailoverPolicy(0.0, 0.0, call_timeout_ms=READMIT_CALL_MS, passes_max=1)


class LocalGroups:
    """Starts this node's replicas: all at once (static) or as assigned (reconcile)."""

    def __init__(
        self,
        node: StorageNode,
        transport: AngeliaTransport,
        client: NameserverClient | None,
        cluster: str,
        bodies: BodyStore,
        peers: Peers | None = None,
        loss: data_loss.DataLoss | None = None,
        data_dir: Path | None = None,
    ) -> None:
        """``client`` reads peer addresses from the nameserver when an assignment needs them;
        every replica reads its message bodies through ``bodies``; ``peers`` calls the
        other storage nodes (an unassigned replica asks its group's leader whether its
        removal committed; without it such a replica waits for its own membership).
        ``loss``: this node's WAL was set aside (its marker lives in ``data_dir``):
        the groups not re-admitted yet start empty, barred from voting, and ask their
        leaders to re-admit them (storage_node/data_loss.py)."""
        self.node = node
        self.peers = peers
        self.loss = loss
        self.data_dir = data_dir
        # Groups of a data-lost node on their way back (group -> where they stand).
        self.readmissions: dict[int, Readmission] = {}
        # Re-admitted groups whose replicas vote again, not yet recorded in the marker.
        self._lifted: set[int] = set()
        self.readmitted_bytes = 0
        """Bytes the re-admitted groups copied from their leaders (images and entries)."""
        node.driver.host.on_members = self._members_applied
        node.data_lost = loss is not None
        self.bodies = bodies
        self.transport = transport
        self.client = client
        self.cluster = cluster
        self._last_plan: ReconcilePlan | None = None
        # The latest assignment of this node's groups (group -> replicas), from heartbeats.
        self.assigned: dict[int, tuple[int, ...]] = {}
        # Groups whose membership change (or leader transfer) this node has under way.
        self._changing: dict[int, asyncio.Future[object] | None] = {}
        self._transfer_asked_ms: dict[int, int] = {}
        # Questions to a group's leader under way (whether an unassigned replica was
        # removed, or to re-admit a data-lost one), and when each group last asked.
        self._asking: dict[int, asyncio.Task[None]] = {}
        self._asked_ms: dict[int, int] = {}
        # Controller mode: ControlledNode (the controller names leaders; no elections).
        self.node_class: type[RawNode] = RawNode
        self.min_in_sync = 1

    @property
    def group_ids(self) -> range:
        """The cluster's group ids."""
        return range(FIRST_GROUP_ID, FIRST_GROUP_ID + self.node.group_count)

    def learn_addresses(self, addresses: dict[int, str]) -> None:
        """Peer addresses (node id -> host:port) for raft streams and leader hints."""
        me = self.node.driver.node_id
        for node_id, address in addresses.items():
            if node_id == me:
                continue
            known = self.transport.addresses.get(node_id)
            if known is not None and known != address:
                # The raft stream to that node keeps its first address (restart to change it).
                _log.warning(
                    "peer address changed; raft keeps the old one until restart",
                    extra={"peer": node_id, "old": known, "new": address},
                )
                continue
            self.transport.addresses[node_id] = address
            self.node.addresses[node_id] = address

    def start_group(self, group_id: int, members: list[int]) -> None:
        """Host a replica of ``group_id`` (no-op if hosted already). With no
        ``members`` this node joins the group: it starts empty, and any stale
        replica its WAL still holds (moved away while this node was down) is
        deleted first, so it never acts on an old membership."""
        if group_id in self.node.replicas:
            return
        lost = self.loss is not None and group_id not in self.loss.readmitted
        if lost:
            readmission = self.readmissions.setdefault(group_id, Readmission())
            if readmission.removed_at < 0:
                # Not hosted until the leader removed this node: hosted before, it would
                # take the leader's appends from entry 1 as a voter (a configuration it
                # never had), where a re-added learner starts from a snapshot.
                return
            members = []  # it starts empty and waits to be added back as a learner
        if not members:
            store = self.node.driver.store
            log = store.group(group_id)
            _hard_state, conf = log.initial_state()
            if log.last_index() > 0 or conf.voters or conf.learners:
                store.drop_group(group_id)
                _log.info("deleted a stale replica before joining", extra={"group": group_id})
        replica = GroupReplica(group_id, self.bodies)
        if not members:
            replica.join()
        self.node.driver.add_group(group_id, members, replica, self.node_class, data_lost=lost)
        raft = self.node.driver.host.node(group_id)
        if isinstance(raft, ControlledNode):
            raft.min_in_sync = self.min_in_sync
        self.node.adopt(group_id, replica)

    def start_all(self, members: list[int]) -> None:
        """Static placement: every group, with ``members``."""
        for group_id in self.group_ids:
            self.start_group(group_id, members)

    def hosted(self) -> dict[int, frozenset[int]]:
        """Group -> voters of each hosted replica."""
        host = self.node.driver.host
        return {
            g: frozenset(cast(RawNode, host.node(g)).conf_state().voters)
            for g in self.node.replicas
        }

    async def reconcile(self, assigned: list[api.RaftGroupInfo]) -> ReconcilePlan:
        """Start the assigned groups this node does not host yet, stop and delete
        those moved away (once this node does not lead them); log what it cannot do.
        Membership changes of the groups it leads follow in :meth:`run_memberships`."""
        mine = [g for g in assigned if g.cluster == self.cluster]
        wanted = {g.group_id: g.replicas for g in mine}
        joining = {g.group_id: g.joining for g in mine if g.joining}
        me = self.node.driver.node_id
        known = set(self.transport.addresses) | {me}
        hosted = self.hosted()
        for group_id, voters in hosted.items():
            if me in voters:  # a joining replica is made a voter once caught up
                self.node.replicas[group_id].caught_up()
        plan = plan_reconcile(me, hosted, wanted, self.group_ids, known, joining)
        if plan.unknown_nodes or any(n not in known for r in wanted.values() for n in r):
            await self._maybe_read_addresses()
        self.assigned = {g: tuple(r) for g, r in wanted.items() if g in self.group_ids}
        for group_id, members in plan.start:
            self.start_group(group_id, list(members))
        # A data-lost node's group waits for its removal before it is hosted.
        started = [(g, m) for g, m in plan.start if g in self.node.replicas]
        if started:
            _log.info(
                "started assigned groups",
                extra={
                    "started": len(started),
                    "joining": [g for g, m in started if not m],
                    "hosted": len(self.node.replicas),
                },
            )
        for group_id in plan.unassigned:
            if group_id not in self.node.replicas:
                continue
            if self._removed_from(group_id):
                await self.stop_group(group_id)
            elif not self._leads(group_id):
                self._ask_in_background(group_id, self._ask_removal)
        for group_id, readmission in list(self.readmissions.items()):
            if group_id not in self.assigned and group_id not in self.node.replicas:
                del self.readmissions[group_id]  # moved away before it was re-admitted
            elif readmission.removed_at < 0:
                self._ask_in_background(group_id, self._ask_readmit)
        self._finish_readmissions()
        if plan != self._last_plan and plan.refused:
            _log.warning(
                "assignment not fully followed",
                extra={"refused": "; ".join(reason for _, reason in plan.refused)},
            )
        self._last_plan = plan
        return plan

    def _leads(self, group_id: int) -> bool:
        return self.node.driver.host.node(group_id).is_leader()

    def _removed_from(self, group_id: int) -> bool:
        """Whether this replica may be deleted: the group's own membership, as this
        replica applied it, no longer names this node. An assignment alone is not
        enough (a nameserver that lost its state or placed the cluster afresh
        would otherwise have every node delete its data)."""
        conf = cast(RawNode, self.node.driver.host.node(group_id)).conf_state()
        me = self.node.driver.node_id
        members = conf.voters | conf.learners | conf.voters_outgoing | conf.learners_next
        return me not in members

    def _ask_in_background(
        self, group_id: int, ask: Callable[[int], Coroutine[object, object, None]]
    ) -> None:
        """Run ``ask(group_id)`` (a question to the group's leader) in the background, one
        at a time per group and at most every ``REMOVAL_ASK_MS``: whether an unassigned
        replica was removed (its leader may never tell it: it stops replicating to a
        node once the change removing it is applied), or to re-admit a data-lost one."""
        if self.peers is None or group_id in self._asking:
            return
        now_ms = int(asyncio.get_running_loop().time() * 1000)
        asked_ms = self._asked_ms.get(group_id, now_ms - REMOVAL_ASK_MS)
        if now_ms - asked_ms < REMOVAL_ASK_MS:
            return
        self._asked_ms[group_id] = now_ms
        task = asyncio.create_task(ask(group_id), name=f"ask-leader-{group_id}")
        self._asking[group_id] = task
        task.add_done_callback(lambda _task: self._asking.pop(group_id, None))

    async def _ask_readmit(self, group_id: int) -> None:
        """Ask the group's leader to re-admit this data-lost node; note its removal."""
        me = self.node.driver.node_id
        asked_term = 0  # not hosted yet: a fresh replica of this node knows no term
        request = ReadmitRequest(group_id, me)
        answer = await self._ask_leader(
            group_id,
            set(self.assigned.get(group_id, ())),
            _READMIT_POLICY,
            2 * READMIT_CALL_MS,
            lambda stub, timeout_ms: stub.readmit_replica(request, timeout_ms=timeout_ms),
        )
        if answer is None:
            return
        before = self.readmissions.get(group_id)
        if before is None:
            return
        after = before.heard(me, asked_term, _leader_membership(answer))
        self.readmissions[group_id] = after
        if after != before:
            _log.info(
                "the group's leader removed this data-lost node; it joins again as a learner",
                extra={"group": group_id, "leader": answer.leader, "index": after.removed_at},
            )
            if group_id in self.assigned:
                self.start_group(group_id, [])

    async def _ask_leader(
        self,
        group_id: int,
        nodes: Set[int],
        policy: FailoverPolicy,
        deadline_ms: int,
        call: Callable[[StorageService, int], Awaitable[GroupMembershipResponse]],
    ) -> GroupMembershipResponse | None:
        """``call(stub, timeout_ms)`` on the leader of ``group_id``, among ``nodes`` (the
        known leader first; NOT_LEADER hints are followed); None, logged, if none answered."""
        peers = self.peers
        assert peers is not None  # checked by _ask_in_background
        lead = self.node.driver.host.leader_of(group_id) if group_id in self.node.replicas else 0
        order = sorted(nodes - {self.node.driver.node_id}, key=lambda n: (n != lead, n))
        candidates = [self.transport.addresses[n] for n in order if n in self.transport.addresses]
        if not candidates:
            return None
        loop = asyncio.get_running_loop()
        failover = Failover(candidates, policy, loop.time() + deadline_ms / 1000)
        try:
            return await call_leader(
                failover,
                lambda address, timeout_ms: call(
                    peers.stub(StorageService, address, wait_for_ready=False), timeout_ms
                ),
                clock=loop.time,
                sleep=asyncio.sleep,
            )
        except AngeliaError as exc:
            _log.info(
                "no leader of the group answered; asked again later",
                extra={"group": group_id, "error": str(exc)},
            )
            return None

    def _members_applied(self, group_id: int, index: int, conf: ConfState) -> None:
        """A replica applied a membership (the driver's hook): follow re-admissions."""
        readmission = self.readmissions.get(group_id)
        if readmission is not None:
            self.readmissions[group_id] = readmission.applied(
                self.node.driver.node_id, index, conf.voters, conf.learners
            )

    def _finish_readmissions(self) -> None:
        """Let the replicas of the groups that re-admitted this node vote again; record
        them in the marker (durably) once their WAL holds the vote the lift recorded
        (else a crash in between would restart them as healthy with no vote for their
        term: they could vote twice in it); once every assigned group is recorded,
        delete the marker."""
        loss = self.loss
        if loss is None or self.data_dir is None:
            return
        store = self.node.driver.store
        recorded = []
        for group_id in sorted(self._lifted):
            if group_id not in self.node.replicas:
                self._lifted.discard(group_id)  # moved away meanwhile
                continue
            persisted, _conf = store.group(group_id).initial_state()
            current = cast(RawNode, self.node.driver.host.node(group_id)).hard_state()
            if (persisted.term, persisted.vote) == (current.term, current.vote):
                recorded.append(group_id)
        if recorded:
            loss.readmitted.update(recorded)
            data_loss.write_marker(self.data_dir, loss)
            self._lifted.difference_update(recorded)
        for group_id in sorted(g for g, r in self.readmissions.items() if r.readmitted):
            del self.readmissions[group_id]
            replica = self.node.replicas[group_id]
            copied = replica.joined_snapshot_bytes + replica.joined_entry_bytes
            self.readmitted_bytes += copied
            self.node.driver.lift_data_lost(group_id)
            self._lifted.add(group_id)
            _log.info(
                "group re-admitted this data-lost node: it votes again",
                extra={"group": group_id, "copied_bytes": copied},
            )
        if self.readmissions or self._lifted or not self.assigned:
            return
        if any(g not in self.node.replicas for g in self.assigned):
            return
        data_loss.clear_marker(self.data_dir)
        self.loss = None
        self.node.data_lost = False
        _log.warning(
            "every group re-admitted this node after its WAL was set aside; it is healthy",
            extra={
                "groups": len(loss.readmitted),
                "copied_bytes": self.readmitted_bytes,
                "quarantined": loss.quarantined,
            },
        )

    async def _ask_removal(self, group_id: int) -> None:
        """Delete the replica of ``group_id`` if its group's leader confirms that the
        group's committed membership excludes this node (:func:`removal_confirmed`)."""
        me = self.node.driver.node_id
        raft = cast(RawNode, self.node.driver.host.node(group_id))
        asked = _mark(raft)
        conf = raft.conf_state()
        members = conf.voters | conf.learners | conf.voters_outgoing | conf.learners_next
        # The known leader first, then the other members; a NOT_LEADER hint is followed.
        request = GroupMembershipRequest(group_id)
        answer = await self._ask_leader(
            group_id,
            members,
            _REMOVAL_ASK_POLICY,
            REMOVAL_ASK_DEADLINE_MS,
            lambda stub, timeout_ms: stub.group_membership(request, timeout_ms=timeout_ms),
        )
        if answer is None:
            return
        if (
            group_id in self.assigned
            or group_id not in self.node.replicas
            or self.node.driver.host.node(group_id) is not raft
        ):
            return  # assigned again, or stopped, while it asked
        if not removal_confirmed(me, asked, _mark(raft), _leader_membership(answer)):
            return
        _log.info(
            "the group's leader confirms this replica was removed: deleting it",
            extra={"group": group_id, "leader": answer.leader, "term": answer.term},
        )
        await self.stop_group(group_id)

    async def close(self) -> None:
        """Cancel the questions about removals under way."""
        tasks = list(self._asking.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_group(self, group_id: int) -> None:
        """Stop hosting ``group_id`` and delete its replica (it was moved away)."""
        self.readmissions.pop(group_id, None)
        replica = self.node.replicas.pop(group_id, None)
        self.assigned.pop(group_id, None)
        self._changing.pop(group_id, None)
        await self.node.driver.remove_group(group_id)
        if replica is not None:
            # Releases the bodies held for the group's snapshots (none is referenced now).
            self.bodies.bodies_to_carry(group_id, set())
        _log.info("stopped and deleted a replica moved away", extra={"group": group_id})

    async def run_memberships(self, interval_ms: int = MEMBERSHIP_CHECK_MS) -> None:
        """Forever: on each group this node leads, take the next membership step toward
        its assignment (see :func:`storage_node.reconcile.plan_membership_step`)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                self.maybe_step_memberships()
            except Exception:  # noqa: BLE001 - the loop goes on; the failure is logged
                _log.exception("a membership step failed")

    def maybe_step_memberships(self) -> int:
        """Start the next membership step of every led group that needs one; how many."""
        started = 0
        host = self.node.driver.host
        self._finish_readmissions()
        for group_id in list(self.node.replicas):
            if not self._leads(group_id):
                # A later leader is asked anew; waiting requests answer NOT_LEADER.
                self.node.lost_replicas.pop(group_id, None)
                removed = self.node.lost_removed.pop(group_id, None)
                if removed is not None and not removed.done():
                    removed.set_result(None)
                continue
            if group_id in self._changing:
                continue
            raft = cast(RawNode, host.node(group_id))
            assigned = self.assigned.get(group_id)
            conf = raft.conf_state()
            lost = self.node.lost_replicas.get(group_id)
            if lost is not None:
                lost &= conf.voters | conf.learners  # the removed ones are done
                if not lost:
                    del self.node.lost_replicas[group_id]
                    lost = None
                    removed = self.node.lost_removed.pop(group_id, None)
                    if removed is not None and not removed.done():
                        removed.set_result(self.node.membership(group_id))
            if (
                lost is None
                and assigned is not None
                and membership_settled(
                    conf.voters, conf.learners, bool(conf.voters_outgoing), assigned
                )
            ):
                continue  # the common case, decided without building the whole status
            status = raft.status()
            conf = status.conf_state
            view = LeaderView(
                self.node.driver.node_id,
                frozenset(conf.voters),
                frozenset(conf.learners),
                bool(conf.voters_outgoing),
                {n: p.match for n, p in status.progress.items()},
                status.commit,
            )
            if assigned is None:
                # Moved away while leading: hand leadership to the most caught-up voter.
                others = [n for n in view.voters if n != view.node_id]
                if not others:
                    continue
                to = max(sorted(others), key=lambda n: view.match.get(n, 0))
                step: MembershipStep | None = MembershipStep(StepKind.TRANSFER_LEADER, to)
            else:
                step = plan_membership_step(view, assigned, lost=lost or ())
            if step is not None and self._maybe_start_step(group_id, step):
                started += 1
        return started

    def _maybe_start_step(self, group_id: int, step: MembershipStep) -> bool:
        driver = self.node.driver
        if step.kind is StepKind.TRANSFER_LEADER:
            now_ms = int(asyncio.get_running_loop().time() * 1000)
            asked_ms = self._transfer_asked_ms.get(group_id, now_ms - TRANSFER_RETRY_MS)
            if now_ms - asked_ms < TRANSFER_RETRY_MS:
                return False
            self._transfer_asked_ms[group_id] = now_ms
            driver.transfer_leader(group_id, step.node_id)
            _log.info(
                "handing leadership away before leaving",
                extra={"group": group_id, "to": step.node_id},
            )
            return True
        change_type = {
            StepKind.ADD_LEARNER: ConfChangeType.ADD_LEARNER,
            StepKind.PROMOTE: ConfChangeType.ADD_VOTER,
            StepKind.REMOVE: ConfChangeType.REMOVE_NODE,
        }[step.kind]
        future = driver.propose_conf_change_nowait(group_id, ConfChange(change_type, step.node_id))
        self._changing[group_id] = future
        future.add_done_callback(lambda f: self._step_done(group_id, step, f))
        return True

    def _step_done(
        self, group_id: int, step: MembershipStep, future: asyncio.Future[object]
    ) -> None:
        if self._changing.get(group_id) is future:
            del self._changing[group_id]
        error = None if future.cancelled() else future.exception()
        if error is None:
            _log.info(
                "membership step applied",
                extra={"group": group_id, "step": step.kind.value, "node": step.node_id},
            )
        elif isinstance(error, RaftError):
            _log.info(
                "membership step not taken; planned again",
                extra={"group": group_id, "step": step.kind.value, "error": str(error)},
            )
        else:
            _log.error("membership step failed", extra={"group": group_id, "error": str(error)})

    async def _maybe_read_addresses(self) -> None:
        if self.client is None:
            return
        request = api.NameRequest(self.cluster)
        try:
            status = await self.client.call(
                lambda ns: ns.cluster_status(request, timeout_ms=CALL_TIMEOUT_MS)
            )
        except AngeliaError as exc:
            _log.warning("cannot read peer addresses", extra={"error": str(exc)})
            return
        self.learn_addresses({n.node_id: n.address for n in status.storage_nodes})

    def transfer_leaders(self, transfers: list[api.LeaderTransferInfo]) -> int:
        """Start the asked leader transfers of groups this node leads; how many started."""
        started = 0
        if self.node_class is not RawNode:
            return 0  # controller mode: only the controller moves mastership
        for transfer in transfers:
            group_id = transfer.group_id
            if group_id not in self.node.replicas:
                continue
            if not self.node.driver.host.node(group_id).is_leader():
                continue
            if transfer.to_node in self.node.lost_replicas.get(group_id, ()):
                continue  # it lost its data: it may not campaign (and is being removed)
            self.node.driver.transfer_leader(group_id, transfer.to_node)
            started += 1
        if started:
            _log.info("leader transfers started", extra={"transfers": started})
        return started


def _leader_membership(answer: GroupMembershipResponse) -> LeaderMembership:
    """A leader's membership answer, as :mod:`storage_node.reconcile` reads it."""
    members = {*answer.voters, *answer.learners, *answer.voters_outgoing, *answer.learners_next}
    return LeaderMembership(answer.leader, answer.term, frozenset(members), answer.applied_index)


def _mark(raft: RawNode) -> ReplicaMark:
    """``raft``'s position now (see :func:`storage_node.reconcile.removal_confirmed`)."""
    status = raft.status()
    return ReplicaMark(status.term, status.last_index, status.commit)
