"""Per-topic retention and topic deletion on real processes.

One cluster for the module: 1 nameserver, 3 storage nodes (4 raft groups,
retention rounds every 300 ms), no broker: messages go straight to the groups'
leaders (``storage.append``), as the broker's storage port sends them. Topics are
created, updated and deleted with ``rip5 admin topic`` as an operator types it.

Checked: messages older than a topic's ``retention_ms`` are trimmed (reads of
them fail, the first offset moves up), a queue keeps at most ``retention_bytes``
of log entries, and a deleted topic's messages, consumer offsets and pop state
are gone on every queue, so the topic created again with the same name starts
empty at offset 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest

from angelia_rpc import AngeliaError
from protocol import storage_api as st
from tests.e2e.cluster import LocalCluster
from tests.e2e.storage_calls import admin_cli, append, on_queue, queue_info, read, running
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

T = TypeVar("T")
RETENTION_CHECK_MS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster (see the module docstring)."""
    local = LocalCluster(
        tmp_path_factory.mktemp("retention-cluster"),
        brokers=0,
        groups=4,
        storage_flags=("--retention-check-ms", str(RETENTION_CHECK_MS)),
    )
    yield from running(local)


def admin(cluster: LocalCluster, *argv: str, code: int = 0) -> str:
    """``rip5 admin ARGV`` against the cluster; its output."""
    return admin_cli(*argv, "--nameserver", cluster.nameserver_address, code=code)


def test_messages_past_the_retention_time_are_trimmed(cluster: LocalCluster) -> None:
    admin(cluster, "topic", "create", "expiring", "--queues", "2", "--retention-ms", "1500")
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
    admin(cluster, "topic", "update", "expiring", "--retention-ms", "3600000")
    listed = admin(cluster, "topic", "list")
    assert "3600000" in listed


def test_a_queue_keeps_at_most_its_retention_bytes(cluster: LocalCluster) -> None:
    admin(cluster, "topic", "create", "bounded", "--queues", "1", "--retention-bytes", "3000")
    assert "retention_bytes=3000" in admin(cluster, "topic", "describe", "bounded")
    for i in range(12):  # one log entry each, about 500 bytes
        append(cluster, "bounded", 0, [f"b{i}"])
    info = wait_until(
        lambda: (info := queue_info(cluster, "bounded", 0)).first_offset > 0 and info,
        timeout_s=20,
        what="the queue to be trimmed to its byte limit",
    )
    assert isinstance(info, st.QueueInfoResponse)
    assert info.end_offset == 12
    kept = read(cluster, "bounded", 0, info.first_offset).messages
    assert 2 <= len(kept) <= 8, f"kept {len(kept)} messages of about 500 bytes for 3000"
    assert [m.message.message_id for m in kept][-1] == "b11"


def test_a_deleted_topic_leaves_no_data_and_starts_again_empty(cluster: LocalCluster) -> None:
    admin(cluster, "topic", "create", "doomed", "--queues", "2")
    admin(cluster, "group", "create", "readers")
    append(cluster, "doomed", 0, ["d0", "d1", "d2"])
    append(cluster, "doomed", 1, ["d3"])
    # A consumer group with a committed offset on one queue and leases on the other.
    commit = st.CommitOffsetRequest("readers", "doomed", 0, 2)
    on_queue(cluster, "doomed", 0, lambda s, t: s.commit_offset(commit, timeout_ms=t))
    receive = st.ReceiveRequest("readers", "doomed", 1, 4, 60_000)
    received = on_queue(cluster, "doomed", 1, lambda s, t: s.receive(receive, timeout_ms=t))
    assert [m.message.message.message_id for m in received.messages] == ["d3"]

    output = admin(cluster, "topic", "delete", "doomed", "--wait-ms", "20000")
    assert "dropped from every queue" in output
    admin(cluster, "topic", "create", "doomed", "--queues", "2")
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
