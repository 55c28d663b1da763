"""Three nameserver processes: SIGKILL the leader while topics are being created."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import NameserverService
from protocol import errors
from protocol import nameserver_api as api
from rip5.admin import NameserverClient
from tests.integration.test_nameserver import Nameservers
from tests.waiting import async_wait_until

pytestmark = pytest.mark.integration

SUBSCRIBE_TIMEOUT_S = 3.0


async def _leader(cluster: Nameservers, peers: Peers) -> int:
    """The node that serves a linearizable read now (0 if none)."""
    for node_id, address in cluster.addresses.items():
        if node_id not in cluster.processes:
            continue
        try:
            await NameserverService(peers.channel(address)).cluster_status(
                api.NameRequest("DefaultCluster"), timeout_ms=1000
            )
        except AngeliaError:
            continue
        return node_id
    return 0


async def _watch(client: NameserverClient, seen: list[api.ChangeInfo]) -> None:
    """Follow every change from revision 0, reconnecting (to any replica) from the
    last one, until cancelled.

    A stream's first batch confirms the subscription; one that does not come
    within SUBSCRIBE_TIMEOUT_S is abandoned and the next replica tried.
    """
    revision = 0
    while True:
        for address in client.addresses:
            try:
                async with client.stub(address).watch(api.WatchRequest(revision)) as stream:
                    batches = aiter(stream)
                    batch = await asyncio.wait_for(anext(batches), SUBSCRIBE_TIMEOUT_S)
                    while True:
                        assert not batch.resync_required, "the history should cover the test"
                        seen.extend(batch.changes)
                        revision = batch.revision
                        batch = await anext(batches)
            except (AngeliaError, TimeoutError, StopAsyncIteration):
                continue
        await asyncio.sleep(0.05)  # every replica refused: an election is under way


async def _create_topics(client: NameserverClient, acked: list[str], stop: asyncio.Event) -> None:
    """Create topics one after another, recording those acknowledged.

    A create whose answer was lost is retried; ALREADY_EXISTS then means the
    lost attempt did commit.
    """
    seq = 0
    while not stop.is_set():
        name = f"Topic{seq:05d}"
        request = api.CreateTopicRequest(name, "DefaultCluster", 2)

        def create(
            ns: NameserverService, r: api.CreateTopicRequest = request
        ) -> Awaitable[api.TopicResponse]:
            return ns.create_topic(r, timeout_ms=2000)

        try:
            await client.call(create)
        except AngeliaError as exc:
            if exc.code is not errors.ALREADY_EXISTS:
                continue
        acked.append(name)
        seq += 1


async def test_sigkill_the_leader_while_creating_topics(tmp_path: Path) -> None:
    cluster = Nameservers(tmp_path, 3)
    for node_id in cluster.addresses:
        cluster.start(node_id)
    peers = Peers(RpcConfig())
    client = NameserverClient(list(cluster.addresses.values()))
    watcher_client = NameserverClient(list(cluster.addresses.values()))
    try:
        leader = 0
        deadline = time.monotonic() + 30
        while leader == 0:
            assert time.monotonic() < deadline, "no nameserver leader within 30 s"
            leader = await _leader(cluster, peers)
            if leader == 0:
                await asyncio.sleep(0.05)

        seen: list[api.ChangeInfo] = []
        acked: list[str] = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch(watcher_client, seen))
        writer = asyncio.create_task(_create_topics(client, acked, stop))
        await async_wait_until(lambda: len(acked) >= 30, timeout_s=60, what="30 topics created")

        cluster.kill(leader)
        killed_at = time.monotonic()
        new_leader = 0
        while new_leader == 0:
            assert time.monotonic() - killed_at < 10, "no new leader within 10 s"
            new_leader = await _leader(cluster, peers)
            if new_leader == 0:
                await asyncio.sleep(0.02)
        took_s = time.monotonic() - killed_at
        assert new_leader != leader
        assert took_s < 2.0, f"the new leader served {took_s:.2f} s after the kill"

        before = len(acked)
        await async_wait_until(
            lambda: len(acked) >= before + 30, timeout_s=60, what="30 topics after the failover"
        )
        stop.set()
        await writer

        stub = NameserverService(peers.channel(cluster.addresses[new_leader]))
        listed = await stub.list_topics(api.ListRequest(), timeout_ms=5000)
        names = {t.name for t in listed.topics}
        lost = [name for name in acked if name not in names]
        assert not lost, f"acknowledged topics lost: {lost}"

        # The watcher catches up to the leader's revision, having seen every
        # revision once, in order, and every acknowledged topic's creation.
        await async_wait_until(
            lambda: bool(seen) and seen[-1].revision >= listed.revision,
            timeout_s=30,
            what=f"the watcher to reach the leader's revision {listed.revision} "
            f"(it saw up to {seen[-1].revision if seen else 0}, {len(seen)} changes; "
            f"watcher {watcher.done() and watcher.exception()!r})",
        )
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        revisions = [change.revision for change in seen]
        assert revisions == sorted(revisions)
        distinct = sorted(set(revisions))
        assert distinct == list(range(1, distinct[-1] + 1)), "a revision was skipped"
        created = [c.key for c in seen if c.kind == api.KIND_TOPIC and not c.deleted]
        assert len(created) == len(set(created)), "a change was delivered twice"
        assert set(acked) <= set(created)
    finally:
        await client.close()
        await watcher_client.close()
        await peers.close()
        cluster.stop_all()
