"""The ``MessageStore`` port over the storage nodes (Angelia ``storage.*``).

Routing: a queue is served by one raft group (``protocol.routing``; the
nameserver's route names the group and its leader and followers). A call
goes to the leader this broker last learned for the group, else to the
route's leader, else to the group's other replicas and the configured seed
storage nodes in turn, through :func:`angelia_rpc.failover.call_leader`,
which decides by the error's flags alone: a replica that names the leader
(NOT_LEADER's hint) sends the call there at once; a retriable failure
without a hint moves it to the next replica after a pause, and once every
replica failed the route is read again, all within the call's deadline. An
unreachable node answers at once (stubs do not wait for ready), so a dead
leader costs a retry, not a call timeout. Failures that are not retriable
keep their shared code, so ``broker/grpc/status.py`` answers the documented
v2 status.

The hot path is a call to the leader last seen: it is made here, without
the failover's state, which is built only when that call fails.

Retrying is safe: appends are idempotent by message id; a receive that
timed out leaves its grants to expire and be delivered again (at least
once); acks and invisibility changes are fenced by the handle's generation.

Dead letters: the storage node moves a message past the group's max
attempts into ``(%DLQ%<group>, group id)`` by itself during a receive;
:meth:`StorageStore.forward_to_dead_letter` does the same on request, as
renew (to fence the handle), read, append to the dead-letter queue of the
same raft group, ack.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import repeat
from typing import TypeVar

from angelia_rpc import AngeliaError, Peers
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.failover import Failover, FailoverPolicy, attempt_timeout_ms, call_leader
from broker.domain import (
    GroupInfo,
    HalfMessage,
    Message,
    PopResult,
    PulledMessage,
    QueueOffsets,
    QueueRef,
    QueueSlice,
    SendResult,
)
from broker.errors import BrokerError, Reason
from broker.processor.replica_reads import ReadSpread, usable_answer
from broker.services import cluster_convert as convert
from broker.services.growth import GrowthWatch
from broker.services.nameserver import ClusterMetadata
from broker.services.node_appends import NodeAppends
from broker.waiting import deal_out, fail_waiting
from protocol import errors as codes
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.filters import MessageFilter
from protocol.positional import positional
from protocol.records import MessageRecord, RecordCorrupted, pack_records, unpack_records
from protocol.vocabulary import Placement

log = logging.getLogger("broker.storage")
T = TypeVar("T")

CALL_TIMEOUT_MS = 5_000
DEADLINE_MS = 10_000
REVISIT_MS = 1_000
"""The longest a long poll waits without popping again: redeliveries after an
invisible time (which storage does not announce) are noticed within this."""
_PLACEMENTS = {int(placement): placement for placement in Placement}
_new_result = positional(SendResult)
"""A :class:`SendResult` from its fields in order (one per stored message)."""
PAUSE_FIRST_S = 0.02
PAUSE_MAX_S = 0.5
"""A call's pauses between misses double from the first to the max."""
GROWTH_WAIT_MS = 2_000
"""How long one storage call of a growth watch waits for its queue to grow."""
GROWTH_WAIT_MARGIN_MS = 500
"""Kept between that wait and the call's timeout (the answer's way back)."""
GROWTH_RETRY_MS = 50
"""A growth watch's pause after a failed call (or an early answer without growth)."""


class StorageStore:
    """The storage port (see the module docstring).

    ``seeds``: storage node addresses tried when the route names no replica
    of a group (e.g. before the storage nodes have reported to the nameserver).
    """

    def __init__(
        self,
        metadata: ClusterMetadata,
        peers: Peers,
        *,
        seeds: Sequence[str] = (),
        call_timeout_ms: int = CALL_TIMEOUT_MS,
        deadline_ms: int = DEADLINE_MS,
        revisit_ms: int = REVISIT_MS,
    ) -> None:
        self._metadata = metadata
        self._spread = ReadSpread()
        self._peers = peers
        self._seeds = list(seeds)
        self._call_timeout_ms = call_timeout_ms
        self._deadline_ms = deadline_ms
        self._policy = FailoverPolicy(PAUSE_FIRST_S, PAUSE_MAX_S, call_timeout_ms=call_timeout_ms)
        # A group's scan: one pass over its candidates, no pause (see _call_group).
        self._scan_policy = FailoverPolicy(0.0, 0.0, call_timeout_ms=call_timeout_ms, passes_max=1)
        self._revisit_ms = revisit_ms
        self._growth = GrowthWatch(self._end_above, retry_ms=GROWTH_RETRY_MS)
        self._leaders: dict[int, str] = {}  # raft group id -> the address that last led it
        # Appends to the leader last seen, joined per storage node (group commit).
        self.node_appends = NodeAppends(self._append_queues, self._append_single)
        self._acks: dict[
            tuple[str, QueueRef],
            list[tuple[list[st.ReceiptHandle], asyncio.Future[list[BrokerError | None]]]],
        ] = {}
        self._ack_flushers: dict[tuple[str, QueueRef], asyncio.Task[None]] = {}
        metadata.on_route_change(self._forget_leader)

    # -- routing ----------------------------------------------------------------------

    def _forget_leader(self, group_id: int | None) -> None:
        """Forget the leader last seen of raft group ``group_id`` (None: of every
        group): its route changed, so the next call starts from the route's leader."""
        if group_id is None:
            self._leaders.clear()
        else:
            self._leaders.pop(group_id, None)

    async def _queue_route(self, queue: QueueRef) -> ns.QueueRouteInfo:
        return _queue_of(await self._metadata.route(queue.topic), queue)

    def _candidates(self, info: ns.QueueRouteInfo) -> list[str]:
        known = self._leaders.get(info.group_id)
        ordered = [known] if known else []
        if info.leader is not None and info.leader.alive:
            ordered.append(info.leader.address)
        ordered += [f.address for f in info.followers if f.alive]
        ordered += [f.address for f in info.followers if not f.alive]
        ordered += self._seeds
        return list(dict.fromkeys(a for a in ordered if a))

    async def _route_with_replicas(
        self, queue: QueueRef, deadline: float, info: ns.QueueRouteInfo | None = None
    ) -> tuple[ns.QueueRouteInfo, list[str]]:
        """The queue's route (``info`` if given) and the addresses to try, the leader last
        seen first; while the route names no replica (the groups are not placed yet),
        read it again with backoff until ``deadline``."""
        loop = asyncio.get_running_loop()
        delay_s = 0.05
        while True:
            if info is None:
                info = await self._queue_route(queue)
            candidates = self._candidates(info)
            if candidates or loop.time() + delay_s >= deadline:
                return info, candidates
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.5)
            self._metadata.forget_route(queue.topic)
            info = None

    async def _call(
        self,
        queue: QueueRef,
        what: str,
        method: Callable[[StorageService, int], Awaitable[T]],
        *,
        deadline_ms: int | None = None,
        first: Callable[[str, int], Awaitable[T]] | None = None,
    ) -> T:
        """``method(stub, timeout_ms)`` on the leader of ``queue``'s group (see the module);
        ``first(address, timeout_ms)``, if given, is the hot path's call to the leader last
        seen instead (a failure of it goes through the failover with ``method``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (deadline_ms or self._deadline_ms) / 1000
        info = await self._queue_route(queue)
        leader = self._leaders.get(info.group_id)
        failure = None
        if leader:  # the hot path: the leader last seen, no failover state
            timeout_ms = attempt_timeout_ms(self._call_timeout_ms, deadline, loop.time())
            try:
                if first is not None:
                    return await first(leader, timeout_ms)
                stub = self._peers.stub(StorageService, leader, wait_for_ready=False)
                return await method(stub, timeout_ms)
            except AngeliaError as error:
                failure = error
        return await self._fail_over(queue, info, what, method, deadline, leader, failure)

    async def _fail_over(
        self,
        queue: QueueRef,
        info: ns.QueueRouteInfo,
        what: str,
        method: Callable[[StorageService, int], Awaitable[T]],
        deadline: float,
        leader: str | None,
        failure: AngeliaError | None,
    ) -> T:
        """:meth:`_call` once its leader is unknown, or the call to it, ``leader``, failed
        with ``failure``."""
        info, candidates = await self._route_with_replicas(queue, deadline, info)
        if failure is not None and leader:
            candidates = list(dict.fromkeys([leader, *candidates]))  # the failed one first
        if not candidates:
            raise BrokerError(
                codes.UNAVAILABLE, f"{what}: no storage node serves raft group {info.group_id}"
            )

        async def refresh() -> list[str]:
            self._metadata.forget_route(queue.topic)
            return (await self._route_with_replicas(queue, deadline))[1]

        failover = Failover(candidates, self._policy, deadline)
        return await self._follow(info.group_id, failover, what, method, refresh, failure)

    async def _follow(
        self,
        group_id: int,
        failover: Failover,
        what: str,
        method: Callable[[StorageService, int], Awaitable[T]],
        refresh: Callable[[], Awaitable[list[str]]] | None = None,
        failure: AngeliaError | None = None,
    ) -> T:
        """``method`` on raft group ``group_id``'s leader as ``failover`` decides (see
        :func:`call_leader`); the replica that answers is remembered as the leader."""
        loop = asyncio.get_running_loop()

        def attempt(address: str, timeout_ms: int) -> Awaitable[T]:
            stub = self._peers.stub(StorageService, address, wait_for_ready=False)
            return method(stub, timeout_ms)

        try:
            result = await call_leader(
                failover,
                attempt,
                clock=loop.time,
                sleep=asyncio.sleep,
                refresh=refresh,
                failure=failure,
            )
        except AngeliaError as error:
            raise convert.error_from_angelia(error, what) from None
        self._leaders[group_id] = failover.address
        return result

    def _append_queues(
        self, address: str, request: st.AppendQueuesRequest, timeout_ms: int
    ) -> Awaitable[st.AppendQueuesResponse]:
        stub = self._peers.stub(StorageService, address, wait_for_ready=False)
        return stub.append_queues(request, timeout_ms=timeout_ms)

    def _append_single(
        self, address: str, request: st.AppendRequest, timeout_ms: int
    ) -> Awaitable[st.AppendResponse]:
        stub = self._peers.stub(StorageService, address, wait_for_ready=False)
        return stub.append(request, timeout_ms=timeout_ms)

    # -- the port ---------------------------------------------------------------------

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        """Append a batch to one queue as one storage append (one raft entry)."""
        records = pack_records([convert.message_to_record(m, queue) for m in messages])
        request = st.AppendRequest(queue.topic, queue.queue_id, records=records)
        response = await self._call(
            queue,
            f"append to {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.append(request, timeout_ms=timeout_ms),
            first=lambda address, timeout_ms: self.node_appends.append(
                address, request, timeout_ms
            ),
        )
        stored_ms = response.store_timestamp_ms
        if response.queued_ids:  # the common form: queued, in order, at consecutive offsets
            first = response.queued_from
            queued = Placement.QUEUED
            results = list(
                map(
                    _new_result,
                    zip(
                        repeat(queue),
                        range(first, first + len(response.queued_ids)),
                        repeat(stored_ms),
                        repeat(queued),
                    ),
                )
            )
        else:
            results = [
                SendResult(queue, outcome.queue_offset, stored_ms, _PLACEMENTS[outcome.placement])
                for outcome in response.listed
            ]
        if len(results) != len(messages):
            raise BrokerError(
                codes.INTERNAL,
                f"append to {queue.topic}:{queue.queue_id}: storage answered "
                f"{len(results)} outcomes for {len(messages)} messages",
            )
        return results

    async def pop(
        self,
        group: GroupInfo,
        queue: QueueRef,
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> PopResult:
        """One storage receive (no waiting); a topic the nameserver lacks is empty."""
        request = st.ReceiveRequest(
            group=group.name,
            topic=queue.topic,
            queue_id=queue.queue_id,
            max_messages=batch_size,
            invisible_duration_ms=invisible_ms,
            max_delivery_attempts=group.retry.max_delivery_attempts,
            filter_expression=message_filter.expression,
            filter_kind=int(message_filter.kind),
            fifo=group.fifo,
            packed=True,
        )
        try:
            response = await self._call(
                queue,
                f"receive from {queue.topic}:{queue.queue_id}",
                lambda stub, timeout_ms: stub.receive(request, timeout_ms=timeout_ms),
            )
        except BrokerError as error:
            if error.reason is Reason.TOPIC_NOT_FOUND:  # auto-create: not sent to yet
                return PopResult((), -1)
            raise
        records = _records_of(response.records, len(response.deliveries), "receive")
        popped = tuple(map(convert.popped_from_packed, response.deliveries, records))
        return PopResult(popped, response.end_offset, leased=response.leased)

    async def ack(self, group: str, queue: QueueRef, offset: int, generation: int) -> None:
        """Finish a delivery; INVALID_RECEIPT_HANDLE when the handle is stale.

        Concurrent acks of one (group, queue) go to storage as one ack call.
        """
        (error,) = await self._enqueue_acks(group, queue, [(offset, generation)])
        if error is not None:
            raise error

    async def ack_all(
        self, group: str, deliveries: Sequence[tuple[QueueRef, int, int]]
    ) -> list[BrokerError | None]:
        """Finish many deliveries (see ``MessageStore.ack_all``); those of one queue go
        to storage in one ack call, with whatever other acks of it are pending."""
        by_queue: dict[QueueRef, list[int]] = {}
        for index, (queue, _offset, _generation) in enumerate(deliveries):
            by_queue.setdefault(queue, []).append(index)
        outcomes: list[BrokerError | None] = [None] * len(deliveries)
        waiting = [
            self._enqueue_acks(group, queue, [deliveries[i][1:] for i in indexes])
            for queue, indexes in by_queue.items()
        ]
        finished_by_queue = await asyncio.gather(*waiting)
        for indexes, finished in zip(by_queue.values(), finished_by_queue, strict=True):
            for index, outcome in zip(indexes, finished, strict=True):
                outcomes[index] = outcome
        return outcomes

    def _enqueue_acks(
        self, group: str, queue: QueueRef, deliveries: Sequence[tuple[int, int]]
    ) -> asyncio.Future[list[BrokerError | None]]:
        """Queue (offset, generation) handles for the next ack call of (group, queue);
        their outcomes, in order, come later."""
        key = (group, queue)
        done: asyncio.Future[list[BrokerError | None]] = asyncio.get_running_loop().create_future()
        handles = [convert.storage_handle(queue, *delivery) for delivery in deliveries]
        self._acks.setdefault(key, []).append((handles, done))
        if key not in self._ack_flushers:
            self._ack_flushers[key] = asyncio.create_task(self._flush_acks(key))
        return done

    async def _ack_call(
        self, group: str, queue: QueueRef, handles: list[st.ReceiptHandle]
    ) -> st.AckResponse:
        request = st.AckRequest(group, queue.topic, queue.queue_id, handles)
        return await self._call(
            queue,
            f"ack on {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.ack(request, timeout_ms=timeout_ms),
        )

    async def _flush_acks(self, key: tuple[str, QueueRef]) -> None:
        group, queue = key
        try:
            while pending := self._acks.pop(key, []):
                handles = [handle for batch, _ in pending for handle in batch]
                try:
                    response = await self._ack_call(group, queue, handles)
                except Exception as error:  # noqa: BLE001 - handed to every waiting acker
                    fail_waiting((done for _, done in pending), error)
                    continue
                outcomes = [convert.ack_error(outcome) for outcome in response.outcomes]
                if len(outcomes) != len(handles):
                    mismatch = BrokerError(
                        codes.INTERNAL,
                        f"ack on {queue.topic}:{queue.queue_id}: storage answered "
                        f"{len(outcomes)} outcomes for {len(handles)} handles",
                    )
                    fail_waiting((done for _, done in pending), mismatch)
                    continue
                deal_out(((len(batch), done) for batch, done in pending), outcomes)
        finally:
            del self._ack_flushers[key]

    async def change_invisible(
        self, group: str, queue: QueueRef, offset: int, generation: int, invisible_ms: int
    ) -> tuple[int, int]:
        """Hide a delivery for ``invisible_ms`` more; the new (generation, until_ms)."""
        request = st.ChangeInvisibleRequest(
            group, convert.storage_handle(queue, offset, generation), invisible_ms
        )
        response = await self._call(
            queue,
            f"change invisibility on {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.change_invisible(request, timeout_ms=timeout_ms),
        )
        return response.handle.generation, response.invisible_until_ms

    async def forward_to_dead_letter(
        self, group: GroupInfo, queue: QueueRef, offset: int, generation: int
    ) -> SendResult:
        """Move a delivery to ``%DLQ%<group>`` (the queue of its own raft group), then ack it."""
        generation, _ = await self.change_invisible(
            group.name, queue, offset, generation, self._deadline_ms * 2
        )
        read = await self._call(
            queue,
            f"read {queue.topic}:{queue.queue_id}@{offset}",
            lambda stub, timeout_ms: stub.read(
                st.ReadRequest(queue.topic, queue.queue_id, offset, 1), timeout_ms=timeout_ms
            ),
        )
        if not read.messages or read.messages[0].queue_offset != offset:
            raise BrokerError(
                codes.NOT_FOUND, f"message {queue.topic}:{queue.queue_id}@{offset} is gone"
            )
        original = convert.message_from_wire(read.messages[0].message)
        info = await self._queue_route(queue)
        await self._metadata.route(group.dead_letter_topic)  # the topic exists for readers
        dead = QueueRef(group.dead_letter_topic, info.group_id)
        copy = Message(
            topic=dead.topic,
            body=original.body,
            message_id=original.message_id,
            message_type=original.message_type,
            tag=original.tag,
            keys=original.keys,
            user_properties=original.user_properties,
            message_group=original.message_group,
            born_timestamp_ms=original.born_timestamp_ms,
            born_host=original.born_host,
            dead_letter_of=(queue.topic, original.message_id),
        )
        (result,) = await self.append(dead, [copy])
        await self.ack(group.name, queue, offset, generation)
        return result

    async def _end_above(self, topic: str, queue_id: int, above: int) -> int:
        """The end offset of ``topic:queue_id`` once above ``above`` (a storage long poll
        of up to ``GROWTH_WAIT_MS``), or as it is when that wait ends; at once for -1."""
        queue = QueueRef(topic, queue_id)

        def ask(stub: StorageService, timeout_ms: int) -> Awaitable[st.QueueInfoResponse]:
            # The storage answers by itself well before the call's own timeout.
            wait_ms = max(0, min(GROWTH_WAIT_MS, timeout_ms - GROWTH_WAIT_MARGIN_MS))
            request = st.QueueInfoRequest(topic, queue_id, end_above=above, wait_ms=wait_ms)
            return stub.queue_info(request, timeout_ms=timeout_ms)

        info = await self._call(
            queue,
            f"queue info of {topic}:{queue_id}",
            ask,
            deadline_ms=GROWTH_WAIT_MS + self._deadline_ms,
        )
        return info.end_offset

    async def wait_for_append(
        self,
        topic: str,
        known_end_offsets: Mapping[int, int],
        timeout_ms: int,
        *,
        quiet: bool = False,
    ) -> bool:
        """Wait until a queue of ``topic`` grows; False after ``timeout_ms`` or the revisit time.

        Growth is measured from ``known_end_offsets``, the end offsets each
        queue's receive saw when it applied, so a message appended (or a timed
        message released) between that receive and this wait is found at the
        next look. A storage node that does not report them (-1) makes the
        next look the baseline (an append just before it is then found by the
        pop after the revisit time at the latest). Every long poll of a queue
        shares one storage long poll on its growth at a time (see ``growth.py``).

        The revisit time (a pop again, for leases ending unannounced) is skipped
        when the caller is ``quiet`` (its group holds no lease on these queues)
        and every end offset is known: then only growth can bring messages.
        """
        if quiet and all(end >= 0 for end in known_end_offsets.values()):
            timeout_s = timeout_ms / 1000
        else:
            timeout_s = min(timeout_ms, self._revisit_ms) / 1000
        return await self._growth.wait(topic, known_end_offsets, timeout_s)

    async def get_consumer_offset(self, group: str, queue: QueueRef) -> int | None:
        """The group's committed offset on ``queue`` (None if it never consumed)."""
        response = await self._call(
            queue,
            f"offset of {group} on {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.get_offset(
                st.GetOffsetRequest(group, queue.topic, queue.queue_id), timeout_ms=timeout_ms
            ),
        )
        return response.offset

    # -- transactions (see the MessageStore contract) ------------------------------------

    async def end_transaction(
        self, queue: QueueRef, message_id: str, commit: bool
    ) -> SendResult | None:
        """Commit or roll back a half message on its group's leader."""
        request = st.EndTransactionRequest(queue.topic, queue.queue_id, message_id, commit)
        try:
            response = await self._call(
                queue,
                f"end transaction {message_id!r} on {queue.topic}:{queue.queue_id}",
                lambda stub, timeout_ms: stub.end_transaction(request, timeout_ms=timeout_ms),
            )
        except BrokerError as error:
            if error.code is codes.NOT_FOUND:
                raise BrokerError.of(Reason.TRANSACTION_NOT_FOUND, error.message) from None
            raise
        if not response.committed:
            return None
        return SendResult(queue, response.queue_offset, 0, Placement(response.placement))

    async def _call_group(
        self,
        group_id: int,
        candidates: Sequence[str],
        what: str,
        method: Callable[[StorageService, int], Awaitable[T]],
    ) -> T:
        """``method`` on the leader of raft group ``group_id``: the one last known, else
        the candidates in turn, following leader hints without a pause; one pass, then
        the last error."""
        known = self._leaders.get(group_id)
        ordered = list(dict.fromkeys([*([known] if known else []), *candidates]))
        if not ordered:
            raise BrokerError(codes.UNAVAILABLE, f"{what}: no storage node for group {group_id}")
        failover = Failover(ordered, self._scan_policy, math.inf)
        return await self._follow(group_id, failover, what, method)

    async def orphaned_transactions(
        self, stored_before_ms: int, checked_before_ms: int, limit: int
    ) -> list[HalfMessage]:
        """Scan every raft group of the cluster (on its leader) for half messages due.

        The groups are the cluster's (``first_group_id`` on); each is asked on its
        leader, found from the nameserver's view, the leader last seen, NOT_LEADER
        hints and the seed nodes. A group that cannot be reached this time is
        skipped (a warning if the nameserver knew its leader, else a debug line):
        its orphans are found by a later scan.
        """
        status = await self._metadata.cluster_status()
        addresses = {node.node_id: node.address for node in status.storage_nodes if node.alive}
        cluster = status.cluster
        group_ids = range(cluster.first_group_id, cluster.first_group_id + cluster.group_count)
        groups = {group.group_id: group for group in status.groups}
        found: list[HalfMessage] = []
        skipped: list[str] = []
        unled: list[str] = []
        for group_id in group_ids:
            if len(found) >= limit:
                break
            group = groups.get(group_id)
            replicas = (group.leader, *group.replicas) if group is not None else ()
            candidates = [addresses[n] for n in replicas if n in addresses] + self._seeds
            request = st.ScanTransactionsRequest(
                group_id, stored_before_ms, checked_before_ms, limit - len(found)
            )
            try:
                response = await self._call_group(
                    group_id,
                    candidates,
                    f"scan transactions of group {group_id}",
                    functools.partial(_scan_transactions, request),
                )
            except BrokerError as error:
                # A group with no leader known yet is being placed or electing (as
                # at start-up): expected, not worth a warning. A known leader that
                # fails to answer is.
                leaderless = group is None or group.leader == 0
                (unled if leaderless else skipped).append(error.message)
                continue
            for info in response.halves:
                message = convert.message_from_wire(info.message)
                queue = QueueRef(info.message.topic, info.message.queue_id)
                found.append(HalfMessage(message, queue, info.store_timestamp_ms, info.check_count))
        if unled:
            log.debug(
                "transaction scan skipped %d groups with no leader yet (%s)", len(unled), unled[0]
            )
        if skipped:
            log.warning(
                "transaction scan skipped %d raft groups this round (%s)", len(skipped), skipped[0]
            )
        return found

    async def note_transaction_checks(
        self, halves: Sequence[HalfMessage], check_max: int
    ) -> list[HalfMessage]:
        """Count a check of each half message on its group's leader; the rolled back ones."""
        by_group: dict[int, list[HalfMessage]] = {}
        for half in halves:
            info = await self._queue_route(half.queue)
            by_group.setdefault(info.group_id, []).append(half)
        rolled_back: list[HalfMessage] = []
        for group_id, members in sorted(by_group.items()):
            request = st.NoteTransactionChecksRequest(
                group_id, [h.message.message_id for h in members], check_max
            )
            response = await self._call(
                members[0].queue,
                f"note transaction checks in group {group_id}",
                functools.partial(_note_transaction_checks, request),
            )
            gone = set(response.rolled_back)
            rolled_back += [h for h in members if h.message.message_id in gone]
        return rolled_back

    async def cancel_timer(self, queue: QueueRef, message_id: str) -> bool:
        """Cancel a held timed message on its group's leader (``storage.cancel_timer``)."""
        request = st.CancelTimerRequest(queue.topic, queue.queue_id, message_id)
        response = await self._call(
            queue,
            f"cancel timer {message_id!r} on {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.cancel_timer(request, timeout_ms=timeout_ms),
        )
        return response.cancelled

    # -- offset reads (pull consumers) ---------------------------------------------------

    async def read(
        self, queue: QueueRef, offset: int, *, batch_size: int, message_filter: MessageFilter
    ) -> QueueSlice:
        """One storage read of ``queue`` from ``offset``, filtered by storage."""
        request = st.ReadRequest(
            queue.topic,
            queue.queue_id,
            offset,
            batch_size,
            filter_expression=message_filter.expression,
            packed=True,
            filter_kind=int(message_filter.kind),
        )
        response = None
        route = await self._metadata.route(queue.topic)
        if self._spread.spreads(route.topic):
            response = await self._read_replica(_queue_of(route, queue), request)
        if response is None:
            response = await self._call(
                queue,
                f"read {queue.topic}:{queue.queue_id}@{offset}",
                lambda stub, timeout_ms: stub.read(request, timeout_ms=timeout_ms),
            )
        records = _records_of(response.records, len(response.stored_at), "read")
        messages = tuple(
            PulledMessage(convert.message_from_record(record), queue, *stored_at)
            for record, stored_at in zip(records, response.stored_at, strict=True)
        )
        return QueueSlice(
            messages, response.next_offset, response.first_offset, response.end_offset
        )

    async def _read_replica(
        self, info: ns.QueueRouteInfo, request: st.ReadRequest
    ) -> st.ReadResponse | None:
        """``request`` on the next replica of the queue's group (``info``: its route) in
        turn (read replicas, :mod:`broker.processor.replica_reads`); None when the leader
        must answer (no replica known, the replica failed, or it has not applied up to
        the offset)."""
        replicas = [f.address for f in info.followers if f.alive]
        if info.leader is not None and info.leader.alive:
            replicas.append(info.leader.address)
        address = self._spread.pick(info.group_id, replicas)
        if address is None:
            return None
        stub = self._peers.stub(StorageService, address, wait_for_ready=False)
        try:
            response = await stub.read(
                dataclasses.replace(request, from_follower=True),
                timeout_ms=self._call_timeout_ms,
            )
        except AngeliaError:
            return None
        return response if usable_answer(request.queue_offset, response.end_offset) else None

    async def queue_offsets(self, queue: QueueRef, timestamp_ms: int = -1) -> QueueOffsets:
        """The queue's offsets from its group's leader (one queue-info call)."""
        request = st.QueueInfoRequest(queue.topic, queue.queue_id, timestamp_ms)
        info = await self._call(
            queue,
            f"queue info of {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.queue_info(request, timeout_ms=timeout_ms),
        )
        return QueueOffsets(info.first_offset, info.end_offset, info.timestamp_offset)

    async def commit_consumer_offset(self, group: str, queue: QueueRef, offset: int) -> int:
        """One storage commit-offset call (a ``CommitConsumerOffset`` in the queue's raft
        group: the group's pop leases stay valid)."""
        request = st.CommitOffsetRequest(group, queue.topic, queue.queue_id, offset, True)
        response = await self._call(
            queue,
            f"commit offset of {group} on {queue.topic}:{queue.queue_id}",
            lambda stub, timeout_ms: stub.commit_offset(request, timeout_ms=timeout_ms),
        )
        return offset if response.offset is None else response.offset

    # -- message query (operators' lookups) ----------------------------------------------

    async def query_messages(
        self,
        topic: str,
        *,
        key: str = "",
        message_id: str = "",
        begin_ms: int = 0,
        end_ms: int,
        limit: int,
    ) -> list[PulledMessage]:
        """Every raft group serving ``topic`` searched at once on its leader
        (``storage.query_messages``, the node's key index); oldest first."""
        a_queue: dict[int, QueueRef] = {}  # raft group id -> one of the topic's queues in it
        for info in (await self._metadata.route(topic)).queues:
            a_queue.setdefault(info.group_id, QueueRef(topic, info.queue_id))

        async def one(group_id: int, queue: QueueRef) -> st.QueryMessagesResponse:
            request = st.QueryMessagesRequest(
                group_id, topic, message_id, key, begin_ms, end_ms, limit
            )
            return await self._call(
                queue,
                f"query messages of {topic} in group {group_id}",
                lambda stub, timeout_ms: stub.query_messages(request, timeout_ms=timeout_ms),
            )

        answers = await asyncio.gather(*(one(g, q) for g, q in sorted(a_queue.items())))
        found = [
            PulledMessage(
                convert.message_from_wire(stored.message),
                QueueRef(stored.message.topic, stored.message.queue_id),
                stored.queue_offset,
                stored.store_timestamp_ms,
            )
            for answer in answers
            for stored in answer.messages
        ]
        found.sort(key=lambda pulled: (pulled.store_timestamp_ms, pulled.queue.queue_id))
        return found[:limit]


def _queue_of(route: ns.RouteResponse, queue: QueueRef) -> ns.QueueRouteInfo:
    """Where ``queue`` is served, from its topic's ``route``; NOT_FOUND if it has no
    such queue."""
    for info in route.queues:
        if info.queue_id == queue.queue_id:
            return info
    raise BrokerError(codes.NOT_FOUND, f"topic {queue.topic!r} has no queue {queue.queue_id}")


def _records_of(packed: bytes, count: int, call: str) -> tuple[MessageRecord, ...]:
    """The ``count`` records of a packed storage answer to ``call``; DECODE_FAILED for
    bytes that are no records or for another count of them."""
    try:
        records = unpack_records(packed).records
    except RecordCorrupted as exc:
        raise BrokerError(codes.DECODE_FAILED, f"{call} answer: {exc}") from None
    if len(records) != count:
        raise BrokerError(
            codes.DECODE_FAILED, f"{call} answer: {len(records)} records for {count} messages"
        )
    return records


async def _scan_transactions(
    request: st.ScanTransactionsRequest, stub: StorageService, timeout_ms: int
) -> st.ScanTransactionsResponse:
    return await stub.scan_transactions(request, timeout_ms=timeout_ms)


async def _note_transaction_checks(
    request: st.NoteTransactionChecksRequest, stub: StorageService, timeout_ms: int
) -> st.NoteTransactionChecksResponse:
    return await stub.note_transaction_checks(request, timeout_ms=timeout_ms)
