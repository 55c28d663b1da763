"""``rip5 dev`` (what ``make run`` starts) serves the official client out of the box:
topics and consumer groups are created on first use, nothing configured."""

from __future__ import annotations

import functools
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rip5.dev import DevLayout
from tests.e2e.test_official_client_cluster import ROOT, run_client_in
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def ready_port(proc: subprocess.Popen[str]) -> int:
    """The client port ``rip5 dev`` (its output piped) prints once ready."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("rip5 dev ready"):
            break
    assert seen, "rip5 dev printed nothing"
    banner = "rip5 dev ready: client endpoint 127.0.0.1:"
    assert seen[-1].startswith(banner), "".join(seen)
    return int(seen[-1][len(banner) :].split()[0])


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
    try:
        port = ready_port(proc)
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


def _start_dev(tmp_path: Path, output: Path, *flags: str) -> subprocess.Popen[str]:
    """``rip5 dev`` on free ports at log level info, its output into ``output``."""
    with output.open("w") as sink:
        return subprocess.Popen(
            [
                sys.executable, "-m", "rip5", "dev", "--free-ports", *flags,
                "--data-dir", str(tmp_path / "dev"), "--log-level", "info",
            ],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip


def _every_group_led(nameserver: str) -> bool:
    """``rip5 admin cluster status`` through ``nameserver`` shows every raft group of
    a default dev cluster placed and led."""
    status = subprocess.run(
        [sys.executable, "-m", "rip5", "admin", "cluster", "status", "--nameserver", nameserver],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    groups = DevLayout(Path()).storage_groups  # what rip5 dev creates by default
    led = f"raft groups: {groups} of {groups} placed, {groups} with a known leader"
    return led in status.stdout


def test_a_healthy_dev_start_logs_no_warning(tmp_path: Path) -> None:
    """From the first line until every raft group has a leader and the broker runs the
    transaction check-back (which scans every group), nothing logs at WARNING or above."""
    output = tmp_path / "dev.log"
    proc = _start_dev(tmp_path, output)
    try:
        ready = re.compile(r"^nameserver \|.* msg=ready endpoint=(\S+)$", re.MULTILINE)
        found = wait_until(
            lambda: "rip5 dev ready" in (text := output.read_text()) and ready.search(text),
            timeout_s=60,
            what="rip5 dev ready",
        )
        assert isinstance(found, re.Match)
        nameserver = found.group(1)

        wait_until(
            functools.partial(_every_group_led, nameserver),
            timeout_s=60,
            what="every raft group led",
        )
        wait_until(
            lambda: "transaction check-back owned here" in output.read_text(),
            what="the broker's transaction check-back",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    text = output.read_text()
    assert proc.returncode == 0, text
    assert "rip5 dev | stopped" in text
    noisy = [
        line for line in text.splitlines() if re.search(r"level=(warning|error|critical)", line)
    ]
    assert noisy == [], "\n".join(noisy)


def test_rip5_dev_runs_three_nameservers_that_every_process_follows(tmp_path: Path) -> None:
    """``--nameservers 3``: one nameserver group; the storage nodes join it and every
    raft group gets a leader, as seen through any of the three."""
    output = tmp_path / "dev.log"
    proc = _start_dev(tmp_path, output, "--nameservers", "3")
    try:
        ready = re.compile(r"^(nameserver(?:-\d)?) \|.* msg=ready endpoint=(\S+)$", re.MULTILINE)

        def all_ready() -> dict[str, str]:
            text = output.read_text()
            found = dict(ready.findall(text))
            return found if "rip5 dev ready" in text and len(found) == 3 else {}

        endpoints = wait_until(all_ready, timeout_s=60, what="rip5 dev ready")
        assert isinstance(endpoints, dict)
        assert sorted(endpoints) == ["nameserver", "nameserver-2", "nameserver-3"]

        for nameserver in endpoints.values():  # each replica alone leads there or redirects
            wait_until(
                functools.partial(_every_group_led, nameserver),
                timeout_s=60,
                what=f"every raft group led, seen from {nameserver}",
            )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0, output.read_text()
