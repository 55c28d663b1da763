"""The grpc-python cost bench runs end to end (its figures are read, not asserted)."""

from __future__ import annotations

import subprocess
import sys


def test_the_bench_reports_both_call_shapes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rip5.bench.grpc_stream", "--seconds", "0.3", "--in-flight", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# grpc-python cost per message")
    for shape in ("send", "receive"):
        (line,) = [row for row in lines if row.startswith(shape)]
        assert "us/msg" in line
        assert "calls/s" in line
