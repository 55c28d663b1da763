"""A live topic streamed by Spark (``spark.readStream.format("rip5")``) exactly once.

One small cluster for the module (1 nameserver, 3 storage nodes with 2 raft
groups, 1 broker); the Spark session is the test run's one (tests/conftest.py).
Messages go in through the brokers' gRPC v2 SendMessage while the query runs;
the stream reads them over PullMessage and QueryOffset.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.records import MessageType
from protocol.rocketmq.v2 import definition_pb2 as pb
from spark_batch.producer import TopicProducer
from tests.e2e.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LIVE_MESSAGES = 3000
SEND_BATCH = 50
WAIT_S = 40.0


def _message(topic: str, i: int) -> pb.Message:
    system = pb.SystemProperties(
        message_id=f"{topic}-{i:06d}",
        keys=[f"k{i}"],
        body_encoding=pb.IDENTITY,
        message_type=pb.NORMAL,
        tag=f"tag{i % 3}",
    )
    system.born_timestamp.FromMilliseconds(1_700_000_000_000 + i)
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=system,
        user_properties={"i": str(i)},
        body=f"body {i}".encode(),
    )


def _send(endpoint: str, topic: str, first: int, count: int) -> list[str]:
    """Send messages ``[first, first + count)``; the ids the brokers acknowledged."""
    producer = TopicProducer([endpoint], topic, "stream-test-producer")
    acked: list[str] = []
    try:
        for start in range(first, first + count, SEND_BATCH):
            batch = [
                _message(topic, i) for i in range(start, min(first + count, start + SEND_BATCH))
            ]
            producer.send(batch)
            acked.extend(m.system_properties.message_id for m in batch)
    finally:
        producer.close()
    return acked


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Topics ``live`` and ``killed`` (4 queues), ``late`` (2) and ``picked`` (1)."""
    local = LocalCluster(tmp_path_factory.mktemp("spark-stream-cluster"), groups=2)
    try:
        local.start()
        normal = int(MessageType.NORMAL)
        local.create(
            {
                "live": (4, normal),
                "killed": (4, normal),
                "late": (2, normal),
                "picked": (1, normal),
            },
            {"rip5-spark": (False, 3)},
        )
        yield local
    finally:
        local.stop()


def _stream(spark: Any, endpoint: str, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("rip5").option("endpoints", endpoint).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _check_landed_once(spark: Any, out: Path, topic: str, acked: list[str]) -> None:
    """The parquet sink at ``out`` holds each acked message once, every column right."""
    rows = spark.read.parquet(str(out)).collect()
    counts = collections.Counter(row["message_id"] for row in rows)
    assert sorted(counts) == sorted(acked)
    assert set(counts.values()) == {1}, [m for m, n in counts.items() if n > 1][:10]
    for row in rows:
        i = int(row["message_id"].rpartition("-")[2])
        assert row["topic"] == topic
        assert row["body"] == f"body {i}".encode()
        assert row["properties"] == {"i": str(i)}
        assert (row["tag"], row["keys"]) == (f"tag{i % 3}", [f"k{i}"])
        assert row["message_type"] == "NORMAL"
        assert row["delivery_timestamp"] is None
        assert row["born_timestamp"].timestamp() == pytest.approx(1_700_000_000 + i / 1000)
    positions = {(row["queue_id"], row["queue_offset"]) for row in rows}
    assert len(positions) == len(rows)


def test_a_query_stopped_mid_stream_and_restarted_lands_each_message_once(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    endpoint = cluster.brokers[0].endpoint
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    acked: list[str] = []
    producer = threading.Thread(
        target=lambda: acked.extend(_send(endpoint, "live", 0, LIVE_MESSAGES)), daemon=True
    )

    def start() -> Any:
        df = _stream(spark, endpoint, "live", maxOffsetsPerTrigger="300")
        return (
            df.writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start(str(out))
        )

    producer.start()
    first = start()
    try:
        _until(
            lambda: sum(p["numInputRows"] for p in first.recentProgress) >= 600,
            "the first query to read 600 messages",
        )
        assert all(p["numInputRows"] <= 300 for p in first.recentProgress)
    finally:
        first.stop()  # mid-stream: the producer is still sending
    first_read = sum(p["numInputRows"] for p in first.recentProgress)
    assert first_read < LIVE_MESSAGES  # stopped mid-stream: the restart has the rest to read
    second = start()
    try:
        producer.join(WAIT_S)
        assert not producer.is_alive(), "the producer did not finish"
        second.processAllAvailable()
    finally:
        second.stop()
    _check_landed_once(spark, out, "live", acked)


KILLED_QUERY = """
import sys
from spark_batch.session import spark_session

endpoint, out, checkpoint = sys.argv[1:4]
spark = spark_session("local[1]", "rip5 stream to be killed")
df = (
    spark.readStream.format("rip5").option("endpoints", endpoint).option("topic", "killed")
    .option("maxOffsetsPerTrigger", "200").load()
)
query = (
    df.writeStream.format("parquet").option("checkpointLocation", checkpoint)
    .trigger(processingTime="100 milliseconds").start(out)
)
query.awaitTermination()
"""


def test_a_query_killed_mid_stream_and_restarted_lands_each_message_once(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """The first query runs in its own driver process (and JVM) and is killed with
    SIGKILL after 2 of its micro-batches of 200 committed, a third of the topic's messages
    unread; the test's session restarts it from the checkpoint while the rest are sent."""
    endpoint = cluster.brokers[0].endpoint
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    before_kill = LIVE_MESSAGES // 3
    acked = _send(endpoint, "killed", 0, before_kill)
    driver = subprocess.Popen(
        [sys.executable, "-c", KILLED_QUERY, endpoint, str(out), str(checkpoint)],
        start_new_session=True,  # its JVM is in its process group: killed with it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        commits = checkpoint / "commits"
        _until(
            lambda: commits.is_dir() and len(list(commits.glob("[0-9]*"))) >= 2,
            "the killed query to commit 2 micro-batches",
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert len(list(commits.glob("[0-9]*"))) * 200 < before_kill  # killed mid-stream
    rest: list[str] = []
    producer = threading.Thread(
        target=lambda: rest.extend(
            _send(endpoint, "killed", before_kill, LIVE_MESSAGES - before_kill)
        ),
        daemon=True,
    )
    query = (
        _stream(spark, endpoint, "killed", maxOffsetsPerTrigger="500")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .start(str(out))
    )
    try:
        producer.start()
        producer.join(WAIT_S)
        assert not producer.is_alive(), "the producer did not finish"
        query.processAllAvailable()
    finally:
        query.stop()
    _check_landed_once(spark, out, "killed", acked + rest)


def test_starting_offsets_latest_and_json(spark: Any, cluster: LocalCluster) -> None:
    endpoint = cluster.brokers[0].endpoint
    _send(endpoint, "late", 0, 40)
    latest = _stream(spark, endpoint, "late", startingOffsets="latest")
    query = latest.writeStream.format("memory").queryName("late_rows").start()
    try:
        query.processAllAvailable()
        after = _send(endpoint, "late", 40, 20)
        query.processAllAvailable()
    finally:
        query.stop()
    read = [r["message_id"] for r in spark.sql("select message_id from late_rows").collect()]
    assert sorted(read) == sorted(after)

    _send(endpoint, "picked", 0, 10)
    picked = _stream(spark, endpoint, "picked", startingOffsets='{"0": 7}')
    query = picked.writeStream.format("memory").queryName("picked_rows").start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql("select queue_offset, message_id from picked_rows").collect()
    assert sorted((r["queue_offset"], r["message_id"]) for r in rows) == [
        (offset, f"picked-{offset:06d}") for offset in (7, 8, 9)
    ]
