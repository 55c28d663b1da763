"""Spark jobs over snapshots: ``rip5 spark stats|export|pipeline``.

- ``stats``: per topic and hour of store time, the messages, their body
  bytes and the store-minus-born latency p50 and p99 (ms, approximate);
- ``export``: a topic's messages to Parquet, partitioned by store date;
- ``pipeline``: a small example pipeline: read topic A from a snapshot,
  keep the messages of a tag (all by default), mark each with where it came
  from (property ``rip5.source`` = ``topic:queue:offset``), and write them
  to topic B through the brokers.

The same commands run under spark-submit::

    PYSPARK_PYTHON=.venv/bin/python spark-submit spark_batch/jobs.py stats SNAPSHOT_URL

(``PYSPARK_PYTHON``: the driver and the workers must run an interpreter that
has pyarrow and this project, installed or on ``PYTHONPATH``).

SHELL (Spark).
"""

from __future__ import annotations

import sys

import click
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_batch.session import spark_session

SOURCE_PROPERTY = "rip5.source"
STATS_COLUMNS = "topic,body,born_timestamp,store_timestamp"
"""The columns :func:`stats` uses: the stats job reads only these (Spark prunes
nothing for a Python source, so the read must ask)."""


def read_snapshot(
    spark: SparkSession, url: str, topic: str | None = None, options: dict[str, str] | None = None
) -> DataFrame:
    """The messages of a snapshot (of one topic when given) as a DataFrame."""
    reader = spark.read.format("rip5")
    if topic:
        reader = reader.option("topic", topic)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load(url)


def stats(messages: DataFrame) -> DataFrame:
    """Per topic and hour: messages, body bytes, latency p50 and p99 in ms."""
    latency = F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp")
    return (
        messages.withColumn("hour", F.date_trunc("hour", "store_timestamp"))
        .withColumn("latency_ms", latency)
        .groupBy("topic", "hour")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(F.length("body")).alias("bytes"),
            F.percentile_approx("latency_ms", 0.5).alias("latency_p50_ms"),
            F.percentile_approx("latency_ms", 0.99).alias("latency_p99_ms"),
        )
        .orderBy("topic", "hour")
    )


def export(messages: DataFrame, out: str) -> None:
    """Write the messages as Parquet under ``out``, partitioned by store date."""
    (
        messages.withColumn("date", F.to_date("store_timestamp"))
        .write.mode("overwrite")
        .partitionBy("date")
        .parquet(out)
    )


def transform(messages: DataFrame, tag: str | None = None) -> DataFrame:
    """The example pipeline's step: messages of ``tag`` (all if None) as messages to
    send, each marked with its source (property :data:`SOURCE_PROPERTY`)."""
    if tag is not None:
        messages = messages.where(F.col("tag") == tag)
    source = F.concat_ws(":", "topic", "queue_id", "queue_offset")
    return messages.select(
        "body",
        "tag",
        "keys",
        F.map_concat(
            F.coalesce("properties", F.create_map().cast("map<string,string>")),
            F.create_map(F.lit(SOURCE_PROPERTY), source),
        ).alias("properties"),
        "message_group",
    )


def write_topic(messages: DataFrame, endpoints: str, topic: str, write_id: str = "") -> None:
    """Send the messages to ``topic`` through the brokers at ``endpoints``."""
    writer = messages.write.format("rip5").option("endpoints", endpoints).option("topic", topic)
    if write_id:
        writer = writer.option("writeId", write_id)
    writer.mode("append").save()


master_option = click.option(
    "--master", default=None, help="Spark master (default local[2]; spark-submit's under it)"
)


@click.group()
def spark() -> None:
    """Spark jobs over snapshots: stats | export | pipeline."""


@spark.command("stats")
@click.argument("snapshot")
@click.option("--topic", default=None, help="only this topic")
@master_option
def stats_command(snapshot: str, topic: str | None, master: str | None) -> None:
    """Messages, bytes and latency p50/p99 per topic and hour of SNAPSHOT."""
    session = spark_session(master, "rip5 stats")
    rows = stats(read_snapshot(session, snapshot, topic, {"columns": STATS_COLUMNS})).collect()
    click.echo("topic\thour\tmessages\tbytes\tlatency_p50_ms\tlatency_p99_ms")
    for row in rows:
        click.echo(
            f"{row.topic}\t{row.hour.isoformat()}\t{row.messages}\t{row.bytes}\t"
            f"{row.latency_p50_ms}\t{row.latency_p99_ms}"
        )


@spark.command("export")
@click.argument("snapshot")
@click.option("--topic", required=True)
@click.option("--out", required=True, help="folder or URL of the Parquet dataset")
@master_option
def export_command(snapshot: str, topic: str, out: str, master: str | None) -> None:
    """Write TOPIC of SNAPSHOT to Parquet under OUT, partitioned by date."""
    session = spark_session(master, "rip5 export")
    export(read_snapshot(session, snapshot, topic), out)
    click.echo(f"exported topic {topic} of {snapshot} to {out}")


@spark.command("pipeline")
@click.argument("snapshot")
@click.option("--from", "source", required=True, help="the topic to read")
@click.option("--to", "target", required=True, help="the topic to write")
@click.option("--endpoints", required=True, help="host:port,... of brokers")
@click.option("--tag", default=None, help="keep only messages with this tag")
@click.option("--write-id", default="", help="rerun with the same id: no duplicates")
@master_option
def pipeline_command(
    snapshot: str,
    source: str,
    target: str,
    endpoints: str,
    tag: str | None,
    write_id: str,
    master: str | None,
) -> None:
    """Read SOURCE from SNAPSHOT, keep TAG, mark the source, write to TARGET."""
    session = spark_session(master, "rip5 pipeline")
    messages = transform(read_snapshot(session, snapshot, source), tag)
    write_topic(messages, endpoints, target, write_id)
    click.echo(f"pipeline {source} -> {target}: done")


if __name__ == "__main__":  # spark-submit spark_batch/jobs.py JOB ...
    spark(sys.argv[1:])
