"""In-process implementations of the ports, with real pop semantics.

For tests and a single-process broker: nothing here survives the process.
The pop state machine follows the contract in ``base.py``: per (group,
queue) a committed offset, the set of offsets in flight (with attempt,
generation and the time they become visible again) and the finished offsets
above the committed one. Time comes only from the injected clock, so tests
move invisibility by advancing a :class:`~broker.services.clock.ManualClock`.

Timed messages wait in a heap until the clock reaches their delivery time;
they are queued lazily, by the first call that looks at the store after that
(``wait_for_append`` wakes up for them). Half messages wait in a dict until
``end_transaction``.

Concurrency: every method runs to completion without awaiting between a
check and the mutation it guards (the only awaits are in ``wait_for_append``),
so the asyncio loop is the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.domain import (
    GroupInfo,
    HalfMessage,
    Message,
    PoppedMessage,
    PopResult,
    PulledMessage,
    QueueInfo,
    QueueOffsets,
    QueueRef,
    QueueSlice,
    SendResult,
    TopicInfo,
)
from broker.errors import BrokerError, Reason
from broker.services.base import Clock
from protocol import errors as codes
from protocol import routing
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType, Placement


class MemoryMetadata:
    """Topics and groups in a dict.

    ``auto_create_topics`` creates an unknown topic (``default_queue_count``
    queues, every message type) on first lookup; ``auto_create_groups`` does
    the same for consumer groups (non-FIFO, default retry policy).
    """

    def __init__(
        self,
        topics: Iterable[TopicInfo] = (),
        groups: Iterable[GroupInfo] = (),
        *,
        auto_create_topics: bool = False,
        auto_create_groups: bool = True,
        default_queue_count: int = 4,
    ) -> None:
        self._topics = {topic.name: topic for topic in topics}
        self._groups = {group.name: group for group in groups}
        self.auto_create_topics = auto_create_topics
        self.auto_create_groups = auto_create_groups
        self.default_queue_count = default_queue_count

    def put_topic(self, topic: TopicInfo) -> None:
        """Create or replace a topic."""
        self._topics[topic.name] = topic

    def put_group(self, group: GroupInfo) -> None:
        """Create or replace a consumer group."""
        self._groups[group.name] = group

    def ensure_topic(self, name: str, queue_count: int = 1) -> TopicInfo:
        """The topic, created with every message type if missing."""
        topic = self._topics.get(name)
        if topic is None:
            topic = TopicInfo(
                name,
                tuple(QueueInfo(i) for i in range(queue_count)),
                frozenset(MessageType),
            )
            self._topics[name] = topic
        return topic

    async def get_topic(self, name: str) -> TopicInfo:
        """The topic; raises TOPIC_NOT_FOUND."""
        topic = self._topics.get(name)
        if topic is None and (routing.is_retry_topic(name) or routing.is_dead_letter_topic(name)):
            # A group's own topics exist once the group does (as over the nameserver).
            group = name.removeprefix(routing.RETRY_TOPIC_PREFIX)
            await self.get_group(group.removeprefix(routing.DLQ_TOPIC_PREFIX))
            topic = self.ensure_topic(name)
        if topic is None:
            if not self.auto_create_topics:
                raise BrokerError.of(Reason.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
            topic = self.ensure_topic(name, self.default_queue_count)
        return topic

    async def get_topic_for_send(self, name: str, message_type: MessageType) -> TopicInfo:
        """The topic (auto-created with every message type, like :meth:`get_topic`)."""
        return await self.get_topic(name)

    async def get_group(self, name: str, *, topics: Sequence[str] = ()) -> GroupInfo:
        """The consumer group; raises CONSUMER_GROUP_NOT_FOUND."""
        group = self._groups.get(name)
        if group is None:
            if not self.auto_create_groups:
                raise BrokerError.of(
                    Reason.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name!r} does not exist"
                )
            group = GroupInfo(name)
            self._groups[name] = group
        return group


@dataclass(slots=True)
class _Stored:
    message: Message
    store_timestamp_ms: int


@dataclass(slots=True)
class _InFlight:
    delivery_attempt: int
    generation: int
    invisible_until_ms: int


@dataclass(slots=True)
class _GroupQueue:
    """Pop state of one group on one queue.

    Invariants: every offset below ``committed`` is finished; ``finished`` and
    ``in_flight`` hold offsets >= ``committed`` and never share one.
    """

    committed: int = 0
    in_flight: dict[int, _InFlight] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)

    def finish(self, offset: int) -> None:
        self.in_flight.pop(offset, None)
        self.finished.add(offset)
        self._settle()

    def _settle(self) -> None:
        while self.committed in self.finished:
            self.finished.discard(self.committed)
            self.committed += 1

    def cursor(self, end: int) -> int:
        """The first offset never handed out (nor finished): where pop goes on."""
        offset = self.committed
        while offset < end and (offset in self.finished or offset in self.in_flight):
            offset += 1
        return offset

    def commit(self, offset: int, end: int) -> None:
        """A consumer's commit: pop goes on at ``offset``; deliveries in flight stay.

        Offsets below ``offset`` become finished unless in flight, offsets from
        it up to the cursor fresh unless in flight, later ones keep their state
        (``storage_node.partition.pop.GroupQueue.commit``, the same rule)."""
        cursor = self.cursor(end)
        if offset >= cursor:
            self.finished.update(o for o in range(cursor, offset) if o not in self.in_flight)
        else:
            self.finished.difference_update(range(offset, cursor))
            self.committed = min(self.committed, offset)
        self._settle()


@dataclass(slots=True)
class _Half:
    queue: QueueRef
    message: Message
    stored_ms: int
    check_count: int = 0
    last_check_ms: int = 0

    def view(self) -> HalfMessage:
        return HalfMessage(self.message, self.queue, self.stored_ms, self.check_count)


class MemoryStore:
    """Queues and pop state in memory (see the module docstring)."""

    def __init__(self, clock: Clock, metadata: MemoryMetadata | None = None) -> None:
        self._clock = clock
        self._metadata = metadata
        self._queues: dict[QueueRef, list[_Stored]] = {}
        self._groups: dict[tuple[str, QueueRef], _GroupQueue] = {}
        self._generation = 0
        self._appended: dict[str, asyncio.Event] = {}
        # Timed messages by (due, arrival): the release order.
        self._held: list[tuple[int, int, QueueRef, Message]] = []
        self._arrivals = itertools.count()
        self._halves: dict[tuple[str, str], _Half] = {}  # (topic, message id), in store order
        self.append_calls = 0  # how many append calls reached the store (batching evidence)

    def _log(self, queue: QueueRef) -> list[_Stored]:
        return self._queues.setdefault(queue, [])

    def _state(self, group: str, queue: QueueRef) -> _GroupQueue:
        return self._groups.setdefault((group, queue), _GroupQueue())

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    @property
    def waiting_topics(self) -> list[str]:
        """Topics a long poll is waiting on right now (for tests)."""
        return [topic for topic, event in self._appended.items() if not event.is_set()]

    def consumer_states(self) -> dict[tuple[str, QueueRef], tuple[int, int]]:
        """(group, queue) -> (committed offset, deliveries in flight), for tests."""
        return {key: (state.committed, len(state.in_flight)) for key, state in self._groups.items()}

    def messages(self, queue: QueueRef) -> list[Message]:
        """Everything appended to ``queue``, in offset order (for tests)."""
        return [stored.message for stored in self._queues.get(queue, [])]

    @property
    def held_count(self) -> int:
        """Timed messages not yet due (for tests)."""
        return len(self._held)

    @property
    def half_count(self) -> int:
        """Unresolved half messages (for tests)."""
        return len(self._halves)

    def _queue_now(self, queue: QueueRef, message: Message, now_ms: int) -> SendResult:
        log = self._log(queue)
        log.append(_Stored(message, now_ms))
        event = self._appended.pop(queue.topic, None)
        if event is not None:
            event.set()
        return SendResult(queue, len(log) - 1, now_ms)

    def _place(self, queue: QueueRef, message: Message, now_ms: int) -> SendResult:
        """Queue ``message`` now, or hold it until its delivery time."""
        due_ms = message.delivery_timestamp_ms
        if due_ms is not None and due_ms > now_ms:
            heapq.heappush(self._held, (due_ms, next(self._arrivals), queue, message))
            return SendResult(queue, -1, now_ms, Placement.DELAYED)
        return self._queue_now(queue, message, now_ms)

    def _release_due(self) -> None:
        """Queue every held message whose delivery time has come, in release order."""
        now_ms = self._clock.now_ms()
        while self._held and self._held[0][0] <= now_ms:
            _due, _arrival, queue, message = heapq.heappop(self._held)
            self._queue_now(queue, message, now_ms)

    def next_due_ms(self) -> int | None:
        """When the earliest held message is due, if any."""
        return self._held[0][0] if self._held else None

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        """Append a batch to one queue: queued, held until due, or held as half messages."""
        self.append_calls += 1
        self._release_due()
        now_ms = self._clock.now_ms()
        results = []
        for message in messages:
            if message.message_type is MessageType.TRANSACTION:
                key = (queue.topic, message.message_id)
                if key not in self._halves:
                    self._halves[key] = _Half(queue, message, now_ms)
                results.append(SendResult(queue, -1, now_ms, Placement.HALF))
            else:
                results.append(self._place(queue, message, now_ms))
        return results

    async def end_transaction(
        self, queue: QueueRef, message_id: str, commit: bool
    ) -> SendResult | None:
        """Commit (queue or hold) or roll back (forget) a half message."""
        self._release_due()
        half = self._halves.get((queue.topic, message_id))
        if half is None or half.queue != queue:
            raise BrokerError.of(
                Reason.TRANSACTION_NOT_FOUND,
                f"no unresolved transaction {message_id!r} in queue {queue.topic}:{queue.queue_id}",
            )
        del self._halves[(queue.topic, message_id)]
        if not commit:
            return None
        return self._place(queue, half.message, self._clock.now_ms())

    async def orphaned_transactions(
        self, stored_before_ms: int, checked_before_ms: int, limit: int
    ) -> list[HalfMessage]:
        """Half messages old enough and not checked recently, oldest first."""
        found: list[HalfMessage] = []
        for half in self._halves.values():
            if len(found) >= limit or half.stored_ms >= stored_before_ms:
                break
            if half.check_count == 0 or half.last_check_ms < checked_before_ms:
                found.append(half.view())
        return found

    async def note_transaction_checks(
        self, halves: Sequence[HalfMessage], check_max: int
    ) -> list[HalfMessage]:
        """One more check of each; those past ``check_max`` are rolled back."""
        now_ms = self._clock.now_ms()
        rolled_back: list[HalfMessage] = []
        for seen in halves:
            key = (seen.queue.topic, seen.message.message_id)
            half = self._halves.get(key)
            if half is None:
                continue
            half.check_count += 1
            half.last_check_ms = now_ms
            if half.check_count > check_max:
                del self._halves[key]
                rolled_back.append(half.view())
        return rolled_back

    async def pop(
        self,
        group: GroupInfo,
        queue: QueueRef,
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> PopResult:
        """Hand visible messages to ``group`` (FIFO groups: per message group order)."""
        self._release_due()
        log = self._log(queue)
        state = self._state(group.name, queue)
        now_ms = self._clock.now_ms()
        popped: list[PoppedMessage] = []
        blocked: set[str | None] = set()
        for offset in range(state.committed, len(log)):
            if len(popped) >= batch_size:
                break
            if offset in state.finished:
                continue
            stored = log[offset]
            key = stored.message.message_group
            if group.fifo and key in blocked:
                continue
            flight = state.in_flight.get(offset)
            if flight is not None and flight.invisible_until_ms > now_ms:
                blocked.add(key)
                continue
            message = stored.message
            if flight is None and not message_filter.matches(
                message.tag or "", message.user_properties.items(), message.keys
            ):
                state.finish(offset)
                continue
            attempt = 1 if flight is None else flight.delivery_attempt + 1
            flight = _InFlight(attempt, self._next_generation(), now_ms + invisible_ms)
            state.in_flight[offset] = flight
            popped.append(
                PoppedMessage(
                    stored.message,
                    queue,
                    offset,
                    stored.store_timestamp_ms,
                    attempt,
                    flight.generation,
                    flight.invisible_until_ms,
                )
            )
        invisible = [f.invisible_until_ms for f in state.in_flight.values()]
        return PopResult(tuple(popped), len(log), min(invisible) if invisible else None)

    def _flight(self, group: str, queue: QueueRef, offset: int, generation: int) -> _InFlight:
        state = self._groups.get((group, queue))
        flight = state.in_flight.get(offset) if state else None
        if flight is None:
            raise BrokerError.of(
                Reason.INVALID_RECEIPT_HANDLE, "receipt handle is stale: the message is finished"
            )
        if flight.generation != generation:
            raise BrokerError.of(
                Reason.INVALID_RECEIPT_HANDLE,
                "receipt handle is stale: the message was redelivered or renewed since",
            )
        return flight

    async def ack(self, group: str, queue: QueueRef, offset: int, generation: int) -> None:
        """Finish a delivery."""
        self._flight(group, queue, offset, generation)
        self._state(group, queue).finish(offset)

    async def ack_all(
        self, group: str, deliveries: Sequence[tuple[QueueRef, int, int]]
    ) -> list[BrokerError | None]:
        """Finish each delivery; one outcome each (see ``MessageStore.ack_all``)."""
        outcomes: list[BrokerError | None] = []
        for queue, offset, generation in deliveries:
            try:
                await self.ack(group, queue, offset, generation)
            except BrokerError as error:
                outcomes.append(error)
            else:
                outcomes.append(None)
        return outcomes

    async def change_invisible(
        self, group: str, queue: QueueRef, offset: int, generation: int, invisible_ms: int
    ) -> tuple[int, int]:
        """Hide a delivery for ``invisible_ms`` from now; a new generation."""
        flight = self._flight(group, queue, offset, generation)
        flight.generation = self._next_generation()
        flight.invisible_until_ms = self._clock.now_ms() + invisible_ms
        return flight.generation, flight.invisible_until_ms

    async def forward_to_dead_letter(
        self, group: GroupInfo, queue: QueueRef, offset: int, generation: int
    ) -> SendResult:
        """Copy the message to ``%DLQ%<group>`` and finish the delivery."""
        self._flight(group.name, queue, offset, generation)
        original = self._queues[queue][offset].message
        dlq_topic = group.dead_letter_topic
        if self._metadata is not None:
            self._metadata.ensure_topic(dlq_topic)
        copy = original._replace(topic=dlq_topic, dead_letter_of=(queue.topic, original.message_id))
        (result,) = await self.append(QueueRef(dlq_topic, 0), [copy])
        self._state(group.name, queue).finish(offset)
        return result

    def _grew(self, topic: str, known_end_offsets: Mapping[int, int]) -> bool:
        return any(
            len(self._queues.get(QueueRef(topic, queue_id), ())) > end
            for queue_id, end in known_end_offsets.items()
        )

    async def wait_for_append(
        self,
        topic: str,
        known_end_offsets: Mapping[int, int],
        timeout_ms: int,
        *,
        quiet: bool = False,
    ) -> bool:
        """Wait until a queue of ``topic`` grows past ``known_end_offsets`` (``quiet`` changes
        nothing here: this store wakes its waiters itself)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            self._release_due()
            if self._grew(topic, known_end_offsets):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            due_ms = self.next_due_ms()
            if due_ms is not None:  # wake up when the next timed message is due
                remaining = min(remaining, max(0.001, (due_ms - self._clock.now_ms()) / 1000))
            event = self._appended.setdefault(topic, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def get_consumer_offset(self, group: str, queue: QueueRef) -> int | None:
        """The group's committed offset on ``queue``: where pop goes on, past messages
        in flight (None: it never consumed it)."""
        self._release_due()
        state = self._groups.get((group, queue))
        return state.cursor(len(self._log(queue))) if state else None

    async def read(
        self, queue: QueueRef, offset: int, *, batch_size: int, message_filter: MessageFilter
    ) -> QueueSlice:
        """Messages from ``offset`` matching ``message_filter`` (every queue starts at 0 here)."""
        self._release_due()
        log = self._log(queue)
        if not 0 <= offset <= len(log):
            raise BrokerError(
                codes.OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [0, {len(log)}] of {queue.topic}:{queue.queue_id}",
            )
        found: list[PulledMessage] = []
        next_offset = offset
        while next_offset < len(log) and len(found) < batch_size:
            stored = log[next_offset]
            message = stored.message
            if message_filter.matches(
                message.tag or "", message.user_properties.items(), message.keys
            ):
                found.append(
                    PulledMessage(stored.message, queue, next_offset, stored.store_timestamp_ms)
                )
            next_offset += 1
        return QueueSlice(tuple(found), next_offset, 0, len(log))

    async def queue_offsets(self, queue: QueueRef, timestamp_ms: int = -1) -> QueueOffsets:
        """0, the queue's length, and the first offset stored at or after ``timestamp_ms``."""
        self._release_due()
        log = self._log(queue)
        at = -1
        if timestamp_ms >= 0:
            at = next(
                (i for i, stored in enumerate(log) if stored.store_timestamp_ms >= timestamp_ms),
                len(log),
            )
        return QueueOffsets(0, len(log), at)

    async def commit_consumer_offset(self, group: str, queue: QueueRef, offset: int) -> int:
        """Commit the group's position on ``queue`` (clamped to the queue); its
        deliveries in flight stay valid (see ``_GroupQueue.commit``)."""
        self._release_due()
        end = len(self._log(queue))
        offset = min(max(offset, 0), end)
        state = self._groups.get((group, queue))
        if state is None:
            self._groups[(group, queue)] = _GroupQueue(committed=offset)
        else:
            state.commit(offset, end)
        return offset

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
        """The topic's queued messages with ``key`` or id ``message_id`` stored in
        ``[begin_ms, end_ms]``, oldest first (a scan: the store is small)."""
        self._release_due()
        found = [
            PulledMessage(stored.message, queue, offset, stored.store_timestamp_ms)
            for queue, log in self._queues.items()
            if queue.topic == topic
            for offset, stored in enumerate(log)
            if begin_ms <= stored.store_timestamp_ms <= end_ms
            and (
                stored.message.message_id == message_id
                if message_id
                else key in stored.message.keys
            )
        ]
        found.sort(key=lambda pulled: (pulled.store_timestamp_ms, pulled.queue.queue_id))
        return found[:limit]

    async def cancel_timer(self, queue: QueueRef, message_id: str) -> bool:
        """Drop a held timed message before it is due (see ``MessageStore.cancel_timer``)."""
        self._release_due()
        for index, (_due, _arrival, held_queue, message) in enumerate(self._held):
            if held_queue == queue and message.message_id == message_id:
                self._held.pop(index)
                heapq.heapify(self._held)
                return True
        return False


class MemoryCoordination:
    """Leases and producer registrations of brokers in one process (the nameserver's part).

    A lease is free, expired (by the clock) or held; its holder may extend it.
    ``register_producers`` stands for a broker's heartbeat; ``set_alive``
    marks a broker dead as the nameserver's failure detector would.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._leases: dict[str, tuple[str, int]] = {}  # name -> (owner, expires_ms)
        self._producers: dict[str, frozenset[str]] = {}  # broker -> producer groups
        self._dead: set[str] = set()

    async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend the lease unless another owner holds it unexpired."""
        now_ms = self._clock.now_ms()
        held = self._leases.get(name)
        if held is not None and held[0] != owner and held[1] > now_ms:
            return False
        self._leases[name] = (owner, now_ms + ttl_ms)
        return True

    async def release_lease(self, name: str, owner: str) -> None:
        """Free the lease if ``owner`` holds it."""
        held = self._leases.get(name)
        if held is not None and held[0] == owner:
            del self._leases[name]

    def lease_owner(self, name: str) -> str | None:
        """Who holds the lease now (for tests)."""
        held = self._leases.get(name)
        return held[0] if held is not None and held[1] > self._clock.now_ms() else None

    def register_producers(self, broker: str, groups: Iterable[str]) -> None:
        """A broker's heartbeat: the producer groups connected to it."""
        self._producers[broker] = frozenset(groups)

    def set_alive(self, broker: str, alive: bool) -> None:
        """Mark a broker live or dead."""
        if alive:
            self._dead.discard(broker)
        else:
            self._dead.add(broker)

    async def brokers_with_producers(self, producer_group: str) -> list[str]:
        """Live brokers reporting a producer of the group, sorted."""
        return sorted(
            broker
            for broker, groups in self._producers.items()
            if producer_group in groups and broker not in self._dead
        )


class OrphanCheckTarget(Protocol):
    """A broker's side of a peer's orphan check: its local producers."""

    def deliver_local(self, half: HalfMessage, transaction_id: str) -> bool:
        """Send the check to a producer connected there; whether one was."""
        ...


class MemoryPeers:
    """Brokers in one process calling each other directly (Angelia in production)."""

    def __init__(self) -> None:
        self._brokers: dict[str, OrphanCheckTarget] = {}

    def add(self, broker: str, target: OrphanCheckTarget) -> None:
        """Make ``broker`` reachable."""
        self._brokers[broker] = target

    def remove(self, broker: str) -> None:
        """Make ``broker`` unreachable (it died)."""
        self._brokers.pop(broker, None)

    async def deliver_orphan_check(
        self, broker: str, half: HalfMessage, transaction_id: str
    ) -> bool:
        """Ask ``broker`` to deliver the check; False if it is unreachable."""
        target = self._brokers.get(broker)
        return target is not None and target.deliver_local(half, transaction_id)
