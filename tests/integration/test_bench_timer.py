"""``rip5 bench timer`` runs three real storage processes and measures timed messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_timer_measures_lateness_and_throughput(tmp_path: Path) -> None:
    args = [
        "--messages", "600", "--spread", "1", "--lead", "4", "--groups", "4", "--queues", "6",
        "--batch", "50", "--in-flight", "4", "--runs", "1", "--dir", str(tmp_path),
        "--json", str(tmp_path / "timer.json"), "--no-progress",
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
    document = json.loads((tmp_path / "timer.json").read_text())
    assert document["target"] == "timer"
    assert document["cores"] >= 1
    (values,) = document["cases"]["timers"]["runs"]
    assert values["early"] == 0
    assert 0 <= values["lateness_p50_ms"] <= values["lateness_p99_ms"] <= values["lateness_max_ms"]
    assert values["timers_per_s"] > 0
    assert values["server_cpu_pct"] > 0
