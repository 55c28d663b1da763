"""A storage node's Prometheus metrics: ``rip5_raft_*`` (raft/host/metrics.py),
``rip5_storage_*``, and the consumer figures of RocketMQ's RIP-46 names.

Consumer lag lives where the queues are: each group's leader reports, for the
consumer groups that consumed its queues, ``rocketmq_consumer_lag_messages``,
``rocketmq_consumer_lag_latency_milliseconds`` (the age of the oldest message not
yet done) and ``rocketmq_consumer_inflight_messages``, the figures ``rip5 admin
group lag`` reads (storage_node/progress.py) summed per (consumer group, topic).
Summing a metric over the cluster's storage nodes gives the group's figure: a
group's queues are reported by its leader only. They are kept, not walked: each
led state's tally (``storage_node/partition/consumer_tally.py``) gives how its
group queues changed since the walk last asked, and ``ConsumerTotals`` sums those
changes, so a walk costs the group queues that changed, not the group queues
held. A state that is no longer led here (or was replaced by a restore) is
retired: its figures are taken out and it keeps no tally.

The three consumer families are made at scrape time by a collector
(``ConsumerGauges``) from the last walk's figures, one tuple of three ints per
(consumer group, topic), instead of three prometheus children per (consumer group,
topic) kept between walks (about 1.6 KB a topic read: a storage node with many
topics read by a simple consumer spent about 200 bytes a queue on them).

How appends join into raft entries: ``rip5_storage_appended_messages``,
``rip5_storage_appends`` and ``rip5_storage_append_entries`` (counters of what the
node led and stored; messages / entries is the join, the figure a message's
share of a raft entry's cost follows).

The leader also reports ``rocketmq_half_messages`` (transactional messages not
yet committed or rolled back) and ``rocketmq_timing_messages`` (delayed messages
not yet due) per topic. Counting them walks every such message, so they are
read every ``SLOW_REFRESHES``-th refresh only.

Everything here is read by :meth:`StorageMetrics.refresh` on the event loop
(angelia_rpc/metrics_export.py, ``refresh_every``); the scrape thread reads
only the metric objects. The queue and consumer gauges walk every group led
here (the queue and message counts are kept by each state, the consumer figures
by its tally): so that many groups do not make the metrics eat the node, a walk goes
on over several refreshes, a raft group at a time, about ``WALK_SLICE_S`` each
(never one long stall of the loop), and after a walk that took d seconds of the
loop the next one starts no sooner than d / ``WALK_SHARE`` later (on a node with
many queues they are updated less often than the other gauges).
A (consumer group, topic) that no longer has a queue led here has no series
from the next walk on.

SHELL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.routing import RETRY_TOPIC_PREFIX
from protocol.storage_api import TIME_MAX_MS
from raft.host.metrics import RaftMetrics
from storage_node.partition.consumer_tally import ConsumerTotals
from storage_node.partition.queries import PartitionQueries
from storage_node.service import StorageNode

WALK_SHARE = 0.02
"""The most of its time a node spends walking its queues for the gauges."""

WALK_SLICE_S = 0.01
"""About the longest one refresh walks queues: a walk over many queues (a third of a
million on each of three nodes) goes on over several refreshes, a raft group at a
time, so that it never stalls the node's event loop (every group it serves) for long."""

SLOW_REFRESHES = 10
"""The half and timing message counts are read every this many refreshes."""

APPEND_COUNTERS = {
    "rip5_storage_appended_messages": "Messages stored by the appends this node led",
    "rip5_storage_appends": "Appends this node led and stored (one queue's messages each, "
    "as a broker sends them)",
    "rip5_storage_append_entries": "Raft log entries those appends were stored in (the "
    "appends to one group that arrive between two raft rounds are joined into one entry)",
}
"""The counters of how appends join into raft entries, in the order of
:meth:`StorageMetrics._count_appends`'s totals (messages, appends, entries)."""

CONSUMER_LABELS = ("consumer_group", "topic", "is_retry", "is_system")
"""The labels RIP-46 gives the consumer gauges (no consumer group of rip5 is a system
one: ``is_system`` is always "false")."""


class StorageMetrics:
    """The metrics of one storage node, registered in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        node: StorageNode,
        labels: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Register the metrics of ``node``; ``labels``: cluster, node_type, node_id;
        ``clock``: seconds, monotonic (paces the walk over the queues)."""
        self._node = node
        self._clock = clock
        self._walk_due = -math.inf
        self._walk: _QueueWalk | None = None  # a walk over the queues under way
        self._consumer_totals = ConsumerTotals()
        self._values = tuple(labels.values())
        names = tuple(labels)
        self.raft = RaftMetrics(registry, node.driver, labels)

        def node_gauge(name: str, help_text: str) -> Gauge:
            """A gauge with this node's one series."""
            return Gauge(name, help_text, names, registry=registry).labels(*self._values)

        self._queues = node_gauge("rip5_storage_queues", "Queues of the raft groups led here")
        self._messages = node_gauge(
            "rip5_storage_messages", "Messages kept in the queues of the raft groups led here"
        )
        self._consumers = ConsumerGauges(names, self._values)
        registry.register(self._consumers)
        self._half = Gauge(
            "rocketmq_half_messages",
            "Transactional messages neither committed nor rolled back yet",
            (*names, "topic"),
            registry=registry,
        )
        self._timing = Gauge(
            "rocketmq_timing_messages",
            "Delayed messages not due yet",
            (*names, "topic"),
            registry=registry,
        )
        joined = Gauge(
            "rip5_storage_joined_copied_bytes",
            "Bytes the replicas that joined groups here copied from peers (source: the "
            "leader's snapshot, or log entries applied from joining until made a voter)",
            (*names, "source"),
            registry=registry,
        )
        self._joined_snapshot = joined.labels(*self._values, "snapshot")
        self._joined_entries = joined.labels(*self._values, "entries")
        self._joined_tier = node_gauge(
            "rip5_storage_joined_tier_bytes",
            "Bytes of history in the tier of the groups that replicas joined here (read "
            "from the tier, not copied from peers)",
        )
        self._tier_read = node_gauge(
            "rip5_storage_tier_read_bytes",
            "Bytes this node read from the tier (footers and blocks; cache hits not counted)",
        )
        # Detections (issue [Chaos]): a WAL that refuses writes, a damaged WAL set aside.
        self._wal_failed = node_gauge(
            "rip5_storage_wal_failed",
            "1 while this node's WAL refuses writes (a failed write or a full disk): it "
            "serves no group and stops heartbeating until the disk takes writes again",
        )
        self._data_lost = node_gauge(
            "rip5_storage_data_lost",
            "1 while this node, started on an empty WAL after setting a damaged one aside, "
            "waits for some group to re-admit it (it neither votes nor campaigns there)",
        )
        self._wal_set_aside = node_gauge(
            "rip5_storage_wal_set_aside",
            "1 if this process runs on an empty WAL after a damaged one was set aside "
            "(the damage is in its log and in the data-lost marker)",
        )
        # How well appends join into raft entries (messages / entries): counters read
        # from the node's running totals at each refresh.
        self._append_counters = tuple(
            Counter(name, help_text, names, registry=registry).labels(*self._values)
            for name, help_text in APPEND_COUNTERS.items()
        )
        self._counted = (0, 0, 0)  # the node's totals at the last refresh
        self._waiting_topics: set[tuple[str, str]] = set()  # (gauge name, topic) reported
        self._refreshes = 0

    def refresh(self) -> None:
        """Read every gauge from the node (on the event loop); the ones that walk
        every queue only once the last walk's pause (see the module) is over."""
        self.raft.refresh()
        node = self._node
        joined = [r for r in node.replicas.values() if r.joining]
        self._joined_snapshot.set(sum(r.joined_snapshot_bytes for r in joined))
        self._joined_entries.set(sum(r.joined_entry_bytes for r in joined))
        self._joined_tier.set(sum(r.joined_tier_bytes for r in joined))
        self._tier_read.set(0 if node.tier_reader is None else node.tier_reader.read_bytes)
        self._wal_failed.set(1 if node.wal_failure else 0)
        self._data_lost.set(1 if node.data_lost else 0)
        self._wal_set_aside.set(1 if node.wal_set_aside else 0)
        self._count_appends()
        started = self._clock()
        if self._walk is None:
            if started < self._walk_due:
                return
            group_ids = list(node.replicas)
            group_ids += [g for g in self._consumer_totals.group_ids() if g not in node.replicas]
            self._walk = _QueueWalk(group_ids, node.now_ms(), started)
        walk = self._walk
        slice_end_s = time.perf_counter() + WALK_SLICE_S  # real time: the loop's stall
        while walk.group_ids:
            group_id = walk.group_ids.pop()
            replica = node.replicas.get(group_id)
            state = None
            if replica is not None and node.driver.leader_of(group_id) == node.driver.node_id:
                state = replica.state
                walk.add(state)
            self._consumer_totals.read(group_id, state)  # retires a state no longer led
            if time.perf_counter() >= slice_end_s:
                break
        walk.spent_s += self._clock() - started
        if walk.group_ids:
            return  # the walk goes on at the next refresh
        self._walk = None
        self._publish_queues(walk)
        self._walk_due = walk.started_s + walk.spent_s / WALK_SHARE

    def _count_appends(self) -> None:
        """Add the appends stored since the last refresh to their counters."""
        node = self._node
        totals = (node.appended_messages, node.appends_stored, node.append_entries)
        for counter, total, counted in zip(
            self._append_counters, totals, self._counted, strict=True
        ):
            counter.inc(total - counted)
        self._counted = totals

    def _publish_queues(self, walk: _QueueWalk) -> None:
        """The queue, message and consumer gauges, from a finished walk."""
        self._queues.set(walk.queues)
        self._messages.set(walk.messages)
        self._consumers.figures = self._consumer_totals.figures(walk.now_ms)
        if self._refreshes % SLOW_REFRESHES == 0:
            self._refresh_waiting()
        self._refreshes += 1

    def _refresh_waiting(self) -> None:
        """Half and timing messages per topic, in the groups led here."""
        node = self._node
        counts: dict[tuple[str, str], int] = {}
        for group_id, replica in list(node.replicas.items()):
            if node.driver.leader_of(group_id) != node.driver.node_id:
                continue
            state = replica.state
            for half in state.half_messages_due(TIME_MAX_MS, TIME_MAX_MS, limit=2**62):
                key = ("half", half.topic)
                counts[key] = counts.get(key, 0) + 1
            for held in state.held_messages():
                key = ("timing", held.topic)
                counts[key] = counts.get(key, 0) + 1
        gauges = {"half": self._half, "timing": self._timing}
        for kind, topic in self._waiting_topics - counts.keys():
            gauges[kind].remove(*self._values, topic)
        for (kind, topic), count in counts.items():
            gauges[kind].labels(*self._values, topic).set(count)
        self._waiting_topics = set(counts)


ConsumerFigures = dict[tuple[str, str], tuple[int, int, int]]
"""(consumer group, topic) -> (lag messages, lag latency ms, in-flight messages)."""


class ConsumerGauges(Collector):
    """``rocketmq_consumer_lag_messages``, ``rocketmq_consumer_lag_latency_milliseconds``
    and ``rocketmq_consumer_inflight_messages``, made at each scrape from ``figures``.

    ``figures`` is replaced whole by the walk on the event loop and read once per
    scrape on the scrape thread, so a scrape shows one walk's figures; no label
    tuple or metric object is kept between scrapes."""

    def __init__(self, node_labels: tuple[str, ...], node_values: tuple[str, ...]) -> None:
        """``node_labels``/``node_values``: the node's labels (cluster, node_type,
        node_id) that precede RIP-46's consumer labels."""
        self._labels = (*node_labels, *CONSUMER_LABELS)
        self._values = node_values
        self.figures: ConsumerFigures = {}

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "rocketmq_consumer_lag_messages",
                "Messages of the topic not yet consumed by the group",
                labels=self._labels,
            ),
            GaugeMetricFamily(
                "rocketmq_consumer_lag_latency",
                "Age of the oldest message the group has not consumed yet",
                labels=self._labels,
                unit="milliseconds",
            ),
            GaugeMetricFamily(
                "rocketmq_consumer_inflight_messages",
                "Messages delivered to the group and not acked yet (still invisible)",
                labels=self._labels,
            ),
        )

    def describe(self) -> Iterator[Metric]:
        """The three families without samples (the registry checks names with it)."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        """The three families with a series per (consumer group, topic) of ``figures``."""
        lag, latency, inflight = self._families()
        for (consumer_group, topic), (count, latency_ms, in_flight) in self.figures.items():
            is_retry = "true" if topic.startswith(RETRY_TOPIC_PREFIX) else "false"
            values = [*self._values, consumer_group, topic, is_retry, "false"]
            lag.add_metric(values, count)
            latency.add_metric(values, latency_ms)
            inflight.add_metric(values, in_flight)
        return iter((lag, latency, inflight))


class _QueueWalk:
    """A walk over the groups led here, summed group by group: what is left to walk
    and the queue and message counts so far."""

    def __init__(self, group_ids: list[int], now_ms: int, started_s: float) -> None:
        self.group_ids = group_ids  # still to walk (taken from the end)
        self.now_ms = now_ms
        self.started_s = started_s  # the metrics clock's reading when it began
        self.spent_s = 0.0  # the event loop's time spent walking so far
        self.queues = 0
        self.messages = 0

    def add(self, state: PartitionQueries) -> None:
        """Add the queues of one group's state (their counts are kept by the state)."""
        self.queues += state.queue_count()
        self.messages += state.message_count()
