"""``rip5 bench queues`` at a small size: creates the queues on a real dev cluster,
publishes one message to each, reads each back, and reports what they cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rip5.bench.queues import queue_counts, role_of, topic_names

pytestmark = pytest.mark.integration


def test_bench_queues_creates_publishes_and_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "queues.json"
    result = _bench_queues(
        "--queues", "60", "--baseline-messages", "40", "--workers", "4", "--json", str(out)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert figures["queues"] == 60
    assert figures["topics"] == 8  # 7 of 8 queues and one of 4
    assert figures["read_msgs"] == 60  # every message read back, each checked by id
    assert figures["create_queues_per_s"] > 0
    assert figures["publish_msgs_per_s"] > 0
    samples = figures["baseline_samples_msgs_per_s"]
    assert len(samples) == 3  # the default
    assert figures["baseline_msgs_per_s"] == sorted(samples)[1] > 0  # their median
    assert "publish at 8 queues:" in result.stdout
    assert "(median of " in result.stdout
    for role, count in (("nameserver", 1), ("storage", 3), ("broker", 1)):
        assert len(figures["rss_bytes"]["end"][role]) == count, role
    assert len(figures["storage_bytes_per_queue"]) == 3
    cpu = figures["cpu_us_per_msg"]  # from /proc in clock ticks: a tiny phase may read 0
    for phase in ("baseline", "publish", "read"):
        assert set(cpu[phase]) == {"nameserver", "storage", "broker"}
        assert min(cpu[phase].values()) >= 0, phase
    assert sum(cpu[phase]["storage"] for phase in cpu) > 0
    assert "server CPU per message (us) nameserver / storage (3 nodes) / broker:" in result.stdout
    # From the storage nodes' counters: every message sent was stored (a send retried
    # after a timeout is stored again, as a duplicate), in at most as many raft entries
    # as appends (baseline: 40 messages, 3 samples).
    joined = figures["joined"]
    assert joined["baseline"]["messages"] >= 3 * 40
    assert joined["publish"]["messages"] >= 60
    for phase in ("baseline", "publish"):
        counts = joined[phase]
        assert 0 < counts["entries"] <= counts["appends"] <= counts["messages"], phase
        assert counts["messages_per_entry"] == counts["messages"] / counts["entries"], phase
        assert counts["rounds"] > 0, phase  # every node's rounds: each entry takes some
    assert "storage: messages (appends) per raft entry:" in result.stdout
    assert "queues: 60 (8 topics of up to 8)" in result.stdout
    assert "bytes per queue, nameserver (after creation):" in result.stdout


def test_queues_are_cut_into_topics_of_eight() -> None:
    assert topic_names(17) == ["bq-0", "bq-1", "bq-2"]
    assert queue_counts(17) == [8, 8, 1]
    assert queue_counts(16) == [8, 8]
    assert role_of("/venv/bin/python -m rip5 storage --node-id 2") == "storage"
    assert role_of("/venv/bin/python -m rip5 dev --storage 3") is None


def _bench_queues(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rip5", "bench", "queues", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
