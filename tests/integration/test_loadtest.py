"""``rip5 loadtest``: headless Locust scenarios speaking RocketMQ gRPC v2 to real brokers."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.report import parse_failures, parse_stats
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

RIP5 = [sys.executable, "-m", "rip5"]


@pytest.fixture
def memory_broker(tmp_path: Path) -> Iterator[str]:
    """A broker process over the in-memory ports (topics ``normal`` and ``fifo``)."""
    port_file = tmp_path / "broker.port"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.contract.memory_broker", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(port_file.exists, timeout_s=30, what="the memory broker to serve")
        yield f"127.0.0.1:{port_file.read_text()}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _loadtest(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RIP5, "loadtest", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _stats(out: Path, scenario: str) -> dict[str, tuple[int, int]]:
    rows = parse_stats((out / f"{scenario}_stats.csv").read_text())
    return {row.name: (row.requests, row.failures) for row in rows}


def test_smoke_scenario_against_a_dev_cluster(tmp_path: Path) -> None:
    # rip5 loadtest starts rip5 dev (nameserver, 3 storage nodes, broker) on free ports,
    # creates the topics and group, and runs every user class headless.
    out = tmp_path / "out"
    result = _loadtest("--scenario", "smoke", "--run-time", "8", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dev cluster ready" in result.stdout
    assert f"report: {out / 'smoke.html'}" in result.stdout
    assert (out / "smoke.html").stat().st_size > 1000
    stats = _stats(out, "smoke")
    for name in ("SendMessage normal", "SendMessage fifo", "SendMessage batch 8", "ReceiveMessage"):
        requests, failures = stats[name]
        assert requests > 0, (name, stats)
        assert failures == 0, (name, stats)
    assert stats["Aggregated"][1] == 0, stats
    assert all(failures == 0 for _, failures in stats.values()), stats
    assert "rip5 dev | stopped" in (out / "dev.log").read_text()


def test_distributed_smoke_against_a_broker_process(memory_broker: str, tmp_path: Path) -> None:
    # A master and two worker processes on this host; every user class of the smoke scenario.
    out = tmp_path / "out"
    result = _loadtest(
        "--endpoint", memory_broker, "--scenario", "smoke", "--run-time", "6",
        "--workers", "2", "--topic", "normal", "--fifo-topic", "fifo", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"report: {out / 'smoke.html'}" in result.stdout
    assert (out / "smoke.html").stat().st_size > 1000
    log = (out / "locust.log").read_text()
    assert "2 workers connected" in log
    stats = _stats(out, "smoke")
    for name in (
        "SendMessage normal", "SendMessage fifo", "SendMessage batch 8", "ReceiveMessage",
        "AckMessage", "Aggregated",
    ):  # fmt: skip
        requests, failures = stats[name]
        assert requests > 0, (name, stats)
        assert failures == 0, (name, stats)


def test_failures_get_short_names(tmp_path: Path) -> None:
    # Nothing listens on a port we just closed: every call fails as UNAVAILABLE.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "out"
    result = _loadtest(
        "--endpoint", f"127.0.0.1:{port}", "--scenario", "produce", "--users", "2",
        "--run-time", "3", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    failures = parse_failures((out / "produce_failures.csv").read_text())
    assert failures
    assert set(failures) <= {
        "QueryRoute: CallFailed(UNAVAILABLE)",
        "SendMessage normal: CallFailed(UNAVAILABLE)",
    }, failures


def test_bad_endpoint_is_a_usage_error(tmp_path: Path) -> None:
    result = _loadtest("--endpoint", "nowhere", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "is not host:port" in result.stderr
