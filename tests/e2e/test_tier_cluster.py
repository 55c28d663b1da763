"""The tier on real processes: a local folder as the tier, leaders SIGKILLed while they
upload.

One cluster for the module: 1 nameserver, 3 storage nodes (4 raft groups) with
``--tier-url file://<tmp>/tier`` and small batches (50 messages or 200 ms),
retention rounds every 300 ms; one broker (for the official client; appends go to the
groups' leaders).
The topic keeps 1 ms locally: what is in the tier leaves the local disks.

Checked: every acknowledged message reaches the tier exactly once, in offset
order, in intact objects (``rip5 admin tier verify``: no gap, no overlap,
checksums); the local first offset follows the upload point and never passes
it; a reader from offset 0 gets every message (the old ones from the tier);
a fresh consumer group of the official client (SimpleConsumer) receives every
message, all of them only in the tier by then (``storage_node/tier_receive.py``);
after a leader is SIGKILLed during uploads (a few times), the new leader
resumes from the recorded upload point: still no gap and no duplicate, and any
object the dead leader wrote but did not record is left unrecorded. A leader
SIGSTOPped with uploads pending and resumed after its successor uploaded them:
every object recorded from the pause on carries the new term, and whatever the
old leader wrote late stays unrecorded.

Retention and topic deletion on the same cluster (its tier on): messages older
than a topic's ``retention_ms`` are trimmed locally and in the tier (reads of
them fail, the first offset moves up), a queue keeps about ``retention_bytes``
locally and in the tier, and a deleted topic's messages, consumer offsets, pop
state and tier objects are gone, so the topic created again with the same name
starts empty at offset 0.

Message query on the same cluster: messages only the tier holds are found by id
and key through the storage API, ``rip5 admin message show|query`` and the
broker's remoting QUERY_MESSAGE and VIEW_MESSAGE_BY_ID.

Last (it changes the cluster's nodes): a fourth storage node replaces node 3
(``rip5 admin node drain 3``); it is caught up by its leaders' snapshots, copies
far fewer bytes from its peers than the tier holds of the groups' history (its
log and metrics say both), reads old offsets from the tier, and the groups take
writes and reads after.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import StorageService
from protocol import storage_api as st
from protocol.message_objects import (
    block_records,
    decode_block,
    decode_footer,
    parse_tier_object_name,
)
from protocol.remoting import messages as messages_codec
from protocol.remoting.codes import RequestCode, ResponseCode
from rip5.admin_tier import group_manifests
from tests.contract.remoting_wire import WireClient
from tests.e2e.cluster import LocalCluster, free_port
from tests.e2e.storage_calls import (
    admin_cli,
    append,
    leader_of,
    on_queue,
    queue_info,
    read,
    read_ids,
    running,
)
from tests.e2e.test_official_client_cluster import run_client_in
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

LARGE_MB = int(os.environ.get("RIP5_TIER_TEST_MB", "0"))
"""Megabytes more to publish, upload and read back (0 in ``make test``)."""
KILLS = int(os.environ.get("RIP5_TIER_TEST_KILLS", "3"))
"""How many times a leader is SIGKILLed during uploads (3 in ``make test``)."""
SEED = int(os.environ.get("RIP5_TIER_TEST_SEED", "34"))
"""Seeds the kills' victims and moments (printed, so a run can be repeated)."""
TOPIC = "archived"
QUEUES = 2
WINDOW_SEGMENTS = 6
"""The WAL segments a storage node's disk may hold beyond the WAL it retains."""
WAL_RETAIN_MB = 64
"""The WAL a storage node retains in the large run (``--wal-retain-mb``; the default
256 MiB in ``make test``): well below what the run publishes, so its disks show the
trimmed data collected."""


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tier")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tier: Path) -> Iterator[LocalCluster]:
    """The module's cluster (see the module docstring)."""
    local = LocalCluster(
        tmp_path_factory.mktemp("tier-cluster"),
        brokers=1,
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
            *(("--wal-retain-mb", str(WAL_RETAIN_MB)) if LARGE_MB else ()),
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


def _publish(cluster: LocalCluster, serial: int, batches: int) -> dict[int, list[str]]:
    sent: dict[int, list[str]] = {}
    for batch in range(batches):
        for queue_id in range(QUEUES):
            ids = [f"q{queue_id}-s{serial}-b{batch}-m{i}" for i in range(20)]
            append(cluster, TOPIC, queue_id, ids)
            sent.setdefault(queue_id, []).extend(ids)
    return sent


def _publish_bulk(
    cluster: LocalCluster, megabytes: int, after_each: Callable[[], None] = lambda: None
) -> dict[int, list[str]]:
    """``megabytes`` MB of 64 KiB messages, 16 per append, over the queues in turn;
    ``after_each`` is called after every append."""
    sent: dict[int, list[str]] = {}
    for batch in range(megabytes):
        queue_id = batch % QUEUES
        ids = [f"bulk-b{batch}-m{i}" for i in range(16)]
        append(cluster, TOPIC, queue_id, ids, body_bytes=64 << 10)
        sent.setdefault(queue_id, []).extend(ids)
        after_each()
    return sent


def _group_offset(cluster: LocalCluster, group: str, queue_id: int) -> int | None:
    get = st.GetOffsetRequest(group, TOPIC, queue_id)
    found = on_queue(cluster, TOPIC, queue_id, lambda s, t: s.get_offset(get, timeout_ms=t))
    return found.offset


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
        assert read_ids(cluster, TOPIC, queue_id) == sent[queue_id]
    # A fresh consumer group of the official client (SimpleConsumer, through the broker)
    # receives and acks every message: all of them only in the tier now.
    admin(cluster, "group", "create", "tier-readers", *ns(cluster))
    every = sorted(sent[0] + sent[1])
    seen = run_client_in(cluster.root, "tier_consume_all", cluster.broker_port(0), len(every))
    assert sorted(set(seen["received"])) == every
    for queue_id in range(QUEUES):  # and the group's position is past them all
        assert _group_offset(cluster, "tier-readers", queue_id) == 160

    rng = random.Random(SEED)
    print(f"tier kills: {KILLS}, seed {SEED} (RIP5_TIER_TEST_KILLS, RIP5_TIER_TEST_SEED)")
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
        # Publish, then kill the leader of one of the queues' groups while it uploads:
        # a random moment, after a random number of appends (uploads run every 200 ms
        # for every 50 messages pending).
        more = _publish(cluster, serial, rng.randint(1, 8))
        node = leader_of(cluster, victim_group)
        cluster.storage[node].kill()
        more_after = _publish(cluster, serial + 10_000, 2)  # served by the new leader
        cluster.storage[node].start()
        for queue_id in range(QUEUES):
            sent[queue_id] += more[queue_id] + more_after[queue_id]
        wait_until(
            lambda: _all_uploaded(cluster, tier, sent),
            timeout_s=40,
            what=f"the uploads after kill {serial} (seed {SEED})",
        )
        verify(cluster, tier)
        print(f"kill {serial}: node {node}, the leader of group {victim_group}")
    final = tiered_ids(tier)
    for queue_id in range(QUEUES):
        assert len(final[queue_id]) == len(set(final[queue_id])), "a message is tiered twice"
        # Each new leader resumed where the recorded objects ended: along the offsets the
        # writers' terms never go back (no deposed leader's object was recorded after).
        terms = [_name_fields(name)[3] for name in _recorded_names(tier, queue_id)]
        assert terms == sorted(terms), f"queue {queue_id}: terms along the offsets {terms}"
        print(
            f"queue {queue_id}: {len(final[queue_id])} messages in {len(terms)} objects, "
            f"{len(set(terms)) - 1} resumes by a new leader (terms {sorted(set(terms))})"
        )
    if LARGE_MB:  # the larger run: docs/storage-node.md, "Tiered storage"
        _large_run(cluster, tier, sent)


def _disk_bytes(cluster: LocalCluster, node: int, under: str = "") -> int:
    """The bytes of storage node ``node``'s files (its data folder: WAL, state), or of
    its subfolder ``under``."""
    folder = cluster.root / f"storage-{node}" / under
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _large_run(cluster: LocalCluster, tier: Path, sent: dict[int, list[str]]) -> None:
    """``LARGE_MB`` MB more published, every message in the tier once, the local disks
    back to the window (local retention 1 ms: what is in the tier leaves them), and
    every message read back from offset 0, by a storage reader and by a fresh consumer
    group of the official client. Prints the run's figures."""
    published = LARGE_MB << 20
    disk_before = {node: _disk_bytes(cluster, node) for node in cluster.storage}
    disk_peak = dict(disk_before)

    def note_peak() -> None:
        for node in cluster.storage:
            disk_peak[node] = max(disk_peak[node], _disk_bytes(cluster, node))

    started = time.monotonic()
    bulk = _publish_bulk(cluster, LARGE_MB, note_peak)
    published_s = time.monotonic() - started
    for queue_id in range(QUEUES):
        sent[queue_id] += bulk[queue_id]
    wait_until(
        lambda: _all_uploaded(cluster, tier, sent),
        timeout_s=60 + 3 * LARGE_MB,
        what=f"{LARGE_MB} MB in the tier",
    )
    uploaded_s = time.monotonic() - started
    report = verify(cluster, tier)
    # The queues' local data goes once it is in the tier (local retention 1 ms)...
    wait_until(
        lambda: all(
            queue_info(cluster, TOPIC, q).local_first_offset == len(sent[q]) for q in range(QUEUES)
        ),
        timeout_s=60,
        what="the local trims up to the upload point",
    )
    # ...and a node's disk holds at most the window: the WAL it retains for its groups
    # (WAL_RETAIN_MB; past it the driver snapshots and collects the segments of the
    # trimmed entries) and the segments around it (the one written, spares, those being
    # collected).
    window = (WAL_RETAIN_MB << 20) + WINDOW_SEGMENTS * (16 << 20)
    disk_after = {node: _disk_bytes(cluster, node) for node in cluster.storage}
    wal_after = {node: _disk_bytes(cluster, node, "wal") for node in cluster.storage}
    print(
        f"large run: {sum(len(ids) for ids in bulk.values())} messages of 64 KiB "
        f"({published} bytes) published; tier verify clean: {report['objects']} objects, "
        f"{report['messages']} messages, {report['bytes']} bytes, "
        f"{len(report['unrecorded'])} unrecorded; published in {published_s:.0f} s, all "
        f"in the tier {uploaded_s:.0f} s from the start; local disk bytes per node before "
        f"{disk_before}, at most {disk_peak} while publishing, after {disk_after} (of it "
        f"the WAL {wal_after}; bound {window})"
    )
    read_back = {queue_id: read_ids(cluster, TOPIC, queue_id) for queue_id in range(QUEUES)}
    # A fresh consumer group of the official client receives every acked message from
    # offset 0 (the tier's first), nearly all of them only in the tier.
    admin(cluster, "group", "create", "tier-readers-large", *ns(cluster))
    every = sorted(sent[0] + sent[1])
    started = time.monotonic()
    seen = run_client_in(cluster.root, "tier_consume_all_large", cluster.broker_port(0), len(every))
    received = sorted(set(seen["received"]))
    print(
        f"large run read back: a fresh consumer group received {len(received)} of "
        f"{len(every)} acked messages ({len(seen['received'])} deliveries) in "
        f"{time.monotonic() - started:.0f} s"
    )
    # Checked once every figure is printed, so one run reports them all.
    assert max(disk_peak.values()) <= window
    assert max(disk_after.values()) <= window
    assert read_back == {queue_id: sent[queue_id] for queue_id in range(QUEUES)}
    assert received == every


def _recorded_names(tier: Path, queue_id: int) -> list[str]:
    """The recorded object names of the topic's queue, in offset order (its manifest)."""
    fs = fsspec.filesystem("file")
    for manifest in group_manifests(fs, str(tier)).values():
        for queue in manifest.queues:
            if (queue.topic, queue.queue_id) == (TOPIC, queue_id):
                return [entry.name for entry in queue.objects]
    return []


def _name_fields(name: str) -> tuple[str, int, int, int]:
    """(topic, queue id, first offset, term) of a tier object's name."""
    parsed = parse_tier_object_name(name)
    assert parsed is not None, name
    return parsed


def test_a_paused_then_resumed_leader_is_fenced(cluster: LocalCluster, tier: Path) -> None:
    """SIGSTOP a group's leader with messages waiting for their upload, let the next
    leader upload them, SIGCONT the old one: nothing it writes late is recorded."""
    sent = tiered_ids(tier)  # the test above left every message it sent in the tier
    group = queue_info(cluster, TOPIC, 0).group_id
    old_term = max(_name_fields(n)[3] for n in _recorded_names(tier, 0))
    node = leader_of(cluster, group)
    process = cluster.storage[node]
    assert process.popen is not None
    waiting = [f"paused-m{i}" for i in range(30)]  # under the batch of 50: they wait
    pause_offset = append(cluster, TOPIC, 0, waiting)[0]
    process.popen.send_signal(signal.SIGSTOP)
    try:
        later = [f"paused-later-m{i}" for i in range(30)]
        append(cluster, TOPIC, 0, later)  # a new leader takes it
        sent[0] += waiting + later
        wait_until(
            lambda: _all_uploaded(cluster, tier, sent),
            timeout_s=40,
            what="the new leader's uploads",
        )
    finally:
        process.popen.send_signal(signal.SIGCONT)
    # Once the resumed node took part again (a later append committed on the group and
    # uploaded), every object from the pause on is the new term's; anything of the old
    # term written late is unrecorded.
    resumed = [f"resumed-m{i}" for i in range(60)]
    append(cluster, TOPIC, 0, resumed)
    sent[0] += resumed
    wait_until(lambda: _all_uploaded(cluster, tier, sent), timeout_s=40, what="the uploads")
    report = verify(cluster, tier)
    names = _recorded_names(tier, 0)
    after = [n for n in names if _name_fields(n)[2] >= pause_offset]
    assert after, names
    assert all(_name_fields(n)[3] > old_term for n in after), (old_term, after)
    stale = [u.split("/", 2)[2] for u in report["unrecorded"] if f"/{TOPIC}/0/" in u]
    assert all(_name_fields(u)[3] <= old_term for u in stale), stale
    final = tiered_ids(tier)
    assert final == sent
    assert len(final[0]) == len(set(final[0]))


# -- retention and topic deletion (on the same cluster: its tier is on) -------------------


def ns(cluster: LocalCluster) -> tuple[str, str]:
    return ("--nameserver", cluster.nameserver_address)


def test_messages_past_the_retention_time_are_trimmed(cluster: LocalCluster) -> None:
    admin(
        cluster,
        "topic",
        "create",
        "expiring",
        "--queues",
        "2",
        "--retention-ms",
        "1500",
        *ns(cluster),
    )
    assert append(cluster, "expiring", 0, ["e0", "e1", "e2"]) == [0, 1, 2]
    assert append(cluster, "expiring", 1, ["e3"]) == [0]
    # Within the retention time nothing goes; past it, everything old does.
    assert queue_info(cluster, "expiring", 0).first_offset == 0
    wait_until(
        lambda: (
            queue_info(cluster, "expiring", 0).first_offset == 3
            and queue_info(cluster, "expiring", 1).first_offset == 1
        ),
        timeout_s=20,
        what="the expired messages to be trimmed",
    )
    with pytest.raises(AngeliaError) as gone:
        read(cluster, "expiring", 0, 0)
    assert "outside" in gone.value.message
    # New messages get new offsets (never reused) and stay for the retention time.
    assert append(cluster, "expiring", 0, ["e4"]) == [3]
    assert [m.message.message_id for m in read(cluster, "expiring", 0, 3).messages] == ["e4"]
    # Longer retention from now on: the next message is kept.
    admin(cluster, "topic", "update", "expiring", "--retention-ms", "3600000", *ns(cluster))
    listed = admin(cluster, "topic", "list", *ns(cluster))
    row = next(line for line in listed.splitlines() if " expiring " in line)
    assert "│ 1 h " in row, listed  # the retention, as a duration


def test_a_queue_keeps_at_most_its_retention_bytes(cluster: LocalCluster) -> None:
    admin(
        cluster,
        "topic",
        "create",
        "bounded",
        "--queues",
        "1",
        "--retention-bytes",
        "3000",
        *ns(cluster),
    )
    described = admin(cluster, "topic", "describe", "bounded", *ns(cluster))
    assert "bytes 2.9 KiB" in described  # 3,000 bytes, in binary units
    for i in range(12):  # one log entry each, about 500 bytes
        append(cluster, "bounded", 0, [f"b{i}"])
    # Both the local log (entries) and the tier (objects) are cut to about 3000 bytes.
    info = wait_until(
        lambda: (info := queue_info(cluster, "bounded", 0)).first_offset > 0 and info,
        timeout_s=20,
        what="the queue to be trimmed to its byte limit",
    )
    assert isinstance(info, st.QueueInfoResponse)
    assert info.end_offset == 12
    kept = read_ids(cluster, "bounded", 0, info.first_offset)
    assert 2 <= len(kept) < 12, f"kept {len(kept)} messages of about 500 bytes for 3000"
    assert kept == [f"b{i}" for i in range(12 - len(kept), 12)]


def test_a_deleted_topic_leaves_no_data_and_starts_again_empty(
    cluster: LocalCluster, tier: Path
) -> None:
    admin(cluster, "topic", "create", "doomed", "--queues", "2", *ns(cluster))
    admin(cluster, "group", "create", "readers", *ns(cluster))
    append(cluster, "doomed", 0, ["d0", "d1", "d2"])
    append(cluster, "doomed", 1, ["d3"])
    # A consumer group with a committed offset on one queue and leases on the other.
    commit = st.CommitOffsetRequest("readers", "doomed", 0, 2)
    on_queue(cluster, "doomed", 0, lambda s, t: s.commit_offset(commit, timeout_ms=t))
    receive = st.ReceiveRequest("readers", "doomed", 1, 4, 60_000)
    received = on_queue(cluster, "doomed", 1, lambda s, t: s.receive(receive, timeout_ms=t))
    assert [m.message.message.message_id for m in received.messages] == ["d3"]

    wait_until(
        lambda: list(tier.glob("groups/*/objects/doomed/*/*.r5mo")),
        timeout_s=20,
        what="the topic's messages in the tier",
    )
    output = admin(cluster, "topic", "delete", "doomed", "--wait-ms", "20000", *ns(cluster))
    assert "dropped from every queue" in output
    # Its tier objects go too (deleted by the leaders that dropped the topic).
    wait_until(
        lambda: not list(tier.glob("groups/*/objects/doomed/*/*.r5mo")),
        timeout_s=20,
        what="the deleted topic's tier objects to go",
    )
    admin(cluster, "topic", "create", "doomed", "--queues", "2", *ns(cluster))
    for queue_id in (0, 1):
        info = queue_info(cluster, "doomed", queue_id)
        assert (info.first_offset, info.end_offset) == (0, 0)
    get = st.GetOffsetRequest("readers", "doomed", 0)
    offset = on_queue(cluster, "doomed", 0, lambda s, t: s.get_offset(get, timeout_ms=t))
    assert offset.offset is None  # the group's position went with the topic
    # The old lease is gone: its handle no longer acks.
    ack = st.AckRequest("readers", "doomed", 1, [received.messages[0].handle])
    acked = on_queue(cluster, "doomed", 1, lambda s, t: s.ack(ack, timeout_ms=t))
    assert acked.outcomes[0].error_code != 0
    # Created again: offsets from 0, and the group sees only the new message.
    assert append(cluster, "doomed", 1, ["n0"]) == [0]
    again = on_queue(cluster, "doomed", 1, lambda s, t: s.receive(receive, timeout_ms=t))
    assert [m.message.message.message_id for m in again.messages] == ["n0"]


# -- message query of messages only the tier holds ----------------------------------------


def test_a_query_by_id_or_key_finds_messages_only_the_tier_holds(cluster: LocalCluster) -> None:
    """Messages whose local copies are trimmed (local retention 1 ms) are found by id
    and by key: through the storage API, ``rip5 admin message query|show`` and the
    broker's remoting QUERY_MESSAGE (key and unique id) and VIEW_MESSAGE_BY_ID."""
    topic = "queried"
    admin(cluster, "topic", "create", topic, "--queues", "1", "--local-retention-ms", "1",
          *ns(cluster))  # fmt: skip
    messages = [
        st.Message(topic, 0, f"qm{i}", b"body-%d" % i, keys=[f"key{i % 3}", "every"])
        for i in range(60)  # over a batch of 50: an object at once, the rest after 200 ms
    ]
    request = st.AppendRequest(topic, 0, messages)
    on_queue(cluster, topic, 0, lambda s, t: s.append(request, timeout_ms=t))
    more = st.AppendRequest(topic, 0, [st.Message(topic, 0, "local", b"l", keys=["key1"])])
    wait_until(
        lambda: queue_info(cluster, topic, 0).local_first_offset == 60,
        timeout_s=20,
        what="the local copies trimmed after their upload",
    )
    on_queue(cluster, topic, 0, lambda s, t: s.append(more, timeout_ms=t))  # offset 60, local
    group_id = queue_info(cluster, topic, 0).group_id

    def query(**fields: Any) -> list[tuple[int, str]]:
        asked = st.QueryMessagesRequest(group_id, topic, limit=100, **fields)
        found = on_queue(cluster, topic, 0, lambda s, t: s.query_messages(asked, timeout_ms=t))
        assert found.complete
        return [(m.queue_offset, m.message.message_id) for m in found.messages]

    assert query(message_id="qm17") == [(17, "qm17")]
    key1 = [(i, f"qm{i}") for i in range(60) if i % 3 == 1] + [(60, "local")]
    assert query(key="key1") == key1  # the tier's first, then the local one
    assert len(query(key="every")) == 60
    # A time range before every store time finds nothing in the tier.
    assert query(key="key1", begin_ms=0, end_ms=1) == []

    shown = json.loads(admin(cluster, "message", "show", "qm42", "--topic", topic, "--json",
                             *ns(cluster)))  # fmt: skip
    assert [(m["queue_offset"], m["keys"]) for m in shown["messages"]] == [(42, ["key0", "every"])]
    listed = json.loads(admin(cluster, "message", "query", "--topic", topic, "--key", "key2",
                              "--json", *ns(cluster)))  # fmt: skip
    assert [m["message_id"] for m in listed["messages"]] == [f"qm{i}" for i in range(2, 60, 3)]

    async def remoting() -> None:
        (address,) = cluster.remoting_addresses
        client = await WireClient.connect(int(address.rpartition(":")[2]))
        try:
            by_key = {"topic": topic, "key": "key2", "maxNum": "64",
                      "beginTimestamp": "0", "endTimestamp": str(1 << 50)}  # fmt: skip
            answer = await client.call(RequestCode.QUERY_MESSAGE, by_key)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            found = [r.body for r in messages_codec.parse_message_exts(answer.body)]
            assert sorted(found) == sorted(b"body-%d" % i for i in range(2, 60, 3))
            by_id = {**by_key, "key": "qm5", "_UNIQUE_KEY_QUERY": "true"}
            answer = await client.call(RequestCode.QUERY_MESSAGE, by_id)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            (record,) = messages_codec.parse_message_exts(answer.body)
            assert (record.body, record.queue_offset) == (b"body-5", 5)
            view = {"offset": str(7), "topic": topic}  # queue 0, offset 7
            answer = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, view)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            (record,) = messages_codec.parse_message_exts(answer.body)
            assert (record.body, record.queue_offset) == (b"body-7", 7)
        finally:
            await client.close()

    asyncio.run(remoting())


# -- a fourth storage node replaces one of three (bootstrap from the tier) ----------------


def _metric(cluster: LocalCluster, process: str, metric: str, label: str = "") -> float:
    """The sum of ``metric``'s series carrying ``label`` (e.g. ``source="snapshot"``) on
    ``process``'s /metrics page (0 if none)."""
    address = cluster.metrics_addresses[process]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as page:
        lines = page.read().decode().splitlines()
    series = [line.rpartition(" ") for line in lines if line.startswith(metric + "{")]
    return sum(float(value) for name, _, value in series if label in name)


def _read_from(address: str, topic: str, queue_id: int, offset: int) -> list[str]:
    """Message ids of a queue from ``offset`` as the replica at ``address`` serves them
    (a read-replica read: any replica answers from what it applied)."""

    async def run() -> list[str]:
        peers = Peers(RpcConfig())
        try:
            stub = peers.stub(StorageService, address)
            request = st.ReadRequest(topic, queue_id, offset, count_max=100, from_follower=True)
            response = await stub.read(request, timeout_ms=10_000)
            return [m.message.message_id for m in response.messages]
        finally:
            await peers.close()

    return asyncio.run(run())


def test_a_fourth_node_replaces_one_of_three_from_the_snapshot_and_the_tier(
    cluster: LocalCluster, tier: Path
) -> None:
    """Node 4 starts and node 3 is drained: node 4 joins every group as a learner, caught
    up by the leader's snapshot (its tier records and the local window's bodies), not by
    the log of messages only the tier holds; it reads those from the tier. Reported:
    bytes copied from peers vs bytes of history in the tier (node 4's log and metrics)."""
    history = tiered_ids(tier)
    address = f"127.0.0.1:{free_port()}"
    joined = cluster._process(
        "storage", "storage-4", "--listen", address, "--node-id", "4",
        "--nameserver", cluster.nameserver_address, "--groups", str(cluster.groups),
        *cluster.storage_flags,
    )  # fmt: skip
    cluster.storage_addresses[4] = address
    cluster.storage[4] = joined
    joined.start()
    output = admin(cluster, "node", "drain", "3", "--timeout-s", "60", *ns(cluster))
    assert output.rstrip().endswith(": drained"), output
    log = (cluster.root / "storage-4.log").read_text()
    assert "joined from the leader's snapshot" in log, log[-2000:]
    copied = "rip5_storage_joined_copied_bytes"
    wait_until(  # the metrics are read from the node every few seconds
        lambda: _metric(cluster, "storage-4", copied, 'source="snapshot"') > 0,
        timeout_s=20,
        what="node 4's metrics",
    )
    copied_snapshot = _metric(cluster, "storage-4", copied, 'source="snapshot"')
    copied_entries = _metric(cluster, "storage-4", copied, 'source="entries"')
    in_tier = _metric(cluster, "storage-4", "rip5_storage_joined_tier_bytes")
    print(
        f"node 4 joined: copied {copied_snapshot:.0f} bytes of snapshots and "
        f"{copied_entries:.0f} bytes of log entries from peers; {in_tier:.0f} bytes of "
        "history read from the tier"
    )
    assert copied_snapshot > 0
    assert in_tier > copied_snapshot + copied_entries  # the history came from the tier
    # Node 4 serves the old offsets from the tier (read replica reads, on node 4 itself).
    for queue_id in range(QUEUES):
        assert _read_from(address, TOPIC, queue_id, 0) == history[queue_id][:100]
    wait_until(
        lambda: _metric(cluster, "storage-4", "rip5_storage_tier_read_bytes") > 0,
        timeout_s=20,
        what="node 4's tier reads in its metrics",
    )
    # The groups serve writes and reads after: new messages at their ends, the whole
    # history from offset 0 (the tier's part and the local part).
    for queue_id in range(QUEUES):
        ids = [f"after-join-q{queue_id}-m{i}" for i in range(5)]
        append(cluster, TOPIC, queue_id, ids)
        assert read_ids(cluster, TOPIC, queue_id, 0)[-5:] == ids
        assert read_ids(cluster, TOPIC, queue_id, 0)[: len(history[queue_id])] == history[queue_id]
