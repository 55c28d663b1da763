"""The bench harness: summaries, CPU windows, JSON and tables."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rip5.bench import harness
from tests.waiting import wait_until


def test_summarize_gives_median_and_range_and_skips_nan() -> None:
    assert harness.summarize([3.0, 1.0, float("nan"), 2.0]) == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
    }
    assert harness.summarize([]) == {}
    assert harness.median_range([1000.0, 3000.0, 2000.0], ",.0f") == "2,000 [1,000-3,000]"
    assert harness.median_range([], ".1f") == "n/a"


def test_cpu_meter_separates_client_and_server_processes() -> None:
    # The server burns CPU in its own process; the client (this process) sleeps.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"]
    )
    try:
        meter = harness.CpuMeter(lambda: [server.pid])
        meter.start()
        # Wait on the server's own CPU counter instead of a clock: 0.3 s of its CPU.
        start = harness.cpu_seconds_of(server.pid)
        assert start is not None
        wait_until(
            lambda: (harness.cpu_seconds_of(server.pid) or 0) - start >= 0.3,
            timeout_s=30,
            what="the server process to use 0.3 s of CPU",
        )
        share = meter.stop()
    finally:
        server.kill()
        server.wait()
    assert share.server_pct > 10
    assert share.machine_pct > 0
    assert harness.cpu_seconds_of(server.pid) is None  # gone: the meter skips it
    assert (harness.rss_bytes_of(os.getpid()) or 0) > 1_000_000


def test_report_writes_json_and_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "bench.json"
    report = harness.BenchReport(
        "demo",
        ["--runs", "2"],
        [harness.Metric("rate", "rate/s"), harness.Metric("rss", "RSS", ".1f")],
        params={"runs": 2},
        json_path=str(out),
        show_progress=True,
    )
    with report.progress(3):
        report.record("a", {"rate": 10.0}, harness.CpuShare(50.0, 70.0, 150.0))
        report.record("a", {"rate": 30.0}, harness.CpuShare(60.0, 80.0, 160.0))
        report.record("b", {"rss": 5.5})
    report.note("shared machine")
    document = report.finish()
    printed = capsys.readouterr().out
    assert "rip5 bench demo" in printed
    assert "20 [10-30]" in printed
    assert "note: shared machine" in printed
    assert json.loads(out.read_text()) == document
    assert document["command"] == "rip5 bench demo --runs 2"
    assert document["cases"]["a"]["summary"]["rate"] == {"median": 20.0, "min": 10.0, "max": 30.0}
    assert document["cases"]["a"]["summary"]["server_cpu_pct"]["median"] == 75.0
    assert document["cases"]["b"]["runs"] == [{"rss": 5.5}]
    assert "rate" not in document["cases"]["b"]["summary"]


def test_closed_loop_counts_messages_of_successful_calls_and_failures_by_name() -> None:
    made: list[int] = []

    def call_of(index: int) -> harness.Call:
        made.append(index)
        turns = 0

        async def call(error_names: dict[str, int]) -> bool:
            nonlocal turns
            turns += 1
            await asyncio.sleep(0.001)
            if turns % 2 == 0:  # every second call of a worker fails
                error_names["REFUSED"] = error_names.get("REFUSED", 0) + 1
                return False
            return True

        return call

    result, stored = asyncio.run(
        harness.closed_loop(call_of, workers=3, per_call=4, seconds=0.2, warmup_s=0.05)
    )
    assert sorted(made) == [0, 1, 2]
    assert result.calls > 0
    assert result.msgs_per_s == result.calls * 4 / 0.2
    # Stored counts the warm-up's calls too; failures store nothing.
    assert stored % 4 == 0
    assert stored > result.calls * 4
    assert result.errors == result.error_names["REFUSED"] > 0
    assert 0 < result.p50_ms <= result.p99_ms


def test_report_measures_a_phase_and_gives_medians_and_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = harness.BenchReport("demo", [], harness.PHASE_METRICS, show_progress=False)
    meter = harness.CpuMeter(list)
    figures = iter([(100.0, {}), (300.0, {"TIMEOUT": 2}), (200.0, {})])

    async def phase() -> tuple[harness.PhaseResult, str]:
        rate, error_names = next(figures)
        return harness.PhaseResult.of(rate, [1.0, 2.0], 2, error_names), "stored"

    for run in range(3):
        result, extra = asyncio.run(report.measure(run, "publish", meter, phase))
        assert extra == "stored"
    assert [r["msgs_per_s"] for r in report.cases["publish"].runs] == [100.0, 300.0, 200.0]
    assert "client_cpu_pct" in report.cases["publish"].runs[0]
    assert report.median("publish", "msgs_per_s") == 200.0
    assert report.errors() == 2
    assert result.line(2, "publish", "calls of 32") == (
        "  run 3: publish 200 msgs/s p50 2.0 ms p99 2.0 ms (2 calls of 32; errors 0)"
    )
    capsys.readouterr()
