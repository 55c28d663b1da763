"""The rip5 command as a user runs it: help, errors, exit codes, dev."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rip5.cli import load_role_config
from rip5.config import ConfigError
from rip5.roles import ROLES

pytestmark = pytest.mark.integration

RIP5 = [sys.executable, "-m", "rip5"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RIP5, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["nameserver"],
        ["storage"],
        ["broker"],
        ["connector"],
        ["dev"],
        ["admin"],
        ["admin", "topic"],
        ["bench"],
    ],
)
def test_every_subcommand_has_help(command: list[str]) -> None:
    result = _run(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: rip5" in result.stdout


def test_version() -> None:
    assert _run("--version").stdout.startswith("rip5, version ")


def test_unknown_bench_target_is_a_usage_error() -> None:
    result = _run("bench", "warp")
    assert result.returncode == 2
    assert "'warp' is not one of" in result.stderr


def test_bad_flag_value_is_rejected_at_start(tmp_path: Path) -> None:
    result = _run("broker", "--listen", "localhost", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "invalid value for option 'listen' (flag --listen): 'localhost'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_env_value_is_rejected_at_start() -> None:
    result = _run("storage", env={"RIP5_STORAGE_FLUSH": "sometimes"})
    assert result.returncode == 2
    assert "environment RIP5_STORAGE_FLUSH" in result.stderr
    assert "one of sync, async" in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[broker]\nlisten = 8081\n", "expected host:port"),
        ("[broker]\nlisten = ", "is not valid TOML"),
        ("[broker]\nlistne = '1.2.3.4:5'\n", "a known option"),
        ("broker = 3\n", "a [broker] table"),
    ],
)
def test_bad_config_file_is_rejected(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "rip5.toml"
    path.write_text(content)
    result = _run("broker", "--config", str(path))
    assert result.returncode == 2
    assert message in result.stderr


def test_missing_config_file_is_rejected(tmp_path: Path) -> None:
    result = _run("broker", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_precedence_file_then_env_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rip5.toml"
    path.write_text(
        "[broker]\nlisten = '127.0.0.1:1001'\nnameserver = '127.0.0.1:2001'\n"
        "log_level = 'debug'\nauto_create = true\n"
    )
    monkeypatch.setenv("RIP5_BROKER_NAMESERVER", "127.0.0.1:2002")
    monkeypatch.setenv("RIP5_BROKER_LOG_LEVEL", "warning")
    common, config = load_role_config(
        ROLES["broker"], str(path), {"log_level": "error", "listen": None}
    )
    assert config.listen == "127.0.0.1:1001"  # type: ignore[attr-defined]  # file
    assert config.nameserver == "127.0.0.1:2002"  # type: ignore[attr-defined]  # env
    assert config.auto_create is True  # type: ignore[attr-defined]  # file
    assert common.log_level == "error"  # flag


def test_unknown_role_env_var_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIP5_BROKER_LISTNE", "x")
    with pytest.raises(ConfigError, match="RIP5_BROKER_LISTEN"):
        load_role_config(ROLES["broker"], None, {})


def test_dev_reaches_ready_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*RIP5, "dev", "--free-ports", "--data-dir", str(tmp_path / "cluster")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("rip5 dev ready"):
            break
    assert seen, "rip5 dev printed nothing"
    assert seen[-1].startswith("rip5 dev ready"), "".join(seen)
    for node in (1, 2, 3):  # the three storage nodes serve (each logged its ready event)
        assert any(line.startswith(f"storage-{node} |") and "msg=ready" in line for line in seen), (
            "".join(seen)
        )
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert rest.rstrip().endswith("rip5 dev | stopped")


def test_dev_removes_its_temp_folder(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [*RIP5, "dev", "--free-ports"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("rip5 dev ready"):
            break
    assert list(tmp_path.glob("rip5-dev-*"))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert not list(tmp_path.glob("rip5-dev-*"))
