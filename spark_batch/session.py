"""A Spark session that can run the ``rip5`` data source.

Spark's Python workers start whatever ``python3`` is on PATH unless told
otherwise, and then cannot import pyarrow or this project: the session's
workers run this very interpreter (``PYSPARK_PYTHON`` and
``spark.pyspark.python``). Under ``spark-submit`` the session it built is
reused as it is, with the data source registered.

SHELL (starts a JVM).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_batch.source import Rip5DataSource

DEFAULT_MASTER = "local[2]"


QUICK_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""A driver JVM that starts fast (the client compiler only, the serial collector): for
tests and short jobs. A long read runs about 1.5x slower in it than in a JVM with
its full compiler (``rip5 bench spark``, 1,000,000 messages: measured side by side)."""
FULL_SPEED_JAVA_OPTIONS = "-XX:+UseParallelGC"
"""A driver JVM that reaches full speed once warm (both compilers): for long reads."""


def spark_session(
    master: str | None = None, app_name: str = "rip5", *, quick_start: bool = True
) -> SparkSession:
    """The active session (spark-submit's), or a new one on ``master`` (default
    ``local[2]``), with the ``rip5`` format registered; ``quick_start``: a new
    session's driver JVM starts fast rather than running long reads at full speed
    (:data:`QUICK_START_JAVA_OPTIONS`, else :data:`FULL_SPEED_JAVA_OPTIONS`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    # Under spark-submit (its JVM hands the driver a gateway port) the master and
    # the rest come from spark-submit's configuration.
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or DEFAULT_MASTER)
    spark = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config(
            "spark.driver.extraJavaOptions",
            QUICK_START_JAVA_OPTIONS if quick_start else FULL_SPEED_JAVA_OPTIONS,
        )
        .getOrCreate()
    )
    spark.dataSource.register(Rip5DataSource)
    return spark
