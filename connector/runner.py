"""The connector process: copies messages between clusters by the rules file.

Per (rule, source queue), a puller and a sender task:

- the puller pulls the queue (long polling, the rule's tag filter applied by the
  source's storage, up to 256 messages a pull: a replicator's cap, see
  :mod:`connector.client`) ahead of the sends, into a buffer of at most
  :data:`AHEAD_BYTES_MAX` body bytes, while its pulls come back full (32 offsets
  or more), else one pull per send or per :data:`PULL_LINGER_S` (:class:`PulledAhead`);
- the sender loops: take what was pulled meanwhile, at most
  :data:`SEND_MESSAGES_MAX` messages and :data:`SEND_BYTES_MAX` body bytes (so a
  batch grows with the target's latency); send the copies
  (:mod:`connector.copies`) to the target in one request, retried until the target
  acknowledged every one; append a translation mark per target queue the batch
  reached; commit the position past it (``UpdateOffset`` of the rule's consumer
  group on the source cluster: the checkpoint), at most every
  :data:`CHECKPOINT_INTERVAL_S`, beside the next sends (commits in order, one at a
  time).

One send is in flight per queue, so copies reach a target queue in source order.

Exactly once: the checkpoint moves only after the target acknowledged (commit after
send), so a crash loses nothing; what a crash can repeat is what was sent past the
checkpoint the source stored: per source queue, about two checkpoint intervals of
sends (one commit may be in flight) and the commit's own time. Each copy keeps its
message id and goes to the same target queue again (a stable mapping), where the
target's dedup window (per raft group, by topic and message id: 2 minutes and 100,000 ids per group
by default, ``storage_node/partition/config.py``) answers the resend with the
first copy's outcome. A pending line written before each send says when it
began; at start, when a queue's first unconfirmed send (:func:`first_pending`) began
longer ago than the window safely covers (``resend_check_after_ms``), the copies of
it and every later send are first sought on the target
(:meth:`RuleCopier._copies_on_target`) and only what is missing is sent.

Sharing: one connector process per rules file. Its data directory is locked
(one process per directory), and two processes running one rule would copy
the same queues twice (their checkpoints are one group's, not leases); run
several connectors with disjoint rules files to spread the work.

On SIGHUP the rules file is read again: rules added start, rules removed
stop, rules changed restart; kept rules go on untouched. A bad file is
refused (logged, counted as an error of each rule) and the old rules go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from connector.client import PULL_FULL_OFFSETS, ClusterClient, ConnectorCallError
from connector.config import ConnectorConfig
from connector.copies import (
    SOURCE_CLUSTER,
    SOURCE_OFFSET,
    SOURCE_QUEUE,
    SOURCE_TOPIC,
    copy_messages,
)
from connector.plan import (
    CLOCK_SKEW_MS,
    RESEND_SAFE_MS,
    Cluster,
    Mark,
    Pending,
    Rule,
    RulesError,
    RuleSet,
    first_pending,
    format_mark,
    format_pending,
    parse_rules,
    plan_reload,
    resend_unsafe,
    target_type,
)
from connector.pulled_ahead import PulledAhead, Taken, delay_stages
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.vocabulary import MessageType

log = logging.getLogger("rip5.connector")
T = TypeVar("T")
TopicCreator = Callable[[Cluster, str, int, MessageType], Awaitable[bool]]
"""Creates a topic on a cluster (its nameservers: the client protocol cannot) with a
queue count and message type; False when it existed already. Given by the process
that runs the connector (``rip5 connector``), so this package stays a pure client."""

LAG_REFRESH_S = 1.0
CREATED_ROUTE_WAIT_S = 30.0
CREATED_ROUTE_POLL_S = 0.2
"""A created target topic is looked for this often, this long, until its brokers route it."""
RETRY_DELAY_MIN_S = 0.2
RETRY_DELAY_MAX_S = 5.0
SEND_MESSAGES_MAX = 1024
"""The most copies one SendMessage carries (the broker's append batch: one log entry)."""
SEND_BYTES_MAX = 2 << 20
"""The most body bytes one SendMessage carries (a target append holds at most 4 MiB of
bodies; half, for the copies' properties and a single larger message going alone)."""
CHECKPOINT_INTERVAL_S = 0.5
"""A queue's checkpoint is committed at most this often (past every batch acknowledged
by then): each commit is a raft write on the source cluster."""
AHEAD_BYTES_MAX = SEND_BYTES_MAX
"""Pulls run ahead of a queue's sends until this many body bytes wait: a full next send
is ready when one returns."""
PULL_LINGER_S = 0.1
"""After a pull that reached the queue's end, the next one waits for the sender to take
what it found at most this long (:class:`PulledAhead`): at most 10 such pulls a second
a queue, and what arrives during a send waits at most this long to be pulled."""


class Metrics:
    """The connector's Prometheus metrics, labelled by rule, in their own registry."""

    def __init__(self) -> None:
        """Register every metric (exported with its ``_total`` suffix for counters)."""
        self.registry = CollectorRegistry()
        labels = ["rule"]
        self.messages = Counter(
            "rip5_connector_replicated_messages",
            "messages copied to the target (acknowledged by it)",
            labels,
            registry=self.registry,
        )
        self.bytes = Counter(
            "rip5_connector_replicated_bytes",
            "body bytes copied to the target",
            labels,
            registry=self.registry,
        )
        self.delay = Gauge(
            "rip5_connector_delay_milliseconds",
            "now minus the source store time of the last message copied, when it was copied",
            labels,
            registry=self.registry,
        )
        self.last_sync = Gauge(
            "rip5_connector_last_sync_timestamp_milliseconds",
            "when the rule last copied messages or found its queues caught up (epoch ms)",
            labels,
            registry=self.registry,
        )
        self.lag = Gauge(
            "rip5_connector_lag_messages",
            "source offsets not yet passed by the rule, summed over its queues",
            labels,
            registry=self.registry,
        )
        self.errors = Counter(
            "rip5_connector_errors",
            "failed calls and refused reloads",
            labels,
            registry=self.registry,
        )

    def forget(self, rule: str) -> None:
        """Drop a removed rule's series."""
        for metric in (
            self.messages,
            self.bytes,
            self.delay,
            self.last_sync,
            self.lag,
            self.errors,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(rule)


class RuleCopier:
    """The tasks copying one rule's source queues."""

    def __init__(
        self,
        rule: Rule,
        source: ClusterClient,
        target: ClusterClient,
        marks_path: Path,
        metrics: Metrics,
        failed: Callable[[BaseException], None],
        resend_safe_ms: int = RESEND_SAFE_MS,
        target_cluster: Cluster | None = None,
        create_topic: TopicCreator | None = None,
    ) -> None:
        """Nothing runs before :meth:`prepare` and :meth:`start`; ``failed`` hears of a
        copy task that ended by an unexpected error (the process then stops: a queue
        must not silently stop being copied). ``target_cluster`` and ``create_topic``:
        where and how a rule with ``create`` creates its missing target topic."""
        self.rule = rule
        self.target_cluster = target_cluster
        self.create_topic = create_topic
        self._failed = failed
        self.resend_safe_ms = resend_safe_ms
        self.source = source
        self.target = target
        self.marks_path = marks_path
        self.metrics = metrics
        self.positions: dict[int, int] = {}
        self.target_queues: list[int] = []
        self._lags: dict[int, int] = {}
        # Per source queue: copies of its unfinished batch found on the target,
        # source offset -> (target queue, target offset); they are not sent again.
        self._found: dict[int, dict[int, tuple[int, int]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._marks: IO[str] | None = None  # the open marks file, once started

    async def prepare(self) -> None:
        """Resolve the queues and each one's starting position (committed first, so a
        "latest" start stays where it was first taken). Raises ConnectorCallError when
        a topic or the group is missing."""
        rule = self.rule
        queues = await self.source.queues(rule.topic)
        if not queues:
            raise ConnectorCallError(
                "TOPIC_NOT_FOUND",
                f"topic {rule.topic!r} has no readable queue on cluster {rule.source!r}",
                retriable=False,
            )
        try:
            self.target_queues = await self._target_queues(len(queues))
        except ConnectorCallError as exc:
            raise ConnectorCallError(
                exc.name,
                f"target topic {rule.target_topic!r} on cluster {rule.target!r}: {exc.detail}",
                retriable=exc.retriable,
            ) from None
        if not self.target_queues:
            raise ConnectorCallError(
                "NO_WRITABLE_QUEUE",
                f"target topic {rule.target_topic!r} on cluster {rule.target!r} "
                "has no writable queue",
                retriable=False,
            )
        for queue in queues:
            try:
                committed = await self.source.committed(rule.group, rule.topic, queue)
            except ConnectorCallError as exc:
                raise ConnectorCallError(
                    exc.name,
                    f"checkpoint group {rule.group!r} on cluster {rule.source!r} "
                    f"(create it there as a consumer group): {exc.detail}",
                    retriable=exc.retriable,
                ) from None
            if committed is None:
                committed = await self.source.bound(rule.topic, queue, end=rule.start == "latest")
                await self.source.commit(rule.group, rule.topic, queue, committed)
            self.positions[queue] = committed
        pending = first_pending(self._marks_text(), self.positions)
        now_ms = time.time_ns() // 1_000_000
        for queue, committed in self.positions.items():
            unfinished = pending.get(queue)
            if unfinished is not None and resend_unsafe(
                unfinished, committed, now_ms, self.resend_safe_ms
            ):
                self._found[queue] = await self._copies_on_target(queue, unfinished)

    async def _target_queues(self, source_queue_count: int) -> list[int]:
        """The target topic's writable queues; a missing topic is created first when the
        rule says ``create`` (then waited for until the target's brokers route it)."""
        rule = self.rule
        try:
            return await self.target.queues(rule.target_topic, writable=True)
        except ConnectorCallError as exc:
            if exc.name != "TOPIC_NOT_FOUND" or not rule.create:
                raise
        if self.target_cluster is None or self.create_topic is None:
            raise ConnectorCallError(
                "UNSUPPORTED", "this connector cannot create topics", retriable=False
            )
        source_types = await self.source.message_types(rule.topic)
        message_type = target_type(frozenset(MessageType(t) for t in source_types))
        if await self.create_topic(
            self.target_cluster, rule.target_topic, source_queue_count, message_type
        ):
            log.info(
                "created the target topic",
                extra={"rule": rule.name, "topic": rule.target_topic, "type": message_type.name},
            )
        deadline = time.monotonic() + CREATED_ROUTE_WAIT_S
        while True:  # the brokers learn of the topic through the nameserver's watch
            try:
                return await self.target.queues(rule.target_topic, writable=True)
            except ConnectorCallError as exc:
                if exc.name != "TOPIC_NOT_FOUND" or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(CREATED_ROUTE_POLL_S)

    def _header(self) -> str:
        rule = self.rule
        return f"# {rule.source} {rule.topic} -> {rule.target} {rule.target_topic}\n"

    def _marks_text(self) -> str:
        """The marks file of this rule's source and target ("" if none or another's)."""
        if not self.marks_path.exists():
            return ""
        text = self.marks_path.read_text()
        return text if text.startswith(self._header()) else ""

    async def _copies_on_target(
        self, queue: int, unfinished: Pending
    ) -> dict[int, tuple[int, int]]:
        """Copies of source ``queue`` from ``unfinished.source_offset`` on that the target
        stored since the unfinished send began (less the clock skew), by reading every
        target queue from then on (with the rule's group, which the target must have)."""
        rule = self.rule
        found: dict[int, tuple[int, int]] = {}
        for target_queue in self.target_queues:
            since = unfinished.sent_ms - CLOCK_SKEW_MS
            offset = await self.target.offset_at(rule.target_topic, target_queue, since)
            end = await self.target.bound(rule.target_topic, target_queue, end=True)
            while offset < end:
                try:
                    pulled = await self.target.pull(
                        rule.group, rule.target_topic, target_queue, offset, "*"
                    )
                except ConnectorCallError as exc:
                    raise ConnectorCallError(
                        exc.name,
                        f"looking on cluster {rule.target!r} for copies of a batch a crash "
                        f"left unfinished (its group {rule.group!r} must exist there too): "
                        f"{exc.detail}",
                        retriable=exc.retriable,
                    ) from None
                for message in pulled.messages:
                    source = message.user_properties
                    if (
                        source.get(SOURCE_CLUSTER) == rule.source
                        and source.get(SOURCE_TOPIC) == rule.topic
                        and source.get(SOURCE_QUEUE) == str(queue)
                        and int(source.get(SOURCE_OFFSET, "-1")) >= unfinished.source_offset
                    ):
                        target_offset = message.system_properties.queue_offset
                        found[int(source[SOURCE_OFFSET])] = (target_queue, target_offset)
                if pulled.next_offset <= offset:
                    break
                offset = pulled.next_offset
        log.warning(
            "a batch left unfinished by a crash is older than the target's dedup window; "
            "its copies found on the target are not sent again",
            extra={"rule": rule.name, "queue": queue, "found": len(found)},
        )
        return found

    def start(self) -> None:
        """Start one copy task per source queue."""
        self.marks_path.parent.mkdir(parents=True, exist_ok=True)
        rule = self.rule
        fresh = not self._marks_text()
        self._marks = self.marks_path.open("w" if fresh else "a")
        if fresh:
            self._marks.write(self._header())
            self._marks.flush()
        for counter in (self.metrics.messages, self.metrics.bytes, self.metrics.errors):
            counter.labels(rule.name)  # exported from the start, at 0
        self._tasks = [
            asyncio.create_task(self._copy_queue(queue), name=f"copy {self.rule.name}:{queue}")
            for queue in self.positions
        ]
        self._tasks.append(asyncio.create_task(self._watch_lag(), name=f"lag {rule.name}"))
        for task in self._tasks:
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._failed(error)

    async def stop(self) -> None:
        """Cancel the copy tasks and wait for them (a batch in flight is resent by the
        next start and absorbed by the target's dedup)."""
        for task in self._tasks:
            task.cancel()
        # A task that ended by an error was reported by _ended already.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._marks is not None:
            self._marks.close()
            self._marks = None

    async def _retrying(self, what: str, call: Callable[..., Awaitable[T]], *args: object) -> T:
        """``call(*args)`` until it succeeds; each failure counted and logged."""
        delay = RETRY_DELAY_MIN_S
        while True:
            try:
                return await call(*args)
            except ConnectorCallError as exc:
                self.metrics.errors.labels(self.rule.name).inc()
                log.warning(
                    "call failed, retrying",
                    extra={"rule": self.rule.name, "call": what, "error": str(exc)},
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_MAX_S)

    async def _copy_queue(self, queue: int) -> None:
        rule = self.rule
        offset = self.positions[queue]
        found = self._found.pop(queue, {})
        # Pulls run ahead of the sends; each send takes what was pulled meanwhile (up to
        # the send caps), so a batch grows with the target's latency. One send in flight
        # per queue, in source order.
        ahead = PulledAhead(offset, AHEAD_BYTES_MAX, PULL_LINGER_S)
        puller = asyncio.create_task(self._pull_ahead(queue, ahead))
        # Checkpoints: at most one per CHECKPOINT_INTERVAL_S (each is a raft write on the
        # source), past the batches acknowledged by then; one overlaps the next sends and
        # is done before the next one begins (commits go in order, one at a time). A
        # crash repeats what was sent past the checkpoint (each of those sends began at
        # or after the one from the checkpoint, where the resend check at start looks).
        checkpoint: asyncio.Task[None] | None = None
        committed = offset
        committed_at = -CHECKPOINT_INTERVAL_S
        try:
            while True:
                if offset == committed:
                    await ahead.wait_news(offset)
                    news = True
                else:  # a checkpoint is owed: wait for news until it is due
                    due_s = committed_at + CHECKPOINT_INTERVAL_S - time.monotonic()
                    news = await ahead.news_within(offset, due_s)
                if news:
                    taken = ahead.take(SEND_MESSAGES_MAX, SEND_BYTES_MAX)
                    await self._copy_taken(queue, offset, taken, found)
                    offset = self.positions[queue] = taken.end_offset
                if offset != committed and (
                    time.monotonic() - committed_at >= CHECKPOINT_INTERVAL_S
                ):
                    if checkpoint is not None:
                        await checkpoint
                    committed, committed_at = offset, time.monotonic()
                    checkpoint = asyncio.create_task(
                        self._retrying(
                            "commit", self.source.commit, rule.group, rule.topic, queue, offset
                        )
                    )
        finally:
            puller.cancel()
            if checkpoint is not None:
                checkpoint.cancel()
            # No pull of this queue outlives the task (a reload may start it again).
            await asyncio.gather(puller, return_exceptions=True)

    async def _pull_ahead(self, queue: int, ahead: PulledAhead) -> None:
        """Pull the queue into ``ahead`` from its end on, waiting while it is full; an
        unexpected error is handed to it, for the sending side to raise."""
        rule, name = self.rule, self.rule.name
        try:
            while True:
                await ahead.wait_room()
                offset = ahead.end_offset
                went_ms = time.time_ns() // 1_000_000
                pulled = await self._retrying(
                    "pull", self.source.pull, rule.group, rule.topic, queue, offset, rule.filter
                )
                if pulled.status == "ILLEGAL_OFFSET":
                    self.metrics.errors.labels(name).inc()
                    log.warning(
                        "position outside the source queue; moving to its edge",
                        extra={"rule": name, "queue": queue, "error": pulled.detail},
                    )
                # A pull that moved a whole batch of offsets is not at the queue's end
                # (with a tag filter, fewer messages than that may have matched).
                ahead.put(
                    pulled,
                    full=pulled.next_offset - offset >= PULL_FULL_OFFSETS,
                    pull_ms=(went_ms, time.time_ns() // 1_000_000),
                )
        except Exception as exc:  # noqa: BLE001 - raised by the copy task, which reports it
            ahead.fail(exc)

    async def _copy_taken(
        self, queue: int, offset: int, taken: Taken, found: dict[int, tuple[int, int]]
    ) -> None:
        """Copy the messages taken from ``offset`` on, with their metrics and marks."""
        rule, name = self.rule, self.rule.name
        messages = taken.messages
        if messages:
            # Per-message work stays in the batch calls (copy_messages, the send's
            # serialization); ``found`` (copies already on the target) is empty but
            # after a restart's resend check.
            offsets = [m.system_properties.queue_offset for m in messages] if found else []
            fresh = (
                [m for m, at in zip(messages, offsets, strict=True) if at not in found]
                if found
                else messages
            )
            taken_ms = time.time_ns() // 1_000_000
            copies, queues = copy_messages(
                fresh, rule.source, queue, rule.target_topic, self.target_queues
            )
            stored = await self._send(queue, offset, copies)
            placed: Iterable[tuple[int, int]] = zip(queues, stored, strict=True)
            if found:
                sent = iter(placed)
                placed = [found.get(at) or next(sent) for at in offsets]
            self._mark(queue, messages, placed)
            now_ms = time.time_ns() // 1_000_000
            last = messages[-1].system_properties.store_timestamp
            self.metrics.messages.labels(name).inc(len(messages))
            self.metrics.bytes.labels(name).inc(taken.body_bytes)
            stored_ms = last.ToMilliseconds()
            self.metrics.delay.labels(name).set(now_ms - stored_ms)
            self.metrics.last_sync.labels(name).set(now_ms)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "batch copied",
                    extra={
                        "rule": name,
                        "queue": queue,
                        "messages": len(messages),
                        **delay_stages(stored_ms, taken.pull_ms, taken_ms, now_ms),
                    },
                )
        elif taken.caught_up:
            self.metrics.last_sync.labels(name).set(time.time_ns() // 1_000_000)

    async def _watch_lag(self) -> None:
        """Every :data:`LAG_REFRESH_S`, the rule's lag gauge: each queue's end offset
        less its checkpoint (a failed read keeps the queue's last lag)."""
        while True:
            for queue, position in list(self.positions.items()):
                with contextlib.suppress(ConnectorCallError):
                    end = await self.source.bound(self.rule.topic, queue, end=True)
                    self._lags[queue] = max(0, end - position)
            self.metrics.lag.labels(self.rule.name).set(sum(self._lags.values()))
            await asyncio.sleep(LAG_REFRESH_S)

    async def _send(self, queue: int, offset: int, copies: spb.SendMessageRequest) -> list[int]:
        """Send ``copies`` (none: nothing), after a pending line saying the batch pulled
        from ``offset`` is being sent; each one's target offset, in order."""
        if not copies.messages:
            return []
        assert self._marks is not None
        sent_ms = time.time_ns() // 1_000_000
        self._marks.write(format_pending(Pending(queue, offset, sent_ms)))
        self._marks.flush()
        return await self._retrying("send", self.target.send, copies)

    def _mark(
        self, queue: int, pulled: Sequence[pb.Message], placed: Iterable[tuple[int, int]]
    ) -> None:
        """One mark per target queue the batch reached: its first copy there. ``placed``:
        each pulled message's (target queue, target offset), in order."""
        seen: set[int] = set()
        lines = []
        for index, (target_queue, target_offset) in enumerate(placed):
            if target_queue in seen:
                continue
            seen.add(target_queue)
            source_offset = pulled[index].system_properties.queue_offset
            lines.append(format_mark(Mark(queue, source_offset, target_queue, target_offset)))
        assert self._marks is not None
        self._marks.write("".join(lines))
        self._marks.flush()


class Connector:
    """The running rules: a :class:`RuleCopier` per rule, clients per cluster."""

    def __init__(
        self,
        rules_path: Path,
        data_dir: Path,
        metrics: Metrics,
        resend_safe_ms: int,
        create_topic: TopicCreator | None = None,
    ) -> None:
        """Nothing runs before :meth:`load`; ``resend_safe_ms``, ``create_topic``: see
        :class:`RuleCopier`."""
        self.resend_safe_ms = resend_safe_ms
        self.create_topic = create_topic
        self.rules_path = rules_path
        self.data_dir = data_dir
        self.metrics = metrics
        self.rules = RuleSet({}, ())
        self.copiers: dict[str, RuleCopier] = {}
        self.failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        """Set by the first copy task that ended by an unexpected error."""
        self._clients: dict[tuple[str, tuple[str, ...]], ClusterClient] = {}

    def _failed(self, error: BaseException) -> None:
        if not self.failure.done():
            self.failure.set_result(error)

    def read_rules(self) -> RuleSet:
        """Parse the rules file (RulesError if it is not usable)."""
        try:
            text = self.rules_path.read_text()
        except OSError as exc:
            raise RulesError(
                str(self.rules_path), None, "(file)", exc.strerror or str(exc)
            ) from None
        return parse_rules(text, str(self.rules_path))

    def _client(self, rules: RuleSet, cluster: str) -> ClusterClient:
        endpoints = rules.clusters[cluster].endpoints
        key = (cluster, endpoints)
        if key not in self._clients:
            self._clients[key] = ClusterClient(cluster, endpoints)
        return self._clients[key]

    async def _start_rule(self, rules: RuleSet, name: str) -> None:
        rule = rules.rule(name)
        copier = RuleCopier(
            rule,
            self._client(rules, rule.source),
            self._client(rules, rule.target),
            self.data_dir / "marks" / f"{name}.marks",
            self.metrics,
            self._failed,
            self.resend_safe_ms,
            rules.clusters[rule.target],
            self.create_topic,
        )
        await copier.prepare()
        copier.start()
        self.copiers[name] = copier
        log.info(
            "rule started",
            extra={
                "rule": name,
                "positions": dict(copier.positions),
                "target_queues": copier.target_queues,
            },
        )

    async def load(self) -> None:
        """Start every rule of the file; raises RulesError or ConnectorCallError."""
        rules = self.read_rules()
        for rule in rules.rules:
            await self._start_rule(rules, rule.name)
        self.rules = rules

    async def reload(self) -> None:
        """Apply the rules file again (module docstring); never raises."""
        try:
            new = self.read_rules()
        except RulesError as exc:
            log.error("rules file refused; the running rules go on", extra={"error": str(exc)})
            for name in self.copiers:
                self.metrics.errors.labels(name).inc()
            return
        plan = plan_reload(self.rules, new)
        for name in (*plan.removed, *plan.changed):
            copier = self.copiers.pop(name, None)
            if copier is not None:
                await copier.stop()
            if name in plan.removed:
                self.metrics.forget(name)
            log.info("rule stopped", extra={"rule": name})
        for name in (*plan.added, *plan.changed, *plan.kept):
            if name in self.copiers:
                continue
            try:
                await self._start_rule(new, name)
            except ConnectorCallError as exc:
                self.metrics.errors.labels(name).inc()
                log.error("rule not started", extra={"rule": name, "error": str(exc)})
        self.rules = new

    async def close(self) -> None:
        """Stop every rule and close the clients."""
        for copier in self.copiers.values():
            await copier.stop()
        self.copiers = {}
        for client in self._clients.values():
            await client.close()


async def serve(
    config: ConnectorConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
    create_topic: TopicCreator | None = None,
) -> None:
    """The connector role: start the rules, serve metrics, reload on SIGHUP, stop.
    ``create_topic``: how rules with ``create`` create target topics (none: they fail)."""
    # At debug level (the copied batches' delay stages) hpack would log every header
    # of every call: not ours to log, and most of the process's CPU when it did.
    logging.getLogger("hpack").setLevel(max(logging.INFO, log.getEffectiveLevel()))
    metrics = Metrics()
    connector = Connector(
        Path(config.rules), data_dir, metrics, config.resend_check_after_ms, create_topic
    )
    exported = False
    try:
        await connector.load()
        if config.metrics_listen:
            # The process shell serves the process registry there (rip5/metrics_endpoint.py).
            REGISTRY.register(metrics.registry)
            exported = True
        loop = asyncio.get_running_loop()
        reload_wanted = asyncio.Event()
        loop.add_signal_handler(signal.SIGHUP, reload_wanted.set)
        ready("connector")
        stop_wait = asyncio.create_task(stopping.wait())
        while not stopping.is_set():
            reload_wait = asyncio.create_task(reload_wanted.wait())
            waits: set[asyncio.Future[Any]] = {stop_wait, reload_wait, connector.failure}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            reload_wait.cancel()
            if connector.failure.done():
                raise connector.failure.result()
            if reload_wanted.is_set():
                reload_wanted.clear()
                log.info("reloading the rules file", extra={"rules": config.rules})
                await connector.reload()
        loop.remove_signal_handler(signal.SIGHUP)
    finally:
        await connector.close()
        if exported:
            REGISTRY.unregister(metrics.registry)
