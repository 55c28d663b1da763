"""Snapshots of a real cluster read by Spark, and DataFrames written back through the brokers.

One cluster for the module (1 nameserver, 3 storage nodes with 4 raft
groups, 1 broker); the Spark session is the test run's one (tests/conftest.py).
Messages go in through the brokers' gRPC v2 SendMessage; snapshots are made
with the ``rip5 admin snapshot`` command as an operator would; what Spark
reads is compared with what the storage API reads back, column by column.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from angelia_rpc import AngeliaError
from angelia_rpc.channel import Peers
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.config import RpcConfig
from protocol import errors
from protocol import nameserver_api as api
from protocol import storage_api as st
from protocol.message_objects import (
    MANIFEST_NAME,
    Manifest,
    ReadWindow,
    decode_manifest,
    select_objects,
)
from protocol.records import MessageType
from protocol.rocketmq.v2 import definition_pb2 as pb
from rip5.admin import NameserverClient
from spark_batch import jobs
from spark_batch.producer import TopicProducer
from spark_batch.source import Rip5Reader
from tests.e2e.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NORMAL_MESSAGES = 2400
FIFO_MESSAGES = 600
OBJECT_BYTES = 20_000  # small objects, so every queue has several (pruning has work)
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "message_id",
    "tag",
    "keys",
    "properties",
    "body",
    "message_group",
    "message_type",
)


def _message(topic: str, i: int, kind: pb.MessageType = pb.NORMAL) -> pb.Message:
    """Message ``i`` of a test topic: tags, keys, properties and sizes vary with ``i``; a
    FIFO one has a message group, a DELAY one a delivery time (past: queued at once)."""
    system = pb.SystemProperties(
        message_id=f"{topic}-{i:06d}",
        keys=[f"k{i}", f"k{i % 7}"] if i % 3 else [],
        body_encoding=pb.IDENTITY,
        message_type=kind,
    )
    system.born_timestamp.FromMilliseconds(1_700_000_000_000 + i)
    if i % 4:
        system.tag = f"tag{i % 4}"
    if kind == pb.FIFO:
        system.message_group = f"group{i % 5}"
    if kind == pb.DELAY:
        system.delivery_timestamp.FromMilliseconds(1_600_000_000_000 + i)
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties={"i": str(i), "even": str(i % 2 == 0)} if i % 5 else {},
        system_properties=system,
        body=(f"body {i} ".encode() * (1 + i % 9)),
    )


def _produce(endpoint: str, topic: str, count: int, kind: pb.MessageType = pb.NORMAL) -> None:
    producer = TopicProducer([endpoint], topic, "spark-test-producer")
    try:
        for start in range(0, count, 100):
            producer.send([_message(topic, i, kind) for i in range(start, min(count, start + 100))])
    finally:
        producer.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster with topics ``orders`` (NORMAL, 4 queues), ``fifo`` (FIFO, 2
    queues), ``copies`` (NORMAL, 3 queues), ``submitted`` (FIFO) and the bulk topics;
    ``orders`` and ``fifo`` filled."""
    local = LocalCluster(tmp_path_factory.mktemp("spark-cluster"), groups=4)
    try:
        local.start()
        local.create(
            {
                "orders": (4, int(MessageType.NORMAL)),
                "fifo": (2, int(MessageType.FIFO)),
                "copies": (3, int(MessageType.NORMAL)),
                "submitted": (2, int(MessageType.FIFO)),
                "retried": (3, int(MessageType.NORMAL)),
                "bulk": (4, int(MessageType.NORMAL)),
                "bulk-fifo": (4, int(MessageType.FIFO)),
                "bulk-timed": (2, int(MessageType.DELAY)),
            },
            {},
        )
        endpoint = local.brokers[0].endpoint
        _produce(endpoint, "orders", NORMAL_MESSAGES)
        _produce(endpoint, "fifo", FIFO_MESSAGES, pb.FIFO)
        yield local
    finally:
        local.stop()


def snapshot(
    cluster: LocalCluster,
    root: Path,
    name: str,
    *topics: str,
    object_bytes: int = OBJECT_BYTES,
    scheme: str = "",
) -> Path:
    """``rip5 admin snapshot create`` (its own process, as an operator runs it); ``scheme``
    ``file://`` gives the folder as an fsspec URL."""
    argv = [
        sys.executable,
        "-m",
        "rip5",
        "admin",
        "snapshot",
        "create",
        "--to",
        f"{scheme}{root}",
        "--name",
        name,
        "--nameserver",
        cluster.nameserver_address,
        "--object-mb",
        str(object_bytes / 1e6),
    ]
    for topic in topics:
        argv += ["--topic", topic]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"snapshot {scheme}{root}/{name}:" in done.stdout
    return root / name


@pytest.fixture(scope="module")
def orders_snapshot(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of ``orders`` and ``fifo``."""
    return snapshot(cluster, tmp_path_factory.mktemp("snapshots"), "s1", "orders", "fifo")


def stored_messages(cluster: LocalCluster, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` as the storage API reads it back, as rows."""

    async def run() -> list[dict[str, Any]]:
        client = NameserverClient([cluster.nameserver_address])
        peers = Peers(RpcConfig())
        rows: list[dict[str, Any]] = []
        try:
            route = await client.call(lambda ns: ns.route(api.NameRequest(topic)))
            addresses = [p.endpoint for p in cluster.storage.values()]
            for queue in route.queues:
                offset = 0
                while True:
                    request = st.ReadRequest(topic, queue.queue_id, offset, 500)
                    response = await _read_on_leader(peers, addresses, request)
                    for stored in response.messages:
                        rows.append(_row(stored))
                    offset += len(response.messages)
                    if offset >= response.end_offset:
                        break
        finally:
            await peers.close()
            await client.close()
        return rows

    return asyncio.run(run())


async def _read_on_leader(
    peers: Peers, addresses: list[str], request: st.ReadRequest
) -> st.ReadResponse:
    for address in addresses:
        try:
            return await peers.stub(StorageService, address).read(request)
        except AngeliaError as exc:
            if exc.code is not errors.NOT_LEADER:
                raise
    raise AssertionError(f"no storage node leads {request.topic}:{request.queue_id}")


def _row(stored: st.StoredMessage) -> dict[str, Any]:
    m = stored.message
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": stored.queue_offset,
        "message_id": m.message_id,
        "tag": m.tag or None,
        "keys": list(m.keys),
        "properties": dict(m.properties),
        "body": bytes(m.body),
        "message_group": m.message_group or None,
        "message_type": MessageType(m.message_type).name,
        "born_ms": m.born_timestamp_ms,
        "store_ms": stored.store_timestamp_ms,
        "delivery_ms": m.delivery_timestamp_ms or None,
    }


def spark_rows(df: Any) -> list[dict[str, Any]]:
    """A read's rows as dicts (times as epoch ms), in (topic, queue, offset) order."""
    selected = df.selectExpr(
        *COLUMNS,
        "unix_millis(born_timestamp) AS born_ms",
        "unix_millis(store_timestamp) AS store_ms",
        "unix_millis(delivery_timestamp) AS delivery_ms",
    ).orderBy("topic", "queue_id", "queue_offset")
    rows = []
    for row in selected.collect():
        values = row.asDict()
        values["body"] = bytes(values["body"])
        values["keys"] = list(values["keys"])
        values["properties"] = dict(values["properties"])
        rows.append(values)
    return rows


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["topic"], r["queue_id"], r["queue_offset"]))


def test_snapshot_read_by_spark_equals_the_storage_api(
    spark: Any, cluster: LocalCluster, orders_snapshot: Path
) -> None:
    manifest = decode_manifest((orders_snapshot / MANIFEST_NAME).read_bytes(), "s1")
    assert {q.topic for q in manifest.queues} == {"orders", "fifo"}
    assert sum(q.message_count for q in manifest.queues) == NORMAL_MESSAGES + FIFO_MESSAGES
    assert all(len(q.objects) >= 2 for q in manifest.queues if q.message_count > 200)
    df = spark.read.format("rip5").load(str(orders_snapshot))
    # One partition per object.
    assert df.rdd.getNumPartitions() == sum(len(q.objects) for q in manifest.queues)
    expected = _ordered(stored_messages(cluster, "orders") + stored_messages(cluster, "fifo"))
    assert len(expected) == NORMAL_MESSAGES + FIFO_MESSAGES
    assert spark_rows(df) == expected
    assert {r["message_type"] for r in expected} == {"NORMAL", "FIFO"}


def _copy(snapshot_path: Path, to: Path) -> tuple[Path, Manifest]:
    """A copy of a snapshot (to damage), and its manifest."""
    shutil.copytree(snapshot_path, to)
    return to, decode_manifest((to / MANIFEST_NAME).read_bytes(), str(to))


def test_pruning_opens_only_what_it_keeps(
    spark: Any, orders_snapshot: Path, tmp_path: Path
) -> None:
    copy, manifest = _copy(orders_snapshot, tmp_path / "pruned")
    options = {
        "path": str(copy),
        "topic": "orders",
        "queues": "1",
        "offsetFrom": "150",
        "offsetTo": "260",
    }
    kept = Rip5Reader(options).partitions()
    window = ReadWindow(150, 260)
    wanted = select_objects(manifest.queues, window, topics=["orders"], queue_ids=[1])
    assert [p.entry.name for p in kept] == [r.entry.name for r in wanted]
    every = [o.name for q in manifest.queues for o in q.objects]
    assert 0 < len(kept) < len(every) // 4
    # Remove every object the read prunes: it must not need them.
    for name in set(every) - {p.entry.name for p in kept}:
        (copy / name).unlink()
    df = spark.read.format("rip5").options(**{k: v for k, v in options.items() if k != "path"})
    rows = spark_rows(df.load(str(copy)))
    assert [r["queue_offset"] for r in rows] == list(range(150, 260))
    assert {(r["topic"], r["queue_id"]) for r in rows} == {("orders", 1)}
    # Nothing kept: no object opened, no row.
    beyond = spark.read.format("rip5").option("topic", "orders").option("offsetFrom", "1000000")
    assert beyond.load(str(copy)).count() == 0
    # By store time: a window around the middle of queue 0's times.
    queue = manifest.queue("orders", 0)
    assert queue is not None
    middle = queue.objects[len(queue.objects) // 2]
    timed = (
        spark.read.format("rip5")
        .option("topic", "orders")
        .option("queues", "0")
        .option("timeFrom", str(middle.min_store_timestamp_ms))
        .option("timeTo", str(middle.max_store_timestamp_ms + 1))
        .load(str(orders_snapshot))
    )
    times = [r["store_ms"] for r in spark_rows(timed)]
    assert times
    assert all(middle.min_store_timestamp_ms <= t <= middle.max_store_timestamp_ms for t in times)


def test_a_read_of_some_columns_equals_those_columns_of_the_full_read(
    spark: Any, orders_snapshot: Path
) -> None:
    """A schema or a ``columns`` option: the reader yields only those columns, with
    the same values as the full read; a column that is not ours is named."""
    path = str(orders_snapshot)
    full = spark.read.format("rip5").option("topic", "orders").load(path).collect()
    assert len(full) == NORMAL_MESSAGES
    for columns, df in [
        (
            ["queue_id", "queue_offset", "body"],
            spark.read.format("rip5")
            .schema("queue_id int, queue_offset bigint, body binary")
            .option("topic", "orders")
            .load(path),
        ),
        (
            ["tag", "keys", "properties", "store_timestamp", "queue_id", "queue_offset"],
            spark.read.format("rip5")
            .option("topic", "orders")
            .option("columns", "tag,keys,properties,store_timestamp,queue_id,queue_offset")
            .load(path),
        ),
    ]:
        assert df.columns == columns
        by_offset = itemgetter(columns.index("queue_id"), columns.index("queue_offset"))
        want = sorted((tuple(row[c] for c in columns) for row in full), key=by_offset)
        assert sorted((tuple(row) for row in df.collect()), key=by_offset) == want
    with pytest.raises(Exception, match="schema column 'payload' is not a rip5 column"):
        spark.read.format("rip5").schema("payload binary").load(path).count()
    with pytest.raises(Exception, match="option columns: 'bdy' is not a rip5 column"):
        spark.read.format("rip5").option("columns", "bdy").load(path).count()


def test_a_corrupt_object_fails_the_read_naming_object_and_offset(
    spark: Any, orders_snapshot: Path, tmp_path: Path
) -> None:
    copy, manifest = _copy(orders_snapshot, tmp_path / "corrupt")
    queue = manifest.queue("orders", 2)
    assert queue is not None
    victim = queue.objects[1]
    data = bytearray((copy / victim.name).read_bytes())
    data[200] ^= 0x55  # inside the first block
    (copy / victim.name).write_bytes(bytes(data))
    df = spark.read.format("rip5").option("topic", "orders").option("queues", "2").load(str(copy))
    with pytest.raises(Exception, match=rf"{victim.name}.*offset {victim.first_offset}"):
        df.count()


def test_writer_sends_each_row_once_even_when_a_task_is_retried(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    rows = 1500
    died = tmp_path / "died"

    @udf(returnType="binary", useArrow=False)
    def body_or_die(row_id: int) -> bytes:
        """The row's body; the first attempt of the task holding row 1400 (the last of
        three) dies there, after its earlier rows went out (the writer sends 100 at a
        time)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if row_id == 1400 and context is not None and context.attemptNumber() == 0:
            died.write_text(f"task {context.taskAttemptId()}")
            raise RuntimeError("killed mid-task (the test's injected failure)")
        return f"row-{row_id}".encode()

    df = spark.range(rows, numPartitions=3).select(
        body_or_die("id").alias("body"),
        F.expr("CASE WHEN id % 2 = 0 THEN 'even' ELSE NULL END").alias("tag"),
        F.expr("array(concat('key-', id))").alias("keys"),
        F.expr("map('n', CAST(id AS STRING))").alias("properties"),
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        messages = df.write.format("rip5").option("endpoints", cluster.brokers[0].endpoint)
        messages.option("topic", "copies").option("batchMessages", "100").mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert died.exists()  # the first attempt did die
    copies = snapshot(cluster, tmp_path, "copies", "copies", scheme="file://")
    stored = spark.read.format("rip5").load(f"file://{copies}")
    assert stored.count() == rows
    assert stored.select("body").distinct().count() == rows
    assert stored.where("tag = 'even'").count() == rows // 2


def test_stats_job_figures(spark: Any, orders_snapshot: Path) -> None:
    messages = jobs.read_snapshot(spark, str(orders_snapshot))
    table = jobs.stats(messages).collect()
    assert sum(r.messages for r in table if r.topic == "orders") == NORMAL_MESSAGES
    assert sum(r.messages for r in table if r.topic == "fifo") == FIFO_MESSAGES
    expected_bytes = sum(len(_message("orders", i).body) for i in range(NORMAL_MESSAGES))
    assert sum(r.bytes for r in table if r.topic == "orders") == expected_bytes
    assert all(0 <= r.latency_p50_ms <= r.latency_p99_ms for r in table)
    # The stats command reads only the columns stats uses: the same table.
    columns = {"columns": jobs.STATS_COLUMNS}
    pruned = jobs.read_snapshot(spark, str(orders_snapshot), options=columns)
    assert jobs.stats(pruned).collect() == table


def test_snapshot_list_describe_and_delete(orders_snapshot: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rip5.snapshot import snapshot as snapshot_group

    copy, manifest = _copy(orders_snapshot, tmp_path / "root" / "s1")
    runner = CliRunner()
    listed = runner.invoke(snapshot_group, ["list", str(copy.parent)])
    assert listed.exit_code == 0, listed.output
    assert "s1" in listed.output
    assert str(NORMAL_MESSAGES + FIFO_MESSAGES) in listed.output
    described = runner.invoke(snapshot_group, ["describe", str(copy)])
    assert described.exit_code == 0, described.output
    assert f"[0, {manifest.queue('fifo', 0).end_offset})" in described.output  # type: ignore[union-attr]
    deleted = runner.invoke(snapshot_group, ["delete", str(copy)])
    assert deleted.exit_code == 0, deleted.output
    assert not copy.exists()
    missing = runner.invoke(snapshot_group, ["describe", str(copy)])
    assert missing.exit_code == 1
    assert "no manifest.json" in missing.output


def test_a_failed_snapshot_leaves_no_manifest(cluster: LocalCluster, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rip5.snapshot import snapshot as snapshot_group

    # The objects of topic orders cannot be written: a file stands where their folder goes.
    blocked = tmp_path / "broken" / "objects"
    blocked.mkdir(parents=True)
    (blocked / "orders").write_bytes(b"not a folder")
    argv = ["create", "--to", str(tmp_path), "--name", "broken"]
    argv += ["--nameserver", cluster.nameserver_address, "--topic", "orders", "--topic", "fifo"]
    result = CliRunner().invoke(snapshot_group, argv)
    assert result.exit_code == 1, result.output
    assert "the snapshot failed" in result.output
    assert "writing queue orders:" in result.output
    assert not (tmp_path / "broken" / MANIFEST_NAME).exists()
    with pytest.raises(Exception, match="is not a snapshot"):
        Rip5Reader({"path": str(tmp_path / "broken")}).partitions()
    deleted = CliRunner().invoke(snapshot_group, ["delete", str(tmp_path / "broken")])
    assert deleted.exit_code == 0, deleted.output
    assert not (tmp_path / "broken").exists()


def test_stats_and_export_commands(spark: Any, orders_snapshot: Path, tmp_path: Path) -> None:
    """``rip5 spark stats|export`` (in this process: the session is the test run's)."""
    from click.testing import CliRunner

    runner = CliRunner()
    stats = runner.invoke(jobs.spark, ["stats", str(orders_snapshot), "--topic", "fifo"])
    assert stats.exit_code == 0, stats.output
    lines = stats.output.strip().splitlines()
    assert lines[0].startswith("topic\thour\tmessages")
    assert sum(int(line.split("\t")[2]) for line in lines[1:]) == FIFO_MESSAGES
    out = tmp_path / "export"
    argv = ["export", str(orders_snapshot), "--topic", "orders", "--out", str(out)]
    exported = runner.invoke(jobs.spark, argv)
    assert exported.exit_code == 0, exported.output
    assert spark.read.parquet(str(out)).count() == NORMAL_MESSAGES
    rip5_help = subprocess.run(
        [sys.executable, "-m", "rip5", "spark", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert rip5_help.returncode == 0, rip5_help.stderr
    assert "pipeline" in rip5_help.stdout


def test_fifty_thousand_mixed_messages_read_back_exactly(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """The issue's check: 50,000 messages of mixed types, tags, keys and properties;
    the snapshot read by Spark equals the storage API's answer, row for row."""
    endpoint = cluster.brokers[0].endpoint
    topics = {"bulk": pb.NORMAL, "bulk-fifo": pb.FIFO, "bulk-timed": pb.DELAY}
    counts = {"bulk": 35_000, "bulk-fifo": 10_000, "bulk-timed": 5_000}
    for topic, kind in topics.items():
        _produce(endpoint, topic, counts[topic], kind)
    bulk = snapshot(cluster, tmp_path, "bulk", *topics, object_bytes=1_000_000)
    df = spark.read.format("rip5").load(str(bulk))
    expected = _ordered([row for topic in topics for row in stored_messages(cluster, topic)])
    assert len(expected) == 50_000
    assert {r["message_type"] for r in expected} == {"NORMAL", "FIFO", "DELAY"}
    assert sum(r["delivery_ms"] is not None for r in expected) == counts["bulk-timed"]
    assert spark_rows(df) == expected


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """An S3 endpoint (moto's server, in a thread) with bucket ``snapshots``."""
    import s3fs
    from moto.server import ThreadedMotoServer

    from angelia_rpc.ports import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        s3fs.S3FileSystem(endpoint_url=endpoint, key="test", secret="test").mkdir("snapshots")
        yield endpoint
    finally:
        server.stop()


def test_snapshot_to_s3_read_by_spark(spark: Any, cluster: LocalCluster, s3_endpoint: str) -> None:
    from click.testing import CliRunner

    from rip5.snapshot import snapshot as snapshot_group

    fs_options = ["--fs-option", f"endpoint_url={s3_endpoint}"]
    fs_options += ["--fs-option", "key=test", "--fs-option", "secret=test"]
    argv = [sys.executable, "-m", "rip5", "admin", "snapshot", "create", "--to", "s3://snapshots"]
    argv += ["--name", "fifo", "--topic", "fifo", "--nameserver", cluster.nameserver_address]
    argv += ["--object-mb", str(OBJECT_BYTES / 1e6), *fs_options]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = CliRunner().invoke(snapshot_group, ["list", "s3://snapshots", *fs_options])
    assert listed.exit_code == 0, listed.output
    assert "fifo" in listed.output
    df = (
        spark.read.format("rip5")
        .option("fs.endpoint_url", s3_endpoint)
        .option("fs.key", "test")
        .option("fs.secret", "test")
        .load("s3://snapshots/fifo")
    )
    assert spark_rows(df) == _ordered(stored_messages(cluster, "fifo"))
    deleted = CliRunner().invoke(snapshot_group, ["delete", "s3://snapshots/fifo", *fs_options])
    assert deleted.exit_code == 0, deleted.output
    listed = CliRunner().invoke(snapshot_group, ["list", "s3://snapshots", *fs_options])
    assert "fifo" not in listed.output


def test_pipeline_job_under_spark_submit(
    cluster: LocalCluster, orders_snapshot: Path, tmp_path: Path
) -> None:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    jobs_file = Path(jobs.__file__)
    argv = [str(spark_submit), "--master", "local[2]", str(jobs_file), "pipeline"]
    argv += [str(orders_snapshot), "--from", "fifo", "--to", "submitted", "--tag", "tag2"]
    argv += ["--endpoints", cluster.brokers[0].endpoint]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "pipeline fifo -> submitted: done" in done.stdout
    copied = snapshot(cluster, tmp_path, "submitted", "submitted")
    manifest = decode_manifest((copied / MANIFEST_NAME).read_bytes(), "submitted")
    want = sum(1 for i in range(FIFO_MESSAGES) if i % 4 == 2)
    assert sum(q.message_count for q in manifest.queues) == want


def test_a_resent_partition_is_stored_once(cluster: LocalCluster) -> None:
    """The writer's retry story without Spark's scheduling: a task's first attempt sends
    part of its rows and dies; the second sends them all again, same write id and
    partition: every row is stored once, the resent ones absorbed by the dedup."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_batch.writer import Rip5Writer

    schema = StructType([StructField("body", BinaryType())])
    options = {"endpoints": cluster.brokers[0].endpoint, "topic": "retried", "writeId": "w1"}
    batches = [
        pa.RecordBatch.from_pydict({"body": [f"r{n}-{i}".encode() for i in range(100)]})
        for n in range(5)
    ]
    first = Rip5Writer(options, schema).write(iter(batches[:3]))  # then the task died
    again = Rip5Writer(options, schema).write(iter(batches))
    assert (first.messages, again.messages) == (300, 500)
    stored = stored_messages(cluster, "retried")
    assert sorted(r["body"] for r in stored) == sorted(
        b for batch in batches for b in batch["body"].to_pylist()
    )
