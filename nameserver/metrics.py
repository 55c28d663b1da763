"""A nameserver's Prometheus metrics: ``rip5_nameserver_*`` (what its replica of the
metadata holds) and ``rip5_raft_*`` of its one raft group (raft/host/metrics.py).

Every replica reports what it applied, so the figures of a follower trail its
leader's by at most the replication delay; ``rip5_nameserver_leader`` says
which replica leads. Read by :meth:`NameserverMetrics.refresh` on the event loop
(angelia_rpc/metrics_export.py, ``refresh_every``).

SHELL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Gauge

from nameserver.queries import MetadataQueries
from nameserver.records import NO_NODE
from raft.host.driver import Driver
from raft.host.metrics import RaftMetrics


class NameserverMetrics:
    """The metrics of one nameserver replica, registered in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        driver: Driver,
        group_id: int,
        state: Callable[[], MetadataQueries],
        labels: Mapping[str, str],
    ) -> None:
        """Register the metrics of the metadata group ``group_id``; ``state`` gives the
        replica's current metadata (a snapshot install replaces the object)."""
        self._driver = driver
        self._group_id = group_id
        self._state = state
        self._values = tuple(labels.values())
        names = tuple(labels)
        self.raft = RaftMetrics(registry, driver, labels)

        def gauge(name: str, help_text: str, *more: str) -> Gauge:
            return Gauge(name, help_text, (*names, *more), registry=registry)

        self._leader = gauge("rip5_nameserver_leader", "1 on the replica that leads, else 0")
        self._revision = gauge("rip5_nameserver_revision", "Revision of the metadata applied")
        self._topics = gauge("rip5_nameserver_topics", "Topics", "cluster_of_topic")
        self._groups = gauge("rip5_nameserver_consumer_groups", "Consumer groups")
        self._storage_nodes = gauge(
            "rip5_nameserver_storage_nodes", "Registered storage nodes by liveness", "alive"
        )
        self._brokers = gauge("rip5_nameserver_brokers", "Registered brokers by liveness", "alive")
        self._raft_groups = gauge(
            "rip5_nameserver_raft_groups",
            "Storage raft groups by whether a leader is known",
            "cluster_of_group",
            "has_leader",
        )

    def refresh(self) -> None:
        """Read every gauge from the replica (on the event loop)."""
        self.raft.refresh()
        state = self._state()
        values = self._values
        self._leader.labels(*values).set(
            1 if self._driver.host.node(self._group_id).is_leader() else 0
        )
        self._revision.labels(*values).set(state.revision)
        topics, groups_by_cluster = state.counts_by_cluster()
        self._groups.labels(*values).set(sum(groups_by_cluster.values()))
        for cluster in state.clusters():
            self._topics.labels(*values, cluster.name).set(topics.get(cluster.name, 0))
            groups = state.raft_groups(cluster.name)
            led = sum(1 for group in groups if group.leader != NO_NODE)
            self._raft_groups.labels(*values, cluster.name, "true").set(led)
            self._raft_groups.labels(*values, cluster.name, "false").set(len(groups) - led)
        for gauge, records in (
            (self._storage_nodes, state.storage_nodes()),
            (self._brokers, state.brokers()),
        ):
            alive = sum(1 for record in records if record.alive)
            gauge.labels(*values, "true").set(alive)
            gauge.labels(*values, "false").set(len(records) - alive)
