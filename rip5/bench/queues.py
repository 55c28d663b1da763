"""``rip5 bench queues --queues N``: many queues on one dev cluster, and what they cost.

Setup: a ``rip5 dev`` cluster (1 nameserver, 3 storage nodes, 1 broker, its
default raft groups) on free ports. Steps, each timed:

1. baseline: publish ``--baseline-messages`` messages into one topic of 8
   queues (``bench-queues-8``), 8 per SendMessage (one per queue), from
   ``--workers`` threads, ``--baseline-samples`` times: msgs/s at 8 queues,
   the median of the samples (each is a few seconds; one alone moved by half
   between runs on a quiet machine, the first of a fresh cluster most);
2. create N queues in bulk: N / 8 topics (``bq-<i>``) of 8 queues each, in
   CreateTopics requests of 1,000 topics (one raft entry each), one at a time,
   as ``rip5 admin topic create --from-file`` sends them: queues/s;
3. publish one message to each of the N queues (one SendMessage per topic,
   its 8 messages each naming its queue), from ``--workers`` threads:
   msgs/s at N queues, and its ratio to the baseline;
4. read each back with the consumer group ``bench-queues-group``: by
   default as a simple consumer, receiving from every topic until its 8
   messages came and acking what each receive gave (a pop of each queue and
   an ack of it: two raft entries a queue); with ``--read
   pull`` as a pull consumer, pulling each queue from offset 0 (offset reads,
   no raft entry). The ids are checked against the ones sent.

RSS of each role (from /proc: nameserver, each storage node, broker) is
read before step 2, after step 2 and after step 4; bytes per queue are the
growth over N (the nameserver's after creation; the storage nodes' and the
broker's after publishing and reading, when the queues hold data). The
CPU time each role used (from /proc) is divided by the messages of the
baseline, the publish and the read: server CPU per message, the figure the
machine's other load changes least. The storage nodes' append counters (their
metrics endpoints: ``rip5_storage_appended_messages``, ``_appends`` and
``_append_entries``, and ``rip5_raft_rounds``) give the messages and appends
per raft entry, and the messages per raft round, of the baseline and of the
publish: how well the appends joined, which sets the share of a raft entry's
cost each message pays. The machine's other load changes the
rates: figures are indicative.

A run at a million queues takes half an hour and more, so the baseline's rate
is logged as soon as it is measured and the publish's rate, ratio, messages
per raft entry and round and server CPU a message as soon as the publish ends.
SIGTERM or SIGINT stops the run: the sends and reads not started are dropped,
those under way end (each within its call timeout), the dev cluster is stopped
as at the end of a run (``rip5.dev_cluster``: SIGTERM, then SIGKILL to its
process group), and the command exits 128 + the signal.

SHELL (processes, threads, clocks, signals).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from angelia_rpc import AngeliaError
from angelia_rpc.metrics_export import REFRESH_MS
from angelia_rpc.nameserver_client import NameserverClient
from loadtest.client import CallFailed, Received, RocketClient
from protocol import nameserver_api as api
from protocol.vocabulary import MessageType
from rip5 import dev_cluster, topic_file
from rip5.admin import DEFAULT_CLUSTER
from rip5.bench import harness
from rip5.metrics_endpoint import scrape
from storage_node.metrics import APPEND_COUNTERS

QUEUES_PER_TOPIC = 8
BASELINE_TOPIC = "bench-queues-8"
GROUP = "bench-queues-group"
TOPIC_PREFIX = "bq-"
ROLES = ("nameserver", "storage", "broker")
CALL_ATTEMPTS = 20  # a fresh group may answer "no leader yet" for a while: retried
RETRY_PAUSE_S = 0.2
READ_INVISIBLE_MS = 10_000
"""How long a received message stays invisible: a delivery lost on the way (a call
that timed out on a loaded machine) comes again after it, as a simple consumer's does."""
READ_DEADLINE_S = 60.0  # per topic, for its 8 messages to come back (past redeliveries)
BASELINE_MESSAGES = 20_000
"""The 8-queue baseline's messages by default: about 5-10 s of publishing here, so
the anchor of the publish ratio is not a 2 s sample."""
BASELINE_SAMPLES = 3
"""How many times the baseline is measured; its rate is the median."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PROGRESS_EVERY_S = 30.0
"""How often a long step (the publish, the read back) logs how far it got."""
ROUNDS_COUNTER = "rip5_raft_rounds"
"""Every storage node's raft rounds (raft/host/metrics.py): one WAL write and fsync, and
one stream message to each peer, for all the groups with work."""
SETTLE_MARGIN_S = 0.2
SETTLE_DEADLINE_S = 30.0
T = TypeVar("T")


class BenchStopped(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived: the run stops (see the module docstring). A
    KeyboardInterrupt, so that an event loop it interrupts (the topics' creation)
    passes it on rather than logging it as a callback's error."""

    def __init__(self, signum: int) -> None:
        """``signum``: the signal that stopped the run."""
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`BenchStopped` in the main
    thread (once: later ones are ignored, so the cluster's stop is not cut short);
    the previous handlers are back after it."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def stop(signum: int, frame: object) -> None:
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise BenchStopped(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def map_stoppable(
    function: Callable[[int], T],
    count: int,
    workers: int,
    progress: Callable[[int, float], None] | None = None,
    every_s: float = PROGRESS_EVERY_S,
) -> list[T]:
    """``function(i)`` for i in ``range(count)`` on ``workers`` threads, in order.
    When it fails (or the run is stopped), the calls not started are cancelled
    rather than waited for; those under way end by themselves. ``progress(done,
    seconds)``, if given, is called every ``every_s`` while calls remain, with the
    calls finished so far and the seconds since the start (from the main thread).

    The results are awaited one by one, in order (``Future.result`` with a
    timeout), never with ``concurrent.futures.wait``: a signal's exception raised
    while ``wait`` holds every future's lock would leave some held, and the
    workers, which take a future's lock to hand over their result, would hang."""
    pool = ThreadPoolExecutor(workers)
    started = time.monotonic()
    report_at = started + every_s
    try:
        futures = [pool.submit(function, i) for i in range(count)]
        results: list[T] = []
        for future in futures:
            while True:
                try:
                    results.append(future.result(timeout=max(0.0, report_at - time.monotonic())))
                    break
                except TimeoutError:
                    if future.done():  # the call itself raised TimeoutError
                        raise
                    if progress is not None:
                        progress(sum(map(Future.done, futures)), time.monotonic() - started)
                    report_at = time.monotonic() + every_s
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def topic_names(queues: int) -> list[str]:
    """The bench's topics for ``queues`` queues (8 each; the last may have fewer)."""
    return [f"{TOPIC_PREFIX}{i}" for i in range(-(-queues // QUEUES_PER_TOPIC))]


def queue_counts(queues: int) -> list[int]:
    """The queue count of each of :func:`topic_names`' topics."""
    full, rest = divmod(queues, QUEUES_PER_TOPIC)
    return [QUEUES_PER_TOPIC] * full + ([rest] if rest else [])


def role_of(cmdline: str) -> str | None:
    """The rip5 role a process's command line runs (None: not a role process)."""
    words = cmdline.split()
    for role in ROLES:
        if role in words:
            return role
    return None


def _by_role(pids: Sequence[int], read: Callable[[int], Any]) -> dict[str, list[Any]]:
    """``read(pid)`` of each role's processes (storage: one entry per node, by pid)."""
    found: dict[str, list[Any]] = {role: [] for role in ROLES}
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError):
            continue
        role = role_of(cmdline)
        value = read(pid)
        if role is not None and value is not None:
            found[role].append(value)
    return found


def rss_by_role(pids: Sequence[int]) -> dict[str, list[int]]:
    """RSS bytes of each role's processes (storage: one entry per node)."""
    return _by_role(pids, harness.rss_bytes_of)


def cpu_by_role(pids: Sequence[int]) -> dict[str, float]:
    """CPU seconds (user + system) each role's processes used so far (storage: all
    nodes together)."""
    return {role: sum(seconds) for role, seconds in _by_role(pids, harness.cpu_seconds_of).items()}


def _cpu_us_per_message(
    before: dict[str, float], after: dict[str, float], messages: int
) -> dict[str, float]:
    return {role: (after[role] - before[role]) * 1e6 / messages for role in ROLES}


def append_counts(endpoints: Sequence[str]) -> tuple[int, int, int, int]:
    """The messages, appends and raft entries the storage nodes whose metrics are at
    ``endpoints`` (host:port) stored, and the raft rounds they ran (each node's rounds
    for every group it hosts, leader or follower), summed, as of each node's last
    metrics refresh."""
    names = (*APPEND_COUNTERS, ROUNDS_COUNTER)
    totals = dict.fromkeys(names, 0.0)
    for address in endpoints:
        for family in scrape(address):
            if family.name in totals:
                totals[family.name] += sum(
                    s.value for s in family.samples if s.name.endswith("_total")
                )
    messages, appends, entries, rounds = (int(totals[name]) for name in names)
    return messages, appends, entries, rounds


def settled_append_counts(
    endpoints: Sequence[str], deadline_s: float = SETTLE_DEADLINE_S
) -> tuple[int, int, int, int]:
    """:func:`append_counts` once two reads a metrics refresh apart agree on the
    appends (rounds go on while idle: heartbeats): with no append under way, every
    append sent so far is counted (RuntimeError after ``deadline_s``)."""
    before = append_counts(endpoints)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        time.sleep(REFRESH_MS / 1000 + SETTLE_MARGIN_S)
        now = append_counts(endpoints)
        if now[:3] == before[:3]:
            return now
        before = now
    raise RuntimeError(f"the storage nodes' append counters still moved after {deadline_s:.0f} s")


def joining(
    before: tuple[int, int, int, int], after: tuple[int, int, int, int]
) -> dict[str, float]:
    """Messages and appends per raft entry, and messages per raft round (every node's
    rounds), between two :func:`append_counts`."""
    messages, appends, entries, rounds = (b - a for a, b in zip(before, after, strict=True))
    return {
        "messages": messages,
        "appends": appends,
        "entries": entries,
        "rounds": rounds,
        "messages_per_entry": messages / max(entries, 1),
        "appends_per_entry": appends / max(entries, 1),
        "messages_per_round": messages / max(rounds, 1),
    }


def _retrying(call: Callable[[], Any]) -> Any:
    """``call()``, retried while it fails with a retriable answer (a fresh group)."""
    for attempt in range(CALL_ATTEMPTS):
        try:
            return call()
        except CallFailed:
            if attempt == CALL_ATTEMPTS - 1:
                raise
            time.sleep(RETRY_PAUSE_S)
    raise AssertionError("unreachable")


def _ack(client: RocketClient, topic: str, got: Sequence[Received]) -> None:
    """Ack what one receive gave, as a simple consumer does (a raft entry: the group
    queues read are consumed to their end again), retried as other calls. An
    INVALID_RECEIPT_HANDLE answer ends it: the lease lapsed (the message comes again
    after its invisibility, as a simple consumer's would) or an earlier attempt's ack
    went through."""
    for attempt in range(CALL_ATTEMPTS):
        try:
            client.ack(GROUP, topic, got)
            return
        except CallFailed as exc:
            if exc.name == "INVALID_RECEIPT_HANDLE":
                return
            if attempt == CALL_ATTEMPTS - 1:
                raise
            time.sleep(RETRY_PAUSE_S)


def progress_logger(
    log: Callable[[str], None], what: str, topics: int, messages_per_topic: int
) -> Callable[[int, float], None]:
    """A ``map_stoppable`` progress callback that logs, for ``what`` (a step over
    ``topics`` topics of ``messages_per_topic`` messages each), the topics done and
    the message rate since the last line (the rate as queues fill, not an average)."""
    last = [0, 0.0]

    def report(done: int, seconds: float) -> None:
        rate = (done - last[0]) * messages_per_topic / max(seconds - last[1], 1e-9)
        last[:] = [done, seconds]
        log(
            f"{what}: {done:,} of {topics:,} topics ({done / topics:.0%}), "
            f"{rate:,.0f} msgs/s in the last {PROGRESS_EVERY_S:.0f} s"
        )

    return report


def publish(
    endpoint: str,
    topics: Sequence[tuple[str, int]],
    workers: int,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[float, dict[str, list[str]]]:
    """One SendMessage per (topic, queue count), one message per queue; the seconds it
    took and the message ids sent, by topic. ``progress``: see :func:`map_stoppable`."""
    sent: dict[str, list[str]] = {}
    clients = [RocketClient(endpoint, timeout_s=10.0) for _ in range(workers)]

    def send(index: int) -> None:
        client = clients[index % workers]
        topic, count = topics[index]
        messages = []
        for queue_id in range(count):
            message = client.message(topic, f"{topic}/{queue_id}".encode())
            message.system_properties.queue_id = queue_id
            messages.append(message)
        _retrying(lambda: client.send(messages))
        sent[topic] = [m.system_properties.message_id for m in messages]

    started = time.monotonic()
    try:
        map_stoppable(send, len(topics), workers, progress)
    finally:
        for client in clients:
            client.close()
    return time.monotonic() - started, sent


def read_back(
    endpoint: str,
    sent: dict[str, list[str]],
    workers: int,
    mode: str = "receive",
    progress: Callable[[int, float], None] | None = None,
) -> tuple[float, int]:
    """Read every topic's messages with the bench group, as a simple consumer
    (``mode`` "receive": ReceiveMessage of the whole topic, a pop of each queue, then an
    ack of what came) or a pull consumer ("pull": PullMessage of each queue from
    offset 0, offset reads); the seconds it took and the messages read. RuntimeError
    if one is missing or unknown. ``progress``: see :func:`map_stoppable`."""
    clients = [RocketClient(endpoint, timeout_s=10.0) for _ in range(workers)]
    names = sorted(sent)

    def receive(client: RocketClient, topic: str, wanted: set[str]) -> set[str]:
        got = _retrying(
            lambda: client.receive(GROUP, topic, batch_size=32, invisible_ms=READ_INVISIBLE_MS)
        )
        if got:
            _ack(client, topic, got)
        return {m.message_id for m in got}

    def pull(client: RocketClient, topic: str, wanted: set[str]) -> set[str]:
        ids: set[str] = set()
        for queue_id, message_id in enumerate(sent[topic]):
            if message_id in wanted:  # not read yet: its queue holds just this one
                got, _next = _retrying(partial(client.pull, GROUP, topic, queue_id, 0))
                ids.update(got)
        return ids

    take = {"receive": receive, "pull": pull}[mode]

    def read(index: int) -> int:
        client = clients[index % workers]
        topic = names[index]
        wanted = set(sent[topic])
        seen: set[str] = set()
        deadline = time.monotonic() + READ_DEADLINE_S
        while seen != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {len(wanted - seen)} messages not read back")
            ids = take(client, topic, wanted - seen)
            if ids - wanted:
                raise RuntimeError(f"{topic}: read messages that were not sent: {ids - wanted}")
            seen |= ids
        return len(seen)

    started = time.monotonic()
    try:
        total = sum(map_stoppable(read, len(names), workers, progress))
    finally:
        for client in clients:
            client.close()
    return time.monotonic() - started, total


def create_topics(nameserver: str, topics: Sequence[tuple[str, int]]) -> float:
    """Create ``topics`` through the nameserver in batches of 1,000 (one
    ``CreateTopics`` raft entry each, ``rip5.topic_file``); the seconds it took
    (topics that exist already count as created)."""
    requests = [
        api.CreateTopicRequest(name, DEFAULT_CLUSTER, queues, int(MessageType.NORMAL))
        for name, queues in topics
    ]

    async def create_all() -> None:
        client = NameserverClient([nameserver])
        try:
            await topic_file.create_topics(client, requests, skip_existing=True)
        finally:
            await client.close()

    started = time.monotonic()
    uvloop.run(create_all())
    return time.monotonic() - started


def _growth_per_queue(before: list[int], after: list[int], queues: int) -> list[float]:
    return [(b - a) / queues for a, b in zip(before, after, strict=False)]


def measure(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the steps of the module docstring; the figures."""
    topics = list(zip(topic_names(args.queues), queue_counts(args.queues), strict=True))
    with tempfile.TemporaryDirectory(prefix="rip5-bench-queues-") as root:
        log("starting the dev cluster")
        with dev_cluster.dev_cluster(Path(root) / "dev.log") as cluster:
            dev_cluster.ensure_resources(
                cluster.nameserver,
                [(BASELINE_TOPIC, QUEUES_PER_TOPIC, int(MessageType.NORMAL))],
                [GROUP],
            )
            dev_cluster.wait_until_serving(cluster.endpoint, [(BASELINE_TOPIC, False)])
            batches = -(-args.baseline_messages // QUEUES_PER_TOPIC)
            baseline_messages = batches * QUEUES_PER_TOPIC
            log(
                f"baseline: {baseline_messages} messages into 8 queues, "
                f"{args.baseline_samples} times"
            )
            storage_metrics = [a for n, a in cluster.metrics.items() if n.startswith("storage")]
            if not storage_metrics:
                raise RuntimeError(
                    f"rip5 dev named no storage node's metrics endpoint; see {cluster.log_path}"
                )
            appends_start = settled_append_counts(storage_metrics)
            cpu_baseline = cpu_by_role(cluster.server_pids())
            baseline_rates = []
            for sample in range(args.baseline_samples):
                sample_s, _ = publish(
                    cluster.endpoint, [(BASELINE_TOPIC, QUEUES_PER_TOPIC)] * batches, args.workers
                )
                baseline_rates.append(baseline_messages / sample_s)
                log(
                    f"baseline sample {sample + 1}: {baseline_rates[-1]:,.0f} msgs/s "
                    f"({sample_s:.1f} s)"
                )
            cpu_start = cpu_by_role(cluster.server_pids())
            appends_baseline = settled_append_counts(storage_metrics)
            baseline_rate = statistics.median(baseline_rates)
            log(f"baseline: {baseline_rate:,.0f} msgs/s at 8 queues (median)")
            rss_start = rss_by_role(cluster.server_pids())
            log(f"creating {args.queues:,} queues ({len(topics):,} topics)")
            create_s = create_topics(cluster.nameserver, topics)
            rss_created = rss_by_role(cluster.server_pids())
            log(f"publishing one message to each of {args.queues:,} queues")
            cpu_created = cpu_by_role(cluster.server_pids())
            publish_s, sent = publish(
                cluster.endpoint,
                topics,
                args.workers,
                progress_logger(log, "publish", len(topics), QUEUES_PER_TOPIC),
            )
            cpu_published = cpu_by_role(cluster.server_pids())
            appends_published = settled_append_counts(storage_metrics)
            publish_rate = args.queues / publish_s
            joined = {
                "baseline": joining(appends_start, appends_baseline),
                "publish": joining(appends_baseline, appends_published),
            }
            log(
                f"publish: {publish_rate:,.0f} msgs/s at {args.queues:,} queues "
                f"({publish_s:.1f} s), {publish_rate / baseline_rate:.0%} of the 8-queue rate; "
                f"{joined['publish']['messages_per_entry']:.1f} messages a raft entry "
                f"({joined['baseline']['messages_per_entry']:.1f} at 8 queues), "
                f"{joined['publish']['messages_per_round']:.1f} a raft round "
                f"({joined['baseline']['messages_per_round']:.1f})"
            )
            cpu_publish = _cpu_us_per_message(cpu_created, cpu_published, args.queues)
            cpu_base = _cpu_us_per_message(
                cpu_baseline, cpu_start, baseline_messages * args.baseline_samples
            )
            log(
                "publish: server CPU a message (us), nameserver / storage / broker: "
                + " / ".join(f"{cpu_publish[role]:,.0f}" for role in ROLES)
                + " ("
                + " / ".join(f"{cpu_base[role]:,.0f}" for role in ROLES)
                + " at 8 queues)"
            )
            log("reading each back")
            read_s, read = read_back(
                cluster.endpoint,
                sent,
                args.workers,
                args.read,
                progress_logger(log, "read back", len(topics), QUEUES_PER_TOPIC),
            )
            cpu_read = cpu_by_role(cluster.server_pids())
            rss_end = rss_by_role(cluster.server_pids())
    return {
        "queues": args.queues,
        "topics": len(topics),
        "create_s": create_s,
        "create_queues_per_s": args.queues / create_s,
        "baseline_msgs_per_s": baseline_rate,
        "baseline_samples_msgs_per_s": baseline_rates,
        "publish_msgs_per_s": publish_rate,
        "publish_ratio": publish_rate / baseline_rate,
        "read_mode": args.read,
        "read_msgs": read,
        "read_msgs_per_s": read / read_s,
        "rss_bytes": {"start": rss_start, "created": rss_created, "end": rss_end},
        "joined": joined,
        "cpu_us_per_msg": {
            "baseline": cpu_base,
            "publish": cpu_publish,
            "read": _cpu_us_per_message(cpu_published, cpu_read, max(read, 1)),
        },
        "nameserver_bytes_per_queue": _growth_per_queue(
            rss_start["nameserver"], rss_created["nameserver"], args.queues
        ),
        "storage_bytes_per_queue": _growth_per_queue(
            rss_start["storage"], rss_end["storage"], args.queues
        ),
        "broker_bytes_per_queue": _growth_per_queue(
            rss_start["broker"], rss_end["broker"], args.queues
        ),
    }


def render(figures: dict[str, Any]) -> str:
    """The figures as the lines the command prints."""
    mib = 1024 * 1024
    rss = figures["rss_bytes"]
    lines = [
        f"queues: {figures['queues']:,} ({figures['topics']:,} topics of up to 8)",
        f"creation: {figures['create_s']:.1f} s, {figures['create_queues_per_s']:,.0f} queues/s",
        f"publish at 8 queues: {figures['baseline_msgs_per_s']:,.0f} msgs/s (median of "
        + ", ".join(f"{rate:,.0f}" for rate in figures["baseline_samples_msgs_per_s"])
        + ")",
        f"publish at {figures['queues']:,} queues (one message each): "
        f"{figures['publish_msgs_per_s']:,.0f} msgs/s "
        f"({figures['publish_ratio']:.0%} of the 8-queue rate)",
        f"read back ({figures['read_mode']}): {figures['read_msgs']:,} messages, "
        f"{figures['read_msgs_per_s']:,.0f} msgs/s",
        "RSS (MiB) start / after creation / after publish+read:",
    ]
    for role in ROLES:
        for index, start in enumerate(rss["start"][role]):
            created, end = rss["created"][role][index], rss["end"][role][index]
            lines.append(
                f"  {role}{'' if role != 'storage' else f' {index + 1}'}: "
                f"{start / mib:.0f} / {created / mib:.0f} / {end / mib:.0f}"
            )
    joined = figures["joined"]
    lines.append("storage: messages (appends) per raft entry:")
    for phase, label in (
        ("baseline", "publish at 8 queues"),
        ("publish", f"publish at {figures['queues']:,} queues"),
    ):
        lines.append(
            f"  {label}: {joined[phase]['messages_per_entry']:.1f} "
            f"({joined[phase]['appends_per_entry']:.1f}), {joined[phase]['entries']:,} entries; "
            f"{joined[phase]['messages_per_round']:.1f} messages a round (all nodes' rounds)"
        )
    lines.append("server CPU per message (us) nameserver / storage (3 nodes) / broker:")
    for phase, label in (
        ("baseline", "publish at 8 queues"),
        ("publish", f"publish at {figures['queues']:,} queues"),
        ("read", "read back"),
    ):
        cpu = figures["cpu_us_per_msg"][phase]
        lines.append(f"  {label}: " + " / ".join(f"{cpu[role]:,.0f}" for role in ROLES))
    for key, label in (
        ("nameserver_bytes_per_queue", "nameserver (after creation)"),
        ("storage_bytes_per_queue", "each storage node (after publish+read)"),
        ("broker_bytes_per_queue", "broker (after publish+read)"),
    ):
        values = ", ".join(f"{v:,.0f}" for v in figures[key])
        lines.append(f"bytes per queue, {label}: {values}")
    lines.append("(indicative: the machine's other load changes these figures)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench queues", description=__doc__)
    parser.add_argument("--queues", type=int, default=100_000, help="queues to create")
    parser.add_argument("--workers", type=int, default=16, help="client threads for sends/reads")
    parser.add_argument(
        "--baseline-messages",
        type=int,
        default=BASELINE_MESSAGES,
        help="messages of the 8-queue baseline",
    )
    parser.add_argument(
        "--read",
        choices=("receive", "pull"),
        default="receive",
        help="read back as a simple consumer (a pop and an ack of each queue, a raft entry each) "
        "or a pull consumer (offset reads)",
    )
    parser.add_argument(
        "--baseline-samples",
        type=int,
        default=BASELINE_SAMPLES,
        help="times the baseline is measured (its rate is their median)",
    )
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    for name in ("queues", "workers", "baseline_messages", "baseline_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    try:
        with stopped_by_signals():
            figures = measure(args, log)
    except BenchStopped as stopped:
        log(f"{stopped}: the dev cluster is stopped, no figures")
        return 128 + stopped.signum
    except (dev_cluster.ClusterError, RuntimeError, CallFailed, AngeliaError) as exc:
        print(f"rip5 bench queues: {exc}", file=sys.stderr)
        return 1
    print(render(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
