"""The partition state machine: everything a queue group keeps, applied from its log.

One :class:`PartitionState` serves every queue of one raft group. Each
replica applies the group's committed entries in log order with
:meth:`PartitionState.apply_entry` (or :meth:`PartitionState.apply` for a
decoded command) and so reaches the same state and the same results:
apply is deterministic and reads no clock, randomness or files.

Applying one command, in order:

1. ``log_index`` must exceed the last applied index (host bug otherwise).
2. The state clock becomes ``max(clock, command.now_ms)``; held timers due
   by then enter their queues (in release order) and old dedup entries are
   evicted. This happens even if step 3 rejects the command.
3. The command is validated; a bad one raises a :class:`StorageError` and
   changes nothing more. Every replica raises alike, so the host reports the
   error to the proposer and goes on with the next entry.
4. The command takes effect and its result is returned.

``grown_queues`` names the queues whose end offset moved during the latest
apply (new messages, released timers, commits, dead letters), so the host
can wake long-polling receivers.

Dead letters: a group's dead-letter queue is ``(%DLQ%<group>, group_id)``
where ``group_id`` is this raft group's id, so moving a message there is a
local append; routing must place queue ``i`` of every ``%DLQ%`` topic in raft
group ``i``.

PURE.
"""

from __future__ import annotations

from itertools import groupby, pairwise, repeat
from operator import itemgetter
from typing import cast

from protocol import errors
from protocol.filters import TagFilter
from protocol.records import MessageRecord, RecordColumns
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import MessageType, Placement
from storage_node.errors import (
    BadCommand,
    InvalidReceiptHandle,
    NotFound,
    OutOfOrderApply,
)
from storage_node.partition.commands import (
    COMMAND_TYPES,
    Ack,
    Append,
    CancelTimer,
    ChangeInvisibleDuration,
    Command,
    CommitConsumerOffset,
    CommitOffset,
    DeadLetter,
    DropTopic,
    EndTransaction,
    ExpireTier,
    FilteredReceive,
    NoteTransactionChecks,
    Receive,
    RecordUpload,
    Release,
    Tick,
    TierReceive,
    TrimQueue,
    append_columns,
    check_record,
    decode,
)
from storage_node.partition.group_queues import GroupQueueKey
from storage_node.partition.pop import FilterVerdicts, Grant, GroupQueue, Lease
from storage_node.partition.queries import PartitionQueries, group_queue_key
from storage_node.partition.queues import (
    TIER_ONLY,
    QueueEntry,
    QueueId,
    QueueIndex,
    QueueRow,
    RecordOutcome,
    dead_letter_topic,
    queue_key,
)
from storage_node.partition.results import (
    AckOutcome,
    AckResult,
    AppendResult,
    CancelTimerResult,
    ChangeInvisibleDurationResult,
    CommitOffsetResult,
    DeadLettered,
    DeadLetterResult,
    Delivery,
    DropTopicResult,
    EndTransactionResult,
    ExpireTierResult,
    QueuedRun,
    ReceiveResult,
    RecordUploadResult,
    ReleaseResult,
    Result,
    TickResult,
    TransactionChecksResult,
    TrimQueueResult,
)
from storage_node.partition.tier import upload_refusal
from storage_node.partition.timers import HeldMessage
from storage_node.partition.transactions import HalfMessage

_queue_of = itemgetter(0, 1)  # a ReceiptHandle's (topic, queue_id)
# The message types an append queues at once when due (a transaction's half waits).
_PLAIN_KINDS = frozenset(int(kind) for kind in MessageType if kind is not MessageType.TRANSACTION)


class PartitionState(PartitionQueries):
    """Queues, consumer groups, half messages and timers of one raft group, applied
    from its log (the read-only queries are :class:`PartitionQueries`')."""

    # ------------------------------------------------------------------ apply

    def apply_entry(self, data: bytes, log_index: int) -> Result | None:
        """Apply the committed log entry ``data`` at ``log_index``.

        Empty data (a new leader's no-op entry) only advances the applied
        index and returns None. Corrupt data raises ``CommandCorrupted`` after
        advancing the applied index.
        """
        self._begin(log_index)
        if not data:
            return None
        plain = append_columns(data)
        if plain is not None:
            now_ms, columns = plain
            self._advance_clock(now_ms)
            result = self._append_plain(columns, log_index)
            if result is not None:
                return result
        # (Applying the clock again is a no-op: it only moves forward.)
        try:
            return self._apply(decode(data), log_index)
        finally:
            self._groups.compact()

    def apply(self, command: Command, log_index: int) -> Result:
        """Apply a decoded ``command`` committed at ``log_index``."""
        self._begin(log_index)
        try:
            return self._apply(command, log_index)
        finally:
            self._groups.compact()  # group queues consumed to their end: cursors again

    def _begin(self, log_index: int) -> None:
        if log_index <= self.applied_index:
            raise OutOfOrderApply(
                f"entry {log_index} applied after entry {self.applied_index}; "
                "entries must be applied once each, in log order"
            )
        self.applied_index = log_index
        self.grown_queues = set()

    def _apply(self, command: Command, log_index: int) -> Result:
        if not isinstance(command, COMMAND_TYPES):
            raise BadCommand(f"not a partition command: {type(command).__name__}")
        released = self._advance_clock(command.now_ms)
        if isinstance(command, Append):
            return self._append(command, log_index)
        if isinstance(command, Receive):
            return self._receive(command, log_index)
        if isinstance(command, Ack):
            return self._ack(command)
        if isinstance(command, ChangeInvisibleDuration):
            return self._change_invisible_duration(command, log_index)
        if isinstance(command, DeadLetter):
            return self._dead_letter_command(command)
        if isinstance(command, (CommitOffset, CommitConsumerOffset)):
            return self._commit_offset(command)
        if isinstance(command, EndTransaction):
            return self._end_transaction(command)
        if isinstance(command, NoteTransactionChecks):
            return self._note_transaction_checks(command)
        if isinstance(command, Tick):
            return TickResult(released)
        if isinstance(command, CancelTimer):
            return CancelTimerResult(
                self._timers.cancel(command.topic, command.message_id) is not None
            )
        if isinstance(command, TrimQueue):
            return self._trim_queue(command)
        if isinstance(command, Release):
            return self._release(command, log_index)
        if isinstance(command, DropTopic):
            return self._drop_topic(command)
        if isinstance(command, RecordUpload):
            return self._record_upload(command)
        if isinstance(command, ExpireTier):
            expired = self.tier.expire((command.topic, command.queue_id), command.before_offset)
            if expired:
                self._tier_changed((command.topic, command.queue_id), True)
            self._trim_groups((command.topic, command.queue_id))
            return ExpireTierResult(tuple(entry.name for entry in expired))
        raise AssertionError(f"no apply for {type(command).__name__}")  # pragma: no cover

    def _advance_clock(self, now_ms: int) -> int:
        """Move the clock forward to ``now_ms`` (never back); release due timers."""
        self.clock_ms = max(self.clock_ms, now_ms)
        due = self._timers.pop_due(self.clock_ms)
        for held in due:
            offset = self._enqueue(
                (held.topic, held.queue_id),
                QueueEntry(
                    held.log_index, held.position, self.clock_ms, held.tag, held.message_group
                ),
            )
            self._dedup.update(
                RecordOutcome(held.topic, held.queue_id, held.message_id, Placement.QUEUED, offset)
            )
        self._dedup.maybe_evict(self.clock_ms)
        return len(due)

    def _enqueue(self, queue: QueueId, entry: QueueRow) -> int:
        return self._growing(queue, 1).append(entry)

    def _growing(self, queue: QueueId, messages: int) -> QueueIndex:
        """The index of ``queue`` (made if new) about to take ``messages`` more: the
        records kept of changed queues (floor, retention, consumer tally) note it
        first, while its entries are still as they were."""
        index = self._queues.get(queue)
        if index is None:
            key = queue_key(*queue)
            index = self._queues[key] = QueueIndex(key=key)
            self._retention_new_queue(key[0])
        self.grown_queues.add(queue)
        self._floor_changed(queue, index)
        self._retention_changed(queue, index.first_offset == index.end_offset)
        if self._consumer_tally is not None:
            self._consumer_tally.queue(queue)
        self._messages_held += messages
        return index

    # ------------------------------------------------------------------ append

    def _append(self, command: Append, log_index: int) -> AppendResult:
        records = command.records
        if records:
            plain = self._append_plain(tuple(zip(*records, strict=True)), log_index)
            if plain is not None:
                return plain
        for record in records:
            check_record(record)
        # Records are handled in order: a later record of the batch sees what an
        # earlier one did (a repeated message id is a duplicate of the first).
        # The common case (a plain message, due now, id not remembered) is queued
        # here inline, one tuple per object built: it is every message of a
        # normal append, on every replica. Every other record: _append_special.
        special = self._append_special
        remembered = self._dedup
        remember = self._dedup.remember
        held = self._timers.is_held
        enqueue = self._enqueue
        clock_ms = self.clock_ms
        transaction = MessageType.TRANSACTION
        queued = Placement.QUEUED
        outcomes: list[RecordOutcome] = []
        for position, record in enumerate(records):
            topic, queue_id, message_id = record[:3]
            if (
                (topic, message_id) in remembered
                or record.message_type is transaction
                or record.delivery_timestamp_ms > clock_ms
                or held(topic, message_id)
            ):
                outcomes.append(special(record, log_index, position))
            else:
                offset = enqueue(
                    (topic, queue_id),
                    (log_index, position, clock_ms, record.tag, record.message_group, False),
                )
                outcome = RecordOutcome(topic, queue_id, message_id, queued, offset)
                remember(outcome, clock_ms)
                outcomes.append(outcome)
        return AppendResult(tuple(outcomes))

    def _append_plain(self, columns: RecordColumns, log_index: int) -> AppendResult | None:
        """``_append`` of records given as columns, in whole runs of one queue, when every
        record is plain (valid, not a transaction's, due now, its id neither
        remembered nor held nor repeated in the batch); None (nothing done) otherwise.

        The effects and the result are exactly those of ``_append`` record by
        record: the entries, offsets and dedup entries come in record order.
        """
        topics = cast(tuple[str, ...], columns[0])
        queue_ids = cast(tuple[int, ...], columns[1])
        message_ids = cast(tuple[str, ...], columns[2])
        tags = cast(tuple[str, ...], columns[4])
        message_groups = cast(tuple[str, ...], columns[6])
        due = cast(tuple[int, ...], columns[9])
        if "" in topics or "" in message_ids or min(queue_ids) < 0:
            return None  # check_record names what is wrong
        if max(due) > self.clock_ms or not _PLAIN_KINDS.issuperset(columns[10]):
            return None
        topic = topics[0]
        count = len(topics)
        one_topic = topics.count(topic) == count
        if one_topic:  # a broker's append: its ids alone
            if len(set(message_ids)) != len(message_ids):
                return None
            if self._dedup.knows_any_of(topic, message_ids):
                return None
            if self._timers.holds_any(zip(repeat(topic), message_ids)):
                return None
        else:
            keys = list(zip(topics, message_ids, strict=True))
            if len(set(keys)) != len(keys) or self._dedup.knows_any(keys):
                return None
            if self._timers.holds_any(keys):
                return None
        if one_topic and queue_ids.count(queue_ids[0]) == count:  # one queue: one run
            starts = [0, count]
        else:
            queues = list(zip(topics, queue_ids, strict=True))
            starts = [0, *(i for i in range(1, count) if queues[i] != queues[i - 1])]
            starts.append(count)
        clock_ms = self.clock_ms
        runs: list[QueuedRun] = []
        for start, end in pairwise(starts):
            # The interned name: the dedup run below keeps it, one copy for the topic.
            topic, queue_id = queue = queue_key(topics[start], queue_ids[start])
            index = self._growing(queue, end - start)
            ids = message_ids[start:end]
            first = index.append_run(
                log_index,
                range(start, end),
                clock_ms,
                tags[start:end],
                message_groups[start:end],
            )
            runs.append(QueuedRun(topic, queue_id, ids, first))
            self._dedup.remember_queued(topic, queue_id, ids, first, clock_ms)
        return AppendResult.of_runs(tuple(runs))

    def _append_special(
        self, record: MessageRecord, log_index: int, position: int
    ) -> RecordOutcome:
        """A record that is a duplicate, a transaction's half, or held for later."""
        topic = record.topic
        message_id = record.message_id
        known = self._dedup.lookup(topic, message_id)
        if known is not None:
            return known._replace(duplicate=True)
        if record.message_type is MessageType.TRANSACTION:
            half = self._halves.get(message_id)
            if half is None:
                self._halves.add(
                    HalfMessage(
                        message_id,
                        topic,
                        record.queue_id,
                        log_index,
                        position,
                        self.clock_ms,
                        record.tag,
                        record.message_group,
                        record.delivery_timestamp_ms,
                    )
                )
            outcome = RecordOutcome(
                topic, record.queue_id, message_id, Placement.HALF, duplicate=half is not None
            )
        elif self._timers.is_held(topic, message_id):
            # Sent again after the dedup window forgot it, while still held.
            outcome = RecordOutcome(
                topic, record.queue_id, message_id, Placement.DELAYED, duplicate=True
            )
        else:
            assert record.delivery_timestamp_ms > self.clock_ms, "a plain record is queued inline"
            self._timers.hold(
                HeldMessage(
                    record.delivery_timestamp_ms,
                    log_index,
                    position,
                    topic,
                    record.queue_id,
                    message_id,
                    record.tag,
                    record.message_group,
                )
            )
            outcome = RecordOutcome(topic, record.queue_id, message_id, Placement.DELAYED)
        if not outcome.duplicate:
            self._dedup.remember(outcome, self.clock_ms)
        return outcome

    # ------------------------------------------------------------------ pop

    def _receive(self, command: Receive, log_index: int) -> ReceiveResult:
        _require(command.group != "", "receive needs a consumer group")
        _require(command.max_messages >= 1, "receive needs max_messages >= 1")
        _require(command.invisible_duration_ms >= 0, "invisible duration must be >= 0")
        _require(command.max_delivery_attempts >= 1, "max delivery attempts must be >= 1")
        queue = (command.topic, command.queue_id)
        index = self._queues.get(queue)
        if index is None:
            return ReceiveResult((), (), 0)
        key = (command.group, command.topic, command.queue_id)
        group_queue = self._groups.writable(key)
        if group_queue is None:
            group_queue = GroupQueue.starting(
                command.initial_position, index, self.readable_first_offset(*queue)
            )
            self._groups.add(command.group, self.queue_key_of(*queue), group_queue)
            self._tally_made(key)
        else:
            self._tally_key(key)
        tier_entries = (
            {
                row.queue_offset: QueueEntry(
                    TIER_ONLY, TIER_ONLY, row.store_timestamp_ms, row.tag, row.message_group
                )
                for row in command.tier_rows
            }
            if isinstance(command, TierReceive)
            else {}
        )
        repeated = group_queue.repeat_attempt(command.attempt_id, self.clock_ms)
        if repeated and all(
            g.queue_offset >= index.first_offset or g.queue_offset in tier_entries for g in repeated
        ):
            return ReceiveResult(
                tuple(_delivery(command, grant, index, tier_entries) for grant in repeated),
                (),
                index.end_offset,
            )
        plan = group_queue.receive(
            index,
            clock_ms=self.clock_ms,
            generation=log_index,
            max_messages=command.max_messages,
            invisible_duration_ms=command.invisible_duration_ms,
            max_delivery_attempts=command.max_delivery_attempts,
            tag_filter=TagFilter.parse(command.filter_expression),
            fifo=command.fifo,
            scan_max=self.config.receive_scan_max,
            verdicts=(
                FilterVerdicts(command.evaluated_end, frozenset(command.unmatched))
                if isinstance(command, FilteredReceive)
                else None
            ),
            tier_entries=tier_entries,
        )
        if command.attempt_id:
            group_queue.last_attempt = (
                command.attempt_id,
                log_index,
                tuple(grant.queue_offset for grant in plan.grants),
            )
        dead = tuple(
            self._move_to_dead_letter(command.group, queue, expiry.queue_offset, expiry.attempts)
            for expiry in plan.dead_letters
        )
        deliveries = tuple(_delivery(command, grant, index, tier_entries) for grant in plan.grants)
        return ReceiveResult(deliveries, dead, index.end_offset)

    def _move_to_dead_letter(
        self, group: str, queue: QueueId, queue_offset: int, attempts: int
    ) -> DeadLettered:
        """Append a dead-letter copy of a queue entry (the caller finished it for the group)."""
        entry = self._queues[queue].at(queue_offset)
        target = (dead_letter_topic(group), self.config.group_id)
        offset = self._enqueue(
            target,
            QueueEntry(
                entry.log_index,
                entry.position,
                self.clock_ms,
                entry.tag,
                entry.message_group,
                dead_letter=True,
            ),
        )
        return DeadLettered(
            queue[0], queue[1], queue_offset, attempts, target[0], target[1], offset
        )

    def _valid_lease(self, group: str, handle: ReceiptHandle) -> tuple[GroupQueue, Lease] | None:
        group_queue = self._groups.writable((group, handle.topic, handle.queue_id))
        if group_queue is None:
            return None
        lease = group_queue.valid_lease(handle.queue_offset, handle.generation, self.clock_ms)
        return None if lease is None else (group_queue, lease)

    def _ack(self, command: Ack) -> AckResult:
        # The handles of one queue usually come together: each run of them looks its
        # group queue up once and settles it once at its end. That ends in the same
        # state as settling after each handle: settle moves the cursor over leased
        # and done offsets alike, and an ack only turns leased into done.
        outcomes = []
        clock_ms = self.clock_ms
        for queue, run in groupby(command.handles, _queue_of):
            group_queue = self._groups.writable((command.group, *queue))
            for handle in run:
                if group_queue is not None and group_queue.finish_current(
                    handle.queue_offset, handle.generation, clock_ms
                ):
                    outcomes.append(AckOutcome(handle))
                else:
                    outcomes.append(AckOutcome(handle, errors.INVALID_RECEIPT_HANDLE))
            if group_queue is not None:
                group_queue.settle(self.end_offset(*queue))
                self._tally_key((command.group, *queue))
        return AckResult(tuple(outcomes))

    def _release(self, command: Release, log_index: int) -> ReleaseResult:
        released = 0
        for handle in command.handles:
            found = self._valid_lease(command.group, handle)
            if found is None:
                continue
            group_queue, lease = found
            self._tally_key((command.group, handle.topic, handle.queue_id))
            # Expired now, one attempt back: the next grant counts this attempt again.
            group_queue.set_lease(
                handle.queue_offset,
                Lease(log_index, self.clock_ms, lease.attempt - 1, lease.message_group),
            )
            released += 1
        return ReleaseResult(released)

    def _change_invisible_duration(
        self, command: ChangeInvisibleDuration, log_index: int
    ) -> ChangeInvisibleDurationResult:
        _require(command.invisible_duration_ms >= 0, "invisible duration must be >= 0")
        found = self._valid_lease(command.group, command.handle)
        if found is None:
            raise InvalidReceiptHandle(_stale(command.handle))
        group_queue, lease = found
        renewed = Lease(
            log_index,
            self.clock_ms + command.invisible_duration_ms,
            lease.attempt,
            lease.message_group,
        )
        group_queue.set_lease(command.handle.queue_offset, renewed)
        self._tally_key((command.group, command.handle.topic, command.handle.queue_id))
        handle = ReceiptHandle(
            command.handle.topic, command.handle.queue_id, command.handle.queue_offset, log_index
        )
        return ChangeInvisibleDurationResult(handle, renewed.invisible_until_ms, renewed.attempt)

    def _dead_letter_command(self, command: DeadLetter) -> DeadLetterResult:
        found = self._valid_lease(command.group, command.handle)
        if found is None:
            raise InvalidReceiptHandle(_stale(command.handle))
        group_queue, lease = found
        queue = (command.handle.topic, command.handle.queue_id)
        _require(
            command.handle.queue_offset >= self.first_offset(*queue),
            f"{queue[0]}:{queue[1]}@{command.handle.queue_offset} is held by the tier only: "
            "a dead-letter copy needs the local log entry",
        )
        group_queue.finish(command.handle.queue_offset, self.end_offset(*queue))
        self._tally_key((command.group, *queue))
        return DeadLetterResult(
            self._move_to_dead_letter(
                command.group, queue, command.handle.queue_offset, lease.attempt
            )
        )

    def _commit_offset(self, command: CommitOffset | CommitConsumerOffset) -> CommitOffsetResult:
        """An operator's reset (leases dropped) or a consumer's commit (leases kept)."""
        _require(command.group != "", "committing an offset needs a consumer group")
        first = self.readable_first_offset(command.topic, command.queue_id)
        end = self.end_offset(command.topic, command.queue_id)
        offset = min(max(command.offset, first), end)
        key = (command.group, command.topic, command.queue_id)
        group_queue = self._groups.writable(key)
        if group_queue is None:
            queue = self.queue_key_of(command.topic, command.queue_id)
            self._groups.add(command.group, queue, GroupQueue(offset))
            self._tally_made(key)
            return CommitOffsetResult(offset)
        if isinstance(command, CommitOffset):
            group_queue.reset(offset)
        else:
            group_queue.commit(offset, end)
        self._tally_key(key)
        return CommitOffsetResult(offset)

    def _trim_queue(self, command: TrimQueue) -> TrimQueueResult:
        index = self._queues.get((command.topic, command.queue_id))
        if index is None:
            return TrimQueueResult(0)
        held = index.end_offset - index.first_offset
        self._floor_changed((command.topic, command.queue_id), index)
        before = index.first_offset
        first = index.trim(command.before_offset)
        if first != before:
            self._retention_changed((command.topic, command.queue_id), True)
        self._messages_held -= held - (index.end_offset - first)
        self._trim_groups((command.topic, command.queue_id))
        return TrimQueueResult(first)

    def _trim_groups(self, queue: QueueId) -> None:
        """Drop the groups' state of offsets no longer readable: below the local first
        offset only where the tier does not hold them (a group behind a local trim
        goes on reading the tier's copies)."""
        if self._consumer_tally is not None:
            self._consumer_tally.queue(queue)
        index = self._queues.get(queue)
        if index is None:
            return
        first = self.readable_first_offset(*queue)
        for group in self._groups.groups_of(queue):
            group_queue = self._groups.writable((group, *queue))
            if group_queue is not None:
                group_queue.trim(first, index.end_offset)

    def _drop_topic(self, command: DropTopic) -> DropTopicResult:
        _require(command.topic != "", "dropping a topic needs its name")
        topic = command.topic
        queues = [queue for queue in self._queues if queue[0] == topic]
        messages = 0
        for queue in queues:
            index = self._queues.pop(queue)
            self._floor_changed(queue, index)
            messages += index.end_offset - index.first_offset
        self._messages_held -= messages
        self._retention_dropped(topic)
        consumer_queues = [key for key in self._groups if key[1] == topic]
        for key in consumer_queues:
            del self._groups[key]
        if self._consumer_tally is not None:
            self._consumer_tally.dropped(topic, consumer_queues)
        held = [h.message_id for h in self._timers.unordered() if h.topic == topic]
        for message_id in held:
            self._timers.cancel(topic, message_id)
        halves = [half.transaction_id for half in self._halves if half.topic == topic]
        for transaction_id in halves:
            self._halves.resolve(transaction_id)
        tier_objects = tuple(entry.name for entry in self.tier.drop_topic(topic))
        return DropTopicResult(
            len(queues), messages, len(consumer_queues), len(held), len(halves), tier_objects
        )

    def _record_upload(self, command: RecordUpload) -> RecordUploadResult:
        queue = (command.topic, command.queue_id)
        refusal = upload_refusal(
            self.tier.end_offset(queue),
            self.first_offset(*queue),
            self.end_offset(*queue),
            command.object.first_offset,
            command.object.end_offset,
        )
        if not refusal:
            self._tier_changed(queue, self.tier.first_offset(queue) is None)
            self.tier.record(queue, command.object)
        point = self.tier.end_offset(queue)
        return RecordUploadResult(not refusal, -1 if point is None else point, refusal)

    # ------------------------------------------------------------------ consumer tally
    # Apply tells the consumer tally (``consumer_tally``: the RIP-46 figures kept by what
    # changed) which group queues changed, when someone reads it; appends and trims
    # tell it their queue inline (above).

    def _tally_key(self, key: GroupQueueKey) -> None:
        """The group queue's pop state changed."""
        if self._consumer_tally is not None:
            self._consumer_tally.key(key)

    def _tally_made(self, key: GroupQueueKey) -> None:
        """A group queue was made."""
        if self._consumer_tally is not None:
            self._consumer_tally.made(group_queue_key(*key))

    # ------------------------------------------------------------------ retention feed

    def _retention_changed(self, queue: QueueId, first_changed: bool) -> None:
        """Note for the retention planner (``take_retention_changes``) that ``queue``
        grows, or (``first_changed``) that its oldest entry changes: an append to an
        empty queue, or a trim (see :func:`_noted`)."""
        if self._retention_changes is not None:
            self._retention_changes = _noted(
                self._retention_changes, queue, first_changed, len(self._queues)
            )

    def _tier_changed(self, queue: QueueId, first_changed: bool) -> None:
        """As :meth:`_retention_changed`, for the queue's tier objects (a record grows
        them; the first one, or an expiry, changes the oldest)."""
        if self._tier_changes is not None:
            self._tier_changes = _noted(self._tier_changes, queue, first_changed, len(self._queues))

    def _retention_new_queue(self, topic: str) -> None:
        """Count a new queue of ``topic`` (once anyone asked for the held topics)."""
        counts = self._topic_queues
        if counts is not None:
            counts[topic] = counts.get(topic, 0) + 1

    def _retention_dropped(self, topic: str) -> None:
        """Forget a dropped topic's queue count."""
        if self._topic_queues is not None:
            self._topic_queues.pop(topic, None)

    # ------------------------------------------------------------------ transactions

    def _end_transaction(self, command: EndTransaction) -> EndTransactionResult:
        half = self._halves.get(command.transaction_id)
        if half is None or half.topic != command.topic:
            raise NotFound(
                f"no unresolved half message {command.transaction_id!r} in topic {command.topic!r}"
            )
        self._halves.resolve(command.transaction_id)
        if not command.commit:
            return EndTransactionResult(False)
        outcome = self._admit_half(half)
        self._dedup.update(outcome)
        return EndTransactionResult(True, outcome)

    def _admit_half(self, half: HalfMessage) -> RecordOutcome:
        if half.delivery_timestamp_ms > self.clock_ms:
            self._timers.hold(
                HeldMessage(
                    half.delivery_timestamp_ms,
                    half.log_index,
                    half.position,
                    half.topic,
                    half.queue_id,
                    half.transaction_id,
                    half.tag,
                    half.message_group,
                )
            )
            return RecordOutcome(half.topic, half.queue_id, half.transaction_id, Placement.DELAYED)
        offset = self._enqueue(
            (half.topic, half.queue_id),
            QueueEntry(half.log_index, half.position, self.clock_ms, half.tag, half.message_group),
        )
        return RecordOutcome(
            half.topic, half.queue_id, half.transaction_id, Placement.QUEUED, offset
        )

    def _note_transaction_checks(self, command: NoteTransactionChecks) -> TransactionChecksResult:
        _require(command.check_max >= 1, "check_max must be >= 1")
        noted: list[str] = []
        discarded: list[str] = []
        unknown: list[str] = []
        for transaction_id in command.transaction_ids:
            half = self._halves.note_check(transaction_id, self.clock_ms)
            if half is None:
                unknown.append(transaction_id)
            elif half.check_count > command.check_max:
                self._halves.resolve(transaction_id)
                discarded.append(transaction_id)
            else:
                noted.append(transaction_id)
        return TransactionChecksResult(tuple(noted), tuple(discarded), tuple(unknown))


def _delivery(
    command: Receive, grant: Grant, index: QueueIndex, tier_entries: dict[int, QueueEntry]
) -> Delivery:
    """A grant as a delivery; an offset below the local first offset takes its entry from
    the command's tier rows (``QueueEntry.tier_only``)."""
    handle = ReceiptHandle(
        command.topic, command.queue_id, grant.queue_offset, grant.lease.generation
    )
    offset = grant.queue_offset
    entry = index.at(offset) if offset >= index.first_offset else tier_entries[offset]
    return Delivery(handle, grant.lease.attempt, grant.lease.invisible_until_ms, entry)


def _noted(
    changes: dict[QueueId, bool], queue: QueueId, first_changed: bool, queues_held: int
) -> dict[QueueId, bool] | None:
    """``changes`` with ``queue`` noted (True sticks: its oldest entry changed); None once
    they are more than a quarter of the queues and 64: the keeping stops, and the next
    taker looks at every queue. Nothing is kept while nobody takes them (None stays)."""
    if first_changed:
        changes[queue] = True
    elif queue not in changes:
        changes[queue] = False
    else:
        return changes
    return None if len(changes) > (queues_held >> 2) + 64 else changes


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise BadCommand(message)


def _stale(handle: ReceiptHandle) -> str:
    return (
        f"receipt handle for {handle.topic}:{handle.queue_id}@{handle.queue_offset} "
        f"generation {handle.generation} is unknown, superseded or expired"
    )
