"""The tier on real processes: a local folder as the tier, leaders SIGKILLed while they
upload.

One cluster for the module: 1 nameserver, 3 storage nodes (4 raft groups) with
``--tier-url file://<tmp>/tier`` and small batches (50 messages or 200 ms),
retention rounds every 300 ms; no broker (appends go to the groups' leaders).
The topic keeps 1 ms locally: what is in the tier leaves the local disks.

Checked: every acknowledged message reaches the tier exactly once, in offset
order, in intact objects (``rip5 admin tier verify``: no gap, no overlap,
checksums); the local first offset follows the upload point and never passes
it; a reader from offset 0 gets every message (the old ones from the tier);
after a leader is SIGKILLed during uploads (a few times), the new leader
resumes from the recorded upload point: still no gap and no duplicate, and any
object the dead leader wrote but did not record is left unrecorded.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from protocol.message_objects import block_records, decode_block, decode_footer
from rip5.admin_tier import group_manifests
from tests.e2e.cluster import LocalCluster
from tests.e2e.storage_calls import admin_cli, append, leader_of, queue_info, read, running
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

LARGE_MB = int(os.environ.get("RIP5_TIER_TEST_MB", "0"))
"""Megabytes more to publish, upload and read back (0 in ``make test``)."""
TOPIC = "archived"
QUEUES = 2
KILLS = 3


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tier")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tier: Path) -> Iterator[LocalCluster]:
    """The module's cluster (see the module docstring)."""
    local = LocalCluster(
        tmp_path_factory.mktemp("tier-cluster"),
        brokers=0,
        groups=4,
        storage_flags=(
            "--tier-url",
            f"file://{tier}",
            "--tier-batch-messages",
            "50",
            "--tier-batch-wait-ms",
            "200",
            "--retention-check-ms",
            "300",
        ),
    )
    yield from running(local)


def admin(cluster: LocalCluster, *argv: str, code: int = 0) -> str:
    """``rip5 admin ARGV``; its output."""
    return admin_cli(*argv, code=code)


def tiered_ids(tier: Path) -> dict[int, list[str]]:
    """The message ids the tier's recorded objects hold, per queue of the topic, in
    offset order (read with nothing but protocol.message_objects)."""
    fs = fsspec.filesystem("file")
    ids: dict[int, list[str]] = {}
    for group_id, manifest in group_manifests(fs, str(tier)).items():
        for queue in manifest.queues:
            if queue.topic != TOPIC:
                continue
            assert queue.first_offset == 0
            for entry in queue.objects:
                data = (tier / "groups" / f"{group_id:05d}" / entry.name).read_bytes()
                footer = decode_footer(data, entry.name, len(data))
                for block in footer.blocks:
                    piece = data[block.position : block.position + block.length]
                    records = block_records(decode_block(piece, block, entry.name))
                    ids.setdefault(queue.queue_id, []).extend(r.message_id for r in records)
    return ids


def verify(cluster: LocalCluster, tier: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        admin(cluster, "tier", "verify", "--tier-url", f"file://{tier}", "--json")
    )
    assert report["clean"], report["problems"]
    return report


def read_all(cluster: LocalCluster, queue_id: int) -> list[str]:
    """Every message id of the queue from its first offset, read as a pull consumer does."""
    ids: list[str] = []
    offset = queue_info(cluster, TOPIC, queue_id).first_offset
    while True:
        response = read(cluster, TOPIC, queue_id, offset)
        ids += [m.message.message_id for m in response.messages]
        if response.next_offset >= response.end_offset:
            return ids
        assert response.next_offset > offset, "a read made no progress"
        offset = response.next_offset


def _publish(cluster: LocalCluster, serial: int, batches: int) -> dict[int, list[str]]:
    sent: dict[int, list[str]] = {}
    for batch in range(batches):
        for queue_id in range(QUEUES):
            ids = [f"q{queue_id}-s{serial}-b{batch}-m{i}" for i in range(20)]
            append(cluster, TOPIC, queue_id, ids)
            sent.setdefault(queue_id, []).extend(ids)
    return sent


def _publish_bulk(cluster: LocalCluster, megabytes: int) -> dict[int, list[str]]:
    """``megabytes`` MB of 64 KiB messages, 16 per append, over the queues in turn."""
    sent: dict[int, list[str]] = {}
    for batch in range(megabytes):
        queue_id = batch % QUEUES
        ids = [f"bulk-b{batch}-m{i}" for i in range(16)]
        append(cluster, TOPIC, queue_id, ids, body_bytes=64 << 10)
        sent.setdefault(queue_id, []).extend(ids)
    return sent


def _all_uploaded(cluster: LocalCluster, tier: Path, sent: dict[int, list[str]]) -> bool:
    return tiered_ids(tier) == sent


def test_committed_messages_reach_the_tier_once_and_leave_the_local_disks(
    cluster: LocalCluster, tier: Path
) -> None:
    admin(
        cluster,
        "topic",
        "create",
        TOPIC,
        "--queues",
        str(QUEUES),
        "--local-retention-ms",
        "1",
        "--nameserver",
        cluster.nameserver_address,
    )
    sent = _publish(cluster, 0, 8)  # 160 messages per queue
    wait_until(lambda: _all_uploaded(cluster, tier, sent), timeout_s=30, what="the uploads")
    # Local data goes once it is in the tier (local retention 1 ms), never past it.
    wait_until(
        lambda: all(queue_info(cluster, TOPIC, q).local_first_offset == 160 for q in range(QUEUES)),
        timeout_s=20,
        what="the local trims up to the upload point",
    )
    report = verify(cluster, tier)
    assert report["messages"] >= 2 * 160
    # A reader from offset 0 (the first offset reported: the tier's) gets every
    # message, from the tier below the local first offset.
    for queue_id in range(QUEUES):
        assert queue_info(cluster, TOPIC, queue_id).first_offset == 0
        assert read_all(cluster, queue_id) == sent[queue_id]

    rng = random.Random(34)
    for serial in range(1, KILLS + 1):
        status = admin(
            cluster,
            "tier",
            "status",
            "--tier-url",
            f"file://{tier}",
            "--nameserver",
            cluster.nameserver_address,
            "--json",
        )
        rows = [r for r in json.loads(status) if r["topic"] == TOPIC]
        victim_group = rng.choice(rows)["group"]
        # Publish, then kill the leader of one of the queues' groups while it uploads.
        more = _publish(cluster, serial, 4)
        node = leader_of(cluster, victim_group)
        cluster.storage[node].kill()
        more_after = _publish(cluster, serial + 100, 2)  # served by the new leader
        cluster.storage[node].start()
        for queue_id in range(QUEUES):
            sent[queue_id] += more[queue_id] + more_after[queue_id]
        wait_until(
            lambda: _all_uploaded(cluster, tier, sent),
            timeout_s=40,
            what=f"the uploads after kill {serial}",
        )
        verify(cluster, tier)
    final = tiered_ids(tier)
    for queue_id in range(QUEUES):
        assert len(final[queue_id]) == len(set(final[queue_id])), "a message is tiered twice"
    if LARGE_MB:  # the larger run: docs/storage-node.md, "Tiered storage"
        bulk = _publish_bulk(cluster, LARGE_MB)
        for queue_id in range(QUEUES):
            sent[queue_id] += bulk[queue_id]
        wait_until(
            lambda: _all_uploaded(cluster, tier, sent),
            timeout_s=60 + 3 * LARGE_MB,
            what=f"{LARGE_MB} MB in the tier",
        )
        verify(cluster, tier)
        for queue_id in range(QUEUES):
            assert read_all(cluster, queue_id) == sent[queue_id]
