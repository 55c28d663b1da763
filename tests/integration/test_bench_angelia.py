"""``rip5 bench angelia`` runs a real server process and prints (and writes) its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_angelia_measures_pairs_against_a_server_process(tmp_path: Path) -> None:
    report = tmp_path / "angelia.md"
    report.write_text("# Angelia\n")
    args = [
        "--transports", "tcp,memory", "--codecs", "msgpack", "--runs", "1",
        "--seconds", "0.3", "--quiet-wait-s", "0", "--write", str(report),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "angelia", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| tcp | msgpack")]
    assert len(rows) == 1
    calls_per_s = float(rows[0].split("|")[3].split()[0].replace(",", ""))
    assert calls_per_s > 0
    text = report.read_text()
    assert text.startswith("# Angelia\n")
    assert "| memory | msgpack |" in text
    # a second run replaces the table instead of appending another
    subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "angelia", *args],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert report.read_text().count("| tcp | msgpack |") == 1
