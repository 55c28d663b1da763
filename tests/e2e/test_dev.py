"""``rip5 dev`` (what ``make run`` starts) serves the official client out of the box:
topics and consumer groups are created on first use, nothing configured."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_official_client_cluster import ROOT, run_client_in

pytestmark = pytest.mark.integration


def test_rip5_dev_serves_the_official_client_with_auto_create(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "rip5", "dev", "--free-ports",
            "--data-dir", str(tmp_path / "dev"), "--log-level", "warning",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("rip5 dev ready"):
                break
        assert seen, "rip5 dev printed nothing"
        banner = "rip5 dev ready: client endpoint 127.0.0.1:"
        assert seen[-1].startswith(banner), "".join(seen)
        port = int(seen[-1][len(banner) :].split()[0])
        observed = run_client_in(tmp_path, "first_use", port)
        assert sorted(m["id"] for m in observed["received"]) == sorted(observed["sent"])
        assert all(m["attempt"] == 1 for m in observed["received"])
        # FIFO on first use: in send order, one message of the group at a time.
        assert [m["id"] for m in observed["fifo_received"]] == observed["fifo_sent"]
        assert observed["fifo_batches"] == [1, 1, 1, 1]
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
