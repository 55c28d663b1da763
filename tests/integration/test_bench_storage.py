"""``rip5 bench storage`` runs three real storage processes and prints its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_storage_measures_append_and_receive_ack(tmp_path: Path) -> None:
    args = [
        "--groups", "4", "--queues", "6", "--runs", "1", "--seconds", "1", "--warmup", "0.5",
        "--in-flight", "4", "--batch", "8", "--dir", str(tmp_path),
    ]  # fmt: skip
    # Retention rounds every 100 ms (10 s by default): a group leader drops the data of
    # a topic the nameserver does not list, so the bench's topic must be listed there
    # or its receive+ack phase never gets the messages appended before a round.
    env = {**os.environ, "RIP5_STORAGE_RETENTION_CHECK_MS": "100"}
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "storage", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    append = [ln for ln in lines if ln.startswith("append msgs/s ")]
    consume = [ln for ln in lines if ln.startswith("receive+ack msgs/s ")]
    assert len(append) == 1, result.stdout
    assert len(consume) == 1, result.stdout
    assert float(append[0].split()[2].replace(",", "")) > 0
    assert float(consume[0].split()[2].replace(",", "")) > 0
    # The nameserver balanced leadership before the phases: 4 groups over 3 nodes.
    (run,) = [ln for ln in lines if ln.strip().startswith("run 1:")]
    led = [int(n) for n in run.rsplit("groups led per node ", 1)[1].split("/")]
    assert sorted(led) == [1, 1, 2], run
