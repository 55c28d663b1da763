"""The RIP-46 consumer figures by a walk over every group queue: the oracle the kept
figures (``storage_node/partition/consumer_tally.py``) are checked against.

It is how the storage node's metrics computed them before they were kept: per
(consumer group, topic), the lag and in-flight messages of ``queue_progress``
summed over the group queues, and the age of the oldest message not done.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage_node.metrics import ConsumerFigures
from storage_node.partition.queries import PartitionQueries
from storage_node.progress import queue_progress


def consumer_figures(states: Iterable[PartitionQueries], now_ms: int) -> ConsumerFigures:
    """(lag, latency ms at ``now_ms``, in flight) of every (consumer group, topic) with a
    group queue in ``states``, looking at every group queue."""
    lag: dict[tuple[str, str], int] = {}
    inflight: dict[tuple[str, str], int] = {}
    oldest: dict[tuple[str, str], int] = {}
    for state in states:
        for consumer_group, topic, queue_id in state.group_queues():
            key = (consumer_group, topic)
            progress = queue_progress(state, consumer_group, topic, queue_id)
            lag[key] = lag.get(key, 0) + progress.lag
            inflight[key] = inflight.get(key, 0) + progress.in_flight
            waiting = max(progress.consumer_offset, progress.first_offset)
            if progress.lag > 0 and waiting < progress.end_offset:
                stored_ms = state.entry(topic, queue_id, waiting).store_timestamp_ms
                oldest[key] = min(oldest.get(key, stored_ms), stored_ms)
    return {
        key: (
            count,
            0 if (least := oldest.get(key)) is None else max(0, now_ms - least),
            inflight[key],
        )
        for key, count in lag.items()
    }
