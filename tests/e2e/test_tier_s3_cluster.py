"""The tier on an S3 server on loopback (moto's ThreadedMotoServer), with an outage.

One cluster of real processes (1 nameserver, 3 storage nodes, 2 raft groups),
``--tier-url s3://<bucket>/<prefix>``; credentials and the endpoint reach the
storage nodes and ``rip5 admin tier`` through the environment only
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``).

Checked: committed messages reach S3 and ``tier verify`` is clean; while S3 is
down (30 s: ``RIP5_TIER_S3_OUTAGE_S``), appends and reads of recent messages go
on and reads of tiered messages fail with a retriable error naming the tier;
once S3 is back the uploads catch up with no gap, and a reader from offset 0
gets every message.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest
from moto.server import ThreadedMotoServer

from angelia_rpc import AngeliaError
from angelia_rpc.ports import free_port
from protocol import storage_api as st
from rip5.admin_tier import group_manifests
from tests.e2e.cluster import LocalCluster
from tests.e2e.storage_calls import admin_cli, append, queue_info, read, read_ids, running
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

BUCKET = "rip5-tier"
TIER_URL = f"s3://{BUCKET}/cluster-1"
TOPIC = "cold"
OUTAGE_S = int(os.environ.get("RIP5_TIER_S3_OUTAGE_S", "30"))
"""How long S3 stays down at least, publishing all along (the issue's 30 s)."""


@pytest.fixture(scope="module")
def s3() -> Iterator[ThreadedMotoServer]:
    """An S3 server on loopback; the environment names it (restored after)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # A fixed port: the server is stopped and started again on it (the outage).
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="rip5-test",
        AWS_SECRET_ACCESS_KEY="rip5-test-secret",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        fs, _ = fsspec.core.url_to_fs(TIER_URL, skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield server
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, s3: ThreadedMotoServer
) -> Iterator[LocalCluster]:
    local = LocalCluster(
        tmp_path_factory.mktemp("tier-s3-cluster"),
        brokers=0,
        groups=2,
        storage_flags=(
            "--tier-url",
            TIER_URL,
            "--tier-batch-messages",
            "40",
            "--tier-batch-wait-ms",
            "200",
            "--retention-check-ms",
            "300",
        ),
    )
    yield from running(local)


def tiered_end(queue_id: int) -> int:
    """Where the tier's recorded objects of the queue end (0: none)."""
    fs, root = fsspec.core.url_to_fs(TIER_URL)
    for manifest in group_manifests(fs, root).values():
        for queue in manifest.queues:
            if (queue.topic, queue.queue_id) == (TOPIC, queue_id):
                return queue.end_offset
    return 0


def status_row(cluster: LocalCluster) -> dict[str, Any]:
    """The topic's row of ``rip5 admin tier status --json`` (the tier's last manifest and
    the leader's view: lag and last upload error)."""
    nameserver = ("--nameserver", cluster.nameserver_address)
    rows = json.loads(admin_cli("tier", "status", "--tier-url", TIER_URL, *nameserver, "--json"))
    (row,) = [r for r in rows if r["topic"] == TOPIC]
    assert isinstance(row, dict)
    return row


def _lags_at_least(cluster: LocalCluster, lag_ms: int) -> bool:
    """Whether the leader reports the queue's oldest message not uploaded as stored
    ``lag_ms`` or more ago."""
    return queue_info(cluster, TOPIC, 0).tier_lag_ms >= lag_ms


def publish(cluster: LocalCluster, serial: int, batches: int) -> list[str]:
    sent = []
    for batch in range(batches):
        ids = [f"s{serial}-b{batch}-m{i}" for i in range(20)]
        append(cluster, TOPIC, 0, ids)
        sent += ids
    return sent


def test_uploads_to_s3_survive_an_outage(cluster: LocalCluster, s3: ThreadedMotoServer) -> None:
    nameserver = ("--nameserver", cluster.nameserver_address)
    admin_cli("topic", "create", TOPIC, "--queues", "1", "--local-retention-ms", "1", *nameserver)
    sent = publish(cluster, 0, 6)
    wait_until(lambda: tiered_end(0) == len(sent), timeout_s=30, what="the uploads to S3")
    wait_until(
        lambda: queue_info(cluster, TOPIC, 0).local_first_offset == len(sent),
        timeout_s=20,
        what="the local trim",
    )
    report = json.loads(admin_cli("tier", "verify", "--tier-url", TIER_URL, "--json"))
    assert report["clean"], report
    assert report["messages"] == len(sent), report

    s3.stop()  # the outage
    try:
        with pytest.raises(AngeliaError) as outage:
            read(cluster, TOPIC, 0, 0)
        assert outage.value.retriable
        assert "tier" in outage.value.message
        during = publish(cluster, 1, 4)  # appends go on
        assert read_ids(cluster, TOPIC, 0, len(sent)) == during  # and so do recent reads
        # Nothing is trimmed past the upload point while uploads fail.
        assert queue_info(cluster, TOPIC, 0).local_first_offset == len(sent)
        # The group's leader reports the lag (what tier status shows; the command itself
        # needs the tier's manifests). The uploader's write is still inside the S3
        # driver's own retries here, so no error is reported yet.
        failing = wait_until(
            lambda: (info := queue_info(cluster, TOPIC, 0)).tier_lag_ms > 0 and info,
            timeout_s=20,
            what="the upload lag in the leader's queue info",
        )
        assert isinstance(failing, st.QueueInfoResponse)
        assert failing.tier_upload_point == len(sent)
        assert failing.tier_lag_bytes > 0
        assert failing.tier_lag_ms > 0
        # The outage goes on for OUTAGE_S: publishing goes on through it, a batch each
        # second of upload lag as the leader reports it (the oldest message not uploaded
        # was stored when the outage began), and nothing is trimmed past the upload point.
        for second in range(1, OUTAGE_S + 1):
            during += publish(cluster, 100 + second, 1)
            wait_until(
                functools.partial(_lags_at_least, cluster, second * 1000),
                timeout_s=10,
                what=f"an upload lag of {second} s",
            )
        assert read_ids(cluster, TOPIC, 0, len(sent)) == during
        stalled = queue_info(cluster, TOPIC, 0)
        assert stalled.local_first_offset == len(sent)
        assert stalled.tier_upload_point == len(sent)
    finally:
        s3.start()  # the same port; the S3 state lives on in this process
    sent += during
    wait_until(lambda: tiered_end(0) == len(sent), timeout_s=40, what="the uploads to catch up")
    report = json.loads(admin_cli("tier", "verify", "--tier-url", TIER_URL, "--json"))
    assert report["clean"], report
    assert report["messages"] == len(sent), report
    assert queue_info(cluster, TOPIC, 0).first_offset == 0
    assert read_ids(cluster, TOPIC, 0, 0) == sent
    caught_up = wait_until(
        lambda: (row := status_row(cluster)) and not row["last_error"] and row,
        timeout_s=20,
        what="tier status to clear the error",
    )
    assert isinstance(caught_up, dict)
    assert (caught_up["lag_messages"], caught_up["lag_bytes"], caught_up["lag_ms"]) == (0, 0, 0)
