"""Routes and assignments: which queues a client may use."""

from __future__ import annotations

from broker.domain import QueueInfo, TopicInfo
from broker.errors import BrokerError, Reason
from broker.processor import validation
from broker.services.base import MetadataService


class RouteProcessor:
    """Protocol-agnostic route lookups; the adapter adds this broker's endpoint."""

    def __init__(self, metadata: MetadataService) -> None:
        self._metadata = metadata

    async def route(self, topic_name: str) -> TopicInfo:
        """The topic and its queues, for QueryRoute."""
        validation.check_topic(topic_name)
        return await self._metadata.get_topic(topic_name)

    async def assignment(self, topic_name: str, group_name: str) -> tuple[TopicInfo, QueueInfo]:
        """What a push consumer of ``group_name`` receives from.

        Every broker pops across all readable queues of a topic, so a consumer
        is assigned the whole topic as one queue with id -1 (as the proxy does
        for non-FIFO groups).
        """
        validation.check_topic(topic_name)
        validation.check_group(group_name)
        topic = await self._metadata.get_topic(topic_name)
        await self._metadata.get_group(group_name)
        readable = [queue for queue in topic.queues if queue.permission.readable]
        if not readable:
            raise BrokerError.of(
                Reason.NO_READABLE_QUEUE, f"topic {topic_name!r} has no readable queue"
            )
        return topic, QueueInfo(-1, readable[0].permission)
