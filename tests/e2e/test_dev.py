"""``rip5 dev`` (what ``make run`` starts) serves the official client out of the box:
topics and consumer groups are created on first use, nothing configured."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_official_client_cluster import ROOT, run_client_in

pytestmark = pytest.mark.integration


def free_run(length: int) -> int:
    """The first of ``length`` consecutive ports that were free a moment ago."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base: int = probe.getsockname()[1]
        if base + length > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + length):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError("no run of free ports found")


def test_rip5_dev_serves_the_official_client_with_auto_create(tmp_path: Path) -> None:
    base = free_run(5)  # nameserver, three storage nodes, broker
    nameserver, storage, broker = base, base + 1, base + 4
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "rip5", "dev", "--data-dir", str(tmp_path / "dev"),
            "--nameserver-port", str(nameserver), "--storage-port", str(storage),
            "--broker-port", str(broker), "--log-level", "warning",
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
        ready = f"rip5 dev ready: client endpoint 127.0.0.1:{broker}"
        assert seen[-1].startswith(ready), "".join(seen)
        observed = run_client_in(tmp_path, "first_use", broker)
        assert sorted(m["id"] for m in observed["received"]) == sorted(observed["sent"])
        assert all(m["attempt"] == 1 for m in observed["received"])
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
