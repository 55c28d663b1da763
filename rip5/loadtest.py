"""``rip5 loadtest``: run a named Locust scenario headless against a cluster.

Without ``--endpoint`` it starts a dev cluster first (``rip5 dev`` as a child
process, every port chosen free on 127.0.0.1, data in a temp folder removed
afterwards) and creates the scenario's topics and consumer group through its
nameserver; with ``--endpoint host:port`` it uses a running broker (its
topics and group must exist, or the broker must create them on first use).

Then it runs Locust (``loadtest/locustfile.py``) headless, in one process or
as a master with ``--workers N`` worker processes on this host, writes the
CSV files and an HTML report under ``--out``, prints the summary read from
the CSV, and says where the report is.

Exit codes: 0 no failed request; 1 some requests failed, or Locust or the
cluster did not run; 2 bad usage; 69 (EX_UNAVAILABLE) ``rip5 dev`` has no
broker in this build.
"""

from __future__ import annotations

import datetime
import importlib.util
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from loadtest.report import StatsRow, parse_failures, parse_stats
from loadtest.scenarios import SCENARIOS, Scenario
from rip5 import dev_cluster
from rip5.admin import MESSAGE_TYPES
from rip5.dev_cluster import free_port

EXIT_FAILED = 1
EXIT_USAGE = 2


class LoadtestError(Exception):
    """The cluster or Locust could not run; ``exit_code`` says how ``rip5 loadtest`` ends."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        """``message`` names the cause."""
        super().__init__(message)
        self.exit_code = exit_code


def locustfile_path() -> str:
    """Where ``loadtest/locustfile.py`` is (found, not imported: importing it patches grpc)."""
    spec = importlib.util.find_spec("loadtest.locustfile")
    if spec is None or spec.origin is None:
        raise LoadtestError("the loadtest package is not installed")
    return spec.origin


def ensure_resources(nameserver: str, options: dict[str, str]) -> None:
    """Create the scenario's NORMAL and FIFO topics and its consumer group."""
    dev_cluster.ensure_resources(
        nameserver,
        [
            (options.get("topic", "loadtest"), 8, MESSAGE_TYPES["normal"]),
            (options.get("fifo-topic", "loadtest-fifo"), 8, MESSAGE_TYPES["fifo"]),
        ],
        [options.get("group", "loadtest-group")],
    )


@dataclass(frozen=True)
class Plan:
    """One headless Locust run."""

    scenario: Scenario
    endpoint: str
    out_dir: Path
    users: int
    spawn_rate: float
    run_time_s: int
    workers: int
    options: dict[str, str]

    @property
    def prefix(self) -> Path:
        """The CSV prefix (``<prefix>_stats.csv`` and friends)."""
        return self.out_dir / self.scenario.name

    @property
    def html(self) -> Path:
        """The HTML report."""
        return self.out_dir / f"{self.scenario.name}.html"


def locust_commands(plan: Plan, master_port: int = 0) -> list[list[str]]:
    """The Locust process(es): one headless runner, or a master then its workers."""
    base = [sys.executable, "-m", "locust", "-f", locustfile_path()]
    rip5_options = [
        item for key, value in sorted(plan.options.items()) for item in (f"--rip5-{key}", value)
    ]
    headless = [
        "--headless",
        "--users", str(plan.users),
        "--spawn-rate", f"{plan.spawn_rate:g}",
        "--run-time", f"{plan.run_time_s}s",
        "--stop-timeout", "5",
        "--host", plan.endpoint,
        "--csv", str(plan.prefix),
        "--html", str(plan.html),
        "--only-summary",
        *rip5_options,
    ]  # fmt: skip
    classes = list(plan.scenario.user_classes)
    if plan.workers <= 0:
        return [[*base, *headless, *classes]]
    master = [
        *base, *headless,
        "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
        "--expect-workers", str(plan.workers),
        *classes,
    ]  # fmt: skip
    worker = [
        *base,
        "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port),
        *rip5_options, *classes,
    ]  # fmt: skip
    return [master] + [list(worker) for _ in range(plan.workers)]


def run_locust(plan: Plan, log_path: Path) -> int:
    """Run the plan's Locust process(es) to the end; the master's (or runner's) exit code."""
    master_port = free_port() if plan.workers > 0 else 0
    commands = locust_commands(plan, master_port)
    deadline_s = plan.run_time_s + 120
    processes: list[subprocess.Popen[bytes]] = []
    with open(log_path, "ab") as log:
        try:
            for command in commands:
                processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
            try:
                code = processes[0].wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                raise LoadtestError(
                    f"Locust did not finish within {deadline_s} s; see {log_path}"
                ) from None
            for worker in processes[1:]:  # workers quit when the master does
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
            return code
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()


def summary_table(rows: Sequence[StatsRow]) -> Table:
    """The Locust stats as a table."""
    table = Table(title="Locust summary")
    for column in ("request", "requests", "failures", "req/s", "median ms", "p99 ms", "avg bytes"):
        table.add_column(column, justify="left" if column == "request" else "right")
    for row in rows:
        table.add_row(
            row.name,
            f"{row.requests:,}",
            f"{row.failures:,}",
            f"{row.requests_per_s:,.1f}",
            f"{row.median_ms:,.0f}",
            f"{row.p99_ms:,.0f}",
            f"{row.average_bytes:,.0f}",
        )
    return table


def execute(plan: Plan, console: Console) -> int:
    """Run Locust, print the summary and where the report is; the exit code."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    log_path = plan.out_dir / "locust.log"
    mode = f"master + {plan.workers} workers" if plan.workers > 0 else "one process"
    console.print(
        f"rip5 loadtest | scenario {plan.scenario.name}: {', '.join(plan.scenario.user_classes)}; "
        f"{plan.users} users, {plan.run_time_s} s, {mode}, against {plan.endpoint}",
        markup=False,
    )
    code = run_locust(plan, log_path)
    stats_path = Path(f"{plan.prefix}_stats.csv")
    if not stats_path.exists():
        raise LoadtestError(f"Locust wrote no statistics (exit {code}); see {log_path}")
    rows = parse_stats(stats_path.read_text())
    console.print(summary_table(rows))
    failures_path = Path(f"{plan.prefix}_failures.csv")
    failures = parse_failures(failures_path.read_text()) if failures_path.exists() else {}
    for key, count in sorted(failures.items()):
        console.print(f"  failure: {key} x {count:,}", markup=False)
    console.print(f"report: {plan.html}", markup=False)
    console.print(f"CSV: {plan.prefix}_stats.csv (and _stats_history, _failures)", markup=False)
    console.print(f"Locust log: {log_path}", markup=False)
    total = next((r for r in rows if r.name == "Aggregated"), None)
    if code != 0 or total is None or total.failures > 0:
        return EXIT_FAILED
    return 0


@click.command(name="loadtest")
@click.option(
    "--scenario",
    type=click.Choice(sorted(SCENARIOS)),
    default="smoke",
    show_default=True,
    help="the named scenario (loadtest/scenarios.py)",
)
@click.option(
    "--endpoint", default=None, help="a running broker's host:port [default: start rip5 dev]"
)
@click.option("--users", type=click.IntRange(1, 100_000), default=None, help="Locust users")
@click.option("--spawn-rate", type=click.FloatRange(0.01), default=None, help="users started/s")
@click.option("--run-time", "run_time_s", type=click.IntRange(1), default=None, help="seconds")
@click.option(
    "--workers",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="distributed: a master and this many worker processes on this host (0: one process)",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder for the CSV, HTML report and logs [default: loadtest-results/<scenario>-<time>]",
)
@click.option("--body-bytes", type=click.IntRange(1, 4 * 1024 * 1024), default=None)
@click.option("--batch", type=click.IntRange(1, 1024), default=None, help="BatchProducer batch")
@click.option("--rate", type=click.FloatRange(0), default=None, help="requests/s per producer")
@click.option("--topic", default=None, help="the NORMAL topic [default: loadtest]")
@click.option("--fifo-topic", default=None, help="the FIFO topic [default: loadtest-fifo]")
@click.option("--group", default=None, help="the consumer group [default: loadtest-group]")
def loadtest(
    scenario: str,
    endpoint: str | None,
    users: int | None,
    spawn_rate: float | None,
    run_time_s: int | None,
    workers: int,
    out_dir: Path | None,
    body_bytes: int | None,
    batch: int | None,
    rate: float | None,
    topic: str | None,
    fifo_topic: str | None,
    group: str | None,
) -> None:
    """Run a named Locust scenario headless; print the summary and where the report is."""
    chosen = SCENARIOS[scenario]
    options = dict(chosen.options)
    for key, value in (
        ("body-bytes", body_bytes),
        ("batch", batch),
        ("rate", rate),
        ("topic", topic),
        ("fifo-topic", fifo_topic),
        ("group", group),
    ):
        if value is not None:
            options[key] = f"{value:g}" if isinstance(value, float) else str(value)
    if out_dir is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
        out_dir = Path("loadtest-results") / f"{scenario}-{stamp}"
    console = Console(highlight=False, width=120)
    if endpoint is not None:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit():
            click.echo(f"rip5: --endpoint {endpoint!r} is not host:port", err=True)
            sys.exit(EXIT_USAGE)

    def plan_for(target: str) -> Plan:
        return Plan(
            chosen,
            target,
            out_dir,
            users if users is not None else chosen.users,
            spawn_rate if spawn_rate is not None else chosen.spawn_rate,
            run_time_s if run_time_s is not None else chosen.run_time_s,
            workers,
            options,
        )

    try:
        if endpoint is not None:
            code = execute(plan_for(endpoint), console)
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            console.print("rip5 loadtest | starting a dev cluster ...", markup=False)
            started = time.monotonic()
            with dev_cluster.dev_cluster(out_dir / "dev.log") as cluster:
                console.print(
                    f"rip5 loadtest | dev cluster ready in {time.monotonic() - started:.1f} s: "
                    f"broker {cluster.endpoint}, nameserver {cluster.nameserver}",
                    markup=False,
                )
                ensure_resources(cluster.nameserver, options)
                dev_cluster.wait_until_serving(
                    cluster.endpoint,
                    [
                        (options.get("topic", "loadtest"), False),
                        (options.get("fifo-topic", "loadtest-fifo"), True),
                    ],
                )
                code = execute(plan_for(cluster.endpoint), console)
    except (LoadtestError, dev_cluster.ClusterError) as exc:
        click.echo(f"rip5: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code)
