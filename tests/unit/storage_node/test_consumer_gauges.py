"""The RIP-46 consumer gauges of a storage node: figures summed per (consumer group,
topic) from the partition state, series made at scrape time by ``ConsumerGauges``.

Their memory is pinned: three prometheus children per (consumer group, topic)
kept between walks took 2,242 traced bytes a (consumer group, topic) on CPython
3.11 (about 280 a queue for topics of 8), the figures the collector keeps
instead take 253 (a key tuple, a tuple of three ints, a dict entry).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc

from prometheus_client import CollectorRegistry

from protocol.records import MessageRecord
from protocol.routing import RETRY_TOPIC_PREFIX
from storage_node.metrics import ConsumerGauges
from storage_node.partition.commands import Ack, Append, Receive, encode
from storage_node.partition.state import PartitionState

from .consumer_walk import consumer_figures

NODE_LABELS = ("cluster", "node_type", "node_id")
NODE_VALUES = ("c", "storage", "1")
GROUP = "g"
BYTES_PER_GROUP_TOPIC_MAX = 300


def _labels(topic: str, is_retry: str = "false") -> dict[str, str]:
    return {
        **dict(zip(NODE_LABELS, NODE_VALUES, strict=True)),
        "consumer_group": GROUP,
        "topic": topic,
        "is_retry": is_retry,
        "is_system": "false",
    }


def test_the_figures_are_summed_per_topic_and_shown_at_each_scrape() -> None:
    state = PartitionState()
    log_index = 0

    def apply(command: Append | Receive | Ack) -> object:
        nonlocal log_index
        log_index += 1
        return state.apply_entry(encode(command), log_index)

    retry = f"{RETRY_TOPIC_PREFIX}{GROUP}"
    records = [MessageRecord("t", q, f"m{q}-{i}", b"x") for q in (0, 1) for i in range(2)]
    apply(Append(1_000, (*records, MessageRecord(retry, 0, "r", b"x"))))
    apply(Append(4_000, (MessageRecord("t", 1, "late", b"x"),)))
    received = apply(Receive(5_000, GROUP, "t", 0, 1, 30_000, 16))
    handles = tuple(d.handle for d in received.deliveries)  # type: ignore[attr-defined]
    apply(Receive(5_000, GROUP, "t", 1, 3, 30_000, 16))
    apply(Receive(5_000, GROUP, retry, 0, 1, 30_000, 16))

    registry = CollectorRegistry()
    gauges = ConsumerGauges(NODE_LABELS, NODE_VALUES)
    registry.register(gauges)

    def sample(name: str, topic: str, is_retry: str = "false") -> float | None:
        return registry.get_sample_value(name, _labels(topic, is_retry))

    assert sample("rocketmq_consumer_lag_messages", "t") is None  # no walk yet
    # t: 5 messages in two queues, 4 in flight, none done; the oldest stored at 1,000.
    gauges.figures = consumer_figures([state], now_ms=6_000)
    assert sample("rocketmq_consumer_lag_messages", "t") == 5
    assert sample("rocketmq_consumer_inflight_messages", "t") == 4
    assert sample("rocketmq_consumer_lag_latency_milliseconds", "t") == 5_000
    assert sample("rocketmq_consumer_inflight_messages", retry, "true") == 1
    # One ack: the acked message leaves the lag and the in-flight count.
    apply(Ack(6_000, GROUP, handles))
    gauges.figures = consumer_figures([state], now_ms=7_000)
    assert sample("rocketmq_consumer_lag_messages", "t") == 4
    assert sample("rocketmq_consumer_inflight_messages", "t") == 3
    assert sample("rocketmq_consumer_lag_latency_milliseconds", "t") == 6_000
    # A walk that no longer finds the group's queues (e.g. leadership moved): no series.
    gauges.figures = consumer_figures([], now_ms=8_000)
    assert sample("rocketmq_consumer_lag_messages", "t") is None
    assert sample("rocketmq_consumer_lag_latency_milliseconds", retry, "true") is None


def test_the_figures_of_a_consumer_group_and_topic_cost_under_300_bytes() -> None:
    gauges = ConsumerGauges(NODE_LABELS, NODE_VALUES)
    CollectorRegistry().register(gauges)
    topics = [sys.intern(f"bq-{t}") for t in range(1_000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        # As the walk makes them: a new key tuple and figures of ints beyond the cached.
        gauges.figures = {
            (GROUP, topic): (t + 1_000, t + 60_000, t + 2_000) for t, topic in enumerate(topics)
        }
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    per_group_topic = grown / len(topics)
    assert 0 < per_group_topic <= BYTES_PER_GROUP_TOPIC_MAX, f"{per_group_topic:.0f} bytes"
