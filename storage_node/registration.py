"""A storage node's membership in its cluster at the nameserver.

- :func:`join_cluster`: before serving, learn the cluster's group count from
  the nameserver (the one source of truth; G is fixed when a cluster is
  created). A missing cluster is created with ``--groups`` (64 when 0). A
  ``--groups`` that disagrees with an existing cluster is refused with
  :class:`ClusterRefused`. While no nameserver answers, it retries (logging
  why) until the node is asked to stop.
- :class:`Registration.run`: every ``heartbeat_interval_ms`` a heartbeat with
  this node's address and load (hosted groups, groups led, bytes on disk,
  appended messages/s, free disk, and the raft membership of the groups it
  leads, which the nameserver's replica moves wait on); its answer (the groups assigned to this
  node, and leader transfers asked of it) goes to ``on_heartbeat``. Beside
  it, the leader and term of every hosted group are polled every
  ``REPORT_POLL_MS`` and reported as :class:`storage_node.reporting.LeaderReporter`
  decides (changes at once but coalesced, everything periodically).

Every call goes to the nameserver leader through
:class:`angelia_rpc.nameserver_client.NameserverClient` (NOT_LEADER hints
are followed, unreachable replicas skipped). A failed heartbeat or report
is logged and tried again on the next occasion: the node keeps serving
while the nameserver is away (it is marked down there after the timeout,
and up again by its next heartbeat).

SHELL.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

from angelia_rpc import AngeliaError
from angelia_rpc.nameserver_client import NameserverClient
from protocol import errors
from protocol import nameserver_api as api
from raft.core.node import RawNode
from storage_node.config import GROUPS_DEFAULT, StorageConfig
from storage_node.reporting import (
    LeaderReporter,
    ReportBatch,
    group_rates_per_s,
    percentile_us,
    rate_per_s,
)
from storage_node.service import FIRST_GROUP_ID, StorageNode

_log = logging.getLogger(__name__)

CALL_TIMEOUT_MS = 2000
JOIN_RETRY_MS = 500
REPORT_POLL_MS = 50
# A nameserver unreachable this long (joining, or heartbeats failing in a row) is warned
# of; shorter gaps (roles starting or stopping together, an election) are logged at info.
NAMESERVER_WARN_AFTER_MS = 10_000
REPORT_FULL_EVERY_HEARTBEATS = 4
SYNC_SAMPLES_MAX = 4096
"""WAL sync durations kept between two heartbeats (the newest; enough for a p99)."""


class ClusterRefused(ValueError):
    """This node's configuration contradicts its cluster at the nameserver (says how)."""


async def join_cluster(
    client: NameserverClient,
    config: StorageConfig,
    stopping: asyncio.Event,
    *,
    warn_after_ms: int = NAMESERVER_WARN_AFTER_MS,
) -> api.ClusterInfo | None:
    """The node's cluster as the nameserver records it (created if missing), or None
    if ``stopping`` was set first; see the module doc. An unreachable nameserver is
    logged at INFO until ``warn_after_ms`` of trying, at WARNING after."""
    name = config.cluster
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    while True:
        try:
            status = await client.call(
                lambda ns: ns.cluster_status(api.NameRequest(name), timeout_ms=CALL_TIMEOUT_MS)
            )
            return check_cluster(status.cluster, config)
        except AngeliaError as exc:
            if exc.code is errors.NOT_FOUND:
                await _maybe_create_cluster(client, config)
                continue
            if not exc.retriable:
                raise ClusterRefused(
                    f"the nameserver at {','.join(client.addresses)} refused to tell cluster "
                    f"{name!r}: {exc}"
                ) from exc
            # Roles start together, so a nameserver that is not up yet is normal at
            # first; only one that stays away past the grace period is worth a warning.
            waited_ms = (loop.time() - started_s) * 1000
            _log.log(
                logging.WARNING if waited_ms >= warn_after_ms else logging.INFO,
                "nameserver not reachable yet; retrying",
                extra={"nameserver": ",".join(client.addresses), "error": str(exc)},
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), JOIN_RETRY_MS / 1000)
        if stopping.is_set():
            return None


async def _maybe_create_cluster(client: NameserverClient, config: StorageConfig) -> None:
    groups = config.groups or GROUPS_DEFAULT
    _log.info("creating cluster", extra={"cluster": config.cluster, "groups": groups})
    request = api.CreateClusterRequest(config.cluster, groups)
    try:
        await client.call(lambda ns: ns.create_cluster(request, timeout_ms=CALL_TIMEOUT_MS))
    except AngeliaError as exc:
        if exc.code is not errors.ALREADY_EXISTS:
            raise


def check_cluster(cluster: api.ClusterInfo, config: StorageConfig) -> api.ClusterInfo:
    """``cluster`` if this node can serve it; :class:`ClusterRefused` saying why not."""
    if config.groups and config.groups != cluster.group_count:
        raise ClusterRefused(
            f"--groups {config.groups} disagrees with cluster {cluster.name!r}, which the "
            f"nameserver records with {cluster.group_count} groups (fixed when it was created); "
            f"start with --groups {cluster.group_count} or --groups 0 (learn it)"
        )
    if cluster.first_group_id != FIRST_GROUP_ID:
        raise ClusterRefused(
            f"cluster {cluster.name!r} has group ids from {cluster.first_group_id}; storage "
            f"nodes serve clusters whose group ids start at {FIRST_GROUP_ID} (the first cluster "
            "created at a nameserver)"
        )
    return cluster


HeartbeatHandler = Callable[[api.StorageHeartbeatResponse], Awaitable[None]]


class Registration:
    """Heartbeats and leader reports of one storage node (see the module docstring)."""

    def __init__(
        self,
        client: NameserverClient,
        node: StorageNode,
        config: StorageConfig,
        address: str,
        data_dir: Path,
        on_heartbeat: HeartbeatHandler | None = None,
        *,
        warn_after_ms: int = NAMESERVER_WARN_AFTER_MS,
    ) -> None:
        """``address``: where this node serves (what brokers and peers are told).
        Heartbeats failing in a row for ``warn_after_ms`` are warned of, at INFO before."""
        self.client = client
        self.node = node
        self.config = config
        self.address = address
        self.data_dir = data_dir
        self.on_heartbeat = on_heartbeat
        self.reporter = LeaderReporter(
            full_interval_ms=config.heartbeat_interval_ms * REPORT_FULL_EVERY_HEARTBEATS
        )
        self._rate_at: tuple[int, int] | None = None  # (appended messages, ms)
        self._group_counts_at: tuple[dict[int, int], int] | None = None  # (per group, ms)
        # WAL sync durations (ns) since the last heartbeat, appended by the sync thread
        # (deque appends and pops are atomic); bounded, the newest kept.
        self._sync_durations_ns: collections.deque[int] = collections.deque(maxlen=SYNC_SAMPLES_MAX)
        self.heartbeats = 0
        self.warn_after_ms = warn_after_ms
        self._failing_since_s: float | None = None  # loop time of the first failure in a row

    async def run(self) -> None:
        """Heartbeat and report until cancelled."""
        self.node.store.sync_observer = self._sync_durations_ns.append
        await asyncio.gather(self._run_heartbeats(), self._run_reports())

    # -- heartbeats --------------------------------------------------------------------

    async def _run_heartbeats(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        while True:
            await self.maybe_heartbeat()
            await asyncio.sleep(interval_s)

    async def maybe_heartbeat(self) -> api.StorageHeartbeatResponse | None:
        """One heartbeat; its answer (also handed to ``on_heartbeat``), or None if it failed."""
        request = self.heartbeat_request()
        try:
            response = await self.client.call(
                lambda ns: ns.storage_heartbeat(request, timeout_ms=CALL_TIMEOUT_MS)
            )
        except AngeliaError as exc:
            now_s = asyncio.get_running_loop().time()
            if self._failing_since_s is None:
                self._failing_since_s = now_s
            failing_ms = (now_s - self._failing_since_s) * 1000
            _log.log(
                logging.WARNING if failing_ms >= self.warn_after_ms else logging.INFO,
                "heartbeat failed",
                extra={"error": str(exc), "failing_ms": int(failing_ms)},
            )
            return None
        if self._failing_since_s is not None:
            _log.info("heartbeats answered again")
            self._failing_since_s = None
        self.heartbeats += 1
        if self.on_heartbeat is not None:
            try:
                await self.on_heartbeat(response)
            except Exception:  # noqa: BLE001 - one bad answer must not end the heartbeats
                _log.exception("acting on a heartbeat answer failed")
        return response

    def heartbeat_request(self) -> api.StorageHeartbeatRequest:
        """This node's registration and current load."""
        node = self.node
        host = node.driver.host
        memberships = []
        for group_id in node.replicas:
            raft = cast(RawNode, host.node(group_id))
            if raft.is_leader():
                conf = raft.conf_state()
                memberships.append(
                    api.GroupMembershipInfo(group_id, sorted(conf.voters), sorted(conf.learners))
                )
        led = len(memberships)
        now_ms = _now_ms()
        appended = node.appended_messages
        msgs_per_s = 0
        if self._rate_at is not None:
            msgs_per_s = rate_per_s(self._rate_at[0], self._rate_at[1], appended, now_ms)
        self._rate_at = (appended, now_ms)
        led_ids = {m.group_id for m in memberships}
        counts = {g: n for g, n in node.appended_by_group.items() if g in led_ids}
        group_loads: dict[int, int] = {}
        if self._group_counts_at is not None:
            before, before_ms = self._group_counts_at
            group_loads = group_rates_per_s(before, before_ms, counts, now_ms)
        self._group_counts_at = (counts, now_ms)
        durations = self._sync_durations_ns
        fsync_ns = [durations.popleft() for _ in range(len(durations))]
        appends = node.batcher.latencies_ns
        append_ns = [appends.popleft() for _ in range(len(appends))]
        return api.StorageHeartbeatRequest(
            node.driver.node_id,
            self.config.cluster,
            self.address,
            groups=len(node.replicas),
            leaders=led,
            bytes=_bytes_under(self.data_dir),
            msgs_per_s=msgs_per_s,
            disk_free_bytes=shutil.disk_usage(self.data_dir).free,
            memberships=memberships,
            fsync_p99_us=percentile_us(fsync_ns),
            group_loads=[api.GroupLoadInfo(g, r) for g, r in sorted(group_loads.items())],
            data_lost=node.data_lost,
            append_p99_us=percentile_us(append_ns),
        )

    # -- leader reports ----------------------------------------------------------------

    def leader_views(self) -> dict[int, tuple[int, int]]:
        """Group -> (leader, term) as this node's replicas see them now."""
        host = self.node.driver.host
        views: dict[int, tuple[int, int]] = {}
        for group_id in list(self.node.replicas):
            raft = cast(RawNode, host.node(group_id))
            views[group_id] = (raft.lead, raft.hard_state().term)
        return views

    async def _run_reports(self) -> None:
        while True:
            await asyncio.sleep(REPORT_POLL_MS / 1000)
            try:
                batch = self.reporter.due(_now_ms(), self.leader_views())
            except Exception:  # noqa: BLE001 - reporting goes on; the failure is logged
                _log.exception("reading the groups' leaders failed")
                continue
            if batch is not None:
                await self.maybe_report(batch)

    async def maybe_report(self, batch: ReportBatch) -> bool:
        """Send one batch of leader views; whether the nameserver heard it."""
        request = api.ReportLeadersRequest(
            self.node.driver.node_id,
            [api.LeaderReportInfo(v.group_id, v.leader, v.term) for v in batch.views],
        )
        try:
            await self.client.call(
                lambda ns: ns.report_leaders(request, timeout_ms=CALL_TIMEOUT_MS)
            )
        except AngeliaError as exc:
            # NOT_FOUND: not registered yet (the first heartbeat is on its way).
            _log.log(
                logging.DEBUG if exc.code is errors.NOT_FOUND else logging.WARNING,
                "leader report failed",
                extra={"error": str(exc), "groups": len(batch.views)},
            )
            return False
        self.reporter.sent(batch, _now_ms())
        return True


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _bytes_under(path: Path) -> int:
    """Bytes of the files under ``path`` (the node's WAL and stores)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total
