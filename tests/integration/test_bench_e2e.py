"""``rip5 bench e2e`` drives a real dev cluster through the broker and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_e2e_publishes_consumes_and_runs_the_official_client(tmp_path: Path) -> None:
    out = tmp_path / "e2e.json"
    args = [
        "--runs", "1", "--seconds", "2", "--warmup", "0.5", "--in-flight", "8", "--batch", "8",
        "--channels", "2", "--official-seconds", "2", "--yardstick", "20000",
        "--idle-seconds", "2",
        "--json", str(out),
    ]  # fmt: skip
    result = _bench_e2e(args, timeout_s=280)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "publish median / yardstick 20,000 msgs/s = " in result.stdout
    cases = json.loads(out.read_text())["cases"]
    for name in ("publish", "receive+ack", "pull", "official client send (1 process)"):
        (run,) = cases[name]["runs"]
        assert run["msgs_per_s"] > 0, (name, run)
        assert run["errors"] == 0, (name, run)
        assert run["server_cpu_pct"] > 0, (name, run)
    assert cases["publish"]["runs"][0]["p99_ms"] >= cases["publish"]["runs"][0]["p50_ms"]
    (idle,) = cases["idle long polls"]["runs"]
    assert idle["errors"] == 0, idle
    assert idle["calls"] >= 8, idle  # every consumer's long poll came back empty at least once
    assert idle["msgs_per_s"] == 0, idle
    assert idle["server_cpu_pct"] > 0, idle


def test_queues_are_refused_against_a_running_broker() -> None:
    # The bench creates its topics only in its own cluster: against --endpoint a
    # --queues would be silently ignored (rip5 dev auto-creates topics with 8).
    result = _bench_e2e(["--endpoint", "127.0.0.1:1", "--queues", "16"], timeout_s=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--queues sets up the bench's own cluster" in result.stderr


def _bench_e2e(args: list[str], *, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "e2e", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
