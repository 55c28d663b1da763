"""``rip5 bench raft`` runs three real raft host processes and prints its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_raft_measures_throughput_latency_and_failover(tmp_path: Path) -> None:
    args = [
        "--groups", "4", "--runs", "1", "--seconds", "1", "--warmup", "0.5",
        "--in-flight", "4", "--batch", "8", "--failovers", "1", "--failover-groups", "4",
        "--segment-mb", "4", "--dir", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "raft", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = [ln for ln in result.stdout.splitlines() if ln.startswith("groups=4: entries/s ")]
    assert len(summary) == 1, result.stdout
    entries_per_s = float(summary[0].split()[2].replace(",", ""))
    assert entries_per_s > 0
    failover = [ln for ln in result.stdout.splitlines() if ln.startswith("failover after SIGKILL")]
    assert len(failover) == 1, result.stdout
    assert float(failover[0].split("ms ")[1].split()[0]) > 0
