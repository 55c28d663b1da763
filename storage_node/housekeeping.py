"""The storage node's background work, beside the requests it serves.

Each ``run_*`` runs forever on the node's event loop (the server starts one
task per function): Ticks for due timers on the groups it leads, the groups'
truncate floors, the indexes of sealed WAL segments, and retention (trims of
expired messages, drops of deleted topics: ``storage_node.retention``).

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

from angelia_rpc import AngeliaError
from protocol.segments import SegmentCorrupted
from raft.errors import RaftError
from storage_node import retention
from storage_node.errors import StorageError
from storage_node.partition.commands import Command, DropTopic, Tick, encode
from storage_node.partition.results import DropTopicResult, ExpireTierResult
from storage_node.replica import FLOOR_REFRESH_MS, GroupReplica
from storage_node.service import StorageNode
from storage_node.store.segment_files import index_segments
from storage_node.tier_plan import TierExpiry, upload_start
from storage_node.tier_store import Tier

_log = logging.getLogger(__name__)

TIMER_CHECK_MS = 20
"""The longest the leader waits before looking for due timers of the groups it leads
(it wakes at the earliest due time when that comes sooner): a timed message appended
while it sleeps is released at most this late, plus one raft commit."""

TICKS_IN_FLIGHT_MAX = 3
"""Ticks of one group proposed and not yet applied, at most. A Tick releases what is due
at its own time, so while one commits the next one (at least ``TIMER_CHECK_MS`` later)
releases what fell due meanwhile: release lateness is not bounded below by commit latency."""

SEGMENT_INDEX_CHECK_MS = 1_000
"""How often sealed WAL segments without an index are looked for."""


async def run_timers(node: StorageNode) -> None:
    """Forever: on the groups ``node`` leads, propose a Tick once a held message is due.

    Each round also raises the node's clock to the time its groups committed
    (:meth:`storage_node.node_clock.NodeClock.observe`), so a leader never
    stamps a Tick behind what another leader already stamped.

    Ticks of a group are pipelined: another one is proposed ``TIMER_CHECK_MS``
    after the last while messages are still held past their due time, up to
    ``TICKS_IN_FLIGHT_MAX`` in flight (a Tick that finds nothing due releases nothing).
    """
    ticking: dict[int, list[int]] = {}  # group -> times of its Ticks in flight
    wait_ms = TIMER_CHECK_MS
    while True:
        await asyncio.sleep(wait_ms / 1000)
        now_ms = node.observe_committed_time()
        wait_ms = TIMER_CHECK_MS
        for group_id, replica in node.replicas.items():
            due_ms = replica.state.next_timer_due_ms()
            if due_ms is not None and due_ms > now_ms:
                wait_ms = min(wait_ms, due_ms - now_ms)
            if due_ms is None or due_ms > now_ms:
                continue
            in_flight = ticking.get(group_id)
            if in_flight and (
                len(in_flight) >= TICKS_IN_FLIGHT_MAX or now_ms - in_flight[-1] < TIMER_CHECK_MS
            ):
                continue
            if not node.driver.host.node(group_id).is_leader():
                continue
            ticking.setdefault(group_id, []).append(now_ms)
            future = node.driver.propose_nowait(group_id, encode(Tick(now_ms)))
            future.add_done_callback(functools.partial(_ticked, group_id, now_ms, ticking))


class WalkTime:
    """Seconds spent in the timed sections (the event loop's own work, not awaits)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the time spent inside the ``with`` block."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started


FLOOR_SHARE = 0.02
"""The most of its time a node spends bringing floors up to date: a pass looks at every
queue of every group that applied something, so after a pass of d seconds the next
comes no sooner than d / FLOOR_SHARE later (and no sooner than FLOOR_REFRESH_MS)."""


async def run_floor_keeper(node: StorageNode) -> None:
    """Forever: bring every group's truncate floor up to its state (raft compacts by it).

    A pass lets other work run between groups: at a million queues one group's look
    takes milliseconds, all of them together a stall of every group this node serves.
    """
    wait_s = FLOOR_REFRESH_MS / 1000
    while True:
        await asyncio.sleep(wait_s)
        walk = WalkTime()
        for replica in list(node.replicas.values()):
            with walk.timed():
                replica.maybe_refresh_floor()
            await asyncio.sleep(0)
        wait_s = max(FLOOR_REFRESH_MS / 1000, walk.seconds / FLOOR_SHARE)


async def run_segment_indexer(node: StorageNode) -> None:
    """Forever: give every sealed WAL segment its index (in a worker thread)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(SEGMENT_INDEX_CHECK_MS / 1000)
        try:
            live = node.store.segment_seqs()  # on the loop: the driver changes them
            await loop.run_in_executor(None, index_segments, node.store.directory / "wal", live)
        except (OSError, SegmentCorrupted) as exc:
            _log.error("indexing sealed WAL segments failed: %s", exc)


TopicLister = Callable[[], Awaitable[Mapping[str, retention.TopicLimits]]]
"""Every topic of the cluster with its limits (from the nameserver); raises if unknown now."""


RETENTION_SHARE = 0.02
"""The most of its time a node spends planning retention: after a round whose planning
took d seconds the next starts no sooner than d / RETENTION_SHARE later (and no sooner
than the configured interval). A round looks at the queues whose oldest message
expired and those that changed (``retention.GroupRetention``); a leader's first round
of a group, and one after a topic's limits changed, looks at every queue."""


@dataclass
class RetentionMemory:
    """What a node's retention rounds keep between rounds: planners per group it led
    in the last round (with a tier, of its objects' expiry too), and (with a tier)
    the local limits of the last topic list."""

    groups: dict[int, retention.GroupRetention] = field(default_factory=dict)
    tier_groups: dict[int, TierExpiry] = field(default_factory=dict)
    listed: Mapping[str, retention.TopicLimits] | None = None
    local: Mapping[str, retention.TopicLimits] = field(default_factory=dict)


async def run_retention(
    node: StorageNode, list_topics: TopicLister, interval_ms: int, tier: Tier | None = None
) -> None:
    """Forever, every ``interval_ms`` (or less often, see :data:`RETENTION_SHARE`): on the
    groups ``node`` leads, propose the trims and topic drops ``storage_node.retention``
    decides (one at a time, awaited); with a tier, local trims stop at the upload point
    and follow the local limits, tier objects past the whole limits expire, and the
    bytes of expired or dropped objects are deleted.

    A round whose topic list cannot be read does nothing (a nameserver that is
    away must never look like every topic deleted).
    """
    wait_s = interval_ms / 1000
    memory = RetentionMemory()
    while True:
        await asyncio.sleep(wait_s)
        walk = WalkTime()
        try:
            await retention_round(node, list_topics, tier, walk, memory)
        except AngeliaError as exc:
            _log.info("retention skipped: the topic list is unknown now: %s", exc)
        wait_s = max(interval_ms / 1000, walk.seconds / RETENTION_SHARE)


async def retention_round(
    node: StorageNode,
    list_topics: TopicLister,
    tier: Tier | None = None,
    walk: WalkTime | None = None,
    memory: RetentionMemory | None = None,
) -> int:
    """One round of :func:`run_retention`; how many commands were applied. The planning
    of each group is timed into ``walk``, and the round lets other work run between
    groups (planning one group blocks the loop, never all of them). ``memory``: what
    the previous rounds kept (None: none, every queue is looked at)."""
    walk = walk or WalkTime()
    memory = memory or RetentionMemory()
    led = [(g, r) for g, r in node.replicas.items() if node.driver.host.node(g).is_leader()]
    planners = {g: memory.groups.get(g) or retention.GroupRetention() for g, _ in led}
    memory.groups = planners  # a group not led now starts afresh when led again
    tier_planners: dict[int, TierExpiry] = {}
    if tier is not None:
        tier_planners = {g: memory.tier_groups.get(g) or TierExpiry() for g, _ in led}
    memory.tier_groups = tier_planners
    # Before the list: a topic held now and unlisted after was deleted (or the list
    # would name it), never created after the listing.
    for group_id, leading in led:
        with walk.timed():
            planners[group_id].before_listing(leading.state)
            if tier is not None:
                tier_planners[group_id].before_listing(leading.state)
        await asyncio.sleep(0)
    try:
        topics = await list_topics()
    except BaseException:
        memory.groups, memory.tier_groups = {}, {}  # what was taken is not planned
        raise
    local: Mapping[str, retention.TopicLimits] = {}
    if tier is not None:
        with walk.timed():
            if topics is not memory.listed:
                memory.local = {name: limits.local() for name, limits in topics.items()}
                memory.listed = topics
            local = memory.local
    applied = 0
    for group_id, planner in list(planners.items()):
        await asyncio.sleep(0)
        replica = node.replicas.get(group_id)
        if replica is None or not node.driver.host.node(group_id).is_leader():
            del planners[group_id]
            tier_planners.pop(group_id, None)
            continue
        state = replica.state
        now_ms = node.now_ms()
        sizes = entry_bytes_of(replica, group_id)
        commands: list[Command]
        with walk.timed():
            if tier is None:
                commands = [*planner.plan(state, topics, now_ms, sizes)]
            else:
                keep_from = functools.partial(upload_start, state)
                commands = [
                    *planner.plan(state, local, now_ms, sizes, keep_from),
                    *tier_planners[group_id].plan(state, topics, now_ms),
                ]
        for command in commands:
            try:
                result = await node.driver.propose(group_id, encode(command))
            except (RaftError, TimeoutError) as exc:
                result = exc
            if isinstance(result, (RaftError, StorageError, TimeoutError)):
                _log.info("retention of group %d stopped: %s", group_id, result)
                planner.forget()  # what was not applied is planned again next round
                if tier is not None:
                    tier_planners[group_id].forget()
                break
            applied += 1
            names: tuple[str, ...] = ()
            if isinstance(result, DropTopicResult):
                names = result.tier_objects
            elif isinstance(result, ExpireTierResult):
                names = result.expired
            if tier is not None and names:
                try:
                    await asyncio.to_thread(tier.delete_objects, group_id, list(names))
                except Exception as exc:  # noqa: BLE001 - fsspec drivers raise their own types: any failure is the tier's
                    _log.warning("deleting tier objects of group %d failed: %s", group_id, exc)
            if isinstance(command, DropTopic):
                _log.info(
                    "dropped the data of deleted topic %s in group %d", command.topic, group_id
                )
    return applied


def entry_bytes_of(replica: GroupReplica, group_id: int) -> retention.EntryBytes:
    """A log entry's size from where it lies in the WAL (read only if it lies elsewhere)."""
    bodies = replica.bodies

    def size(log_index: int) -> int:
        location = bodies.entry_location(group_id, log_index)
        if location is not None:
            return location.length
        try:
            return len(bodies.read_entry(group_id, log_index))
        except StorageError:
            return 0

    return size


def _ticked(
    group_id: int, at_ms: int, ticking: dict[int, list[int]], future: asyncio.Future[object]
) -> None:
    in_flight = ticking.get(group_id)
    if in_flight is not None:
        with contextlib.suppress(ValueError):
            in_flight.remove(at_ms)
        if not in_flight:
            del ticking[group_id]
    if not future.cancelled() and future.exception() is not None:
        _log.debug("timer tick of group %d failed: %s", group_id, future.exception())
