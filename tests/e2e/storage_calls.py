"""Calls to the storage groups' leaders from end-to-end tests, as ``rip5 admin`` makes
them (``rip5.admin_storage.ClusterAdmin``): a queue's group from the topic's route,
its leader found through failover."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from click.testing import CliRunner

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import StorageService
from protocol import storage_api as st
from rip5 import cli
from rip5.admin_storage import ClusterAdmin
from tests.e2e.cluster import CLUSTER, LocalCluster
from tests.waiting import wait_until

T = TypeVar("T")


def on_queue(
    cluster: LocalCluster,
    topic: str,
    queue_id: int,
    method: Callable[[StorageService, int], Awaitable[T]],
) -> T:
    """``method(stub, timeout_ms)`` on the leader of the group serving the queue."""

    async def action(admin: ClusterAdmin) -> T:
        route = await admin.route(topic)
        (info,) = [q for q in route.queues if q.queue_id == queue_id]
        return await admin.call_group(info.group_id, method)

    return asyncio.run(ClusterAdmin.using(cluster.nameserver_addresses, CLUSTER, action))


def append(
    cluster: LocalCluster, topic: str, queue_id: int, ids: list[str], body_bytes: int = 0
) -> list[int]:
    """Store one message per id in one append (bodies of about 500 bytes, or
    ``body_bytes``); their offsets. Retried until the group has a leader (right after
    the cluster starts, placement may still be going on)."""
    messages = [
        st.Message(topic, queue_id, i, _body(i, body_bytes) if body_bytes else _body(i, 500))
        for i in ids
    ]
    request = st.AppendRequest(topic, queue_id, messages)

    def attempt() -> list[int] | None:
        try:
            response = on_queue(
                cluster, topic, queue_id, lambda s, t: s.append(request, timeout_ms=t)
            )
        except AngeliaError as exc:
            if not exc.retriable:
                raise
            return None
        return [o.queue_offset for o in response.outcomes]

    offsets = wait_until(attempt, timeout_s=30, what=f"an append to {topic}:{queue_id}")
    assert isinstance(offsets, list)
    return offsets


def queue_info(cluster: LocalCluster, topic: str, queue_id: int) -> st.QueueInfoResponse:
    request = st.QueueInfoRequest(topic, queue_id)
    return on_queue(cluster, topic, queue_id, lambda s, t: s.queue_info(request, timeout_ms=t))


def read(cluster: LocalCluster, topic: str, queue_id: int, offset: int) -> st.ReadResponse:
    request = st.ReadRequest(topic, queue_id, offset, count_max=100)
    return on_queue(cluster, topic, queue_id, lambda s, t: s.read(request, timeout_ms=t))


def leader_of(cluster: LocalCluster, group_id: int) -> int:
    """The node id the nameserver names as raft group ``group_id``'s leader (waits for one)."""

    async def action(admin: ClusterAdmin) -> int:
        status = await admin.status()
        group = next(g for g in status.groups if g.group_id == group_id)
        return group.leader

    def known() -> int:
        return asyncio.run(ClusterAdmin.using(cluster.nameserver_addresses, CLUSTER, action))

    leader = wait_until(known, timeout_s=20, what=f"a leader of group {group_id}")
    assert isinstance(leader, int)
    return leader


def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """``cluster`` started, for a module fixture to yield from; stopped after."""
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def admin_cli(*argv: str, code: int = 0) -> str:
    """``rip5 admin ARGV`` as an operator types it; its output (exit ``code`` checked)."""
    result = CliRunner().invoke(cli.main, ["admin", *argv])
    assert result.exit_code == code, f"{argv}: exit {result.exit_code}\n{result.output}"
    return result.output


def _body(message_id: str, size: int) -> bytes:
    """``size`` bytes that name the message."""
    unit = f"body of {message_id} ".encode()
    return (unit * (size // len(unit) + 1))[:size]


def read_ids(
    cluster: LocalCluster, topic: str, queue_id: int, offset: int | None = None
) -> list[str]:
    """Every message id of a queue from ``offset`` (default: its first offset, the tier's
    when it holds older messages), read page by page as a pull consumer does."""
    if offset is None:
        offset = queue_info(cluster, topic, queue_id).first_offset
    ids: list[str] = []
    while True:
        response = read(cluster, topic, queue_id, offset)
        ids += [m.message.message_id for m in response.messages]
        if response.next_offset >= response.end_offset:
            return ids
        assert response.next_offset > offset, "a read made no progress"
        offset = response.next_offset
