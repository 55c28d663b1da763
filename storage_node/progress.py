"""A consumer group's progress in the queues of one raft group (``rip5 admin group lag``).

Pop consumers (Simple, Push) and offset consumers (pull, committed offsets)
share one consumption state per (consumer group, queue) in the partition
(``storage_node/partition/pop.py``, ``GroupQueue``): a committed offset resets
it, pops advance it. So one reading serves both: the consumer offset is the
point below which every message is done (acked, dead-lettered, or below a
committed offset), which for a pull consumer is the offset it committed.

PURE.
"""

from __future__ import annotations

from protocol.storage_api import QueueProgress
from storage_node.partition.queries import PartitionQueries


def group_progress(state: PartitionQueries, consumer_group: str, topic: str) -> list[QueueProgress]:
    """``consumer_group``'s progress in every queue of ``state`` it has consumption state
    in, and (``topic`` not "") in every queue of ``topic`` the state holds; sorted."""
    queues = {(t, q) for g, t, q in state.group_queues() if g == consumer_group}
    if topic:
        queues = {queue for queue in queues if queue[0] == topic}
        queues.update(queue for queue in state.queue_ids() if queue[0] == topic)
    return [queue_progress(state, consumer_group, *queue) for queue in sorted(queues)]


def queue_progress(
    state: PartitionQueries, consumer_group: str, topic: str, queue_id: int
) -> QueueProgress:
    """``consumer_group``'s progress in one queue (see ``QueueProgress``)."""
    first = state.first_offset(topic, queue_id)
    end = state.end_offset(topic, queue_id)
    consumer_offset = state.consumer_offset(consumer_group, topic, queue_id)
    lag, in_flight = state.backlog(consumer_group, topic, queue_id)
    last_consumed_ms = -1
    if consumer_offset is not None and first < consumer_offset <= end:
        last_consumed_ms = state.entry(topic, queue_id, consumer_offset - 1).store_timestamp_ms
    return QueueProgress(
        topic,
        queue_id,
        first,
        end,
        -1 if consumer_offset is None else consumer_offset,
        in_flight,
        lag,
        last_consumed_ms,
    )
