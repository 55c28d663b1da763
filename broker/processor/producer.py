"""Sending: validate, pick queues, append (coalesced per queue).

Every message type goes the same way: the store holds a DELAY message until
its delivery time and a TRANSACTION message as a half message until it is
ended (see the ``MessageStore`` contract), so a send of either is one append.

Queue choice for a request whose messages name no queue (no message group,
no queue id): the topic has a current queue. A request joins the append
forming there (waiting behind one in flight) while that holds fewer than
``JOIN_MESSAGES_MAX`` messages with it; otherwise the current queue moves
on by one and the request goes there. A retry of a request (the same
first message id) goes where the first attempt went instead
(``retry_placement.py``), so the storage dedup window sees it. Under light load no append is
forming, so requests take the queues in turn and go at once; under load
appends gather ~``JOIN_MESSAGES_MAX`` messages (the store pays per append,
not per message) and the queues still take them in turn, so none is
favoured.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Sequence

from broker.domain import Message, QueueRef, SendResult
from broker.errors import BrokerError, Reason
from broker.metrics import BrokerMetrics
from broker.processor import recall_handle as recall_handles
from broker.processor import validation
from broker.processor.coalescer import AppendCoalescer
from broker.processor.retry_placement import RetryPlacements
from broker.processor.selector import select_queue
from broker.services.base import Clock, MessageStore, MetadataService
from protocol import errors as codes

JOIN_MESSAGES_MAX = 256
"""A request joins the current queue's forming append while it stays within this."""


class ProducerProcessor:
    """Protocol-agnostic send path."""

    def __init__(
        self,
        metadata: MetadataService,
        store: MessageStore,
        clock: Clock,
        *,
        coalescer: AppendCoalescer | None = None,
        delivery_ahead_ms_max: int = validation.DELIVERY_AHEAD_MS_MAX,
        join_messages_max: int = JOIN_MESSAGES_MAX,
    ) -> None:
        self._metadata = metadata
        self._delivery_ahead_ms_max = delivery_ahead_ms_max
        self._clock = clock
        self._store = store
        self._coalescer = coalescer or AppendCoalescer(store)
        self._turns: dict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._current: dict[str, int] = {}  # topic -> index into its writable queues
        self._join_messages_max = join_messages_max
        self._placements = RetryPlacements()
        self.metrics: BrokerMetrics | None = None  # set by the broker role when it exports them

    async def send(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store ``messages`` (one topic); results in request order.

        All-or-nothing validation: one bad message fails the request before
        anything is stored.
        """
        results = await self._send(messages)
        if self.metrics is not None:
            self.metrics.stored(messages)
        return results

    async def _send(self, messages: Sequence[Message]) -> list[SendResult]:
        if not messages:
            raise BrokerError.of(Reason.MESSAGE_CORRUPTED, "send request carries no message")
        now_ms = self._clock.now_ms()
        for message in messages:
            validation.check_message(message, now_ms, self._delivery_ahead_ms_max)
        topic_name = messages[0].topic
        if any(message.topic != topic_name for message in messages):
            raise BrokerError(codes.BAD_REQUEST, "messages of one send must share one topic")
        topic = await self._metadata.get_topic_for_send(topic_name, messages[0].message_type)
        for message in messages:
            validation.check_type_allowed(message, topic)
        writable = [queue.queue_id for queue in topic.queues if queue.permission.writable]
        if not writable:
            raise BrokerError.of(
                Reason.NO_WRITABLE_QUEUE, f"topic {topic_name!r} has no writable queue"
            )
        # A request goes to one queue, as RocketMQ sends a batch to one queue:
        # the batch stays one append (messages with a message group or a queue
        # of their own still go where those name).
        if not any(map(_names_its_queue, messages)):  # the common batch: one append
            # A retry (same first message id) goes where its first attempt went, where
            # the storage dedup window sees it (retry_placement.py).
            first_id = messages[0].message_id
            placed = self._placements.queue_of(topic_name, first_id, now_ms)
            if placed is not None and placed in writable:
                queue = QueueRef(topic_name, placed)
            else:
                queue = self._current_queue(topic_name, writable, len(messages))
                self._placements.remember(topic_name, first_id, queue.queue_id, now_ms)
            return await self._coalescer.append(queue, messages)
        turn = next(self._turns[topic_name])
        by_queue: dict[int, list[int]] = defaultdict(list)
        for index, message in enumerate(messages):
            by_queue[select_queue(message, writable, turn)].append(index)
        appended = await asyncio.gather(
            *(
                self._coalescer.append(
                    QueueRef(topic_name, queue_id), [messages[i] for i in indexes]
                )
                for queue_id, indexes in by_queue.items()
            )
        )
        results: list[SendResult | None] = [None] * len(messages)
        for indexes, queue_results in zip(by_queue.values(), appended, strict=True):
            for index, result in zip(indexes, queue_results, strict=True):
                results[index] = result
        return [result for result in results if result is not None]

    def _current_queue(self, topic: str, writable: Sequence[int], count: int) -> QueueRef:
        """Where a request of ``count`` messages naming no queue goes (module docstring)."""
        index = self._current.get(topic, -1)
        if index >= 0:
            queue = QueueRef(topic, writable[index % len(writable)])
            forming = self._coalescer.pending_messages(queue)
            if forming and forming + count <= self._join_messages_max:
                return queue
        index = (index + 1) % len(writable)
        self._current[topic] = index
        return QueueRef(topic, writable[index])

    async def recall(self, topic_name: str, handle: str) -> str:
        """Cancel the timed message a send's recall handle names, before it is due; its
        message id (RocketMQ 5.3's RecallMessage).

        BAD_REQUEST for a handle that is malformed or of another topic; NOT_FOUND
        when the message is no longer held: its delivery time has passed (it was
        delivered) or it was recalled already.
        """
        validation.check_topic(topic_name)
        target = recall_handles.decode(handle, topic_name)
        await self._metadata.get_topic(topic_name)
        now_ms = self._clock.now_ms()
        if target.delivery_ms <= now_ms:
            raise BrokerError(
                codes.NOT_FOUND,
                f"message {target.message_id!r} was due at {target.delivery_ms} ms, "
                f"{now_ms - target.delivery_ms} ms ago: it was delivered and cannot be recalled",
            )
        if not await self._store.cancel_timer(target.queue, target.message_id):
            raise BrokerError(
                codes.NOT_FOUND,
                f"message {target.message_id!r} is not held for delivery: "
                "it was delivered or recalled already",
            )
        return target.message_id


def _names_its_queue(message: Message) -> bool:
    """Whether ``message`` may go elsewhere than the topic's current queue: its
    message group or its own queue id decide (``select_queue``)."""
    return message.message_group is not None or message.queue_id is not None
