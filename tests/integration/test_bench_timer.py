"""``rip5 bench timer`` runs three real storage processes and measures timed messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_timer_measures_lateness_and_throughput(tmp_path: Path) -> None:
    args = [
        "--messages", "600", "--spread", "1", "--lead", "4", "--groups", "4", "--queues", "6",
        "--batch", "50", "--in-flight", "4", "--runs", "1", "--dir", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "timer", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    (run,) = [ln for ln in lines if ln.startswith("  run 1:")]
    assert "pending at first due: 600" in run, run
    assert "early 0;" in run, run
    (summary,) = [ln for ln in lines if ln.startswith("lateness ms p50 ")]
    fields = summary.split()
    p50_ms = float(fields[3])
    assert p50_ms >= 0
    assert float(fields[fields.index("timers/s") + 1].replace(",", "")) > 0
