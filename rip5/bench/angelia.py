"""``rip5 bench angelia``: unary and streaming throughput of every transport x codec pair.

For each pair a server runs in its own process on 127.0.0.1 (the memory
transport runs in-process: it has no process boundary by design). The client
(uvloop) warms up, then measures, in each of several runs:

- unary: ``in_flight`` concurrent callers send 1 KiB requests and get 1 KiB
  responses over one connection: calls/s and the p99 latency;
- streaming: one server-streaming call pushing 1 KiB messages: messages/s.

It reports the median and [min-max] over the runs and the CPU (percent of
one core) of the client and the server during the unary runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import os
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import uvloop

from angelia_rpc import (
    AngeliaError,
    CallContext,
    Channel,
    RpcConfig,
    Server,
    ServerStream,
    Service,
    Unary,
)
from angelia_rpc.config import CODEC_NAMES, TRANSPORT_NAMES
from angelia_rpc.transport.memory import MemoryNetwork
from rip5.bench import harness
from rip5.supervisor import DIE_WITH_PARENT

METRICS = (
    harness.Metric("calls_per_s", "unary calls/s"),
    harness.Metric("p99_ms", "unary p99 ms", ".2f"),
    harness.Metric("stream_msgs_per_s", "streamed msgs/s"),
)


@dataclass(frozen=True, slots=True)
class Blob:
    """A request or response carrying a body."""

    seq: int
    body: bytes


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """Ask for ``count`` messages of ``body_bytes`` each."""

    count: int
    body_bytes: int


class Bench(Service, name="bench"):
    """The benchmark's service."""

    echo = Unary(Blob, Blob)
    stream = ServerStream(StreamRequest, Blob)


class BenchImpl:
    """Echoes; streams as fast as flow control allows."""

    async def echo(self, request: Blob, context: CallContext) -> Blob:
        """The request back."""
        return request

    async def stream(self, request: StreamRequest, context: CallContext) -> AsyncIterator[Blob]:
        """``count`` messages."""
        body = b"s" * request.body_bytes
        for seq in range(request.count):
            yield Blob(seq, body)


@dataclass
class RunResult:
    """One measured run of one pair."""

    calls_per_s: float
    p99_ms: float
    stream_msgs_per_s: float
    client_cpu: float
    server_cpu: float
    machine_busy: float

    @property
    def client_us_per_call(self) -> float:
        """Client CPU per unary call, in microseconds."""
        return self.client_cpu / 100 / self.calls_per_s * 1e6

    @property
    def server_us_per_call(self) -> float:
        """Server CPU per unary call, in microseconds."""
        return self.server_cpu / 100 / self.calls_per_s * 1e6


def _cpu_seconds_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


async def wait_quiet(busy_max: float = 0.5, wait_s: float = 20.0) -> float:
    """Wait (up to ``wait_s``) for a second in which the machine is at most ``busy_max`` busy."""
    deadline = time.monotonic() + wait_s
    if wait_s <= 0:
        return 0.0
    while True:
        busy0, total0 = _machine_cpu()
        await asyncio.sleep(1.0)
        busy1, total1 = _machine_cpu()
        busy = (busy1 - busy0) / max(1, total1 - total0)
        if busy <= busy_max or time.monotonic() >= deadline:
            return busy


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _unary_load(
    bench: Bench, seconds: float, in_flight: int, body: bytes
) -> tuple[int, list[float]]:
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []

    async def caller() -> int:
        calls = 0
        clock = time.perf_counter
        echo = bench.echo
        request = Blob(0, body)
        while True:
            start = clock()
            if start >= stop_at:
                return calls
            await echo(request, timeout_ms=10_000)
            latencies.append(clock() - start)
            calls += 1

    counts = await asyncio.gather(*(caller() for _ in range(in_flight)))
    return sum(counts), latencies


async def _stream_load(bench: Bench, seconds: float, body_bytes: int) -> float:
    # Stream in bounded chunks until the time is up.
    received = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        async for _ in bench.stream(StreamRequest(2_000, body_bytes), timeout_ms=60_000):
            received += 1
    return received / (time.perf_counter() - start)


async def measure_pair(
    transport: str,
    codec: str,
    *,
    seconds: float,
    runs: int,
    in_flight: int,
    body_bytes: int,
    quiet_wait_s: float,
    out: Callable[[str], None],
) -> list[RunResult]:
    """Start a server for the pair, warm up, and measure ``runs`` runs."""
    config = RpcConfig(transport=transport, codec=codec)
    server_process: asyncio.subprocess.Process | None = None
    server: Server | None = None
    network_transport = None
    if transport == "memory":
        network = MemoryNetwork(seed=1)
        server = Server([Bench.bind(BenchImpl())], config, transport=network.transport("server"))
        address = await server.start("server")
        network_transport = network.transport("client")
        server_pid = os.getpid()
    else:
        server_process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rip5.bench.angelia",
            "--serve",
            transport,
            codec,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=DIE_WITH_PARENT,  # a killed bench leaves no server running
        )
        assert server_process.stdout is not None
        address = (await server_process.stdout.readline()).decode().strip()
        if not address:
            raise RuntimeError(f"the {transport}/{codec} bench server did not start")
        server_pid = server_process.pid
    channel = Channel(address, config, transport=network_transport)
    bench = Bench(channel)
    body = b"b" * body_bytes
    results: list[RunResult] = []
    try:
        await _unary_load(bench, min(1.0, seconds), in_flight, body)  # warm up
        for _ in range(runs):
            await wait_quiet(wait_s=quiet_wait_s)
            machine0 = _machine_cpu()
            client_cpu0, server_cpu0 = _own_cpu_seconds(), _cpu_seconds_of(server_pid)
            wall0 = time.perf_counter()
            calls, latencies = await _unary_load(bench, seconds, in_flight, body)
            wall = time.perf_counter() - wall0
            client_cpu = (_own_cpu_seconds() - client_cpu0) / wall * 100
            server_cpu = (_cpu_seconds_of(server_pid) - server_cpu0) / wall * 100
            machine1 = _machine_cpu()
            machine_share = (machine1[0] - machine0[0]) / max(1, machine1[1] - machine0[1])
            machine_busy = machine_share * (os.cpu_count() or 1) * 100
            if server is not None:  # in-process: one process did both
                server_cpu = 0.0
            latencies.sort()
            p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else 0.0
            stream_rate = await _stream_load(bench, seconds / 2, body_bytes)
            result = RunResult(calls / wall, p99, stream_rate, client_cpu, server_cpu, machine_busy)
            out(
                f"  {transport:6} {codec:7} run: {result.calls_per_s:9,.0f} calls/s "
                f"p99 {result.p99_ms:6.2f} ms  stream {result.stream_msgs_per_s:9,.0f} msg/s  "
                f"cpu client {client_cpu:3.0f}% server {server_cpu:3.0f}% "
                f"machine {machine_busy:3.0f}%"
            )
            results.append(result)
    finally:
        await channel.close()
        if server is not None:
            await server.stop()
        if server_process is not None:
            server_process.terminate()
            await server_process.wait()
    return results


def _median_range(values: list[float], fmt: str) -> str:
    return (
        f"{format(statistics.median(values), fmt)} "
        f"[{format(min(values), fmt)}-{format(max(values), fmt)}]"
    )


def table(rows: list[tuple[str, str, list[RunResult]]]) -> str:
    """The Markdown table of all pairs."""
    lines = [
        "| transport | codec | unary calls/s | unary p99 ms | streamed msgs/s "
        "| CPU client / server % | CPU µs per call client / server | machine busy % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for transport, codec, results in rows:
        lines.append(
            f"| {transport} | {codec} "
            f"| {_median_range([r.calls_per_s for r in results], ',.0f')} "
            f"| {_median_range([r.p99_ms for r in results], '.2f')} "
            f"| {_median_range([r.stream_msgs_per_s for r in results], ',.0f')} "
            f"| {statistics.median([r.client_cpu for r in results]):.0f} / "
            f"{statistics.median([r.server_cpu for r in results]):.0f} "
            f"| {statistics.median([r.client_us_per_call for r in results]):.0f} / "
            f"{statistics.median([r.server_us_per_call for r in results]):.0f} "
            f"| {statistics.median([r.machine_busy for r in results]):.0f} |"
        )
    return "\n".join(lines)


async def run_bench(
    args: argparse.Namespace,
    out: Callable[[str], None],
    report: harness.BenchReport | None = None,
) -> str:
    """Measure every requested pair; the Markdown report (runs also go to ``report``)."""
    pairs = [(t, c) for t in args.transports.split(",") for c in args.codecs.split(",") if t and c]
    rows = []
    failures = []
    for transport, codec in pairs:
        out(f"{transport} x {codec} ...")
        if report is not None:
            report.stage(f"{transport} x {codec}")
        try:
            results = await measure_pair(
                transport,
                codec,
                seconds=args.seconds,
                runs=args.runs,
                in_flight=args.in_flight,
                body_bytes=args.body_bytes,
                quiet_wait_s=args.quiet_wait_s,
                out=out,
            )
        except (AngeliaError, OSError, RuntimeError) as exc:
            out(f"  {transport} x {codec} FAILED: {exc}")
            failures.append(f"{transport} x {codec}: {exc}")
            continue
        rows.append((transport, codec, results))
        for result in results:
            if report is None:
                break
            report.record(
                f"{transport} x {codec}",
                {
                    "calls_per_s": result.calls_per_s,
                    "p99_ms": result.p99_ms,
                    "stream_msgs_per_s": result.stream_msgs_per_s,
                },
                harness.CpuShare(result.client_cpu, result.server_cpu, result.machine_busy),
            )
    command = "rip5 bench angelia " + " ".join(args.argv)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"Command: `{command.strip()}`; {now}; {os.cpu_count()} cores; Python "
        f"{sys.version.split()[0]}, uvloop. {args.in_flight} calls in flight on one connection, "
        f"{args.body_bytes}-byte bodies each way; {args.runs} runs of {args.seconds:g} s per pair "
        f"(streaming: {args.seconds / 2:g} s); median [min-max]. Server in its own process "
        "on 127.0.0.1 (memory: in-process, client and server CPU together). "
        "CPU % is of one core (200 % = the whole machine); 'machine busy' includes "
        "other tenants' work, so rows with machine busy well above client + server were "
        "contended: read their rates as lower bounds and the CPU µs per call as the cost."
    )
    failed = "".join(f"\nFAILED {failure}\n" for failure in failures)
    return header + "\n\n" + table(rows) + "\n" + failed


def parse(argv: list[str]) -> argparse.Namespace:
    """The bench's options."""
    parser = argparse.ArgumentParser(prog="rip5 bench angelia", description=__doc__.split("\n")[0])
    parser.add_argument("--transports", default=",".join(TRANSPORT_NAMES))
    parser.add_argument("--codecs", default=",".join(CODEC_NAMES))
    parser.add_argument("--seconds", type=float, default=2.0, help="per unary run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--write", metavar="FILE", help="also write the report into FILE")
    parser.add_argument(
        "--quiet-wait-s",
        type=float,
        default=20.0,
        help="before each run, wait up to this long for the machine to be at most half busy",
    )
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    args.argv = argv
    for name in args.transports.split(","):
        if name not in TRANSPORT_NAMES:
            parser.error(f"unknown transport {name!r}: use {', '.join(TRANSPORT_NAMES)}")
    for name in args.codecs.split(","):
        if name not in CODEC_NAMES:
            parser.error(f"unknown codec {name!r}: use {', '.join(CODEC_NAMES)}")
    if args.runs < 1 or args.seconds <= 0 or args.in_flight < 1:
        parser.error("--runs, --seconds and --in-flight must be positive")
    return args


def main(argv: list[str]) -> int:
    """Run the bench; print the table (and write it with --write)."""
    args = parse(argv)
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress", "argv")}
    runs = harness.BenchReport(
        "angelia",
        argv,
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    pairs = len(args.transports.split(",")) * len(args.codecs.split(","))
    with runs.progress(pairs * args.runs):
        report = uvloop.run(run_bench(args, runs.say, runs))
    runs.finish()
    print()
    print(report)
    if "\nFAILED " in report:
        return 1
    if args.write:
        path = Path(args.write)
        text = path.read_text() if path.exists() else ""
        marker = "<!-- bench:angelia -->"
        if marker in text:
            before, _, rest = text.partition(marker)
            _, _, after = rest.partition(marker)
            text = f"{before}{marker}\n{report}{marker}{after}"
        else:
            text = f"{text}\n{marker}\n{report}{marker}\n"
        path.write_text(text)
    return 0


async def _serve(transport: str, codec: str) -> None:
    config = dataclasses.replace(RpcConfig(), transport=transport, codec=codec)
    server = Server([Bench.bind(BenchImpl())], config)
    address = await server.start("127.0.0.1:0")
    print(address, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        uvloop.run(_serve(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(main(sys.argv[1:]))
