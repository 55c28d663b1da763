"""The one harness behind every ``rip5 bench <target>``.

A target measures *cases* (a group count, a transport x codec pair, a phase)
in several *runs* each, after its own warm-up. For each run it records the
figures it measured and, through :class:`CpuMeter`, the CPU of the client
(this process) and of the server processes separately, from /proc. The
harness then prints the table (median [min-max] per figure), and with
``--json FILE`` writes every run and the summary as JSON. While it runs, a
progress bar (rich) counts the runs; lines a target prints appear above it.

A phase's figures are a :class:`PhaseResult` (msgs/s, p50/p99 of a call,
calls, failures by name); :func:`closed_loop` measures one for a load of
concurrent workers each making calls one after the other (the publish loop of
``rip5 bench e2e``, ``remoting`` and ``connector``), and
:meth:`BenchReport.measure` records it with the CPU of its window.

Every report states the command, the UTC start time, the core count and the
load average at the start and the end: the machine may be shared, so a
figure without its load is not comparable.

SHELL (reads /proc and the clock).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rip5 import stats

_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every target shares: ``--json FILE`` and ``--no-progress``."""
    parser.add_argument("--json", metavar="FILE", default=None, help="also write runs as JSON")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (plain lines only)"
    )


def cpu_seconds_of(pid: int) -> float | None:
    """User + system CPU seconds of a whole process (all threads), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S


def rss_bytes_of(pid: int) -> int | None:
    """Resident set size of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def pids_of(processes: Mapping[Any, Any]) -> Callable[[], list[int]]:
    """The pids of a live mapping of process handles (anything with ``.pid``)."""
    return lambda: [process.pid for process in processes.values()]


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


@dataclass(frozen=True)
class CpuShare:
    """CPU over a window, in percent of one core (100 = one core busy)."""

    client_pct: float
    server_pct: float
    machine_pct: float

    def as_dict(self) -> dict[str, float]:
        """The three figures by name."""
        return {
            "client_cpu_pct": self.client_pct,
            "server_cpu_pct": self.server_pct,
            "machine_cpu_pct": self.machine_pct,
        }


class CpuMeter:
    """Client (this process) and server CPU over one measured window.

    ``server_pids`` is asked at the start and at the end of the window; a
    server counts for the CPU it used between the two readings it was alive
    for (a process restarted in the window counts from its start).
    """

    def __init__(self, server_pids: Callable[[], Iterable[int]]) -> None:
        """Nothing is read until :meth:`start`."""
        self._server_pids = server_pids
        self._wall0 = 0.0
        self._client0 = 0.0
        self._servers0: dict[int, float] = {}
        self._machine0 = (0, 0)

    def start(self) -> None:
        """Read every counter at the window's start."""
        self._wall0 = time.perf_counter()
        self._client0 = _own_cpu_seconds()
        self._servers0 = {}
        for pid in self._server_pids():
            seconds = cpu_seconds_of(pid)
            if seconds is not None:
                self._servers0[pid] = seconds
        self._machine0 = _machine_jiffies()

    def stop(self) -> CpuShare:
        """The CPU shares since :meth:`start`."""
        wall = max(1e-9, time.perf_counter() - self._wall0)
        client = _own_cpu_seconds() - self._client0
        server = 0.0
        for pid in self._server_pids():
            seconds = cpu_seconds_of(pid)
            if seconds is not None:
                server += seconds - self._servers0.get(pid, 0.0)
        busy1, total1 = _machine_jiffies()
        busy = (busy1 - self._machine0[0]) / max(1, total1 - self._machine0[1])
        return CpuShare(
            client / wall * 100, server / wall * 100, busy * (os.cpu_count() or 1) * 100
        )

    @contextlib.contextmanager
    def window(self) -> Iterator[list[CpuShare]]:
        """``with meter.window() as share:`` -> ``share[0]`` once the block ends."""
        result: list[CpuShare] = []
        self.start()
        try:
            yield result
        finally:
            result.append(self.stop())


@dataclass(frozen=True)
class Metric:
    """A figure a target reports: its key in a run's values, a label and a format."""

    key: str
    label: str
    fmt: str = ",.0f"


CPU_METRICS = (
    Metric("client_cpu_pct", "client CPU %", ".0f"),
    Metric("server_cpu_pct", "server CPU %", ".0f"),
    Metric("machine_cpu_pct", "machine CPU %", ".0f"),
)


@dataclass
class PhaseResult:
    """One measured phase."""

    msgs_per_s: float
    p50_ms: float
    p99_ms: float
    calls: int
    errors: int
    error_names: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, msgs_per_s: float, latencies: list[float], calls: int, error_names: dict[str, int]
    ) -> PhaseResult:
        """A phase's figures from its rate, its calls' latencies (ms), how many calls
        it counts and its failures by name."""
        return cls(
            msgs_per_s,
            stats.percentile(latencies, 0.5),
            stats.percentile(latencies, 0.99),
            calls,
            sum(error_names.values()),
            error_names,
        )

    def line(self, run: int, case: str, calls: str) -> str:
        """The run's line: rate, p50/p99, how many ``calls`` (e.g. "calls of 32") and
        the failures by name."""
        return (
            f"  run {run + 1}: {case} {self.msgs_per_s:,.0f} msgs/s "
            f"p50 {self.p50_ms:.1f} ms p99 {self.p99_ms:.1f} ms "
            f"({self.calls} {calls}; errors {self.error_names or 0})"
        )

    def values(self) -> dict[str, float]:
        """The figures by metric key."""
        return {
            "msgs_per_s": self.msgs_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "calls": self.calls,
            "errors": self.errors,
        }


PHASE_METRICS = (
    Metric("msgs_per_s", "msgs/s"),
    Metric("p50_ms", "p50 ms", ".1f"),
    Metric("p99_ms", "p99 ms", ".1f"),
    Metric("errors", "errors"),
    Metric("calls", "calls"),
)
"""The figures of a :class:`PhaseResult`, as a report shows them."""


Call = Callable[[dict[str, int]], Awaitable[bool]]
"""One call of a closed-loop load: True when it succeeded; on a failure it counts
the failure by name in the dict it is given (and backs off, if it should) and
returns False."""


async def closed_loop(
    call_of: Callable[[int], Call],
    *,
    workers: int,
    per_call: int,
    seconds: float,
    warmup_s: float,
) -> tuple[PhaseResult, int]:
    """``workers`` concurrent loops, each making the calls of its ``call_of(index)`` one
    after the other, for ``warmup_s`` and then ``seconds``.

    A successful call counts in the measured window when it started after the
    warm-up and ended before the end: the rate is ``per_call`` messages for each
    of those over ``seconds``, p50/p99 their latencies. Also returns the messages
    of every successful call, warm-up included (what the load stored).
    """
    clock = time.perf_counter
    measure_from = clock() + warmup_s
    end = measure_from + seconds
    latencies: list[float] = []
    measured = 0
    stored = 0
    error_names: dict[str, int] = {}

    async def worker(index: int) -> None:
        nonlocal measured, stored
        call = call_of(index)
        while (sent := clock()) < end:
            if not await call(error_names):
                continue
            done = clock()
            stored += per_call
            if sent >= measure_from and done <= end:
                latencies.append((done - sent) * 1000)
                measured += per_call

    await asyncio.gather(*(worker(i) for i in range(workers)))
    return PhaseResult.of(measured / seconds, latencies, len(latencies), error_names), stored


@dataclass
class _Case:
    runs: list[dict[str, float]] = field(default_factory=list)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max (NaN-free values only; empty -> {})."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return {}
    return {"median": statistics.median(kept), "min": min(kept), "max": max(kept)}


def median_range(values: Sequence[float], fmt: str) -> str:
    """``median [min-max]`` formatted, or ``n/a``."""
    summary = summarize(values)
    if not summary:
        return "n/a"
    return (
        f"{format(summary['median'], fmt)} "
        f"[{format(summary['min'], fmt)}-{format(summary['max'], fmt)}]"
    )


class BenchReport:
    """The runs of one ``rip5 bench <target>`` invocation, and how they are shown.

    Usage::

        report = BenchReport("nameserver", argv, metrics, params=..., json_path=...)
        with report.progress(total_runs):
            ...
            report.record("writes", {"ops_per_s": ...}, cpu_share)
        report.finish()
    """

    def __init__(
        self,
        target: str,
        argv: Sequence[str],
        metrics: Sequence[Metric],
        *,
        params: dict[str, Any] | None = None,
        json_path: str | None = None,
        show_progress: bool = True,
        console: Console | None = None,
    ) -> None:
        """Note the start time and load; nothing is printed yet."""
        self.target = target
        self.command = " ".join(["rip5", "bench", target, *argv])
        self.metrics = list(metrics)
        self.params = dict(params or {})
        self.json_path = json_path
        self.show_progress = show_progress
        self.console = console or Console(highlight=False)
        self.started = datetime.datetime.now(datetime.UTC)
        self.load_start = load_average()
        self.cases: dict[str, _Case] = {}
        self.notes: list[str] = []
        self._progress: Progress | None = None
        self._task: Any = None

    # -- while running -----------------------------------------------------

    def header(self) -> str:
        """One line: command, time, cores, load."""
        load = " ".join(f"{v:.2f}" for v in self.load_start)
        return (
            f"# {self.command}  {self.started:%Y-%m-%d %H:%M} UTC  cores={os.cpu_count()}  "
            f"load average {load}  Python {platform.python_version()}"
        )

    def say(self, line: str) -> None:
        """Print a line above the progress bar."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    @contextlib.contextmanager
    def progress(self, total_runs: int) -> Iterator[None]:
        """Show a bar counting recorded runs (``total_runs`` expected)."""
        self.say(self.header())
        if not self.show_progress or not self.console.is_terminal:
            yield
            return
        bar = Progress(
            TextColumn(f"bench {self.target}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        with bar:
            self._progress = bar
            self._task = bar.add_task("", total=total_runs)
            try:
                yield
            finally:
                self._progress = None

    def stage(self, description: str) -> None:
        """What the bar says is running now."""
        if self._progress is not None:
            self._progress.update(self._task, description=description)

    def record(self, case: str, values: dict[str, float], cpu: CpuShare | None = None) -> None:
        """One measured run of ``case``; ``cpu`` adds the client/server CPU figures."""
        run = dict(values)
        if cpu is not None:
            run.update(cpu.as_dict())
        self.cases.setdefault(case, _Case()).runs.append(run)
        if self._progress is not None:
            self._progress.advance(self._task)

    async def measure(
        self,
        run: int,
        case: str,
        meter: CpuMeter,
        phase: Callable[[], Awaitable[tuple[PhaseResult, T]]],
    ) -> tuple[PhaseResult, T]:
        """Run ``phase`` as run ``run`` (from 0) of ``case``: the bar names it, and its
        figures are recorded with the CPU shares of its window; what it returned."""
        self.stage(f"run {run + 1}: {case}")
        meter.start()
        result, extra = await phase()
        self.record(case, result.values(), meter.stop())
        return result, extra

    def note(self, text: str) -> None:
        """A remark printed under the table and kept in the JSON."""
        self.notes.append(text)

    # -- at the end ----------------------------------------------------------

    def _columns(self) -> list[Metric]:
        keys = {k for case in self.cases.values() for run in case.runs for k in run}
        return [m for m in [*self.metrics, *CPU_METRICS] if m.key in keys]

    def median(self, case: str, key: str) -> float:
        """The median of figure ``key`` over the runs of ``case``."""
        return summarize([run[key] for run in self.cases[case].runs])["median"]

    def errors(self) -> float:
        """The failed calls of every run of every case (the exit status is 1 if any)."""
        return sum(run.get("errors", 0) for case in self.cases.values() for run in case.runs)

    def as_json(self) -> dict[str, Any]:
        """Everything recorded, with the per-figure summaries."""
        return {
            "target": self.target,
            "command": self.command,
            "started_utc": self.started.isoformat(timespec="seconds"),
            "cores": os.cpu_count(),
            "load_average_start": [round(v, 2) for v in self.load_start],
            "load_average_end": [round(v, 2) for v in load_average()],
            "python": platform.python_version(),
            "params": self.params,
            "cases": {
                name: {
                    "runs": case.runs,
                    "summary": {
                        m.key: summarize([run[m.key] for run in case.runs if m.key in run])
                        for m in self._columns()
                        if any(m.key in run for run in case.runs)
                    },
                }
                for name, case in self.cases.items()
            },
            "notes": self.notes,
        }

    def tables(self) -> list[Table]:
        """Median [min-max] of every figure, one row per case; cases that report
        the same figures share a table."""
        shapes: dict[tuple[str, ...], list[str]] = {}
        for name, case in self.cases.items():
            keys = {k for run in case.runs for k in run}
            shape = tuple(m.key for m in self._columns() if m.key in keys)
            shapes.setdefault(shape, []).append(name)
        tables = []
        by_key = {m.key: m for m in self._columns()}
        for shape, names in shapes.items():
            table = Table(title=f"rip5 bench {self.target}: median \\[min-max] of runs")
            table.add_column("case")
            table.add_column("runs", justify="right")
            for key in shape:
                table.add_column(by_key[key].label, justify="right")
            for name in names:
                runs = self.cases[name].runs
                cells = [
                    median_range([run[key] for run in runs if key in run], by_key[key].fmt)
                    for key in shape
                ]
                table.add_row(name, str(len(runs)), *cells)
            tables.append(table)
        return tables

    def finish(self) -> dict[str, Any]:
        """Print the table and notes, write the JSON if asked; the JSON document."""
        document = self.as_json()
        wide = Console(highlight=False, width=max(self.console.width, 160))
        for table in self.tables():
            wide.print(table)
        load = " ".join(f"{v:.2f}" for v in document["load_average_end"])
        print(f"load average at the end: {load}")
        for text in self.notes:
            print(f"note: {text}")
        if self.json_path:
            path = Path(self.json_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(document, indent=2) + "\n")
            print(f"JSON: {path}")
        sys.stdout.flush()
        return document
