"""What the dashboard asks of the cluster: the admin API, the same calls as ``rip5 admin``.

Metadata (topics, groups, cluster status) comes from the nameservers through
one long-lived :class:`NameserverClient`, following the leader. Storage reads
(group lag, message query, dead letters) go through
:class:`rip5.admin_storage.ClusterAdmin`, one per page (it caches the
cluster status and routes for one command). Connected clients come from each
live broker's ``broker.clients`` (its peer address is its broker id), so
gRPC clients are listed with the id, language and version from their
Telemetry settings.

Tier: :meth:`DashboardCluster.tier_status` reads the groups' manifests in the
tier (blocking fsspec calls, in a thread) and asks each group's leader for the
queue's end, as ``rip5 admin tier status`` does.

Connectors: :meth:`DashboardCluster.connector_rules` reads each connector's
metrics endpoint (``--connector-metrics``): its rules are the ``rule`` labels of
the ``rip5_connector_*`` series (connector/runner.py).

Throughput: :meth:`DashboardCluster.sample` scrapes the brokers' metrics
endpoints and adds one :class:`~rip5.dashboard.chart.Sample` to the chart.

SHELL.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import BrokerService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import broker_api as br
from protocol import nameserver_api as ns
from protocol import storage_api as st
from rip5.admin_storage import (
    CALL_TIMEOUT_MS,
    ClusterAdmin,
    Found,
    Progress,
    QueryOutcome,
    Resent,
)
from rip5.admin_tier import group_manifests, status_rows
from rip5.dashboard.chart import Sample, Throughput
from storage_node.partition.queues import dead_letter_topic

log = logging.getLogger("rip5.dashboard")

DEAD_LETTERS_SHOWN = 50
"""At most this many dead letters per page."""

SCRAPE_TIMEOUT_S = 2.0

CONNECTOR_FIGURES = {
    "rip5_connector_replicated_messages": "messages",
    "rip5_connector_replicated_bytes": "bytes",
    "rip5_connector_lag_messages": "lag",
    "rip5_connector_delay_milliseconds": "delay_ms",
    "rip5_connector_last_sync_timestamp_milliseconds": "last_sync_ms",
    "rip5_connector_errors": "errors",
}
"""The connector's metric families (as the parser names them: no ``_total``) -> the
field of :class:`ConnectorRule` they fill."""


@dataclass(frozen=True, slots=True)
class BrokerClient:
    """A client connected to a broker, and the broker."""

    broker_id: str
    client: br.ClientConnection


@dataclass(frozen=True, slots=True)
class ConnectorRule:
    """One rule of one connector, as its metrics show it (a figure it has not
    reported yet is 0)."""

    connector: str
    rule: str
    messages: int = 0
    bytes: int = 0
    lag: int = 0
    delay_ms: int = 0
    last_sync_ms: int = 0
    errors: int = 0


def connector_rules(connector: str, text: str) -> list[ConnectorRule]:
    """The rules in ``connector``'s metrics ``text`` (Prometheus text format), by name."""
    figures: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(text):
        field_name = CONNECTOR_FIGURES.get(family.name)
        if field_name is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created") or "rule" not in sample.labels:
                continue
            figures.setdefault(sample.labels["rule"], {})[field_name] = int(sample.value)
    return [ConnectorRule(connector, rule, **figures[rule]) for rule in sorted(figures)]


class DashboardCluster:
    """The dashboard's connections to one cluster."""

    def __init__(
        self,
        nameservers: Sequence[str],
        cluster: str,
        broker_metrics: Sequence[str] = (),
        tier_url: str = "",
        connector_metrics: Sequence[str] = (),
    ) -> None:
        """Reach the cluster through ``nameservers``; chart ``broker_metrics`` (host:port);
        show the tier at ``tier_url`` ("" for none) and the connectors whose metrics
        endpoints are ``connector_metrics`` (host:port)."""
        self.cluster = cluster
        self.connector_metrics = list(connector_metrics)
        self.tier_url = tier_url
        self.nameserver = NameserverClient(list(nameservers))
        self.peers = Peers(RpcConfig(call_timeout_ms=CALL_TIMEOUT_MS))
        self.broker_metrics = list(broker_metrics)
        self.throughput = Throughput()

    async def close(self) -> None:
        """Close every connection."""
        await self.nameserver.close()
        await self.peers.close()

    def admin(self) -> ClusterAdmin:
        """A storage admin for one page."""
        return ClusterAdmin(self.nameserver, self.peers, self.cluster)

    # -- metadata ----------------------------------------------------------------------

    async def status(self) -> ns.ClusterStatusResponse:
        """Nodes, brokers and raft groups of the cluster."""
        request = ns.NameRequest(self.cluster)
        return await self.nameserver.call(
            lambda s: s.cluster_status(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    async def topics(self) -> list[ns.TopicInfo]:
        """The cluster's topics, by name."""
        request = ns.ListRequest(self.cluster)
        response = await self.nameserver.call(
            lambda s: s.list_topics(request, timeout_ms=CALL_TIMEOUT_MS)
        )
        return sorted(response.topics, key=lambda t: t.name)

    async def groups(self) -> list[ns.ConsumerGroupInfo]:
        """The cluster's consumer groups, by name."""
        request = ns.ListRequest(self.cluster)
        response = await self.nameserver.call(
            lambda s: s.list_consumer_groups(request, timeout_ms=CALL_TIMEOUT_MS)
        )
        return sorted(response.groups, key=lambda g: g.name)

    async def authenticate(self, signed: ns.SignedBy) -> ns.AuthenticateResponse:
        """Who signed ``signed`` (a login); the nameserver refuses a user that does not
        exist or a wrong secret with UNAUTHENTICATED."""
        request = ns.AuthenticateRequest(signed)
        return await self.nameserver.call(
            lambda s: s.authenticate(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    async def create_topic(self, request: ns.CreateTopicRequest) -> ns.TopicResponse:
        """Create a topic (the nameserver validates it and checks ``request.signed``)."""
        return await self.nameserver.call(
            lambda s: s.create_topic(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    async def update_topic(self, request: ns.UpdateTopicRequest) -> ns.TopicResponse:
        """Change a topic."""
        return await self.nameserver.call(
            lambda s: s.update_topic(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    async def delete_topic(self, name: str, signed: ns.SignedBy) -> ns.RevisionResponse:
        """Delete a topic, signed by ``signed``."""
        request = ns.NameRequest(name, signed)
        return await self.nameserver.call(
            lambda s: s.delete_topic(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    # -- clients -------------------------------------------------------------------------

    async def clients(self, group: str = "") -> tuple[list[BrokerClient], dict[str, str]]:
        """The clients connected to every live broker (of ``group``, if named), and the
        brokers that did not answer with the reason."""
        brokers = [b for b in (await self.status()).brokers if b.alive]
        request = br.ClientsRequest(group)

        async def one(broker_id: str) -> br.ClientsResponse | AngeliaError:
            stub = self.peers.stub(BrokerService, broker_id, wait_for_ready=False)
            try:
                return await stub.clients(request, timeout_ms=CALL_TIMEOUT_MS)
            except AngeliaError as error:
                return error

        answers = await asyncio.gather(*(one(b.broker_id) for b in brokers))
        found: list[BrokerClient] = []
        failed: dict[str, str] = {}
        for broker, answer in zip(brokers, answers, strict=True):
            if isinstance(answer, AngeliaError):
                failed[broker.broker_id] = f"{answer.code.name}: {answer.message}"
                continue
            found.extend(BrokerClient(broker.broker_id, c) for c in answer.clients)
        found.sort(key=lambda c: (c.client.group, c.client.client_id, c.broker_id))
        return found, failed

    # -- storage -------------------------------------------------------------------------

    async def group_lag(self, group: str) -> list[Progress]:
        """``group``'s progress in every queue it consumed (``rip5 admin group lag``)."""
        return await self.admin().group_lag(group)

    async def query(self, *, topic: str, message_id: str, key: str) -> QueryOutcome:
        """Messages by id or key (``rip5 admin message query``)."""
        return await self.admin().query_messages(topic=topic, message_id=message_id, key=key)

    async def dead_letters(self, group: str) -> list[Found]:
        """The oldest :data:`DEAD_LETTERS_SHOWN` messages still in ``group``'s dead-letter
        queues: one per raft group, each in its own group (``rip5 admin dlq resend``
        reads the same queues)."""
        admin = self.admin()
        await admin.require_group(group)
        topic = dead_letter_topic(group)
        found: list[Found] = []
        for group_id in await admin.group_ids():
            wanted = DEAD_LETTERS_SHOWN - len(found)
            if wanted <= 0:
                break
            letters = await _read_oldest(admin, group_id, topic, group_id, wanted)
            found.extend(Found(group_id, stored) for stored in letters)
        return found

    async def resend_dead_letters(self, group: str) -> Resent:
        """Resend ``group``'s dead letters to their topics (``rip5 admin dlq resend``)."""
        return await self.admin().resend_dead_letters(group)

    # -- tier ----------------------------------------------------------------------------

    async def tier_status(self) -> list[dict[str, Any]]:
        """Per group and queue, what the tier holds (``rip5 admin tier status``'s rows).
        Raises ``ObjectCorrupted`` for a damaged manifest and ``ValueError`` (and
        whatever fsspec raises) for a tier URL it cannot open."""
        import fsspec  # noqa: PLC0415 - optional (the tiered extra): only the tier page needs it

        fs, root = await asyncio.to_thread(fsspec.core.url_to_fs, self.tier_url)
        root = str(root).rstrip("/")
        manifests = await asyncio.to_thread(group_manifests, fs, root)
        return await status_rows(self.admin(), manifests)

    # -- connectors ------------------------------------------------------------------------

    async def connector_rules(self) -> tuple[list[ConnectorRule], list[str]]:
        """Every connector's rules, and the connectors whose metrics did not answer."""
        texts = await asyncio.gather(
            *(asyncio.to_thread(_metrics_text, target) for target in self.connector_metrics)
        )
        rules: list[ConnectorRule] = []
        silent: list[str] = []
        for target, text in zip(self.connector_metrics, texts, strict=True):
            if text is None:
                silent.append(target)
            else:
                rules.extend(connector_rules(target, text))
        return rules, silent

    # -- throughput ----------------------------------------------------------------------

    async def sample(self) -> None:
        """Scrape every broker's metrics once and add the sums to the chart; a broker
        that does not answer is left out of this sample (and logged at debug)."""
        totals = await asyncio.gather(
            *(asyncio.to_thread(_scrape, target) for target in self.broker_metrics)
        )
        answered = [t for t in totals if t is not None]
        if not answered:
            return
        self.throughput.add(
            Sample(
                int(time.time() * 1000),
                sum(t[0] for t in answered),
                sum(t[1] for t in answered),
            )
        )


async def _read_oldest(
    admin: ClusterAdmin, group_id: int, topic: str, queue_id: int, count: int
) -> list[st.StoredMessage]:
    """Up to ``count`` of the oldest messages kept in queue ``queue_id`` of ``topic``
    (served by raft group ``group_id``)."""
    asked = st.QueueInfoRequest(topic, queue_id)
    offsets = await admin.call_group(
        group_id, lambda stub, ms: stub.queue_info(asked, timeout_ms=ms)
    )
    if offsets.first_offset >= offsets.end_offset:
        return []
    read = st.ReadRequest(topic, queue_id, offsets.first_offset, count)
    batch = await admin.call_group(group_id, lambda stub, ms: stub.read(read, timeout_ms=ms))
    return list(batch.messages)


def _metrics_text(target: str) -> str | None:
    """The metrics ``target`` (host:port) serves at /metrics; None if unreachable."""
    try:
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=SCRAPE_TIMEOUT_S) as r:
            return str(r.read().decode())
    except OSError as error:
        log.debug("metrics not read", extra={"target": target, "error": str(error)})
        return None


def _scrape(target: str) -> tuple[float, float] | None:
    """(messages in, messages out) summed over a broker's series; None if unreachable."""
    text = _metrics_text(target)
    if text is None:
        return None
    totals = {"rocketmq_messages_in": 0.0, "rocketmq_messages_out": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name in totals:
            totals[family.name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return totals["rocketmq_messages_in"], totals["rocketmq_messages_out"]
