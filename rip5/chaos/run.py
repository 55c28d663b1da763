"""``rip5 chaos run``: start a cluster (or attach), run a model under faults, check, report.

Steps: start the cluster (:class:`~rip5.chaos.cluster.ChaosCluster`), create
the model's topic and consumer group, wait until a probe message is stored,
then run producers and consumers for ``duration`` while the schedule's
faults come and go; stop the producers, let the consumers drain (until
every message that must be visible was delivered, or ``drain`` seconds),
check the history and report.

Exit codes: 0 the verdict is OK; 1 it is not (lost, duplicated, ...) or the
run could not start; 2 bad usage.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click
from rich.console import Console

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.nameserver_client import NameserverClient
from broker.fault_injection import ACK_BEFORE_STORE_ENV
from protocol import errors
from protocol import nameserver_api as api
from rip5.admin import DEFAULT_CLUSTER
from rip5.chaos import report
from rip5.chaos.checkers import Verdict, check, must_be_visible
from rip5.chaos.cluster import ChaosCluster, ClusterFailed, ClusterShape
from rip5.chaos.faults import inject
from rip5.chaos.history import FaultWindow, History, Outcome
from rip5.chaos.schedule import KINDS, FaultStep, ScheduleError, parse_fault, plan
from rip5.chaos.workload import MODELS, Client, Model, Recorder, Workload, now_ms

EXIT_FAILED = 1
EXIT_USAGE = 2
SERVE_TIMEOUT_S = 90.0
QUEUES = 4


@dataclass(frozen=True)
class RunOptions:
    """Everything one run needs (the CLI's options)."""

    model: str = "queue"
    faults: tuple[str, ...] = ()
    duration_s: float = 30.0
    interval_s: float = 10.0
    hold_s: float = 4.0
    warmup_s: float = 3.0
    drain_s: float = 30.0
    seed: int = 1
    endpoint: str = ""
    nameserver: str = ""
    storage: int = 3
    brokers: int = 1
    groups: int = 8
    producers: int = 2
    consumers: int = 2
    rate_per_s: float = 40.0
    out_dir: Path = field(default_factory=lambda: Path("chaos-report"))
    drop_one: bool = False
    """Planted bug (tests only): a consumer forgets one acked message."""
    ack_before_store_ms: int = 0
    """Planted bug (tests only): the brokers ack sends this long before storing them
    (``broker/fault_injection.py``); 0: off."""
    chart: bool = True


class RunFailed(Exception):
    """The run could not start or went wrong outside the system under test."""


async def ensure_model(nameserver: str, model: Model) -> None:
    """Create the model's topic and consumer group (existing ones are kept)."""
    topic = api.CreateTopicRequest(model.topic, DEFAULT_CLUSTER, QUEUES, model.message_type)
    group = api.CreateConsumerGroupRequest(model.group, DEFAULT_CLUSTER, fifo=model.fifo_group)

    async def create_topic(ns: NameserverService) -> object:
        return await ns.create_topic(topic)

    async def create_group(ns: NameserverService) -> object:
        return await ns.create_consumer_group(group)

    client = NameserverClient([nameserver])
    try:
        for name, create in ((topic.name, create_topic), (group.name, create_group)):
            try:
                await client.call(create)
            except AngeliaError as exc:
                if exc.code is not errors.ALREADY_EXISTS:
                    raise RunFailed(f"cannot create {name}: {exc}") from exc
    finally:
        await client.close()


async def wait_serving(workload: Workload) -> set[str]:
    """Send probe messages until one is stored; the probes' ids (kept out of the history)."""
    client = Client(workload.endpoint)
    probes: set[str] = set()
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    try:
        while True:
            message = workload.probe_message()
            probes.add(message.system_properties.message_id)
            results = await client.send([message])
            if results[0][0] is Outcome.ACKED:
                if workload.model.name == "txn":
                    await client.end_transaction(
                        workload.model.topic,
                        message.system_properties.message_id,
                        results[0][1],
                        commit=True,
                    )
                return probes
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"the broker at {workload.endpoint} stored no message within "
                    f"{SERVE_TIMEOUT_S:.0f} s (last: {results[0][2]})"
                )
            await asyncio.sleep(0.2)
    finally:
        await client.close()


async def _run_faults(
    cluster: ChaosCluster | None,
    steps: list[FaultStep],
    start: float,
    seed: int,
    windows: list[FaultWindow],
    say: Callable[[str], None],
) -> None:
    for i, step in enumerate(steps):
        await asyncio.sleep(max(0.0, start + step.at_ms / 1000 - time.monotonic()))
        assert cluster is not None
        began = now_ms()
        injected = await inject(cluster, step, seed + i)
        say(f"fault {step.kind} on {injected.target}: {injected.detail}")
        try:
            await asyncio.sleep(step.hold_ms / 1000)
        finally:
            await injected.heal()
        windows.append(FaultWindow(step.kind, injected.target, began, now_ms(), injected.detail))
        say(f"healed {step.kind} on {injected.target}")


async def _drain(workload: Workload, probes: set[str], deadline_s: float) -> None:
    """Wait until every message that must be visible was delivered, or the deadline."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline_s
    recorder = workload.recorder
    while loop.time() < until:
        delivered = {d.message_id for d in recorder.deliveries}
        waiting = [
            s for s in recorder.sends if must_be_visible(s) and s.message_id not in delivered
        ]
        due = max((s.due_ms or 0 for s in recorder.sends), default=0)
        if not waiting and now_ms() > due + 2_000:
            return
        await asyncio.sleep(0.2)


async def run(
    options: RunOptions, say: Callable[[str], None], log: Callable[[str], None]
) -> tuple[History, Verdict]:
    """One whole run (see the module docstring): ``say`` tells progress, ``log`` takes the
    cluster's output lines."""
    model = MODELS[options.model]
    shape = ClusterShape(options.storage, options.brokers, options.groups)
    processes = shape.process_names() if not options.endpoint else []
    # Checked before anything starts: a bad fault name is a usage error.
    specs = [parse_fault(f, processes) for f in options.faults]
    if specs and options.endpoint:
        raise ScheduleError("faults need a cluster this command starts (not --endpoint)")
    steps = plan(
        specs,
        processes,
        duration_ms=int(options.duration_s * 1000),
        interval_ms=int(options.interval_s * 1000),
        hold_ms=int(options.hold_s * 1000),
        warmup_ms=int(options.warmup_s * 1000),
        seed=options.seed,
    )
    cluster: ChaosCluster | None = None
    data_dir: Path | None = None
    endpoint, nameserver = options.endpoint, options.nameserver
    retry_endpoints: tuple[str, ...] = ()  # the other brokers, which retries go through
    try:
        if not endpoint:
            data_dir = Path(tempfile.mkdtemp(prefix="rip5-chaos-"))
            planted = (
                {"broker": {ACK_BEFORE_STORE_ENV: str(options.ack_before_store_ms)}}
                if options.ack_before_store_ms
                else {}
            )
            cluster = ChaosCluster(data_dir, shape, options.seed, log, planted)
            say(f"starting {options.storage} storage nodes, {options.brokers} broker(s)")
            await cluster.start()
            endpoint, nameserver = cluster.endpoint, cluster.nameserver
            retry_endpoints = tuple(e for e in cluster.broker_endpoints if e != endpoint)
        if nameserver:
            say(f"creating topic {model.topic} and group {model.group}")
            await ensure_model(nameserver, model)
        recorder = Recorder()
        workload = Workload(
            model, endpoint, recorder, options.seed, options.producers, options.consumers,
            options.rate_per_s, drop_one=options.drop_one, retry_endpoints=retry_endpoints,
        )  # fmt: skip
        say(f"waiting until the broker at {endpoint} stores a probe message")
        probes = await wait_serving(workload)
        workload.probes = probes
        say(f"serving at {endpoint}; running {options.model} for {options.duration_s:.0f} s")
        stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
        windows: list[FaultWindow] = []
        start_ms = now_ms()
        start = time.monotonic()
        consumers = [
            asyncio.create_task(workload.consume(i, stop_consuming))
            for i in range(options.consumers)
        ]
        producers = [
            asyncio.create_task(workload.produce(i, stop_producing))
            for i in range(options.producers)
        ]
        faults = asyncio.create_task(_run_faults(cluster, steps, start, options.seed, windows, say))
        try:
            await asyncio.sleep(options.duration_s)
            await faults
        finally:
            if not faults.done():
                faults.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await faults
            stop_producing.set()
            await asyncio.gather(*producers, return_exceptions=True)
        say("draining")
        await _drain(workload, probes, options.drain_s)
        stop_consuming.set()
        await asyncio.gather(*consumers, return_exceptions=True)
        history = History(
            model.name,
            start_ms,
            now_ms(),
            tuple(recorder.sends),
            tuple(d for d in recorder.deliveries if d.message_id not in probes),
            tuple(windows),
            tuple(f"{name}: {count}" for name, count in sorted(recorder.errors.items())),
        )
        return history, check(history)
    finally:
        if cluster is not None:
            await cluster.stop()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


def run_and_report(options: RunOptions, console: Console) -> Verdict:
    """Run, then write the files, print the table and draw the chart."""
    options.out_dir.mkdir(parents=True, exist_ok=True)
    with open(options.out_dir / "cluster.log", "a") as log_file:

        def log(line: str) -> None:
            log_file.write(line + "\n")

        history, verdict = asyncio.run(run(options, console.print, log))
    extra: dict[str, object] = {"options": {k: str(v) for k, v in asdict(options).items()}}
    report.write_files(options.out_dir, history, verdict, extra)
    if options.chart:
        report.chart(options.out_dir / "chart.png", history, verdict)
    report.table(console, verdict, history.start_ms)
    console.print(f"report: {options.out_dir}")
    return verdict


@click.command("run")
@click.option("--model", type=click.Choice(sorted(MODELS)), default="queue", show_default=True)
@click.option(
    "--fault", "faults", multiple=True, metavar="KIND[@TARGET]",
    help="a fault to inject, in turn with the others: " + ", ".join(KINDS),
)  # fmt: skip
@click.option("--duration", type=float, default=30.0, show_default=True, help="seconds of load")
@click.option(
    "--interval", type=float, default=10.0, show_default=True, help="seconds between faults"
)
@click.option("--hold", type=float, default=4.0, show_default=True, help="seconds each fault lasts")
@click.option("--drain", type=float, default=30.0, show_default=True, help="most seconds to drain")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--endpoint", default="", help="attach to this broker (no faults) instead of starting a cluster"
)
@click.option("--nameserver", default="", help="with --endpoint: create the topic and group here")
@click.option("--storage", type=int, default=3, show_default=True, help="storage nodes to start")
@click.option("--brokers", type=int, default=1, show_default=True)
@click.option("--rate", type=float, default=40.0, show_default=True, help="messages per second")
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("chaos-report"), show_default=True
)
def run_command(
    model: str, faults: tuple[str, ...], duration: float, interval: float, hold: float,
    drain: float, seed: int, endpoint: str, nameserver: str, storage: int, brokers: int,
    rate: float, out: Path,
) -> None:  # fmt: skip
    """Run one model under the given faults and report (exit 1 unless nothing was lost)."""
    options = RunOptions(
        model, faults, duration, interval, hold, min(3.0, interval / 2), drain, seed, endpoint,
        nameserver, storage, brokers, rate_per_s=rate, out_dir=out,
    )  # fmt: skip
    console = Console()
    try:
        verdict = run_and_report(options, console)
    except (ScheduleError, RunFailed, ClusterFailed) as exc:
        console.print(f"rip5 chaos: {exc}")
        raise SystemExit(EXIT_USAGE if isinstance(exc, ScheduleError) else EXIT_FAILED) from None
    raise SystemExit(0 if verdict.ok else EXIT_FAILED)
