"""The broker's Prometheus metrics, with RocketMQ 5's RIP-46 names and labels, so the
Grafana boards made for RocketMQ read a rip5 cluster as they read RocketMQ.

Every series carries ``cluster``, ``node_type="broker"`` and ``node_id`` (the
broker's client address). Counters keep ``_total``; Prometheus appends the unit
to gauges and histograms (``rocketmq_rpc_latency_milliseconds``), as RocketMQ's
exporter does.

Cost on the hot path: the processors report one call per request (a send, a
receive, a pull), never one per message. A request's message sizes go into
``rocketmq_message_size`` through :class:`BatchHistogram`, which takes a whole
batch under one lock (prometheus_client's Histogram takes a lock per value).
The connection gauges are read from the client registries by
:meth:`BrokerMetrics.refresh` on the event loop; the scrape thread reads only
the metric objects.

Where rip5 counts what RocketMQ's broker counts elsewhere: consumer lag,
in-flight messages and lag latency come from the storage nodes, which hold the
queues (storage_node/metrics.py, same names and labels).

SHELL.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from broker.domain import Delivery, Message
from protocol.broker_api import ClientConnection
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.routing import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX

MESSAGE_SIZE_BUCKETS_BYTES = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
"""RIP-46's buckets of ``rocketmq_message_size`` (1K, 4K, 512K, 1M, 2M, 4M)."""

RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
"""RIP-46's buckets of ``rocketmq_rpc_latency`` (ms)."""

LONG_POLLING_METHODS = frozenset({"ReceiveMessage", "PullMessage"})
"""gRPC methods that wait for messages (``is_long_polling="true"``)."""

_CODE_NAMES = {number: name for name, number in pb.Code.items()}
_TYPE_NAMES = {1: "normal", 2: "fifo", 3: "delay", 4: "transaction"}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _is_system_topic(topic: str) -> bool:
    return topic.startswith(("rmq_sys_", "RMQ_SYS_"))


class BatchHistogram(Collector):
    """A histogram fed a batch of values at a time (one lock per batch)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        """Register it in ``registry``; ``buckets`` are the finite upper bounds."""
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = tuple(buckets)
        self._lock = threading.Lock()
        # labels -> (per-bucket counts, the last for +Inf; sum)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        registry.register(self)

    def observe_all(self, labels: tuple[str, ...], values: Iterable[float]) -> None:
        """Count every value of ``values`` under ``labels``."""
        # Sorted once (in C), each bound is one bisection: the cost per value is the sort's.
        ordered = sorted(values)
        at_most = [bisect.bisect_right(ordered, bound) for bound in self._bounds]
        counts = [b - a for a, b in zip([0, *at_most], [*at_most, len(ordered)], strict=True)]
        total = float(sum(ordered))
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                self._series[labels] = (counts, [total])
                return
            kept, kept_sum = series
            for index, count in enumerate(counts):
                kept[index] += count
            kept_sum[0] += total

    def describe(self) -> Iterator[HistogramMetricFamily]:
        """The family, without samples (for registration)."""
        yield HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """Cumulative buckets of every series."""
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        with self._lock:
            series = [(labels, list(c), s[0]) for labels, (c, s) in self._series.items()]
        for labels, counts, total in series:
            cumulative: list[tuple[str, float]] = []
            running = 0
            for bound, count in zip((*self._bounds, float("inf")), counts, strict=True):
                running += count
                cumulative.append((_bound_text(bound), running))
            family.add_metric(list(labels), cumulative, total)
        yield family


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else str(float(bound))


class BrokerMetrics:
    """The metrics of one broker, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry, cluster: str, node_id: str) -> None:
        """Register every metric; ``node_id`` names this broker (its client address)."""
        self.registry = registry
        base = ("cluster", "node_type", "node_id")
        self._base = (cluster, "broker", node_id)
        incoming = (*base, "topic", "message_type", "is_system")
        self._messages_in = Counter(
            "rocketmq_messages_in", "Messages stored by producers", incoming, registry=registry
        )
        self._throughput_in = Counter(
            "rocketmq_throughput_in",
            "Bytes of message bodies stored by producers",
            incoming,
            registry=registry,
        )
        self._message_size = BatchHistogram(
            "rocketmq_message_size",
            "Body size of the messages stored by producers (bytes)",
            incoming,
            MESSAGE_SIZE_BUCKETS_BYTES,
            registry,
        )
        outgoing = (*base, "topic", "consumer_group", "is_system", "is_retry")
        self._messages_out = Counter(
            "rocketmq_messages_out", "Messages delivered to consumers", outgoing, registry=registry
        )
        self._throughput_out = Counter(
            "rocketmq_throughput_out",
            "Bytes of message bodies delivered to consumers",
            outgoing,
            registry=registry,
        )
        self._to_dlq = Counter(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a dead-letter topic (delivered too often)",
            (*base, "consumer_group", "topic", "is_system"),
            registry=registry,
        )
        self._commits = Counter(
            "rocketmq_commit_messages",
            "Transactional messages committed",
            (*base, "topic"),
            registry=registry,
        )
        self._rollbacks = Counter(
            "rocketmq_rollback_messages",
            "Transactional messages rolled back",
            (*base, "topic"),
            registry=registry,
        )
        self._rpc_latency = Histogram(
            "rocketmq_rpc_latency",
            "Time to answer one client request",
            (*base, "protocol_type", "request_code", "response_code", "is_long_polling", "result"),
            registry=registry,
            unit="milliseconds",
            buckets=RPC_LATENCY_BUCKETS_MS,
        )
        self._producers = Gauge(
            "rocketmq_producer_connections",
            "Producer clients connected",
            (*base, "language", "version", "protocol_type"),
            registry=registry,
        )
        self._consumers = Gauge(
            "rocketmq_consumer_connections",
            "Consumer clients connected",
            (
                *base,
                "consumer_group",
                "language",
                "version",
                "consume_mode",
                "protocol_type",
                "is_system",
            ),
            registry=registry,
        )
        # Label children by key, made once: prometheus-client's labels() checks and locks.
        self._stored_children: dict[tuple[str, int], tuple[Any, Any, tuple[str, ...]]] = {}
        self._delivered_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._rpc_children: dict[tuple[str, str, str, bool], Any] = {}
        self._connections: Callable[[], Iterable[ClientConnection]] = list
        self._reported_producers: set[tuple[str, ...]] = set()
        self._reported_consumers: set[tuple[str, ...]] = set()

    # -- the hot path: one call per request ----------------------------------------

    def stored(self, messages: Sequence[Message]) -> None:
        """A send request stored ``messages`` (one topic). Retry and dead-letter topics are
        not counted (RIP-46)."""
        topic = messages[0].topic
        if topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)):
            return
        message_type = messages[0].message_type
        if any(message.message_type != message_type for message in messages):
            for one in messages:
                self.stored((one,))
            return
        children = self._stored_children.get((topic, message_type))
        if children is None:
            series: tuple[str, ...] = (
                *self._base,
                topic,
                _TYPE_NAMES.get(message_type, "normal"),
                _flag(_is_system_topic(topic)),
            )
            children = (
                self._messages_in.labels(*series),
                self._throughput_in.labels(*series),
                series,
            )
            self._stored_children[(topic, message_type)] = children
        count, size, labels = children
        sizes = [len(message.body) for message in messages]
        count.inc(len(sizes))
        size.inc(sum(sizes))
        self._message_size.observe_all(labels, sizes)

    def delivered(self, consumer_group: str, topic: str, bodies: int, body_bytes: int) -> None:
        """A receive or pull request handed ``bodies`` messages of ``body_bytes`` to a
        consumer of ``consumer_group``."""
        children = self._delivered_children.get((topic, consumer_group))
        if children is None:
            labels = (
                *self._base,
                topic,
                consumer_group,
                _flag(_is_system_topic(topic)),
                _flag(topic.startswith(RETRY_TOPIC_PREFIX)),
            )
            children = (self._messages_out.labels(*labels), self._throughput_out.labels(*labels))
            self._delivered_children[(topic, consumer_group)] = children
        count, size = children
        count.inc(bodies)
        size.inc(body_bytes)

    def deliveries(self, consumer_group: str, topic: str, deliveries: Sequence[Delivery]) -> None:
        """:meth:`delivered` for the deliveries of one receive."""
        if deliveries:
            size = sum(len(delivery.popped.message.body) for delivery in deliveries)
            self.delivered(consumer_group, topic, len(deliveries), size)

    def dead_lettered(self, consumer_group: str, topic: str) -> None:
        """One message of ``topic`` went to ``consumer_group``'s dead-letter topic."""
        labels = (*self._base, consumer_group, topic, _flag(_is_system_topic(topic)))
        self._to_dlq.labels(*labels).inc()

    def ended(self, topic: str, commit: bool) -> None:
        """A transaction of ``topic`` was committed or rolled back."""
        (self._commits if commit else self._rollbacks).labels(*self._base, topic).inc()

    def answered(
        self, protocol: str, request: str, response: str, latency_ms: float, *, failed: bool
    ) -> None:
        """One request answered after ``latency_ms``."""
        key = (protocol, request, response, failed)
        child = self._rpc_children.get(key)
        if child is None:
            child = self._rpc_latency.labels(
                *self._base,
                protocol,
                request,
                response,
                _flag(request in LONG_POLLING_METHODS),
                "process_request_failed" if failed else "success",
            )
            self._rpc_children[key] = child
        child.observe(latency_ms)

    # -- the gauges, read on the event loop -----------------------------------------

    def watch_connections(self, connections: Callable[[], Iterable[ClientConnection]]) -> None:
        """Read the connected clients from ``connections`` at each :meth:`refresh`."""
        self._connections = connections

    def refresh(self) -> None:
        """Set the connection gauges from the clients connected now."""
        producers: dict[tuple[str, ...], int] = {}
        consumers: dict[tuple[str, ...], int] = {}
        for client in self._connections():
            key: tuple[str, ...]
            if client.group:
                key = (
                    *self._base,
                    client.group,
                    client.language,
                    client.version,
                    client.consume_mode,
                    client.protocol,
                    "false",
                )
                consumers[key] = consumers.get(key, 0) + 1
            else:
                key = (*self._base, client.language, client.version, client.protocol)
                producers[key] = producers.get(key, 0) + 1
        for gauge, now, before in (
            (self._producers, producers, self._reported_producers),
            (self._consumers, consumers, self._reported_consumers),
        ):
            for gone in before - now.keys():
                gauge.remove(*gone)
            for key, count in now.items():
                gauge.labels(*key).set(count)
            before.clear()
            before.update(now)


def timed(name: str, handler: grpc.RpcMethodHandler, metrics: BrokerMetrics) -> Any:
    """``handler`` of gRPC method ``name``, observed in ``rocketmq_rpc_latency`` with the
    v2 status of its (first) response as the response code. Telemetry (a stream for
    the client's life) is not timed."""
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_call(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            try:
                response = await unary(request, context)
            except BaseException:
                metrics.answered("grpc", name, "", _ms_since(started), failed=True)
                raise
            code = response.status.code
            metrics.answered("grpc", name, _code_name(code), _ms_since(started), failed=False)
            return response

        return grpc.unary_unary_rpc_method_handler(
            unary_call, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        streamed = handler.unary_stream

        async def unary_stream_call(request: Any, context: Any) -> AsyncIterator[Any]:
            started = time.perf_counter()
            code: int | None = None
            try:
                async for response in streamed(request, context):
                    if code is None and response.HasField("status"):
                        code = response.status.code
                    yield response
            except BaseException:
                metrics.answered("grpc", name, "", _ms_since(started), failed=True)
                raise
            response_code = "" if code is None else _code_name(code)
            metrics.answered("grpc", name, response_code, _ms_since(started), failed=False)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream_call, handler.request_deserializer, handler.response_serializer
        )
    return handler


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _code_name(code: int) -> str:
    return _CODE_NAMES.get(code, str(code))
