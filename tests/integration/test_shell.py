"""The process shell, in real processes: readiness, graceful stop, deadlines, locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ECHO = str(Path(__file__).with_name("echo_role.py"))


def _start(
    data_dir: Path, mode: str, timeout_ms: int = 5000
) -> tuple[subprocess.Popen[bytes], int]:
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "RIP5_READY_FD": str(write_fd)}
    proc = subprocess.Popen(
        [sys.executable, ECHO, str(data_dir), mode, str(timeout_ms)],
        env=env,
        pass_fds=(write_fd,),
        stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    return proc, read_fd


def _read_ready(read_fd: int) -> str:
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.readline().decode()


def test_ready_then_graceful_stop_on_sigterm(tmp_path: Path) -> None:
    proc, read_fd = _start(tmp_path / "d", "serve")
    line = _read_ready(read_fd)
    assert line.startswith("ready 127.0.0.1:")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    lines = err.decode().splitlines()
    assert any("msg=ready" in ln and "role=echo" in ln for ln in lines)
    assert "msg=stopped" in lines[-1]
    assert (tmp_path / "d" / "LOCK").exists()


def test_stop_deadline_cancels_a_stubborn_role(tmp_path: Path) -> None:
    proc, read_fd = _start(tmp_path / "d", "stubborn", timeout_ms=200)
    _read_ready(read_fd)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    overran = [ln for ln in err.decode().splitlines() if "overran its deadline" in ln]
    assert len(overran) == 1
    # The line names where the role was stuck: serve, awaiting an event that never comes.
    assert "serve echo_role.py:" in overran[0]
    assert "> wait locks.py:" in overran[0]


def test_a_failing_role_logs_one_error_line_and_exits_1(tmp_path: Path) -> None:
    proc, read_fd = _start(tmp_path / "d", "fail")
    _read_ready(read_fd)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    error_lines = [ln for ln in err.decode().splitlines() if "level=error" in ln]
    assert len(error_lines) == 1
    assert 'error="RuntimeError: serve failed on purpose"' in error_lines[0]


def test_two_processes_never_share_a_data_dir(tmp_path: Path) -> None:
    first, read_fd = _start(tmp_path / "d", "serve")
    _read_ready(read_fd)
    try:
        second = subprocess.run(
            [sys.executable, ECHO, str(tmp_path / "d"), "serve"],
            capture_output=True,
            timeout=20,
            check=False,
        )
        assert second.returncode == 1
        assert f"in use by another rip5 process (pid {first.pid})" in second.stderr.decode()
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=20)
    wait_until(lambda: first.poll() is not None, what="first process to exit")
