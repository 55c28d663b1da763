"""``rip5_raft_*``: the Prometheus metrics of one node's raft groups (storage nodes and
nameservers alike).

Timings come from the driver as it works (:class:`~raft.host.driver.RoundObserver`):
one observation per fdatasync and per proposal (a proposal carries a whole batch
of appends), never per message. The gauges (groups, leaders, WAL bytes) and the
election count are read from the driver by :meth:`RaftMetrics.refresh`, which
the role calls on its event loop (the scrape runs in another thread and reads
only the metric objects, never the raft state).

Every series carries the role's constant labels (``cluster``, ``node_type``,
``node_id``), as the broker's RocketMQ metrics do.

SHELL.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from raft.host.driver import Driver

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
"""Bucket bounds of the fsync and commit latency histograms (seconds)."""


class RaftMetrics:
    """The raft metrics of ``driver``, registered in ``registry``."""

    def __init__(
        self, registry: CollectorRegistry, driver: Driver, labels: Mapping[str, str]
    ) -> None:
        """Register the metrics and start observing ``driver``."""
        names = tuple(labels)
        values = tuple(labels.values())
        self._driver = driver
        self._fsync = Histogram(
            "rip5_raft_fsync_seconds",
            "Duration of one WAL fdatasync (one per raft round with new entries)",
            names,
            registry=registry,
            buckets=LATENCY_BUCKETS_S,
        ).labels(*values)
        self._commit = Histogram(
            "rip5_raft_commit_latency_seconds",
            "From a proposal's submission to its application here (commit by a majority "
            "included); one per proposal, which carries a batch",
            names,
            registry=registry,
            buckets=LATENCY_BUCKETS_S,
        ).labels(*values)
        self._elections = Counter(
            "rip5_raft_elections",
            "Terms this node's replicas entered (each election starts a term)",
            names,
            registry=registry,
        ).labels(*values)
        self._groups = Gauge(
            "rip5_raft_groups", "Raft groups hosted here", names, registry=registry
        ).labels(*values)
        self._leaders = Gauge(
            "rip5_raft_leaders", "Raft groups this node leads", names, registry=registry
        ).labels(*values)
        self._log_bytes = Gauge(
            "rip5_raft_log_bytes",
            "Bytes of the WAL segments kept (all groups share one WAL)",
            names,
            registry=registry,
        ).labels(*values)
        self._rounds = Counter(
            "rip5_raft_rounds", "Raft rounds run (one WAL write each)", names, registry=registry
        ).labels(*values)
        self._terms: dict[int, int] = {}
        self._rounds_seen = 0
        driver.observer = self

    def synced(self, seconds: float) -> None:
        """One fdatasync took ``seconds`` (called by the driver)."""
        self._fsync.observe(seconds)

    def committed(self, seconds: float) -> None:
        """One proposal ended ``seconds`` after its submission (called by the driver)."""
        self._commit.observe(seconds)

    def refresh(self) -> None:
        """Read the gauges and the elections since the last refresh from the driver
        (on the event loop)."""
        driver = self._driver
        host = driver.host
        leaders = 0
        terms: dict[int, int] = {}
        for group_id in host.group_ids():
            node = host.node(group_id)
            term = node.status().term
            terms[group_id] = term
            if node.is_leader():
                leaders += 1
            before = self._terms.get(group_id)
            if before is not None and term > before:
                self._elections.inc(term - before)
        self._terms = terms
        self._groups.set(len(terms))
        self._leaders.set(leaders)
        self._log_bytes.set(driver.store.retained_bytes())
        self._rounds.inc(driver.rounds - self._rounds_seen)
        self._rounds_seen = driver.rounds
