"""The pop / ack / FIFO / DLQ lifecycle against a plain model (hypothesis, stateful).

The model keeps, per consumer group, one status per queue offset (fresh,
leased or done) in a dict and answers every question by brute force; the
real state keeps cursors, lease maps, timers, half messages, a dedup window
and snapshots.
Every command goes through the log codec, and a rule restores the state from
its own snapshot mid-run, so a divergence in either shows up as a model
mismatch.

Checked after every step (the invariants of the issue):
- no acknowledged append is lost, offsets are dense and unique per queue
  (delayed messages arrive when due, committed half messages on commit,
  rolled-back ones never), and a retried send reports the original outcome;
- no message is handed to a group while it is invisible to that group;
- delivery attempts are exact (1 + earlier deliveries to that group);
- FIFO groups never get a message while an earlier one of its message group
  is not done, and never two of one message group in flight;
- a message is dead-lettered exactly when its next attempt would exceed the
  maximum, and never delivered beyond it;
- acks and invisibility changes succeed exactly for current, unexpired handles.

Deterministic: ``derandomize=True``; a failure prints the steps to replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from protocol import errors
from protocol.filters import TagFilter
from protocol.records import MessageRecord
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import MessageType, Placement
from storage_node.errors import InvalidReceiptHandle, NotFound
from storage_node.partition.commands import (
    ChangeInvisibleDuration,
    CommitOffset,
    DeadLetter,
    EndTransaction,
    Tick,
    TrimQueue,
)
from storage_node.partition.config import PartitionConfig
from storage_node.partition.queues import dead_letter_topic
from storage_node.partition.results import (
    ChangeInvisibleDurationResult,
    DeadLetterResult,
    EndTransactionResult,
    TrimQueueResult,
)
from storage_node.partition.snapshot import take_snapshot

from .harness import Harness, record

TOPIC = "orders"
GROUP_ID = 5
MAX_ATTEMPTS = 3
DEDUP_WINDOW_MS = 120_000
GROUPS = {"plain": False, "ordered": True}  # consumer group -> fifo
TAGS = ("", "a", "b")
MESSAGE_GROUPS = ("", "A", "B")
# Mostly match-all: a filter retires the messages it skips for good.
FILTERS = ("*", "*", "*", "*", "*", "a||b", "a", "b")


def message_for(number: int, due_ms: int = 0, *, half: bool = False) -> MessageRecord:
    """Message ``m<number>`` (``t<number>`` for a transaction's half message).

    A retried send of it is the same message (delivery time aside)."""
    kind = MessageType.DELAY if due_ms else MessageType.NORMAL
    return record(
        f"{'t' if half else 'm'}{number}",
        topic=TOPIC,
        tag=TAGS[number % 3],
        message_group=MESSAGE_GROUPS[(number // 3) % 3],
        delivery_timestamp_ms=due_ms,
        message_type=MessageType.TRANSACTION if half else kind,
    )


@dataclass
class ModelLease:
    generation: int
    until_ms: int
    attempt: int


@dataclass
class ModelGroup:
    """offset -> ModelLease or "done"; absent means fresh."""

    status: dict[int, ModelLease | str] = field(default_factory=dict)
    delivered: dict[int, int] = field(default_factory=dict)  # offset -> deliveries so far
    dead: list[int] = field(default_factory=list)  # offsets dead-lettered, in order

    def done(self, offset: int) -> bool:
        return self.status.get(offset) == "done"

    def lease(self, offset: int) -> ModelLease | None:
        found = self.status.get(offset)
        return found if isinstance(found, ModelLease) else None


class PartitionLifecycle(RuleBasedStateMachine):
    handles = Bundle("handles")

    @initialize()
    def start(self) -> None:
        self.h = Harness(
            PartitionConfig(group_id=GROUP_ID, dedup_window_ms=DEDUP_WINDOW_MS),
            now_ms=10_000_000,
        )
        self.clock_ms = 0  # the state clock starts at 0; commands move it
        self.queue: list[str] = []  # message ids by offset
        self.first = 0  # offsets below were trimmed
        self.content: dict[str, MessageRecord] = {}
        self.stored_ms: dict[str, int] = {}  # message id -> first store time (dedup)
        self.held: list[tuple[int, int, int, str]] = []  # (due, log index, position, id)
        self.halves: set[str] = set()  # unresolved transactions
        self.outcomes: dict[str, tuple[Placement, int]] = {}  # what a retried send reports
        self.groups = {name: ModelGroup() for name in GROUPS}

    # ------------------------------------------------------------------ model time

    def tick_model(self, now_ms: int) -> None:
        """What every command does first: the clock moves forward, due timers fire."""
        self.clock_ms = max(self.clock_ms, now_ms)
        due = sorted(t for t in self.held if t[0] <= self.clock_ms)
        for item in due:
            self.held.remove(item)
            self.outcomes[item[3]] = (Placement.QUEUED, len(self.queue))
            self.queue.append(item[3])

    def is_fresh(self, message_id: str) -> bool:
        """Whether a send of ``message_id`` now is stored (not a duplicate)."""
        stored = self.stored_ms.get(message_id)
        in_window = stored is not None and stored >= self.clock_ms - DEDUP_WINDOW_MS
        return not in_window and message_id not in self.halves

    # ------------------------------------------------------------------ rules

    @rule(
        numbers=st.lists(st.integers(0, 17), min_size=1, max_size=3),
        delays=st.lists(st.sampled_from([0, 0, 0, 5_000, 60_000]), min_size=3, max_size=3),
    )
    def append(self, numbers: list[int], delays: list[int]) -> None:
        records = [
            message_for(n, self.h.now_ms + d if d else 0)
            for n, d in zip(numbers, delays, strict=False)
        ]
        index = self.h.next_index
        self.tick_model(self.h.now_ms)
        result = self.h.append(*records)
        for position, (rec, outcome) in enumerate(zip(records, result.outcomes, strict=True)):
            mid = rec.message_id
            fresh = self.is_fresh(mid)
            assert outcome.duplicate is not fresh, (mid, outcome)
            if not fresh:
                assert (outcome.placement, outcome.queue_offset) == self.outcomes[mid]
                continue
            self.stored_ms[mid] = self.clock_ms
            self.content[mid] = rec
            if rec.delivery_timestamp_ms > self.clock_ms:
                self.held.append((rec.delivery_timestamp_ms, index, position, mid))
                self.outcomes[mid] = (Placement.DELAYED, -1)
            else:
                self.outcomes[mid] = (Placement.QUEUED, len(self.queue))
                self.queue.append(mid)
            assert (outcome.placement, outcome.queue_offset) == self.outcomes[mid]

    @rule(number=st.integers(0, 5))
    def send_half_message(self, number: int) -> None:
        rec = message_for(number, half=True)
        self.tick_model(self.h.now_ms)
        fresh = self.is_fresh(rec.message_id)
        outcome = self.h.append(rec).outcomes[0]
        assert outcome.duplicate is not fresh
        if fresh:
            self.stored_ms[rec.message_id] = self.clock_ms
            self.content[rec.message_id] = rec
            self.halves.add(rec.message_id)
            self.outcomes[rec.message_id] = (Placement.HALF, -1)
        assert (outcome.placement, outcome.queue_offset) == self.outcomes[rec.message_id]

    @rule(number=st.integers(0, 5), commit=st.booleans())
    def end_transaction(self, number: int, commit: bool) -> None:
        transaction_id = f"t{number}"
        self.tick_model(self.h.now_ms)
        try:
            result = self.h.apply(EndTransaction(self.h.now_ms, TOPIC, transaction_id, commit))
        except NotFound:
            assert transaction_id not in self.halves
            return
        assert isinstance(result, EndTransactionResult)
        self.halves.remove(transaction_id)
        if commit:
            self.outcomes[transaction_id] = (Placement.QUEUED, len(self.queue))
            self.queue.append(transaction_id)
            assert result.outcome is not None
            assert result.outcome.queue_offset == self.outcomes[transaction_id][1]
        else:
            assert result.outcome is None

    @rule(
        target=handles,
        group=st.sampled_from(sorted(GROUPS)),
        max_messages=st.integers(1, 4),
        invisible_ms=st.sampled_from([0, 1_000, 10_000, 30_000]),
        filter_expression=st.sampled_from(FILTERS),
    )
    def receive(
        self, group: str, max_messages: int, invisible_ms: int, filter_expression: str
    ) -> object:
        fifo = GROUPS[group]
        index = self.h.next_index
        self.tick_model(self.h.now_ms)
        model = self.groups[group]
        expected = self.model_receive(
            model, index, max_messages, invisible_ms, TagFilter.parse(filter_expression), fifo
        )
        result = self.h.receive(
            group,
            topic=TOPIC,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            max_attempts=MAX_ATTEMPTS,
            filter_expression=filter_expression,
            fifo=fifo,
        )
        got = [(d.handle.queue_offset, d.delivery_attempt) for d in result.deliveries]
        assert got == expected[0], (got, expected[0])
        assert [d.queue_offset for d in result.dead_lettered] == expected[1]
        for dead in result.dead_lettered:
            assert dead.attempts == MAX_ATTEMPTS
            assert (dead.dead_letter_topic, dead.dead_letter_queue_id) == (
                dead_letter_topic(group),
                GROUP_ID,
            )
        for delivery in result.deliveries:
            got_record = self.h.resolve(delivery.entry, TOPIC, 0)
            sent = self.content[self.queue[delivery.handle.queue_offset]]
            assert (got_record.body, got_record.tag, got_record.message_group) == (
                sent.body,
                sent.tag,
                sent.message_group,
            )
            assert delivery.invisible_until_ms == self.clock_ms + invisible_ms
        return multiple(*((group, d.handle) for d in result.deliveries))

    def model_receive(
        self,
        model: ModelGroup,
        generation: int,
        max_messages: int,
        invisible_ms: int,
        tag_filter: TagFilter,
        fifo: bool,
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """Brute force: which offsets are handed out (with attempts) and dead-lettered."""
        now = self.clock_ms
        delivered: list[tuple[int, int]] = []
        dead: list[int] = []
        for offset in range(len(self.queue)):
            if len(delivered) >= max_messages:
                break
            status = model.status.get(offset)
            if status == "done":
                continue
            previous = model.lease(offset)
            if previous is not None and now < previous.until_ms:
                continue  # invisible: never handed out
            rec = self.content[self.queue[offset]]
            attempt = 1 if previous is None else previous.attempt + 1
            if attempt > MAX_ATTEMPTS:
                model.status[offset] = "done"
                model.dead.append(offset)
                dead.append(offset)
                continue
            if not tag_filter.matches(rec.tag):
                model.status[offset] = "done"
                continue
            if fifo and rec.message_group and self.group_busy(model, offset, rec.message_group):
                continue
            assert model.delivered.get(offset, 0) == attempt - 1  # attempts are exact
            model.delivered[offset] = attempt
            model.status[offset] = ModelLease(generation, now + invisible_ms, attempt)
            delivered.append((offset, attempt))
        return delivered, dead

    def group_busy(self, model: ModelGroup, offset: int, message_group: str) -> bool:
        """FIFO: an earlier message of the group is not done, or one is in flight."""
        for other in range(len(self.queue)):
            if other == offset or self.content[self.queue[other]].message_group != message_group:
                continue
            lease = model.lease(other)
            if other < offset and not model.done(other):
                return True
            if lease is not None and self.clock_ms < lease.until_ms:
                return True
        return False

    def handle_is_valid(self, group: str, handle: ReceiptHandle) -> bool:
        lease = self.groups[group].lease(handle.queue_offset)
        return (
            lease is not None
            and lease.generation == handle.generation
            and self.clock_ms < lease.until_ms
        )

    @rule(pick=handles)
    def ack(self, pick: tuple[str, ReceiptHandle]) -> None:
        group, handle = pick
        self.tick_model(self.h.now_ms)
        valid = self.handle_is_valid(group, handle)
        result = self.h.ack(handle, group=group)
        assert (result.outcomes[0].error is None) is valid
        assert valid or result.outcomes[0].error is errors.INVALID_RECEIPT_HANDLE
        if valid:
            self.groups[group].status[handle.queue_offset] = "done"

    @rule(
        target=handles,
        pick=handles,
        invisible_ms=st.sampled_from([0, 5_000, 40_000]),
    )
    def change_invisible_duration(
        self, pick: tuple[str, ReceiptHandle], invisible_ms: int
    ) -> object:
        group, handle = pick
        index = self.h.next_index
        self.tick_model(self.h.now_ms)
        valid = self.handle_is_valid(group, handle)
        try:
            result = self.h.apply(
                ChangeInvisibleDuration(self.h.now_ms, group, handle, invisible_ms)
            )
        except InvalidReceiptHandle:
            assert not valid
            return multiple()
        assert valid
        assert isinstance(result, ChangeInvisibleDurationResult)
        lease = self.groups[group].lease(handle.queue_offset)
        assert lease is not None
        assert result.delivery_attempt == lease.attempt
        assert result.handle.generation == index
        self.groups[group].status[handle.queue_offset] = ModelLease(
            index, self.clock_ms + invisible_ms, lease.attempt
        )
        return (group, result.handle)

    @rule(pick=handles)
    def dead_letter(self, pick: tuple[str, ReceiptHandle]) -> None:
        group, handle = pick
        self.tick_model(self.h.now_ms)
        valid = self.handle_is_valid(group, handle)
        try:
            result = self.h.apply(DeadLetter(self.h.now_ms, group, handle))
        except InvalidReceiptHandle:
            assert not valid
            return
        assert valid
        assert isinstance(result, DeadLetterResult)
        model = self.groups[group]
        model.status[handle.queue_offset] = "done"
        model.dead.append(handle.queue_offset)

    @precondition(lambda self: self.queue)
    @rule(group=st.sampled_from(sorted(GROUPS)), offset=st.integers(0, 40))
    def commit_offset(self, group: str, offset: int) -> None:
        self.tick_model(self.h.now_ms)
        clamped = min(max(offset, self.first), len(self.queue))
        self.h.apply(CommitOffset(self.h.now_ms, group, TOPIC, 0, offset))
        model = self.groups[group]
        model.status = dict.fromkeys(range(clamped), "done")
        model.delivered = {}

    @rule(before=st.integers(0, 12))
    def trim_queue(self, before: int) -> None:
        self.tick_model(self.h.now_ms)
        result = self.h.apply(TrimQueue(self.h.now_ms, TOPIC, 0, before))
        if not self.queue:
            return
        first = min(max(before, self.first), len(self.queue))
        assert result == TrimQueueResult(first)
        for model in self.groups.values():
            for offset in range(self.first, first):
                model.status[offset] = "done"  # gone: never handed out again
        self.first = first

    @rule(ms=st.sampled_from([1, 999, 1_000, 5_000, 10_000, 30_000, 61_000]))
    def time_passes(self, ms: int) -> None:
        self.h.advance(ms)

    @rule(lag_ms=st.sampled_from([1, 50_000]))
    def lagging_leader_ticks(self, lag_ms: int) -> None:
        self.tick_model(self.h.now_ms - lag_ms)
        self.h.apply(Tick(self.h.now_ms - lag_ms))

    @rule()
    def restart_from_snapshot(self) -> None:
        before = take_snapshot(self.h.state)
        self.h.restart_from_snapshot()
        assert take_snapshot(self.h.state) == before

    # ------------------------------------------------------------------ invariants

    @invariant()
    def queue_is_exactly_the_acknowledged_appends(self) -> None:
        if not hasattr(self, "h"):
            return
        self.h.state.check_invariants()
        assert self.h.state.clock_ms == self.clock_ms
        assert self.h.state.first_offset(TOPIC, 0) == self.first
        entries = self.h.state.read(TOPIC, 0, self.first, 1 << 20)
        ids = [self.h.resolve(e, TOPIC, 0).message_id for e in entries]
        assert ids == self.queue[self.first :]
        assert sorted(h.message_id for h in self.h.state.held_messages()) == sorted(
            t[3] for t in self.held
        )
        for number in range(6):
            half = self.h.state.half_message(f"t{number}")
            assert (half is not None) is (f"t{number}" in self.halves)

    @invariant()
    def groups_match_the_model(self) -> None:
        if not hasattr(self, "h"):
            return
        for name, model in self.groups.items():
            first_open = next(
                (o for o in range(len(self.queue)) if not model.done(o)), len(self.queue)
            )
            offset = self.h.state.consumer_offset(name, TOPIC, 0)
            assert offset is None or offset == first_open, (name, offset, first_open)
            backlog, flying = self.h.state.backlog(name, TOPIC, 0)
            assert backlog == sum(1 for o in range(len(self.queue)) if not model.done(o))
            assert flying == sum(
                1
                for o in range(len(self.queue))
                if (lease := model.lease(o)) is not None and self.clock_ms < lease.until_ms
            )
            dlq = dead_letter_topic(name)
            dead_entries = self.h.state.read(dlq, GROUP_ID, 0, 1 << 20)
            dead_ids = [self.h.resolve(e, dlq, GROUP_ID) for e in dead_entries]
            assert [r.dead_letter_message_id for r in dead_ids] == [
                self.queue[o] for o in model.dead
            ]
            assert all(r.topic == dlq and r.dead_letter_topic == TOPIC for r in dead_ids)
            for o in range(len(self.queue)):
                lease = model.lease(o)
                real = self.h.state.lease(name, TOPIC, 0, o)
                if lease is None:
                    assert real is None
                else:
                    assert real is not None
                    assert (real.generation, real.invisible_until_ms, real.attempt) == (
                        lease.generation,
                        lease.until_ms,
                        lease.attempt,
                    )
                    assert real.attempt <= MAX_ATTEMPTS
            if GROUPS[name]:
                in_flight = [
                    self.content[self.queue[o]].message_group
                    for o in range(len(self.queue))
                    if (lease := model.lease(o)) is not None and self.clock_ms < lease.until_ms
                ]
                grouped = [g for g in in_flight if g]
                assert len(grouped) == len(set(grouped)), "two of one message group in flight"


PartitionLifecycle.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_partition_lifecycle = PartitionLifecycle.TestCase
