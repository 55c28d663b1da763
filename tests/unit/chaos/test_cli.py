"""``rip5 chaos run``: bad fault names are refused before any process starts."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rip5.cli import main


def test_an_unknown_fault_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["chaos", "run", "--fault", "explode", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "unknown fault 'explode'" in result.output


def test_a_storage_fault_on_a_broker_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["chaos", "run", "--fault", "disk-full@broker-1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "storage nodes only" in result.output


def test_faults_need_a_cluster_of_our_own(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["chaos", "run", "--endpoint", "127.0.0.1:1", "--fault", "kill", "--out", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "not --endpoint" in result.output
