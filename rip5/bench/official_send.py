"""The official RocketMQ Python client's single-process send rate (``rip5 bench e2e`` runs it).

Usage: ``python -m rip5.bench.official_send ENDPOINT TOPIC SECONDS BODY_BYTES WARMUP_S
[ACCESS_KEY SECRET]``.
Runs in its own interpreter: the client's generated protobuf modules clash
with ours in one process. One Producer sends ``BODY_BYTES`` messages one
after another (synchronous ``send``, as an application would) for
``WARMUP_S`` then ``SECONDS``; the last stdout line is one JSON object with
the measured ``msgs_per_s``, ``p50_ms``, ``p99_ms``, ``errors`` and the
process's CPU seconds over the measured window. :func:`run` is how ``rip5 bench
e2e`` starts it and reads that line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from rip5.stats import percentile


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(
    args: argparse.Namespace, endpoint: str, credentials: tuple[str, str] | None = None
) -> dict[str, float]:
    """One run of the official client's producer in its own process (signing as
    ``credentials``, an ACL user, when given); its JSON line."""
    command = [
        sys.executable, "-m", "rip5.bench.official_send", endpoint, args.topic,
        f"{args.official_seconds:g}", str(args.message_bytes), f"{args.warmup:g}",
        *(credentials or ()),
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=args.official_seconds + args.warmup + 120,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(
            f"the official client failed (exit {result.returncode}): {result.stderr[-2000:]}"
        )
    values: dict[str, float] = json.loads(lines[-1])
    return values


def main(argv: list[str]) -> int:
    """Send for the given time; print the JSON line."""
    endpoint, topic, seconds_text, body_text, warmup_text, *credentials = argv
    seconds, warmup_s, body_bytes = float(seconds_text), float(warmup_text), int(body_text)
    from rocketmq import ClientConfiguration, Credentials, Message, Producer  # noqa: PLC0415

    producer = Producer(ClientConfiguration(endpoint, Credentials(*credentials)), (topic,))
    producer.startup()
    body = os.urandom(body_bytes)
    latencies: list[float] = []
    errors = 0
    try:
        started = time.perf_counter()
        measure_from = started + warmup_s
        end = measure_from + seconds
        cpu0 = None
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            if cpu0 is None and now >= measure_from:
                cpu0 = _cpu_s()
            message = Message()
            message.topic = topic
            message.body = body
            try:
                producer.send(message)
            except Exception:  # noqa: BLE001 - any failed send counts; the rate goes on
                errors += 1
                continue
            done = time.perf_counter()
            if now >= measure_from:
                latencies.append((done - now) * 1000)
        cpu_s = _cpu_s() - (cpu0 if cpu0 is not None else _cpu_s())
    finally:
        producer.shutdown()
    print(
        json.dumps(
            {
                "msgs_per_s": len(latencies) / seconds,
                "p50_ms": percentile(latencies, 0.5),
                "p99_ms": percentile(latencies, 0.99),
                "errors": errors,
                "cpu_s": cpu_s,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
