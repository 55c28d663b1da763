"""The gRPC cost bench runs end to end on both servers (its figures are read, not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("server", ["grpcio", "h2"])
def test_the_bench_reports_both_call_shapes(server: str) -> None:
    args = ["--seconds", "0.3", "--in-flight", "4", "--server", server]
    done = subprocess.run(
        [sys.executable, "-m", "rip5.bench.grpc_stream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# gRPC cost per message")
    assert f"server {server}," in lines[0]
    for shape in ("send", "receive"):
        (line,) = [row for row in lines if row.startswith(shape)]
        assert "us/msg" in line
        assert "calls/s" in line
