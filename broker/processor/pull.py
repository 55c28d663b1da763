"""Offset-based consumption (the v2 pull consumer): pull, commit, read offsets back.

A pull names its queue and offset and changes no state: the consumer keeps
its own position and commits it when it wants (``update_offset``). The
committed position of a group in a queue is ONE value in the queue's raft
group, shared with pop consumption (Simple/Push consumers) of the same group,
as RocketMQ keeps one consumer offset table for both (see docs/consumers.md):

- ``get_offset`` reads the position pop consumption reached too, past the
  messages it popped, acked or still in flight (RocketMQ's committed offset);
- ``update_offset`` moves it, and pop consumption of the group resumes there;
  the group's in-flight pop messages keep their receipt handles (an ack still
  works, an unacked one comes back when its invisibility ends), as RocketMQ
  keeps pop's checkpoints across a commit. An operator's ``group
  reset-offset`` is the one commit that drops them.

Long polling: a pull answers at once when a message matching its filter
exists at or past its offset; otherwise it waits (up to the planned poll,
see ``polling.py``) for the queue to grow, through the store's one growth
watch per queue, and reads again. A filter that skips a whole read window
moves the pull on without waiting, for at most ``SKIPPED_READS_MAX`` windows.

Out of range: an offset below the queue's first offset or above its end is
answered as RocketMQ's proxy does (``ILLEGAL_OFFSET``; the status message
names the valid range), with the next offset moved into the range (the
first offset when below it, the end when above), as the broker's offset
correction does.

Stateless like the rest of the broker: any broker serves any pull or commit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from broker.domain import PulledMessage, QueueOffsets, QueueRef
from broker.errors import BrokerError, Reason
from broker.metrics import BrokerMetrics
from broker.processor import validation
from broker.services.base import MessageStore, MetadataService
from protocol import errors as codes
from protocol.filters import MessageFilter
from protocol.rocketmq.pull import BATCH_SIZE_MAX

SKIPPED_READS_MAX = 16
"""Reads whose whole window the filter skipped, at most, in one pull: a pull through
a long run of unmatched messages answers (MESSAGE_NOT_FOUND, next_offset past
them) instead of scanning on until its poll ends."""


@dataclass(frozen=True, slots=True)
class PullResult:
    """What a pull answers: the messages, where the consumer goes on, and (for an
    offset out of range) the error its status reports."""

    messages: tuple[PulledMessage, ...]
    next_offset: int
    out_of_range: BrokerError | None = None


def out_of_range(queue: QueueRef, offset: int, offsets: QueueOffsets) -> PullResult:
    """The answer to a pull at ``offset`` outside [first, end] of ``queue``."""
    first, end = offsets.first_offset, offsets.end_offset
    error = BrokerError(
        codes.OFFSET_OUT_OF_RANGE,
        f"offset {offset} is outside [{first}, {end}], the offsets of "
        f"{queue.topic}:{queue.queue_id}",
    )
    return PullResult((), first if offset < first else end, error)


class PullProcessor:
    """Protocol-agnostic pull and offset path (see the module docstring)."""

    def __init__(self, metadata: MetadataService, store: MessageStore) -> None:
        self.metrics: BrokerMetrics | None = None  # set by the broker role when it exports them
        self._metadata = metadata
        self._store = store

    async def _queue(self, topic_name: str, queue_id: int) -> QueueRef:
        """The topic's queue ``queue_id``; BAD_REQUEST when it has none, FORBIDDEN
        when it is not readable."""
        validation.check_topic(topic_name)
        topic = await self._metadata.get_topic(topic_name)
        for queue in topic.queues:
            if queue.queue_id == queue_id:
                if not queue.permission.readable:
                    raise BrokerError.of(
                        Reason.NO_READABLE_QUEUE,
                        f"queue {queue_id} of topic {topic_name!r} is not readable",
                    )
                return QueueRef(topic_name, queue_id)
        raise BrokerError(
            codes.BAD_REQUEST,
            f"topic {topic_name!r} has no queue {queue_id} "
            f"(its queues: {sorted(q.queue_id for q in topic.queues)})",
        )

    async def _group_queue(self, group_name: str, topic_name: str, queue_id: int) -> QueueRef:
        """The queue, once the consumer group is known (CONSUMER_GROUP_NOT_FOUND)."""
        validation.check_group(group_name)
        queue = await self._queue(topic_name, queue_id)
        await self._metadata.get_group(group_name, topics=[topic_name])
        return queue

    async def pull(
        self,
        group_name: str,
        topic_name: str,
        queue_id: int,
        offset: int,
        message_filter: MessageFilter,
        *,
        batch_size: int,
        poll_ms: int,
        batch_size_max: int = BATCH_SIZE_MAX,
    ) -> PullResult:
        """Up to ``batch_size`` (capped to ``batch_size_max``) messages matching
        ``message_filter`` from ``offset`` on, waiting at most ``poll_ms`` for the first
        (see the module docstring)."""
        queue = await self._group_queue(group_name, topic_name, queue_id)
        batch_size = validation.check_batch_size(batch_size, batch_size_max)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        skipped_reads = 0
        while True:
            try:
                found = await self._store.read(
                    queue, offset, batch_size=batch_size, message_filter=message_filter
                )
            except BrokerError as error:
                if error.code is not codes.OFFSET_OUT_OF_RANGE:
                    raise
                offsets = await self._store.queue_offsets(queue)
                in_range = offsets.first_offset <= offset <= offsets.end_offset
                if in_range and loop.time() < deadline:
                    continue  # the queue grew (or was trimmed) between the two calls
                return out_of_range(queue, offset, offsets)
            if found.messages:
                if self.metrics is not None:
                    size = sum(len(pulled.message.body) for pulled in found.messages)
                    self.metrics.delivered(group_name, topic_name, len(found.messages), size)
                return PullResult(found.messages, found.next_offset)
            offset = found.next_offset
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return PullResult((), offset)
            if offset < found.end_offset:
                # The filter skipped a whole read window: read on, a bounded number
                # of windows per call (the consumer goes on from next_offset).
                skipped_reads += 1
                if skipped_reads >= SKIPPED_READS_MAX:
                    return PullResult((), offset)
                continue
            # Nothing past the offset yet: the group holds no lease here that could
            # bring messages, so only growth matters (quiet).
            await self._store.wait_for_append(
                topic_name, {queue_id: found.end_offset}, int(remaining_s * 1000) + 1, quiet=True
            )

    async def update_offset(
        self, group_name: str, topic_name: str, queue_id: int, offset: int
    ) -> int:
        """Commit ``group_name``'s position in the queue; the offset stored (clamped to
        the queue's [first, end]). A negative offset is refused (ILLEGAL_OFFSET)."""
        if offset < 0:
            raise BrokerError(codes.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        queue = await self._group_queue(group_name, topic_name, queue_id)
        return await self._store.commit_consumer_offset(group_name, queue, offset)

    async def get_offset(self, group_name: str, topic_name: str, queue_id: int) -> int:
        """The group's committed position in the queue; OFFSET_NOT_FOUND when the group
        never consumed the queue nor committed an offset in it."""
        queue = await self._group_queue(group_name, topic_name, queue_id)
        offset = await self._store.get_consumer_offset(group_name, queue)
        if offset is None:
            raise BrokerError.of(
                Reason.OFFSET_NOT_FOUND,
                f"group {group_name!r} has no offset in {topic_name}:{queue_id}",
            )
        return offset

    async def beginning_offset(self, topic_name: str, queue_id: int) -> int:
        """The queue's first (oldest) offset still held."""
        offsets = await self._store.queue_offsets(await self._queue(topic_name, queue_id))
        return offsets.first_offset

    async def end_offset(self, topic_name: str, queue_id: int) -> int:
        """The offset the queue's next message gets."""
        offsets = await self._store.queue_offsets(await self._queue(topic_name, queue_id))
        return offsets.end_offset

    async def offset_at(self, topic_name: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue stored at or after ``timestamp_ms`` (the end
        offset if none; the first offset for a time before every message)."""
        if timestamp_ms < 0:
            raise BrokerError(codes.BAD_REQUEST, f"timestamp {timestamp_ms} ms is negative")
        queue = await self._queue(topic_name, queue_id)
        return (await self._store.queue_offsets(queue, timestamp_ms)).timestamp_offset
