"""The publish load options shared by ``rip5 bench remoting`` and ``rip5 bench
connector`` (runs, windows, concurrency, batch and message size, connections, the
topic and its queues), checked, the report they are measured into, and the publish
phase those options describe (``rip5 bench e2e``'s too)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from rip5.bench import harness


class Publisher(Protocol):
    """A protocol's load generator (``rip5 bench e2e``'s gRPC ``Generator``,
    ``rip5 bench remoting``'s ``RemotingPublisher``)."""

    async def publish(
        self, *, in_flight: int, batch: int, body: bytes, seconds: float, warmup_s: float
    ) -> tuple[harness.PhaseResult, int]:
        """Sends for ``warmup_s`` and then ``seconds``: the measured phase, and how many
        messages were stored."""
        ...


def phase_of(
    publisher: Publisher, args: argparse.Namespace, body: bytes
) -> Callable[[], Awaitable[tuple[harness.PhaseResult, int]]]:
    """The publish phase of ``publisher`` with the load options ``args`` (``in_flight``,
    ``batch``, ``seconds``, ``warmup``) and messages of ``body``, for
    :meth:`harness.BenchReport.measure`."""
    return lambda: publisher.publish(
        in_flight=args.in_flight,
        batch=args.batch,
        body=body,
        seconds=args.seconds,
        warmup_s=args.warmup,
    )


def parser_of(
    name: str, description: str | None, *, runs: int, topic: str, queues: int
) -> argparse.ArgumentParser:
    """The argument parser of ``rip5 bench NAME`` with the publish load options."""
    parser = argparse.ArgumentParser(prog=f"rip5 bench {name}", description=description)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per case")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per case")
    parser.add_argument("--in-flight", type=int, default=64, help="concurrent sends")
    parser.add_argument("--batch", type=int, default=32, help="messages per send")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument("--channels", type=int, default=4, help="connections to a broker")
    parser.add_argument("--queues", type=int, default=queues, help="queues of the topic")
    parser.add_argument("--topic", default=topic, help="the NORMAL topic (created)")
    harness.add_arguments(parser)
    return parser


def report_of(
    name: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, harness.BenchReport]:
    """The parsed and checked options (the parser exits on bad ones) and the report."""
    args = parser.parse_args(argv)
    for option in ("runs", "in_flight", "batch", "message_bytes", "channels", "queues"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if args.seconds <= 0 or args.warmup < 0:
        parser.error("--seconds must be positive and --warmup not negative")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        name,
        list(argv or []),
        harness.PHASE_METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    return args, report
