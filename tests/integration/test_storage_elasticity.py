"""Storage nodes on real processes: read replicas, a slow disk demoted, a node drained and removed.

One nameserver (at most 4 groups moving at once) and four storage nodes, 12
groups of 3 replicas, shared by the tests of this module; a producer appends
to every queue all along (so every node syncs its WAL).

- Read replicas: ``rip5 admin topic update T --read-replicas on`` sets the
  topic attribute; 8 consumers reading one of its queues through a broker
  storage port (which learns the attribute with the topic's route) put reads
  on every replica of the queue's group (counted by each node's status), none
  on other nodes; a queue of a topic without it is read from its leader only.
- Slow disk: node 3's fault-injection file makes every one of its WAL
  fdatasyncs take 200 ms longer (``storage_node/fault_injection.py``). Its
  heartbeats report the fsync p99; the nameserver leader finds it an outlier
  among its peers (median/MAD, three windows in a row:
  ``nameserver/load_monitor.py``), marks it degraded and hands its
  leaderships to healthy replicas: within 30 s it leads no group.
- Drain and remove (the slow node is replaced): ``rip5 admin node drain 3``
  records the drain and shows its progress until node 3 hosts nothing; each
  of its replicas was replaced (learner, catch-up, promotion, removal).
  ``rip5 admin node remove 3`` is refused while node 3 runs; once it is
  stopped and marked down, it is forgotten. Every acknowledged message reads
  back from every replica of its queue's group. The moves are throttled by
  the append p99 the nodes report (``nameserver/move_throttle.py``: a drain
  starts with one group moving, more while the p99 stays within 1.5x of its
  level before, half as many above 2x): the producer's append p99 during the
  drain is at most twice what it was with healthy disks before.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from click.testing import CliRunner

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import StorageService
from broker.domain import QueueRef
from broker.services.nameserver import ClusterMetadata, NameserverLink
from broker.services.storage import StorageStore
from protocol import nameserver_api as api
from protocol.filters import MessageFilter
from protocol.storage_api import AppendRequest, AppendResponse, Message, ReadRequest
from rip5 import admin
from storage_node.fault_injection import FAULT_FILE_ENV
from tests.integration.test_replica_moves import (
    CLUSTER,
    QUEUES,
    TOPICS,
    Moves,
    _wait,
    four_node_cluster,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.alone,
    pytest.mark.asyncio(loop_scope="module"),
]

SLOW = 3
DETECTION_BOUND_S = 30.0


@dataclass
class Cluster:
    """The module's cluster, its producer and node 3's fault file."""

    moves: Moves
    producer: Producer
    fault_file: Path
    slowed_at: float | None = None  # when node 3's disk was made slow


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    root = tmp_path_factory.mktemp("elasticity")
    fault_file = root / "faults.json"
    fault_file.write_text("{}")
    async with four_node_cluster(root, (1, 2, 4)) as moves:
        # Only the slow node reads a fault file (the environment is copied at spawn).
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(FAULT_FILE_ENV, str(fault_file))
            await moves.storage.start_node(SLOW)
        for topic in TOPICS:
            request = api.CreateTopicRequest(topic, CLUSTER, QUEUES)
            await moves.client.call(
                lambda ns, r=request: ns.create_topic(r, timeout_ms=5000)  # type: ignore[misc]
            )
        await _wait(lambda: moves.settled({1, 2, 3, 4}), 120, "the initial placement")
        producer = Producer(moves)
        load = asyncio.create_task(producer.run())
        try:
            await _wait(lambda: _true_after(producer, 60), 60, "a first load")
            yield Cluster(moves, producer, fault_file)
        finally:
            producer.stopping.set()
            await asyncio.wait_for(load, 60)


async def _admin(nameserver: str, *args: str) -> tuple[int, str]:
    """Run ``rip5 admin node ARGS``; its exit code and output (stdout and stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rip5",
        *("admin", "node", *args, "--nameserver", nameserver),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, out.decode()


class Producer:
    """Appends one message to each queue per round, recording acknowledged ids and
    each append's latency."""

    def __init__(self, moves: Moves) -> None:
        self.moves = moves
        self.acked: dict[tuple[str, int], list[str]] = {}
        self.latencies_s: list[tuple[float, float]] = []  # (when, latency)
        self.failed = 0
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        round_ = 0
        while not self.stopping.is_set():
            round_ += 1
            for topic in TOPICS:
                for queue_id in range(QUEUES):
                    await self._append(topic, queue_id, f"{topic}-{queue_id}-{round_}")

    async def _append(self, topic: str, queue_id: int, message_id: str) -> None:
        request = AppendRequest(
            topic, queue_id, [Message(topic, queue_id, message_id, message_id.encode())]
        )

        async def append(stub: StorageService) -> AppendResponse:
            return await stub.append(request)

        started = time.monotonic()
        try:
            await self.moves.storage.call(
                append, group=self.moves.storage.group_of(topic, queue_id)
            )
        except AngeliaError:
            self.failed += 1  # not acknowledged: nothing to find later
            return
        self.latencies_s.append((started, time.monotonic() - started))
        self.acked.setdefault((topic, queue_id), []).append(message_id)

    def p99_ms(self, since: float, until: float) -> float:
        window = [lat for when, lat in self.latencies_s if since <= when < until]
        if len(window) < 2:
            return 0.0
        return statistics.quantiles(window, n=100)[98] * 1000


async def test_a_hot_queue_read_by_8_consumers_puts_reads_on_every_replica(
    cluster: Cluster,
) -> None:
    moves = cluster.moves
    hot, cold = QueueRef(TOPICS[0], 0), QueueRef(TOPICS[1], 0)
    nodes = sorted(moves.storage.processes)

    async def reads_per_node() -> dict[int, int]:
        statuses = [await moves.storage.status(n) for n in nodes]
        return {s.node_id: s.reads for s in statuses if s is not None}

    # The operator's command, in this process (a worker thread: it runs its own loop).
    update = [hot.topic, "--read-replicas", "on", "--nameserver", moves.client.addresses[0]]
    result = await asyncio.to_thread(CliRunner().invoke, admin.topic, ["update", *update])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().splitlines()[-2].rstrip(" │").endswith("on"), result.output
    status = await moves.status()
    group = next(g for g in status.groups if g.group_id == moves.storage.group_of(*hot))
    cold_group = next(g for g in status.groups if g.group_id == moves.storage.group_of(*cold))
    peers = Peers(RpcConfig())
    link = NameserverLink(list(moves.client.addresses), peers)
    metadata = ClusterMetadata(link, cluster=CLUSTER)
    store = StorageStore(metadata, peers)  # no read-replica option: the topic says
    # The producer appends all along, so a replica may be a raft round behind the
    # leader's end; a read past what it applied is the leader's (``usable_answer``).
    # The consumers read below an end every replica has applied: each read is the
    # spread's choice, none falls back.
    end = (await store.queue_offsets(hot)).end_offset
    assert end > 0, "the producer's first load reached every queue"

    async def applied_on(node_id: int) -> bool:
        request = ReadRequest(hot.topic, hot.queue_id, end, count_max=1, from_follower=True)
        try:
            read = await moves.storage.stub(node_id).read(request, timeout_ms=2000)
        except AngeliaError:
            return False
        return read.end_offset >= end

    for node_id in group.replicas:
        await _wait(lambda n=node_id: applied_on(n), 30, f"node {node_id} applying {hot}@{end}")
    before = await reads_per_node()

    async def consumer(queue: QueueRef, reads: int, below: int | None = None) -> int:
        offset, read = 0, 0
        for _ in range(reads):
            batch = await store.read(queue, offset, batch_size=8, message_filter=MessageFilter())
            offset = batch.next_offset if batch.messages else 0  # round again from the start
            if below is not None and offset >= below:
                offset = 0
            read += len(batch.messages)
        return read

    try:
        counts = await asyncio.gather(*(consumer(hot, 12, end) for _ in range(8)))
        between = await reads_per_node()
        cold_count = await consumer(cold, 12)
    finally:
        await peers.close()
    after = await reads_per_node()
    served = {n: between[n] - before[n] for n in nodes}
    cold_served = {n: after[n] - between[n] for n in nodes}
    print(
        f"reads of {hot.topic}:{hot.queue_id} per node: {served}; messages read {counts}; "
        f"of {cold.topic}:{cold.queue_id} (no read replicas, leader {cold_group.leader}): "
        f"{cold_served}"
    )
    assert all(counts)
    assert set(group.replicas) == {n for n, reads in served.items() if reads > 0}
    # Spread round-robin: no replica serves more than half of the 96 reads.
    assert all(served[n] <= 48 for n in group.replicas)
    # A topic without the attribute: every read on its queue's leader.
    assert cold_count
    assert {n for n, reads in cold_served.items() if reads > 0} == {cold_group.leader}
    assert cold_served[cold_group.leader] == 12


async def test_a_slow_disk_marks_its_node_degraded_and_takes_its_leaders(cluster: Cluster) -> None:
    moves = cluster.moves

    async def slow_node_leads() -> bool:
        status = await moves.status()
        return any(g.leader == SLOW for g in status.groups)

    await _wait(slow_node_leads, 60, f"node {SLOW} leading some groups")
    cluster.fault_file.write_text(json.dumps({"wal_sync_delay_ms": 200}))
    slowed_at = cluster.slowed_at = time.monotonic()

    async def degraded_and_leaderless() -> api.ClusterStatusResponse | None:
        status = await moves.status()
        node = next(n for n in status.storage_nodes if n.node_id == SLOW)
        if not node.degraded or node.leaders or any(g.leader == SLOW for g in status.groups):
            return None
        return status

    status = await _wait(degraded_and_leaderless, DETECTION_BOUND_S + 10, "the demotion")
    elapsed_s = time.monotonic() - slowed_at
    assert isinstance(status, api.ClusterStatusResponse)
    figures = {n.node_id: (n.degraded, n.fsync_p99_us, n.leaders) for n in status.storage_nodes}
    print(f"node {SLOW} degraded and leaderless {elapsed_s:.1f} s after its disk slowed: {figures}")
    assert elapsed_s <= DETECTION_BOUND_S
    slow = next(n for n in status.storage_nodes if n.node_id == SLOW)
    assert slow.fsync_p99_us >= 200_000
    # Its groups are led by healthy replicas; it still holds its replicas.
    assert all(g.leader not in (0, SLOW) for g in status.groups)
    assert any(SLOW in g.replicas for g in status.groups)


async def test_a_node_drained_under_load_is_emptied_and_removed(cluster: Cluster) -> None:
    moves, producer = cluster.moves, cluster.producer
    nameserver = moves.client.addresses[0]
    drain_started = time.monotonic()
    code, out = await _admin(nameserver, "drain", str(SLOW), "--timeout-s", "150")
    drained_at = time.monotonic()
    assert code == 0, out
    print(out)
    assert f"node {SLOW}: draining" in out
    assert out.rstrip().endswith(": drained")
    # A drained node that still runs cannot be removed: it would register again.
    code, out = await _admin(nameserver, "remove", str(SLOW))
    assert code == 1
    assert "alive: stop it first" in out
    status = await moves.status()
    assert all(SLOW not in g.replicas for g in status.groups)
    assert all(len(set(g.replicas)) == 3 and not g.joining for g in status.groups)
    assert all(g.leader not in (0, SLOW) for g in status.groups)
    node = next(n for n in status.storage_nodes if n.node_id == SLOW)
    assert node.draining
    assert node.groups == 0

    moves.storage.kill(SLOW)

    async def down() -> bool:
        status = await moves.status()
        return not next(n for n in status.storage_nodes if n.node_id == SLOW).alive

    await _wait(down, 30, f"node {SLOW} marked down")
    code, out = await _admin(nameserver, "remove", str(SLOW))
    assert code == 0, out
    status = await moves.status()
    assert SLOW not in {n.node_id for n in status.storage_nodes}

    # Nothing acknowledged was lost: every acked message is on every replica.
    # The producer runs on: check what was acknowledged up to now.
    moves.acked = {queue: list(ids) for queue, ids in producer.acked.items()}
    await _read_back_acked(moves, status)
    # The baseline: the appends before node 3's disk turned slow (if it did).
    before = producer.p99_ms(0.0, cluster.slowed_at or drain_started)
    during = producer.p99_ms(drain_started, drained_at)
    print(
        f"drain took {drained_at - drain_started:.1f} s; {sum(map(len, producer.acked.values()))}"
        f" appends acked, {producer.failed} failed; append p99 {before:.1f} ms with healthy"
        f" disks, {during:.1f} ms during the drain"
    )
    assert during <= 2 * before, f"append p99 {during:.1f} ms during the drain, {before:.1f} before"


async def _true_after(producer: Producer, appends: int) -> bool:
    return len(producer.latencies_s) >= appends


async def _read_back_acked(moves: Moves, status: api.ClusterStatusResponse) -> None:
    """Every acknowledged message, in order, from every replica of its queue's group
    (a message stored but not acknowledged may be there too)."""
    replicas = {g.group_id: g.replicas for g in status.groups}
    for (topic, queue_id), ids in moves.acked.items():
        group = moves.storage.group_of(topic, queue_id)
        for node_id in replicas[group]:

            async def stored(
                n: int = node_id,
                t: str = topic,
                q: int = queue_id,
                want: frozenset[str] = frozenset(ids),
            ) -> list[str]:
                try:
                    read = await moves.storage.stub(n).read(
                        ReadRequest(t, q, 0, count_max=10_000, from_follower=True),
                        timeout_ms=2000,
                    )
                except AngeliaError:
                    return []
                got = [m.message.message_id for m in read.messages]
                return got if want <= set(got) else []

            got = await _wait(stored, 30, f"{topic}/{queue_id} on node {node_id}")
            assert isinstance(got, list)
            seen = [m for m in got if m in set(ids)]
            assert seen == ids, f"{topic}/{queue_id} on {node_id}: {got} lacks or reorders {ids}"
