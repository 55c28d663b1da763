"""Sending: validate, pick queues, append (coalesced per queue).

Every message type goes the same way: the store holds a DELAY message until
its delivery time and a TRANSACTION message as a half message until it is
ended (see the ``MessageStore`` contract), so a send of either is one append.

Queue choice for a request whose messages name no queue (no message group,
no queue id): a stable hash of the request's first message id picks it
among the writable queues (``protocol.routing.group_queue_index``, the one
that places message groups). A client retrying a send that failed or timed
out resends the same message ids, so the retry lands on the queue of its
first attempt, through this broker or any other, before or after a broker
restart, where the storage dedup window (per raft group) sees it: a first
attempt stored after all is not stored twice. Distinct requests spread over
the queues evenly; those that meet on one queue while an append is in
flight there join the next append (``AppendCoalescer``), and the storage
node joins the appends to one raft group between two rounds into one log
entry.
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
from broker.processor.selector import group_queue_index, select_queue
from broker.services.base import Clock, MessageStore, MetadataService
from protocol import errors as codes


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
    ) -> None:
        self._metadata = metadata
        self._delivery_ahead_ms_max = delivery_ahead_ms_max
        self._clock = clock
        self._store = store
        self._coalescer = coalescer or AppendCoalescer(store)
        self._turns: dict[str, itertools.count[int]] = defaultdict(itertools.count)
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
            # Where any attempt of this request goes, on any broker (module docstring).
            index = group_queue_index(messages[0].message_id, len(writable))
            return await self._coalescer.append(QueueRef(topic_name, writable[index]), messages)
        turn = next(self._turns[topic_name])
        by_queue: dict[int, list[int]] = defaultdict(list)
        for index, message in enumerate(messages):
            by_queue[select_queue(message, writable, turn)].append(index)
        if len(by_queue) == 1:  # e.g. a batch to the queue its client chose: no gather task
            ((queue_id, _indexes),) = by_queue.items()
            return await self._coalescer.append(QueueRef(topic_name, queue_id), messages)
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
