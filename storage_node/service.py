"""The storage node's Angelia API over the raft groups it hosts.

:class:`StorageService` declares the methods (types in
``protocol.storage_api``); :class:`StorageNode` implements them over one
:class:`raft.host.driver.Driver` whose groups each apply into a
:class:`GroupReplica` (a ``PartitionState`` plus what the host needs around
it). Requests and responses are converted in :mod:`storage_node.api_convert`;
the node's background loops are in :mod:`storage_node.housekeeping`.

The host's duties of ``storage_node.partition`` and how they are met here:

1. Time: every command is stamped with this node's clock (ms) when the
   leader proposes it; nothing else brings time into a group. The node's
   clock (:class:`storage_node.node_clock.NodeClock`) runs on the monotonic
   clock, steered toward the wall clock at a bounded rate and never behind
   the time its groups committed, so a wall-clock step cannot release timers
   early.
2. Apply: the driver applies committed entries in log order, once, through
   :meth:`GroupReplica.apply`; a ``StorageError`` raised by apply is the
   proposer's result (raised to the caller), and apply goes on.
3. Long polls: after each apply, receivers waiting on a grown queue wake.
4. Timers: on the leader, :func:`storage_node.housekeeping.run_timers` proposes ``Tick``
   once a group's earliest held message is due.
5-7. Snapshots and log truncation: the driver snapshots a group every
   ``snapshot_entries`` applied entries and when the WAL holds more than
   ``wal_retain_bytes`` (a group image, see :class:`GroupReplica`), and
   compacts its log no further than the group's truncate floor, which the
   replica keeps just below the oldest entry a queue, half message or timer
   still references (``Driver.set_truncate_floor``, the one retention
   mechanism; see docs/wal-format.md). So bodies stay readable after
   truncation and a restart replays only the entries after the snapshot. A
   replica restored from its leader's snapshot gets the referenced bodies
   inside it (``snapshot_for_peer``).
8. Dead letters: a group's DLQ is ``(%DLQ%<group>, group id)``; routing
   already maps it there.

Reads (read, queue info, get offset) are served by the leader from applied
state after a barrier: the leader must have applied an entry of its current
term (else it proposes a ``Tick`` first), so it has applied every entry
committed by earlier leaders. A deposed leader that has not heard of its
successor can still answer a read with older data (no leases yet).

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar, cast

from angelia_rpc import CallContext
from angelia_rpc.errors import from_exception, to_wire
from protocol import routing
from protocol.filters import MATCH_ALL, TagFilter
from protocol.records import (
    MessageRecord,
    is_canonical,
    pack_items,
    pack_record,
)
from protocol.sql92 import Sql92Filter, visible_properties
from protocol.storage_api import (
    AckOutcome,
    AckRequest,
    AckResponse,
    AppendQueuesRequest,
    AppendQueuesResponse,
    AppendRequest,
    AppendResponse,
    CancelTimerRequest,
    CancelTimerResponse,
    ChangeInvisibleRequest,
    ChangeInvisibleResponse,
    CommitOffsetRequest,
    EndTransactionRequest,
    EndTransactionResponse,
    ExportSnapshotRequest,
    ExportSnapshotResponse,
    GetOffsetRequest,
    GroupMembershipRequest,
    GroupMembershipResponse,
    GroupProgressRequest,
    GroupProgressResponse,
    HalfMessageInfo,
    NodeStatusRequest,
    NodeStatusResponse,
    NoteTransactionChecksRequest,
    NoteTransactionChecksResponse,
    OffsetResponse,
    PackedDelivery,
    QueryMessagesRequest,
    QueryMessagesResponse,
    QueueAppended,
    QueueInfoRequest,
    QueueInfoResponse,
    ReadmitRequest,
    ReadRequest,
    ReadResponse,
    ReceivedMessage,
    ReceiveRequest,
    ReceiveResponse,
    ScanTransactionsRequest,
    ScanTransactionsResponse,
    StoredAt,
    StoredMessage,
    from_record,
)
from raft.core.node import RawNode
from raft.errors import RaftError, RaftNotLeader
from raft.host.driver import Driver
from raft.wal.logstore import LogStore
from storage_node import message_query
from storage_node.api_convert import (
    append_records,
    append_response,
    receive_command,
    sql_filter,
)
from storage_node.append_batcher import AppendBatcher, Joined
from storage_node.errors import (
    BadCommand,
    GroupNotHosted,
    StorageError,
    StorageNotLeader,
)
from storage_node.key_index import KeyIndex, Query
from storage_node.node_clock import NodeClock
from storage_node.partition import property_filter, pull
from storage_node.partition.commands import (
    Ack,
    Append,
    CancelTimer,
    ChangeInvisibleDuration,
    Command,
    CommitConsumerOffset,
    CommitOffset,
    EndTransaction,
    NoteTransactionChecks,
    Release,
    Tick,
    check_record,
    encode,
)
from storage_node.partition.queues import QueueEntry, QueueId
from storage_node.partition.reads import (
    EntryReader,
    fitting,
    record_bytes,
    record_items_of,
    records_of,
)
from storage_node.partition.results import (
    AckResult,
    AppendResult,
    CancelTimerResult,
    ChangeInvisibleDurationResult,
    CommitOffsetResult,
    Delivery,
    EndTransactionResult,
    ReceiveResult,
    Result,
    TransactionChecksResult,
)
from storage_node.progress import group_progress
from storage_node.replica import GroupReplica
from storage_node.snapshot_export import EXPORTS_MAX, export_group
from storage_node.store.segment_files import uncache_segments
from storage_node.tier_plan import UploadLag
from storage_node.tier_reads import TierMessage, TierReader
from storage_node.tier_receive import with_tier_rows

_log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_GROUP_ID = 1
"""Group ids of a cluster are ``FIRST_GROUP_ID .. FIRST_GROUP_ID + groups - 1``."""

APPEND_BODY_BYTES_MAX = 4 << 20
"""The most body bytes one append may carry (RocketMQ's default message size limit):
one append is one log entry, and raft batches must stay under the transport's frame limit."""

RECEIVE_BYTES_MAX = 8 << 20
"""About the most message bytes one receive answers with (half Angelia's default frame
limit): messages granted past it are released at once. The first always goes."""

QUEUE_INFO_WAIT_MS_MAX = 30_000
"""The longest a queue-info call waits for growth (``QueueInfoRequest.wait_ms``)."""

SNAPSHOT_ENTRIES = 20_000
"""A group is snapshotted every this many applied entries (bounds the replay at restart)."""

KEEP_ENTRIES = 2_000
"""Entries kept below a snapshot (if nothing references them either) for lagging followers."""

WAL_CACHED_BYTES = 256 << 20
"""Sealed WAL segments older than the newest this many bytes of them leave the page cache
right before each spare segment is zero-filled (``uncache_segments``, run by the driver's
spare thread: the fill takes their pages while the host still backs them, not fresh ones).
Measured in ``rip5 bench e2e`` publish on 2 cores: 41,307 / 43,464 msgs/s keeping every
page, 50,259 / 46,202 with this window (docs/benchmarks.md, E2E run N)."""


class StorageNode:
    """Serves :class:`StorageService` for the groups hosted by ``driver``.

    ``addresses`` maps node ids to their Angelia addresses (for leader hints).
    """

    def __init__(
        self,
        driver: Driver,
        store: LogStore,
        replicas: Mapping[int, GroupReplica],
        group_count: int,
        addresses: Mapping[int, str],
        wall_ms: Callable[[], float] | None = None,
    ) -> None:
        """Serve the replicas; they must already be added to ``driver``. ``wall_ms``
        replaces the wall clock :meth:`now_ms` steers toward, only under fault injection."""
        self._wall_ms = wall_ms or _wall_ms
        self.clock = NodeClock()
        self.driver = driver
        self.store = store
        self.replicas: dict[int, GroupReplica] = {}
        for group_id, replica in replicas.items():
            self.adopt(group_id, replica)
        self.group_count = group_count
        self.addresses = dict(addresses)
        self.appended_messages = 0
        """Messages appended through this node since it started (the load it reports)."""
        self.appended_by_group: dict[int, int] = {}
        """The same, per group (the per-group load it reports)."""
        self.appends_stored = 0
        """Appends stored through this node since it started (one queue's records each)."""
        self._alone_entries = 0  # appends stored as a log entry of their own (not joined)
        self.reads_served = 0
        """Offset reads served since it started (leader or follower: read replicas)."""
        self._exports = asyncio.Semaphore(EXPORTS_MAX)
        self.tier_reader: TierReader | None = None
        """Reads below a queue's local first offset, with a tier (``tier_reads``)."""
        self.tier_status: Callable[[GroupReplica, QueueId, int], tuple[UploadLag, str]] | None = (
            None
        )
        """With a tier, a queue's upload lag and the uploader's last error of its group
        (``Uploader.queue_status``), for ``queue_info``."""
        self.key_index = KeyIndex()
        """Message ids and keys of sealed chunks of queues, built by queries (bounded)."""
        self.data_lost = False
        """This node's WAL was set aside and some group has not re-admitted it yet
        (``storage_node.data_loss``): its heartbeats say so (reported degraded)."""
        self.wal_set_aside = ""
        """What this process found damaged in its WAL at start and set aside ("" if
        nothing): the error naming the segment and offset."""
        self.wal_failure = ""
        """Why the WAL refuses writes ("" while it takes them): the node serves nothing."""
        self.lost_replicas: dict[int, set[int]] = {}
        """Group -> members that lost their replica's data and asked this leader to
        re-admit them (``readmit_replica``); the membership loop removes them first."""
        self.lost_removed: dict[int, asyncio.Future[GroupMembershipResponse | None]] = {}
        """Group -> resolved (and dropped) by the membership loop once no lost member
        remains: with the membership right then (the removal applied, before the node is
        added back), or None when this node stopped leading the group."""
        self.batcher = AppendBatcher(driver, self.now_ms, self.replicas, APPEND_BODY_BYTES_MAX)
        wal_dir = store.directory / "wal"
        cached_segments = WAL_CACHED_BYTES // store.segment_bytes
        uncached: set[int] = set()  # the spare thread's own
        driver.before_spare_fill(
            lambda live: uncache_segments(wal_dir, live, cached_segments, uncached)
        )

    def adopt(self, group_id: int, replica: GroupReplica) -> None:
        """Serve ``replica`` (already added to the driver); it keeps its group's truncate floor."""
        replica.report_floor_to(self.driver.set_truncate_floor)
        self.replicas[group_id] = replica

    # ------------------------------------------------------------ plumbing
    def now_ms(self) -> int:
        """This node's time in ms (its :class:`NodeClock`): the time stamped on proposed
        commands."""
        return self.clock.read(self._wall_ms(), time.monotonic() * 1000)

    def observe_committed_time(self) -> int:
        """Raise this node's clock to the largest time its groups committed; its time now."""
        committed_ms = max((r.state.clock_ms for r in self.replicas.values()), default=0)
        return self.clock.observe(committed_ms, self._wall_ms(), time.monotonic() * 1000)

    def _group_of(self, topic: str, queue_id: int) -> int:
        if not topic:
            raise BadCommand("topic must not be empty")
        try:
            return routing.group_id(topic, queue_id, FIRST_GROUP_ID, self.group_count)
        except ValueError as exc:
            raise BadCommand(f"queue {topic}:{queue_id}: {exc}") from exc

    def _leader_hint(self, leader: int) -> str:
        return self.addresses.get(leader, "") if leader else ""

    def _led_replica(self, group_id: int) -> GroupReplica:
        """The replica of a group this node leads; NOT_LEADER (with a hint) otherwise.

        While this node's WAL has failed it leads nothing: NOT_LEADER without a
        hint, naming the cause (callers go to another replica, as after a crash).
        """
        if self.driver.stopped:
            try:
                self.driver.raise_if_failed()
            except RaftError as exc:
                raise StorageNotLeader(f"node {self.driver.node_id} leads no group: {exc}") from exc
        replica = self.replicas.get(group_id)
        if replica is None:
            raise GroupNotHosted(f"node {self.driver.node_id} hosts no replica of group {group_id}")
        node = self.driver.host.node(group_id)
        if not node.is_leader():
            raise StorageNotLeader(
                f"node {self.driver.node_id} does not lead group {group_id}",
                self._leader_hint(node.lead),
            )
        return replica

    async def _propose(self, group_id: int, command: Command) -> Result:
        """Propose ``command``; its result once applied here, or its error raised."""
        return await self._propose_encoded(group_id, encode(command))

    async def _propose_encoded(self, group_id: int, data: bytes) -> Result:
        """Propose the encoded command ``data``; as :meth:`_propose`."""
        try:
            result = await self.driver.propose(group_id, data)
        except RaftNotLeader as exc:
            raise StorageNotLeader(str(exc), self._leader_hint(exc.leader)) from exc
        if isinstance(result, StorageError):
            raise result
        return cast(Result, result)

    async def _read_barrier(self, group_id: int) -> GroupReplica:
        """The led replica, once it has applied everything committed before its term."""
        replica = self._led_replica(group_id)
        if not self._term_applied(group_id, replica):
            await self._propose(group_id, Tick(self.now_ms()))
        return replica

    def _term_applied(self, group_id: int, replica: GroupReplica) -> bool:
        """Whether ``replica`` applied an entry of its node's current term (a new
        leader's state covers everything committed before only from then on)."""
        node = cast(RawNode, self.driver.host.node(group_id))
        return replica.applied_term >= node.hard_state().term

    async def _readable_replica(self, group_id: int, from_follower: bool) -> GroupReplica:
        """The replica to read from: the leader after its barrier, or (read replicas)
        any replica hosted here, as of what it applied (never beyond its commit index)."""
        if from_follower:
            replica = self.replicas.get(group_id)
            if replica is not None:
                return replica
        return await self._read_barrier(group_id)

    def _records(
        self, group_id: int, queue: QueueId, entries: Sequence[QueueEntry]
    ) -> list[MessageRecord]:
        """The records of ``entries`` read from this node's log of the group
        (``reads.records_of``)."""
        return records_of(self._entry_reader(group_id), group_id, queue, entries)

    def _entry_reader(self, group_id: int) -> EntryReader:
        bodies = self.replicas[group_id].bodies
        return lambda log_index: bodies.read_entry(group_id, log_index)

    # ------------------------------------------------------------- methods
    async def append(self, request: AppendRequest, context: CallContext) -> AppendResponse:
        """Store a batch of messages of one queue as one log entry."""
        group_id, count, stored = self._begin_append(request)
        return self._appended(group_id, count, await stored)

    async def append_queues(
        self, request: AppendQueuesRequest, context: CallContext
    ) -> AppendQueuesResponse:
        """Several appends, each as :meth:`append` alone (joined per group by the
        batcher), each with its own outcome: a failure fails only its append."""
        begun: list[tuple[int, int, Awaitable[Joined]] | BaseException] = []
        for append in request.appends:
            try:
                begun.append(self._begin_append(append))
            except Exception as exc:  # noqa: BLE001 - this append's outcome
                begun.append(exc)
        # Every append is under way (its future set before the next round); only now wait.
        outcomes: list[QueueAppended] = []
        for item in begun:
            if isinstance(item, BaseException):
                failed = item
            else:
                group_id, count, stored = item
                try:
                    outcomes.append(QueueAppended(self._appended(group_id, count, await stored)))
                    continue
                except Exception as exc:  # noqa: BLE001 - this append's outcome
                    failed = exc
            outcomes.append(QueueAppended(None, to_wire(from_exception(failed))))
        return AppendQueuesResponse(outcomes)

    def _begin_append(self, request: AppendRequest) -> tuple[int, int, Awaitable[Joined]]:
        """Check ``request`` and put it under way: its group, its record count and what
        ends with its result and store time (raises what the append fails with at once)."""
        group_id = self._group_of(request.topic, request.queue_id)
        self._led_replica(group_id)
        records, items = append_records(request)
        body_bytes = sum(map(len, map(_record_body, records)))
        if body_bytes > APPEND_BODY_BYTES_MAX:
            raise BadCommand(
                f"an append carries {body_bytes} body bytes, more than {APPEND_BODY_BYTES_MAX}"
            )
        if items is not None or all(map(is_canonical, records)):
            # Joined with the group's other appends of this round into one entry,
            # applied by the leader without decoding (see append_batcher). Every
            # record is of the request's queue (append_records): only ids vary.
            if not request.topic or request.queue_id < 0 or "" in map(_record_id, records):
                for record in records:
                    check_record(record)  # names the record at fault
            return (
                group_id,
                len(records),
                self._joined(self.batcher.add(group_id, records, body_bytes, items)),
            )
        # Alone, and decoded on apply by every replica: a record of a wrong type
        # fails alike everywhere.
        return group_id, len(records), self._alone(group_id, records)

    @property
    def append_entries(self) -> int:
        """The raft log entries the appends stored through this node took since it started:
        the appends to one group that arrive between two rounds join into one entry
        (``append_batcher``), so messages per entry is how well they were joined."""
        return self.batcher.stored_batches + self._alone_entries

    async def _joined(self, joined: Awaitable[Joined]) -> Joined:
        try:
            return await joined
        except RaftNotLeader as exc:
            raise StorageNotLeader(str(exc), self._leader_hint(exc.leader)) from exc

    async def _alone(self, group_id: int, records: list[MessageRecord]) -> Joined:
        now_ms = self.now_ms()
        appended = await self._propose(group_id, Append(now_ms, tuple(records)))
        assert isinstance(appended, AppendResult)
        self._alone_entries += 1
        return appended, now_ms

    def _appended(self, group_id: int, count: int, stored: Joined) -> AppendResponse:
        """Count a stored append (the load this node reports) and answer it."""
        result, now_ms = stored
        self.appends_stored += 1
        self.appended_messages += count
        self.appended_by_group[group_id] = self.appended_by_group.get(group_id, 0) + count
        return append_response(result, now_ms)

    async def read(self, request: ReadRequest, context: CallContext) -> ReadResponse:
        """Messages of a queue by offset, bounded by count and body bytes."""
        if request.count_max < 1 or request.bytes_max < 1:
            raise BadCommand("count_max and bytes_max must be at least 1")
        group_id = self._group_of(request.topic, request.queue_id)
        replica = await self._readable_replica(group_id, request.from_follower)
        self.reads_served += 1
        state = replica.state
        queue = (request.topic, request.queue_id)
        sql = sql_filter(request.filter_kind, request.filter_expression)
        tag_filter = TagFilter.parse(MATCH_ALL if sql else request.filter_expression)
        scan_max = request.count_max
        if sql or not tag_filter.matches_all:
            scan_max = max(scan_max, state.config.receive_scan_max)
        if self._first_offset(replica, queue) <= request.queue_offset < state.first_offset(*queue):
            return await self._read_tier(replica, request, scan_max, sql, tag_filter)
        entries = state.read(request.topic, request.queue_id, request.queue_offset, scan_max)
        if sql is None:
            offsets, kept, next_offset = pull.matching(
                entries, request.queue_offset, tag_filter, request.count_max
            )
        else:  # evaluated on the records, before any leaves the node
            offsets, kept, next_offset = property_filter.matching(
                entries,
                request.queue_offset,
                self._entry_reader(group_id),
                group_id,
                queue,
                sql,
                request.count_max,
            )
        first = self._first_offset(replica, queue)
        end = state.end_offset(request.topic, request.queue_id)
        if request.packed:
            items = record_items_of(self._entry_reader(group_id), group_id, queue, kept)
            count = fitting(map(len, items), request.bytes_max)
            if count < len(items):
                next_offset = offsets[count]
            stored_at = [
                StoredAt(offset, entry.store_timestamp_ms)
                for offset, entry in zip(offsets[:count], kept, strict=False)
            ]
            return ReadResponse([], first, end, next_offset, pack_items(items[:count]), stored_at)
        messages = [
            StoredMessage(offset, entry.store_timestamp_ms, from_record(record))
            for offset, entry, record in zip(
                offsets, kept, self._records(group_id, queue, kept), strict=True
            )
        ]
        total = 0
        for i, stored in enumerate(messages):
            total += len(stored.message.body)
            if total > request.bytes_max and i > 0:
                next_offset = stored.queue_offset
                messages = messages[:i]
                break
        return ReadResponse(messages, first, end, next_offset)

    def _first_offset(self, replica: GroupReplica, queue: QueueId) -> int:
        """A queue's first readable offset: in the tier if it holds older messages than
        the local log (and this node reads the tier), else the local first offset."""
        if self.tier_reader is None:
            return replica.state.first_offset(*queue)
        return replica.state.readable_first_offset(*queue)

    async def _read_tier(
        self,
        replica: GroupReplica,
        request: ReadRequest,
        scan_max: int,
        sql: Sql92Filter | None,
        tag_filter: TagFilter,
    ) -> ReadResponse:
        """:meth:`read` of offsets below the local first offset, from the tier (the same
        filters and bounds; it never reads past the recorded objects)."""
        assert self.tier_reader is not None
        queue = (request.topic, request.queue_id)
        state = replica.state
        looked = await self.tier_reader.read(
            replica.group_id, state.tier.objects(queue), request.queue_offset, scan_max
        )
        kept = [
            m
            for m in looked
            if (
                sql.matches(visible_properties(m.record.properties, m.record.tag, m.record.keys))
                if sql is not None
                else tag_filter.matches(m.record.tag)
            )
        ][: request.count_max]
        if not looked:  # the objects end here (an expiry raced this read)
            next_offset = request.queue_offset
        elif len(kept) == request.count_max:
            next_offset = kept[-1].queue_offset + 1
        else:
            next_offset = looked[-1].queue_offset + 1
        first = self._first_offset(replica, queue)
        end = state.end_offset(*queue)
        if request.packed:
            items = [pack_record(m.record) for m in kept]
            count = fitting(map(len, items), request.bytes_max)
            if count < len(kept):
                next_offset = kept[count].queue_offset
            stored_at = [StoredAt(m.queue_offset, m.store_timestamp_ms) for m in kept[:count]]
            return ReadResponse([], first, end, next_offset, pack_items(items[:count]), stored_at)
        count = fitting((len(m.record.body) for m in kept), request.bytes_max)
        if count < len(kept):
            next_offset = kept[count].queue_offset
        messages = [
            StoredMessage(m.queue_offset, m.store_timestamp_ms, from_record(m.record))
            for m in kept[:count]
        ]
        return ReadResponse(messages, first, end, next_offset)

    def _idle_receive_end(
        self, group_id: int, replica: GroupReplica, request: ReceiveRequest, now_ms: int
    ) -> int | None:
        """The end offset for an empty answer without proposing (see
        ``PartitionState.idle_receive_end``); None: propose. Never for a retried
        attempt, nor on a new leader before its term's first entry applied here."""
        if request.attempt_id or not self._term_applied(group_id, replica):
            return None
        return replica.state.idle_receive_end(
            request.group, request.topic, request.queue_id, now_ms
        )

    async def receive(self, request: ReceiveRequest, context: CallContext) -> ReceiveResponse:
        """Pop messages for a consumer group; long-poll up to ``poll_ms`` when none."""
        group_id = self._group_of(request.topic, request.queue_id)
        queue = (request.topic, request.queue_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, request.poll_ms) / 1000
        sql = sql_filter(request.filter_kind, request.filter_expression)
        dead_lettered = 0
        tier_messages: dict[int, TierMessage] = {}
        while True:
            replica = self._led_replica(group_id)
            grown = replica.grown(queue)
            now_ms = self.now_ms()
            idle_end = self._idle_receive_end(group_id, replica, request, now_ms)
            more = False
            if idle_end is not None:  # nothing to hand out or change: no log entry
                result: Result = ReceiveResult((), (), idle_end)
            else:
                receive = receive_command(request, now_ms)
                command: Command = receive
                if sql is not None:  # its verdicts go into the command
                    filtered, more = property_filter.evaluate(
                        replica.state, self._entry_reader(group_id), receive, sql
                    )
                    # Go on at once only past messages this one finished (progress).
                    more = more and bool(filtered.unmatched)
                    command = receive = filtered
                if self.tier_reader is not None and replica.state.tier:
                    tiered = await with_tier_rows(
                        self.tier_reader, replica.state, receive, sql, now_ms
                    )
                    command, tier_messages = tiered.command, tiered.messages
                    more = more or tiered.fresh
                result = await self._propose(group_id, command)
            assert isinstance(result, ReceiveResult)
            dead_lettered += len(result.dead_lettered)
            remaining_s = deadline - loop.time()
            if result.deliveries or remaining_s <= 0:
                break
            if more:  # the filter's evaluation stopped short of the scan window
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(grown.wait(), remaining_s)
            if loop.time() >= deadline and not grown.is_set():
                break
        deliveries = result.deliveries
        if request.packed:
            reader = self._entry_reader(group_id)
            items = self._delivered(
                deliveries,
                tier_messages,
                lambda entries: record_items_of(reader, group_id, queue, entries),
                pack_record,
            )
            kept = fitting(map(len, items), RECEIVE_BYTES_MAX)
            records = []
        else:
            items = []
            records = self._delivered(
                deliveries,
                tier_messages,
                lambda entries: self._records(group_id, queue, entries),
                lambda record: record,
            )
            kept = fitting(map(record_bytes, records), RECEIVE_BYTES_MAX)
        if kept < len(deliveries):
            await self._release(group_id, request.group, deliveries[kept:])
            deliveries, records, items = deliveries[:kept], records[:kept], items[:kept]
        # A hint for the caller's long poll, read from this replica whether or not it
        # still leads (the answer itself is already decided).
        leased = replica.state.leased_count(request.group, request.topic, request.queue_id)
        if request.packed:
            return ReceiveResponse(
                [],
                dead_lettered,
                result.end_offset,
                pack_items(items),
                [
                    # A storage handle is its 4 fields in order.
                    PackedDelivery(
                        *d.handle,
                        d.delivery_attempt,
                        d.invisible_until_ms,
                        d.entry.store_timestamp_ms,
                    )
                    for d in deliveries
                ],
                leased,
            )
        return ReceiveResponse(
            [
                ReceivedMessage(
                    d.handle,
                    d.delivery_attempt,
                    d.invisible_until_ms,
                    StoredMessage(
                        d.handle.queue_offset, d.entry.store_timestamp_ms, from_record(record)
                    ),
                )
                for d, record in zip(deliveries, records, strict=True)
            ],
            dead_lettered,
            result.end_offset,
            leased=leased,
        )

    def _delivered(
        self,
        deliveries: Sequence[Delivery],
        tier_messages: Mapping[int, TierMessage],
        read_local: Callable[[list[QueueEntry]], Sequence[T]],
        from_tier: Callable[[MessageRecord], T],
    ) -> list[T]:
        """What is sent of each of ``deliveries`` in order: ``read_local`` of the entries
        in this node's log, ``from_tier`` of the records a receive read from the tier
        for its tier-only entries (``tier_receive``)."""
        local = read_local([d.entry for d in deliveries if not d.entry.tier_only])
        out: list[T] = []
        position = 0
        for d in deliveries:
            if d.entry.tier_only:
                out.append(from_tier(tier_messages[d.handle.queue_offset].record))
            else:
                out.append(local[position])
                position += 1
        return out

    async def _release(self, group_id: int, group: str, deliveries: Sequence[Delivery]) -> None:
        """Hand granted deliveries back at once, uncounted (they did not fit the answer).

        Best effort: if the release fails, they reappear when their invisible
        duration ends, one attempt counted.
        """
        handles = tuple(d.handle for d in deliveries)
        with contextlib.suppress(StorageError, RaftError, TimeoutError):
            await self._propose(group_id, Release(self.now_ms(), group, handles))

    async def ack(self, request: AckRequest, context: CallContext) -> AckResponse:
        """Acknowledge deliveries; each handle has its own outcome."""
        group_id = self._group_of(request.topic, request.queue_id)
        self._led_replica(group_id)
        topic, queue_id = request.topic, request.queue_id
        for handle in request.handles:
            if handle.topic != topic or handle.queue_id != queue_id:
                raise BadCommand(
                    f"handle of {handle.topic}:{handle.queue_id} in an ack of {topic}:{queue_id}"
                )
        handles = tuple(request.handles)
        result = await self._propose(group_id, Ack(self.now_ms(), request.group, handles))
        assert isinstance(result, AckResult)
        return AckResponse(
            [
                AckOutcome(
                    o.handle.queue_offset,
                    0 if o.error is None else o.error.number,
                    "" if o.error is None else o.error.name,
                )
                for o in result.outcomes
            ]
        )

    async def change_invisible(
        self, request: ChangeInvisibleRequest, context: CallContext
    ) -> ChangeInvisibleResponse:
        """Renew (or end, with 0) a delivery's invisibility; a new handle."""
        handle = request.handle
        group_id = self._group_of(handle.topic, handle.queue_id)
        self._led_replica(group_id)
        command = ChangeInvisibleDuration(
            self.now_ms(), request.group, handle, request.invisible_duration_ms
        )
        result = await self._propose(group_id, command)
        assert isinstance(result, ChangeInvisibleDurationResult)
        return ChangeInvisibleResponse(
            result.handle, result.invisible_until_ms, result.delivery_attempt
        )

    async def commit_offset(
        self, request: CommitOffsetRequest, context: CallContext
    ) -> OffsetResponse:
        """Set a consumer group's position in a queue: a consumer's commit
        (``keep_leases``) or an operator's reset."""
        group_id = self._group_of(request.topic, request.queue_id)
        self._led_replica(group_id)
        kind = CommitConsumerOffset if request.keep_leases else CommitOffset
        command = kind(
            self.now_ms(), request.group, request.topic, request.queue_id, request.offset
        )
        result = await self._propose(group_id, command)
        assert isinstance(result, CommitOffsetResult)
        return OffsetResponse(result.offset)

    async def get_offset(self, request: GetOffsetRequest, context: CallContext) -> OffsetResponse:
        """A consumer group's committed position in a queue, past messages in flight
        (None: never consumed)."""
        group_id = self._group_of(request.topic, request.queue_id)
        replica = await self._read_barrier(group_id)
        return OffsetResponse(
            replica.state.committed_offset(request.group, request.topic, request.queue_id)
        )

    async def queue_info(
        self, request: QueueInfoRequest, context: CallContext
    ) -> QueueInfoResponse:
        """A queue's first and end offsets, and the offset of a store time if asked;
        with ``end_above`` and ``wait_ms``, once the queue grows past ``end_above``."""
        group_id = self._group_of(request.topic, request.queue_id)
        if request.end_above >= 0 and request.wait_ms > 0:
            replica = await self._await_end_above(group_id, request)
        else:
            replica = await self._readable_replica(group_id, request.from_follower)
        state = replica.state
        timestamp_offset = -1
        if request.timestamp_ms >= 0:
            timestamp_offset = state.offset_for_timestamp(
                request.topic, request.queue_id, request.timestamp_ms
            )
        queue = (request.topic, request.queue_id)
        tier: tuple[int, int, int, str] = (-1, -1, -1, "")
        if self.tier_status is not None:
            lag, last_error = self.tier_status(replica, queue, self.now_ms())
            tier = (lag.upload_point, lag.log_bytes, lag.age_ms, last_error)
        return QueueInfoResponse(
            self._first_offset(replica, queue),
            state.end_offset(*queue),
            group_id,
            timestamp_offset,
            state.first_offset(*queue),
            *tier,
        )

    async def _await_end_above(self, group_id: int, request: QueueInfoRequest) -> GroupReplica:
        """The replica to answer ``request`` from, once its queue's end offset is above
        ``end_above`` or the wait (at most ``QUEUE_INFO_WAIT_MS_MAX``) is over; the
        replica is checked again after each wake-up (leadership may have moved)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(request.wait_ms, QUEUE_INFO_WAIT_MS_MAX) / 1000
        queue = (request.topic, request.queue_id)
        while True:
            replica = await self._readable_replica(group_id, request.from_follower)
            remaining_s = deadline - loop.time()
            if replica.state.end_offset(*queue) > request.end_above or remaining_s <= 0:
                return replica
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(replica.grown(queue).wait(), remaining_s)

    async def status(self, request: NodeStatusRequest, context: CallContext) -> NodeStatusResponse:
        """Which node leads each group, as this node knows it."""
        host = self.driver.host
        groups = range(FIRST_GROUP_ID, FIRST_GROUP_ID + self.group_count)
        leaders = [host.leader_of(g) if g in self.replicas else 0 for g in groups]
        led = [g for g in groups if g in self.replicas and host.node(g).is_leader()]
        return NodeStatusResponse(
            self.driver.node_id, FIRST_GROUP_ID, leaders, led, self.reads_served
        )

    async def end_transaction(
        self, request: EndTransactionRequest, context: CallContext
    ) -> EndTransactionResponse:
        """Commit (the half message enters its queue) or roll back a transaction."""
        group_id = self._group_of(request.topic, request.queue_id)
        self._led_replica(group_id)
        command = EndTransaction(
            self.now_ms(), request.topic, request.transaction_id, request.commit
        )
        result = await self._propose(group_id, command)
        assert isinstance(result, EndTransactionResult)
        if result.outcome is None:
            return EndTransactionResponse(result.committed)
        return EndTransactionResponse(
            result.committed, int(result.outcome.placement), result.outcome.queue_offset
        )

    async def cancel_timer(
        self, request: CancelTimerRequest, context: CallContext
    ) -> CancelTimerResponse:
        """Cancel a held delayed message before it is due."""
        group_id = self._group_of(request.topic, request.queue_id)
        self._led_replica(group_id)
        command = CancelTimer(self.now_ms(), request.topic, request.message_id)
        result = await self._propose(group_id, command)
        assert isinstance(result, CancelTimerResult)
        return CancelTimerResponse(result.cancelled)

    async def scan_transactions(
        self, request: ScanTransactionsRequest, context: CallContext
    ) -> ScanTransactionsResponse:
        """Half messages of a group due for a check-back, with their messages."""
        if request.limit < 1:
            raise BadCommand("limit must be at least 1")
        replica = await self._read_barrier(request.group_id)
        halves = replica.state.half_messages_due(
            request.stored_before_ms, request.checked_before_ms, request.limit
        )
        # Each half message is read through the same path as queue reads (by its log
        # index and position), so wherever bodies live, a half message is found alike.
        infos = []
        for half in halves:
            entry = QueueEntry(
                half.log_index, half.position, half.stored_ms, half.tag, half.message_group
            )
            (record,) = self._records(request.group_id, (half.topic, half.queue_id), [entry])
            infos.append(HalfMessageInfo(from_record(record), half.stored_ms, half.check_count))
        return ScanTransactionsResponse(infos)

    async def note_transaction_checks(
        self, request: NoteTransactionChecksRequest, context: CallContext
    ) -> NoteTransactionChecksResponse:
        """Count one check-back of each half message; roll back those out of checks."""
        self._led_replica(request.group_id)
        command = NoteTransactionChecks(
            self.now_ms(), tuple(request.transaction_ids), request.check_max
        )
        result = await self._propose(request.group_id, command)
        assert isinstance(result, TransactionChecksResult)
        return NoteTransactionChecksResponse(
            list(result.noted), list(result.discarded), list(result.unknown)
        )

    async def query_messages(
        self, request: QueryMessagesRequest, context: CallContext
    ) -> QueryMessagesResponse:
        """Messages of a raft group by id or key in a time range, through the key index."""
        try:
            query = Query(
                request.topic,
                request.message_id,
                request.key,
                request.begin_ms,
                request.end_ms,
                request.limit,
            )
        except ValueError as exc:
            raise BadCommand(str(exc)) from exc
        group_id = request.group_id
        replica = await self._read_barrier(group_id)

        def read(queue: QueueId, entries: Sequence[QueueEntry]) -> list[MessageRecord]:
            return self._records(group_id, queue, entries)

        tier_reader = self.tier_reader if replica.state.tier else None
        return await message_query.query_messages(
            self.key_index, group_id, replica.state, read, tier_reader, query
        )

    async def group_progress(
        self, request: GroupProgressRequest, context: CallContext
    ) -> GroupProgressResponse:
        """A consumer group's progress in the queues of a raft group (pop and pull alike)."""
        if not request.consumer_group:
            raise BadCommand("group progress needs a consumer group")
        replica = await self._read_barrier(request.group_id)
        return GroupProgressResponse(
            group_progress(replica.state, request.consumer_group, request.topic)
        )

    async def export_snapshot(
        self, request: ExportSnapshotRequest, context: CallContext
    ) -> ExportSnapshotResponse:
        """Write a group's queues as message objects up to one applied index
        (``storage_node.snapshot_export``)."""
        self._led_replica(request.group_id)
        async with self._exports:
            replica = await self._read_barrier(request.group_id)
            return await export_group(replica, request)

    async def group_membership(
        self, request: GroupMembershipRequest, context: CallContext
    ) -> GroupMembershipResponse:
        """The group's membership as this leader applied it, after a read barrier (so
        it covers every change committed before its term)."""
        await self._read_barrier(request.group_id)
        return self.membership(request.group_id)

    def membership(self, group_id: int) -> GroupMembershipResponse:
        """The membership of hosted group ``group_id`` as this replica applied it."""
        node = cast(RawNode, self.driver.host.node(group_id))
        status = node.status()
        conf = status.conf_state
        return GroupMembershipResponse(
            group_id,
            self.driver.node_id,
            status.term,
            sorted(conf.voters),
            sorted(conf.learners),
            sorted(conf.voters_outgoing),
            sorted(conf.learners_next),
            status.applied,
        )

    async def readmit_replica(
        self, request: ReadmitRequest, context: CallContext
    ) -> GroupMembershipResponse:
        """Note that ``request.node_id`` lost its replica of the group (its WAL was set
        aside: storage_node/data_loss.py); the membership loop removes it, then adds it
        back as a learner and promotes it. Answers the membership once the removal is
        applied, or as it stands after ``READMIT_WAIT_MS`` (the node asks again)."""
        group_id, node_id = request.group_id, request.node_id
        if node_id == self.driver.node_id:
            # A stale leader hint led the node to itself: it leads nothing (data lost).
            raise StorageNotLeader(
                f"node {node_id} lost its replica of group {group_id} and leads it not"
            )
        await self._read_barrier(group_id)
        node = cast(RawNode, self.driver.host.node(group_id))
        conf = node.conf_state()
        members = conf.voters | conf.learners | conf.voters_outgoing | conf.learners_next
        lost = self.lost_replicas.setdefault(group_id, set())
        if node_id in members and node_id not in lost:
            lost.add(node_id)
            _log.warning(
                "a member lost its replica's data: removing it, then adding it back",
                extra={"group": group_id, "node": node_id},
            )
        if node_id in lost:
            removed = self.lost_removed.get(group_id)
            if removed is None:
                removed = self.lost_removed[group_id] = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                # The membership as the removal left it: by the time this task runs
                # again the node may be a learner already (the loop goes on at once).
                answer = await asyncio.wait_for(asyncio.shield(removed), READMIT_WAIT_MS / 1000)
                if answer is not None:
                    return answer
        return self.membership(self._led_replica(group_id).group_id)


READMIT_WAIT_MS = 3_000
"""How long a leader asked to re-admit a node waits for its removal before it answers."""


def _wall_ms() -> float:
    # With its fraction: the node clock starts at it (node_clock.NodeClock.read).
    return time.time() * 1000


_record_body = operator.itemgetter(MessageRecord._fields.index("body"))
_record_id = operator.itemgetter(MessageRecord._fields.index("message_id"))
