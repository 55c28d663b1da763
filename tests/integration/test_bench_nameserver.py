"""``rip5 bench nameserver`` measures real nameserver processes and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_nameserver_measures_writes_routes_and_memory(tmp_path: Path) -> None:
    out = tmp_path / "ns.json"
    args = [
        "--runs", "2", "--seconds", "0.5", "--warmup", "0.2", "--in-flight", "4",
        "--memory-topics", "300", "--dir", str(tmp_path), "--json", str(out),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "nameserver", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "metadata writes (create topic)" in result.stdout
    document = json.loads(out.read_text())
    assert document["target"] == "nameserver"
    assert document["cores"] >= 1
    assert len(document["load_average_start"]) == 3
    cases = document["cases"]
    writes = cases["metadata writes (create topic)"]
    routes = cases["route lookups"]
    assert len(writes["runs"]) == 2
    assert len(routes["runs"]) == 2
    for case in (writes, routes):
        summary = case["summary"]
        assert summary["ops_per_s"]["min"] > 0
        assert summary["ops_per_s"]["min"] <= summary["ops_per_s"]["median"]
        assert summary["ops_per_s"]["median"] <= summary["ops_per_s"]["max"]
        assert summary["server_cpu_pct"]["median"] > 0
        assert "client_cpu_pct" in summary
    (memory,) = (v for k, v in cases.items() if k.startswith("memory: 300 topics x 8 queues"))
    (run,) = memory["runs"]
    assert run["topics"] == 300
    assert run["rss_mib"] > 1
    assert run["rss_growth_mib"] > 0
