"""``rip5 bench spark`` runs three real storage processes, snapshots them and reads with Spark.

It reads with the suite's one Spark session (the ``spark`` fixture): a second driver JVM
would cost the suite its start-up for no more coverage (``rip5 bench spark`` on the command
line starts its own, as ``main`` does without a session).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rip5.bench import spark as bench_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_bench_spark_measures_snapshot_writing_and_reads(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--messages", "3000", "--message-bytes", "200", "--groups", "2", "--queues", "4",
        "--batch", "100", "--in-flight", "4", "--object-mb", "0.1", "--runs", "1",
        "--master", "local[1]", "--dir", str(tmp_path), "--json", str(tmp_path / "spark.json"),
        "--no-progress",
    ]  # fmt: skip
    assert bench_spark.main(args, session=spark) == 0
    assert "loaded 3,000 messages" in capsys.readouterr().out
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session stays up
    document = json.loads((tmp_path / "spark.json").read_text())
    assert document["target"] == "spark"
    cases = document["cases"]
    (written,) = cases["snapshot write"]["runs"]
    assert written["messages"] == 3000
    assert written["mb_per_s"] > 0
    (ours,) = cases["spark read rip5"]["runs"]
    (theirs,) = cases["spark read parquet"]["runs"]
    assert ours["seconds"] > 0
    assert theirs["seconds"] > 0
    assert ours["ratio"] == pytest.approx(ours["seconds"] / theirs["seconds"])
    (body_only,) = cases["spark read rip5 body"]["runs"]
    assert body_only["messages"] == 3000
    assert body_only["ratio"] == pytest.approx(body_only["seconds"] / theirs["seconds"])
