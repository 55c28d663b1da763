"""Consuming: receive with long polling, ack, change invisibility, dead letters.

Stateless: a delivery is described entirely by its receipt handle (see
``receipt.py``) and the store's pop state, so any broker may finish a
delivery another broker made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.domain import Delivery, GroupInfo, PoppedMessage, QueueRef, Receipt
from broker.errors import BrokerError, Reason
from broker.metrics import BrokerMetrics
from broker.processor import receipt as receipts
from broker.processor import validation
from broker.processor.pop_coalescer import PopCoalescer
from broker.services.base import Clock, MessageStore, MetadataService
from protocol.filters import MessageFilter

DEFAULT_INVISIBLE_MS = 60_000  # auto-renew receives (push consumers) leave it to the server


class ConsumerProcessor:
    """Protocol-agnostic receive/ack path."""

    def __init__(
        self,
        metadata: MetadataService,
        store: MessageStore,
        clock: Clock,
        receipt_secret: bytes,
        *,
        default_invisible_ms: int = DEFAULT_INVISIBLE_MS,
        pops: PopCoalescer | None = None,
    ) -> None:
        """``pops``: how pops reach ``store`` (a ``PopCoalescer`` of it by default)."""
        self._metadata = metadata
        self._store = store
        self._pops = PopCoalescer(store) if pops is None else pops
        self._clock = clock
        self._secret = receipt_secret
        self._default_invisible_ms = default_invisible_ms
        self._turn = 0
        self.metrics: BrokerMetrics | None = None  # set by the broker role when it exports them

    def _handle(self, group: str, popped: PoppedMessage) -> str:
        return receipts.encode_fields(
            group,
            popped.queue,
            popped.offset,
            popped.generation,
            popped.delivery_attempt,
            popped.invisible_until_ms,
            popped.message.message_id,
            self._secret,
        )

    async def group(self, group_name: str, topics: Sequence[str] = ()) -> GroupInfo:
        """The consumer group (validated name); ``topics``: what the client subscribes to."""
        validation.check_group(group_name)
        return await self._metadata.get_group(group_name, topics=topics)

    async def receive(
        self,
        group_name: str,
        topic_name: str,
        message_filter: MessageFilter,
        *,
        batch_size: int,
        invisible_ms: int | None,
        poll_ms: int,
    ) -> list[Delivery]:
        """Up to ``batch_size`` messages, waiting at most ``poll_ms`` for the first.

        ``invisible_ms`` None: the server picks (auto-renew receives).
        Queues are tried in turn from a rotating start, those whose pop in
        flight this receive can join first (see ``pop_coalescer``).
        Deliveries past the group's max attempts go to its dead-letter topic
        instead of the consumer.
        """
        validation.check_topic(topic_name)
        group = await self.group(group_name, [topic_name])
        batch_size = validation.check_batch_size(batch_size)
        if invisible_ms is None:
            invisible_ms = self._default_invisible_ms
        else:
            validation.check_receive_invisible_ms(invisible_ms)
        topic = await self._metadata.get_topic(topic_name)
        readable = [queue.queue_id for queue in topic.queues if queue.permission.readable]
        if not readable:
            raise BrokerError.of(
                Reason.NO_READABLE_QUEUE, f"topic {topic_name!r} has no readable queue"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        while True:
            self._turn += 1
            start = self._turn % len(readable)
            order = self._pops.joining_first(
                group,
                topic_name,
                readable[start:] + readable[:start],
                batch_size=batch_size,
                invisible_ms=invisible_ms,
                message_filter=message_filter,
            )
            deliveries: list[Delivery] = []
            known_end_offsets: dict[int, int] = {}
            next_visible_ms: int | None = None
            quiet = True  # no queue popped reports a lease of the group
            for queue_id in order:
                wanted = batch_size - len(deliveries)
                if wanted <= 0:
                    break
                result = await self._pops.pop(
                    group,
                    QueueRef(topic_name, queue_id),
                    batch_size=wanted,
                    invisible_ms=invisible_ms,
                    message_filter=message_filter,
                )
                known_end_offsets[queue_id] = result.end_offset
                quiet = quiet and result.leased == 0
                if result.next_visible_ms is not None and (
                    next_visible_ms is None or result.next_visible_ms < next_visible_ms
                ):
                    next_visible_ms = result.next_visible_ms
                for popped in result.messages:
                    if popped.delivery_attempt > group.retry.max_delivery_attempts:
                        await self._store.forward_to_dead_letter(
                            group, popped.queue, popped.offset, popped.generation
                        )
                        if self.metrics is not None:
                            self.metrics.dead_lettered(group.name, topic_name)
                        continue
                    deliveries.append(Delivery(popped, self._handle(group.name, popped)))
            if deliveries:
                if self.metrics is not None:
                    self.metrics.deliveries(group.name, topic_name, deliveries)
                return deliveries
            wait_s = deadline - loop.time()
            if wait_s <= 0:
                return []
            wait_ms = int(wait_s * 1000) + 1
            if next_visible_ms is not None:
                wait_ms = min(wait_ms, max(1, next_visible_ms - self._clock.now_ms()))
            await self._store.wait_for_append(topic_name, known_end_offsets, wait_ms, quiet=quiet)

    def _receipt(self, group_name: str, topic_name: str, handle: str) -> Receipt:
        receipt = receipts.decode(handle, self._secret, self._clock.now_ms())
        if receipt.group != group_name or receipt.queue.topic != topic_name:
            raise BrokerError.of(
                Reason.INVALID_RECEIPT_HANDLE,
                "receipt handle was issued for another consumer group or topic",
            )
        return receipt

    async def ack(
        self, group_name: str, topic_name: str, handles: Sequence[str]
    ) -> list[BrokerError | None]:
        """Finish deliveries; one outcome per handle (None for success)."""
        validation.check_group(group_name)
        validation.check_topic(topic_name)
        outcomes: list[BrokerError | None] = []
        valid: list[int] = []
        deliveries: list[tuple[QueueRef, int, int]] = []
        for index, handle in enumerate(handles):
            try:
                receipt = self._receipt(group_name, topic_name, handle)
            except BrokerError as error:
                outcomes.append(error)
                continue
            outcomes.append(None)
            valid.append(index)
            deliveries.append((receipt.queue, receipt.offset, receipt.generation))
        if deliveries:
            # In one go: a store finishes the handles of one queue in one call.
            finished = await self._store.ack_all(group_name, deliveries)
            for index, outcome in zip(valid, finished, strict=True):
                outcomes[index] = outcome
        return outcomes

    async def change_invisible(
        self, group_name: str, topic_name: str, handle: str, invisible_ms: int
    ) -> str:
        """Hide a delivery for ``invisible_ms`` from now; returns the new handle."""
        validation.check_group(group_name)
        validation.check_topic(topic_name)
        validation.check_change_invisible_ms(invisible_ms)
        receipt = self._receipt(group_name, topic_name, handle)
        generation, until_ms = await self._store.change_invisible(
            group_name, receipt.queue, receipt.offset, receipt.generation, invisible_ms
        )
        renewed = Receipt(
            group=receipt.group,
            queue=receipt.queue,
            offset=receipt.offset,
            generation=generation,
            delivery_attempt=receipt.delivery_attempt,
            invisible_until_ms=until_ms,
            message_id=receipt.message_id,
        )
        return receipts.encode(renewed, self._secret)

    async def forward_to_dead_letter(self, group_name: str, topic_name: str, handle: str) -> None:
        """Move a delivery to the group's dead-letter topic now (FIFO consumers give up)."""
        group = await self.group(group_name)
        validation.check_topic(topic_name)
        receipt = self._receipt(group_name, topic_name, handle)
        await self._store.forward_to_dead_letter(
            group, receipt.queue, receipt.offset, receipt.generation
        )
        if self.metrics is not None:
            self.metrics.dead_lettered(group.name, topic_name)
