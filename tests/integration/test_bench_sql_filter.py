"""``rip5 bench sql_filter`` drains a partition with ``*`` and with a 1-in-K SQL92 filter."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_bench_sql_filter_delivers_every_match_and_reports_the_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "sql_filter", "--messages", "640"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    plain, filtered, ratio = result.stdout.splitlines()[-3:]
    assert plain.startswith("'*': 640 delivered")
    assert "(1 in 10): 64 delivered" in filtered  # exactly n = 3 of 0..639
    assert re.fullmatch(r"ratio: \d+\.\d\d", ratio)
