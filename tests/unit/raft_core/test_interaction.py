"""Runs every scenario in tests/datadriven/raft/ (pytest --rewrite regenerates them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._datadriven import run_file
from tests.unit.raft_core.interaction import Interaction

SCENARIOS = sorted((Path(__file__).parents[2] / "datadriven" / "raft").glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, rewrite: bool) -> None:
    interaction = Interaction()
    run_file(path, interaction.handle, rewrite)


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 9
