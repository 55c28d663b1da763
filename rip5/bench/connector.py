"""``rip5 bench connector``: replication msgs/s between two clusters on one machine,
and the replication delay at half that rate, beside one cluster's publish rate
measured in the same sitting.

Setup: two ``rip5 dev`` clusters on free ports ("east" and "west", each 1
nameserver, 3 storage nodes with fsync on, 1 broker), topic ``bench-connector``
(``queues`` queues, NORMAL) on both and the rule's checkpoint group on east, and a
``rip5 connector`` process with one rule east -> west (``start = "earliest"``).
Each run:

1. **publish** (the yardstick): east alone, no connector running, as ``rip5 bench
   e2e`` publishes (``in_flight`` SendMessage calls of ``batch`` messages of
   ``message_bytes``): msgs/s over ``seconds`` after ``warmup``; what it stores is
   the backlog;
2. **replication**: a connector process starts and copies the backlog from its
   rule's checkpoint (the previous run's end): msgs/s from its first copy to the
   last, read from its ``rip5_connector_replicated_messages_total`` every 100 ms
   (its start is not counted); then, not measured, until its lag is 0;
3. **delay at half rate**: east gets messages at half the replication rate (sends
   of ``batch`` on a fixed schedule) for ``seconds`` after ``warmup``, while the
   connector copies them; p50/p99 of ``rip5_connector_delay_milliseconds`` (now
   minus the source store time of the last message copied) read every 100 ms
   whenever the copied count moved since the last read. Then, once its lag is 0,
   the connector stops (SIGTERM), so the next run's publish has the machine to
   itself and the next run's copy is of its own backlog only (a connector stopped
   while behind left the rest to be counted in the next run's replication, which
   then ended early and left old messages to the delay phase: samples of 20 s).

Targets (issue [Connector]): replication >= 50% of the publish rate; delay p99
<= 1 s at half load. Figures are indicative on a shared machine: both clusters,
the connector and the load generator share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import uvloop

from angelia_rpc.ports import free_port
from loadtest.client import CallFailed, SendRequests, build_message, check_send
from rip5 import dev_cluster, shell, stats
from rip5.admin import MESSAGE_TYPES
from rip5.bench import harness, publish_load
from rip5.bench.e2e import Generator
from rip5.bench.harness import PhaseResult

TOPIC = "bench-connector"
QUEUES = 8
RULE = "bench"
GROUP = "connector-bench"
SAMPLE_S = 0.1
CONNECTOR_READY_S = 60.0
COPY_TIMEOUT_S = 300.0
PUBLISH_CASE = "publish (one cluster)"
REPLICATION_CASE = "replication"
DELAY_CASE = "delay at half rate"
STAGES = ("wait_pull_ms", "pull_ms", "wait_send_ms", "send_ms", "delay_ms")
"""The delay stages of a copied batch's last message, in order (``--stages``)."""


def _rules(east: str, west: str, topic: str) -> str:
    return f"""
[clusters.east]
endpoints = ["{east}"]
[clusters.west]
endpoints = ["{west}"]

[[rules]]
name = "{RULE}"
from = "east"
to = "west"
topic = "{topic}"
start = "earliest"
group = "{GROUP}"
"""


def stages_of(log_text: str, from_s: float, to_s: float) -> dict[str, list[float]]:
    """Each delay stage of the batches a connector's JSON log says were copied between
    epoch seconds ``from_s`` and ``to_s``, by stage name (:data:`STAGES`)."""
    found: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        if '"batch copied"' not in line:
            continue
        event = json.loads(line)
        at_s = datetime.fromisoformat(event["ts"]).timestamp()
        if from_s <= at_s < to_s:
            for name in STAGES:
                if name in event:
                    found.setdefault(name, []).append(float(event[name]))
    return found


class ConnectorProcess:
    """A ``rip5 connector`` child process and its metrics."""

    def __init__(self, root: Path, rules: str, serial: int = 0, *, stages: bool = False) -> None:
        """Start it; ``stages``: at debug level, its log (JSON) says each batch's delay
        stages (:meth:`stages`)."""
        rules_path = root / "rules.toml"
        rules_path.write_text(rules)
        self.port = free_port()
        self.log_path = root / f"connector-{serial}.log"
        self.log = self.log_path.open("w")
        argv = [
            sys.executable, "-m", "rip5", "connector", "--rules", str(rules_path),
            "--data-dir", str(root / "connector"),
            "--metrics-listen", f"127.0.0.1:{self.port}",
            "--log-level", "debug" if stages else "warning", "--log-format", "json",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def metrics(self) -> dict[str, float]:
        """The rule's metrics by name (empty until the connector serves them)."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            return {}
        values = {}
        for line in text.splitlines():
            name, _, rest = line.partition(f'{{rule="{RULE}"}} ')
            if rest and not line.startswith("#"):
                values[name] = float(rest)
        return values

    def stages(self, from_s: float, to_s: float) -> dict[str, list[float]]:
        """Each delay stage (``connector.pulled_ahead.delay_stages``) of the batches it
        logged as copied between epoch seconds ``from_s`` and ``to_s``, by stage name."""
        self.log.flush()
        return stages_of(self.log_path.read_text(), from_s, to_s)

    def wait_ready(self) -> None:
        """Until the connector serves its rule's metrics (it prepared the rule)."""
        deadline = time.monotonic() + CONNECTOR_READY_S
        while "rip5_connector_replicated_messages_total" not in self.metrics():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the connector did not start (exit {self.process.poll()}): see its log"
                )
            time.sleep(SAMPLE_S)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 30 s); once stopped, nothing more."""
        if self.log.closed:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


ROLES = ("broker", "storage", "nameserver")


def _role_of(pid: int) -> str:
    """The ``rip5`` role a process runs (from its command line), else ``other``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    words = [word.decode(errors="replace") for word in argv]
    return next((word for word in words if word in ROLES), "other")


class RoleCpu:
    """CPU seconds per part of the copy (east's and west's roles, the connector) over a
    window: the CPU cost per message copied, part by part (from /proc; a process
    started in the window counts from its start)."""

    def __init__(self, parts: Callable[[], dict[str, list[int]]]) -> None:
        """``parts``: the pids of each part, by its name (asked at start and stop)."""
        self._parts = parts
        self._start: dict[int, float] = {}

    def start(self) -> None:
        """Read every part's processes' CPU now."""
        self._start = {
            pid: seconds
            for pids in self._parts().values()
            for pid in pids
            if (seconds := harness.cpu_seconds_of(pid)) is not None
        }

    def us_per_message(self, messages: float) -> dict[str, float]:
        """Each part's CPU since :meth:`start`, in microseconds per one of ``messages``."""
        spent: dict[str, float] = {}
        for part, pids in self._parts().items():
            for pid in pids:
                seconds = harness.cpu_seconds_of(pid)
                if seconds is not None:
                    spent[part] = spent.get(part, 0.0) + seconds - self._start.get(pid, 0.0)
        return {part: 1e6 * seconds / max(1.0, messages) for part, seconds in spent.items()}


def _say_cpu(report: harness.BenchReport, what: str, us: dict[str, float]) -> None:
    report.say(
        f"  {what}: CPU us per message copied: "
        + ", ".join(f"{part} {value:.0f}" for part, value in sorted(us.items()))
        + f" (total {sum(us.values()):.0f})"
    )


async def _replication(connector: ConnectorProcess, copied_before: float, backlog: int) -> float:
    """msgs/s of copying ``backlog`` messages past ``copied_before`` copies, from the
    first copy seen to the last."""
    deadline = time.monotonic() + COPY_TIMEOUT_S
    first: tuple[float, float] | None = None
    while True:
        copied = (await asyncio.to_thread(connector.metrics)).get(
            "rip5_connector_replicated_messages_total", 0.0
        )
        now = time.perf_counter()
        if first is None and copied > copied_before:
            first = (now, copied)
        if copied >= copied_before + backlog and first is not None:
            elapsed = now - first[0]
            return (copied - first[1]) / elapsed if elapsed > 0 else 0.0
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the connector copied {copied - copied_before:.0f} of {backlog} messages "
                f"in {COPY_TIMEOUT_S:.0f} s"
            )
        await asyncio.sleep(SAMPLE_S)


def _copied(connector: ConnectorProcess) -> float:
    """The messages the connector copied so far (its counter)."""
    return connector.metrics().get("rip5_connector_replicated_messages_total", 0.0)


async def _caught_up(connector: ConnectorProcess) -> None:
    """Until the connector has nothing left to copy (its rule's lag is 0: each queue's
    position at its end offset), outside any measured window: a phase then starts
    with no backlog of the one before, and a run's copy is of its own publish only
    (a connector stopped while behind left the rest to the next run's count)."""
    deadline = time.monotonic() + COPY_TIMEOUT_S
    while (await asyncio.to_thread(connector.metrics)).get(
        "rip5_connector_lag_messages", -1.0
    ) != 0.0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the connector did not catch up in {COPY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(SAMPLE_S)


async def _paced_delay(
    generator: Generator,
    connector: ConnectorProcess,
    *,
    rate: float,
    batch: int,
    body: bytes,
    seconds: float,
    warmup_s: float,
) -> PhaseResult:
    """Sends at ``rate`` msgs/s (``batch`` a call, on a fixed schedule) for ``warmup_s``
    + ``seconds``; the delay samples of the measured part (see the module docstring),
    with the rate achieved."""
    clock = time.perf_counter
    interval_s = batch / rate
    start = clock()
    measure_from = start + warmup_s
    end = measure_from + seconds
    slots = iter(range(10**12))
    sent = 0
    error_names: dict[str, int] = {}

    async def sender(index: int) -> None:
        nonlocal sent
        stub = generator.stubs[index % len(generator.stubs)]
        requests = SendRequests(
            [build_message(generator.topic, body, generator.born_host) for _ in range(batch)]
        )
        while (due := start + next(slots) * interval_s) < end:
            await asyncio.sleep(max(0.0, due - clock()))
            try:
                check_send(
                    await stub.SendMessage(
                        requests.next(), timeout=30, metadata=generator.metadata
                    ),
                    batch,
                )
            except CallFailed as error:
                name = type(error).__name__
                error_names[name] = error_names.get(name, 0) + 1
                continue
            if due >= measure_from:
                sent += batch

    async def sampler() -> list[float]:
        samples: list[float] = []
        last_copied = -1.0
        while clock() < end:
            values = await asyncio.to_thread(connector.metrics)
            copied = values.get("rip5_connector_replicated_messages_total", 0.0)
            if clock() >= measure_from and copied != last_copied and last_copied >= 0:
                samples.append(values.get("rip5_connector_delay_milliseconds", 0.0))
            last_copied = copied
            await asyncio.sleep(SAMPLE_S)
        return samples

    # Enough senders that the schedule holds while calls take up to a few hundred ms.
    senders = max(1, min(64, int(rate / batch) + 1))
    sampling = asyncio.create_task(sampler())
    await asyncio.gather(*(sender(i) for i in range(senders)))
    samples = await sampling
    return PhaseResult(
        sent / seconds,
        stats.percentile(samples, 0.5),
        stats.percentile(samples, 0.99),
        len(samples),
        sum(error_names.values()),
        error_names,
    )


async def _runs(
    args: argparse.Namespace,
    report: harness.BenchReport,
    east: str,
    start_connector: Callable[[], ConnectorProcess],
    server_pids: Callable[[], list[int]],
    parts: Callable[[], dict[str, list[int]]],
) -> None:
    generator = Generator(east, args.channels, args.topic, GROUP, "lean")
    meter = harness.CpuMeter(server_pids)
    role_cpu = RoleCpu(parts)
    body = os.urandom(args.message_bytes)
    try:
        for run in range(args.runs):
            publish, stored = await report.measure(
                run, PUBLISH_CASE, meter, publish_load.phase_of(generator, args, body)
            )
            report.say(
                f"  run {run + 1}: publish {publish.msgs_per_s:,.0f} msgs/s "
                f"p99 {publish.p99_ms:.1f} ms ({stored:,} messages)"
            )
            report.stage(f"run {run + 1}: replication")
            connector = await asyncio.to_thread(start_connector)
            meter.start()
            role_cpu.start()
            rate = await _replication(connector, 0.0, stored)
            report.record(REPLICATION_CASE, {"msgs_per_s": rate}, meter.stop())
            _say_cpu(report, f"run {run + 1}: replication", role_cpu.us_per_message(stored))
            report.say(f"  run {run + 1}: replication {rate:,.0f} msgs/s ({stored:,} messages)")
            await _caught_up(connector)
            report.stage(f"run {run + 1}: delay at half rate")
            meter.start()
            role_cpu.start()
            copied_before = await asyncio.to_thread(_copied, connector)
            measure_from_s = time.time() + args.warmup
            delay = await _paced_delay(
                generator,
                connector,
                rate=max(1.0, rate / 2),
                batch=args.batch,
                body=body,
                seconds=args.seconds,
                warmup_s=args.warmup,
            )
            report.record(DELAY_CASE, delay.values(), meter.stop())
            copied = await asyncio.to_thread(_copied, connector) - copied_before
            _say_cpu(report, f"run {run + 1}: delay phase", role_cpu.us_per_message(copied))
            report.say(
                f"  run {run + 1}: at {delay.msgs_per_s:,.0f} msgs/s the delay is p50 "
                f"{delay.p50_ms:.0f} ms p99 {delay.p99_ms:.0f} ms ({delay.calls} samples; "
                f"errors {delay.error_names or 0})"
            )
            if args.stages:
                stages = connector.stages(measure_from_s, measure_from_s + args.seconds)
                report.say(
                    f"  run {run + 1}: delay stages of the batches' last messages, p50/p99 ms: "
                    + ", ".join(
                        f"{name} {stats.percentile(stages.get(name, []), 0.5):.0f}/"
                        f"{stats.percentile(stages.get(name, []), 0.99):.0f}"
                        for name in STAGES
                    )
                    + f" ({len(stages.get('delay_ms', []))} batches)"
                )
            await _caught_up(connector)
            await asyncio.to_thread(connector.stop)
    finally:
        await generator.close()


def _measure(args: argparse.Namespace, report: harness.BenchReport) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="rip5-bench-connector-") as root_name,
        ExitStack() as stack,
    ):
        root = Path(root_name)
        report.stage("starting the two dev clusters")
        east = stack.enter_context(dev_cluster.dev_cluster(root / "east.log"))
        west = stack.enter_context(dev_cluster.dev_cluster(root / "west.log"))
        topics = [(args.topic, args.queues, MESSAGE_TYPES["normal"])]
        dev_cluster.ensure_resources(east.nameserver, topics, [GROUP])
        dev_cluster.ensure_resources(west.nameserver, topics, [])
        report.say(f"  east: broker {east.endpoint}; west: broker {west.endpoint}")
        report.stage("waiting for the brokers to store a message")
        dev_cluster.wait_until_serving(east.endpoint, [(args.topic, False)])
        dev_cluster.wait_until_serving(west.endpoint, [(args.topic, False)])
        rules = _rules(east.endpoint, west.endpoint, args.topic)
        running: list[ConnectorProcess] = []

        def start_connector() -> ConnectorProcess:
            """A connector process for one run's copy (stopped at the run's end)."""
            connector = ConnectorProcess(root, rules, serial=len(running), stages=args.stages)
            running.append(connector)
            stack.callback(connector.stop)
            connector.wait_ready()
            return connector

        def connectors() -> list[int]:
            return [c.process.pid for c in running if c.process.poll() is None]

        def servers() -> list[int]:
            return [*east.server_pids(), *west.server_pids(), *connectors()]

        def parts() -> dict[str, list[int]]:
            found: dict[str, list[int]] = {"connector": connectors()}
            for name, cluster in (("east", east), ("west", west)):
                for pid in cluster.server_pids():
                    found.setdefault(f"{name} {_role_of(pid)}", []).append(pid)
            return found

        shell.tune_gc()
        uvloop.run(_runs(args, report, east.endpoint, start_connector, servers, parts))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = publish_load.parser_of(
        "connector", description=__doc__, runs=1, topic=TOPIC, queues=QUEUES
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also say where the delay goes: each copied batch's stages, from the "
        "connector's debug log (source store -> pull sent -> pulled -> taken into a send "
        "-> acknowledged)",
    )
    args, report = publish_load.report_of("connector", parser, argv)
    report.note(
        "two dev clusters (each 1 nameserver, 3 storage nodes with fsync on, 1 broker) and "
        f"the connector on one machine; {args.message_bytes} B messages, {args.batch} per "
        f"SendMessage; server CPU: both clusters and the connector"
    )
    try:
        with report.progress(args.runs * 3):
            _measure(args, report)
    except (dev_cluster.ClusterError, RuntimeError) as exc:
        print(f"rip5 bench connector: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    publish = report.median(PUBLISH_CASE, "msgs_per_s")
    if publish > 0:
        report.note(
            f"replication / one cluster's publish = "
            f"{report.median(REPLICATION_CASE, 'msgs_per_s') / publish:.2f} (target >= 0.50); "
            f"delay p99 at half rate {report.median(DELAY_CASE, 'p99_ms'):.0f} ms "
            "(target <= 1000)"
        )
    report.finish()
    return 1 if report.errors() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
