"""Controller mode on a storage node: follow the controller's record of each group.

Every ``POLL_MS`` the node reads the controller's records (``control.replica_sets``,
which also tells the controller this node is alive) and, at the start of the
next raft round, hands each hosted group its record
(:meth:`storage_node.controlled_node.ControlledNode.follow`): the named master
leads at the record's epoch, the others follow it. Every ``POLL_MS`` too,
whether or not the controller answers, each master samples its slaves'
progress and asks for the SyncStateSet change it calls for, one at a time (the
samples must be closer than the lag bound: a slave is in sync when by one
sample it reached the log's end of the one before); a change the controller
has not recorded yet is asked again on the next poll (the same request: if an
earlier one was recorded after all, its set epoch is stale and the next record
brings the new set). A fenced master steps down.

With the controller (every nameserver) away, reads fail and the loop keeps
trying: masters keep serving with the set they have; only failover and set
changes wait.

SHELL.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import ControlService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import control_api as ctl
from protocol import errors
from storage_node.controlled_node import ControlledNode

if TYPE_CHECKING:
    from storage_node.service import StorageNode

_log = logging.getLogger(__name__)

POLL_MS = 100
LAG_MS = 500
"""A SyncStateSet member behind the master's log (or silent) this long is dropped."""
CALL_TIMEOUT_MS = 1000


class ControllerFollower:
    """Polls the controller and applies its records to this node's controlled groups."""

    def __init__(
        self,
        node: StorageNode,
        client: NameserverClient,
        poll_ms: int = POLL_MS,
        lag_ms: int = LAG_MS,
    ) -> None:
        """Registers its hook with ``node``'s driver (records apply between rounds)."""
        self.node = node
        self.client = client
        self.poll_ms = poll_ms
        self.lag_ms = lag_ms
        self._views: dict[int, ctl.ReplicaSetInfo] = {}
        self._sample_due = False
        self._sending: dict[int, asyncio.Task[None]] = {}
        self._unreachable = False
        node.driver.before_each_round(self._apply)

    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def _controlled(self, group_id: int) -> ControlledNode | None:
        if group_id not in self.node.replicas:
            return None
        raft = self.node.driver.host.node(group_id)
        return raft if isinstance(raft, ControlledNode) else None

    def _apply(self) -> None:
        """At the start of a round: hand each group its newest record; when a sample is
        due, every master samples its slaves; start the SyncStateSet changes the
        masters ask for."""
        views, self._views = self._views, {}
        sampled: set[int] = set(self.node.replicas) if self._sample_due else set()
        self._sample_due = False
        if not views and not sampled:
            return
        now_ms = self._now_ms()
        host = self.node.driver.host
        for group_id in sorted(sampled | views.keys()):
            raft = self._controlled(group_id)
            if raft is None:
                continue
            view = views.get(group_id)
            before = (raft.raft.role, raft.raft.term, raft.raft.tracker.config)
            if view is not None:
                raft.follow(view, now_ms)
            elif not raft.is_leader():
                continue
            request = raft.sync_state_request(now_ms, self.lag_ms)
            if request is not None:
                _log.info(
                    "SyncStateSet change asked",
                    extra={
                        "group": group_id,
                        "sync_state_set": raft.view.sync_state_set if raft.view else [],
                        "asked": request.sync_state_set,
                        "peers": raft.sync_report(now_ms),
                    },
                )
            asked = raft.asked
            if (
                request is None
                and asked
                and view is not None
                and view.sync_state_set_epoch == asked.sync_state_set_epoch
            ):
                request = asked  # not recorded yet: ask again (once a poll)
            if request is not None and group_id not in self._sending:
                self._sending[group_id] = asyncio.create_task(
                    self._alter(group_id, request), name=f"alter-sync-state-set-{group_id}"
                )
            changed = (raft.raft.role, raft.raft.term, raft.raft.tracker.config) != before
            if changed or raft.behind():
                host.touch(group_id)
            if changed and view is not None:
                _log.info(
                    "controller record applied",
                    extra={
                        "group": group_id,
                        "master": view.master,
                        "epoch": view.epoch,
                        "sync_state_set": view.sync_state_set,
                        "leads": raft.is_leader(),
                    },
                )

    async def _alter(self, group_id: int, request: ctl.AlterSyncStateSetRequest) -> None:
        try:
            answer = await self.client.call_service(
                ControlService,
                lambda s: s.alter_sync_state_set(request, timeout_ms=CALL_TIMEOUT_MS),
            )
        except AngeliaError as exc:
            if exc.code is errors.NOT_LEADER and "is not the master" in exc.message:
                _log.warning("fenced by the controller", extra={"group": group_id})
            else:
                _log.info(
                    "SyncStateSet change not recorded yet",
                    extra={"group": group_id, "error": exc.message},
                )
            return
        finally:
            self._sending.pop(group_id, None)
        self._views[group_id] = answer.group
        self.node.driver.wake()

    async def run(self) -> None:
        """Forever: read the records, then let the next round apply them; and have the
        masters sample their slaves every ``poll_ms``, the controller away or not."""
        sampling = asyncio.create_task(self._sample_every(), name="controller-samples")
        try:
            await self._poll_every()
        finally:
            sampling.cancel()

    async def _sample_every(self) -> None:
        while True:
            await asyncio.sleep(self.poll_ms / 1000)
            self._sample_due = True
            self.node.driver.wake()

    async def _poll_every(self) -> None:
        me = self.node.driver.node_id
        request = ctl.ReplicaSetsRequest([], me)
        while True:
            try:
                response = await self.client.call_service(
                    ControlService, lambda s: s.replica_sets(request, timeout_ms=CALL_TIMEOUT_MS)
                )
            except AngeliaError as exc:
                if not self._unreachable:
                    _log.warning(
                        "the controller cannot be read; masters keep serving",
                        extra={"error": exc.message},
                    )
                self._unreachable = True
            else:
                if self._unreachable:
                    _log.info("the controller answers again")
                self._unreachable = False
                for group in response.groups:
                    self._views[group.group_id] = group
                if response.groups:
                    self.node.driver.wake()
            await asyncio.sleep(self.poll_ms / 1000)
