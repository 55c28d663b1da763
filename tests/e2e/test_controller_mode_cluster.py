"""Controller mode (RIP-44) on real processes: one nameserver (the controller), two
storage nodes holding every group (a master and a slave), one broker.

- With the controller (the nameserver) SIGKILLed, publishing through the broker
  goes on; the nameserver comes back on its data and fails no live master over
  (the storage nodes may still be in their reconnect backoff).
- A group's master SIGSTOPped: the controller elects the slave at a new epoch;
  resumed, the old master cannot write (its appends are refused: the slave
  fences it by epoch); every acknowledged append is on the new master.
- ``rip5 admin cluster status`` shows the mode and a group's master, epoch and
  SyncStateSet; then that master is SIGKILLed under a steady append load:
  appends resume on the new master within 2 s, and none acknowledged is lost
  (``rip5 bench replication`` restarts killed nodes and waits for them to
  rejoin the SyncStateSet, five times per run).

The three share one cluster (module scope) and run in this order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import ControlService, StorageService
from protocol import control_api as ctl
from protocol import errors, routing
from protocol import nameserver_api as api
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from protocol.storage_api import AppendRequest, Message, ReadRequest
from rip5.admin import NameserverClient
from tests.e2e.cluster import RIP5, LocalCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

GROUPS = 2
TOPIC = "ctl-orders"
META = (("x-mq-client-id", "e2e-controller-client"),)
FAILOVER_MAX_S = 2.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("controller")
    local = LocalCluster(root, storage=2, groups=GROUPS, replication="controller")
    local.start()
    try:
        local.create({TOPIC: (4, api.MESSAGE_TYPE_NORMAL)}, {})
        wait_until(
            lambda: all(len(r.sync_state_set) == 2 for r in _records(local).values()),
            timeout_s=60,
            what="every group mastered with both nodes in its SyncStateSet",
        )
        yield local
    finally:
        for process in local.storage.values():
            if process.alive:
                assert process.popen is not None
                process.popen.send_signal(signal.SIGCONT)
        local.stop()


# -- helpers ------------------------------------------------------------------------------


async def _read_records(cluster: LocalCluster) -> dict[int, ctl.ReplicaSetInfo]:
    """The controller's records by group ({} while it cannot answer)."""
    client = NameserverClient(cluster.nameserver_addresses)
    try:
        response = await client.call_service(
            ControlService, lambda s: s.replica_sets(ctl.ReplicaSetsRequest(), timeout_ms=2000)
        )
    except AngeliaError:
        return {}
    finally:
        await client.close()
    return {g.group_id: g for g in response.groups}


def _records(cluster: LocalCluster) -> dict[int, ctl.ReplicaSetInfo]:
    return asyncio.run(_read_records(cluster))


async def _new_master(cluster: LocalCluster, group_id: int, epoch: int) -> ctl.ReplicaSetInfo:
    """The group's record once its epoch passed ``epoch`` (an election), within 15 s."""
    deadline = time.monotonic() + 15
    while True:
        record = (await _read_records(cluster)).get(group_id)
        if record is not None and record.epoch > epoch:
            return record
        assert time.monotonic() < deadline, f"no election in group {group_id} within 15 s"
        await asyncio.sleep(0.05)


def _queue_of_group(group_id: int) -> int:
    """A queue of TOPIC that group ``group_id`` holds (groups are numbered from 1)."""
    return next(q for q in range(64) if routing.group_id(TOPIC, q, 1, GROUPS) == group_id)


@dataclass
class Appender:
    """Appends batches to one queue directly on the storage nodes, following the master."""

    addresses: dict[int, str]
    queue_id: int
    acked: dict[str, int] = field(default_factory=dict)  # message id -> queue offset
    ok_at: list[float] = field(default_factory=list)
    serial: int = 0
    refusals: list[str] = field(default_factory=list)  # error code names, in order
    peers: Peers = field(default_factory=lambda: Peers(RpcConfig()))

    async def append_once(self, node: int | None = None, timeout_ms: int = 1000) -> bool:
        """One batch, to ``node`` or to each node in turn; whether it was acknowledged."""
        self.serial += 1
        messages = [
            Message(TOPIC, self.queue_id, f"ctl-{self.queue_id}-{self.serial}-{i}", b"x" * 64)
            for i in range(4)
        ]
        for n in [node] if node is not None else sorted(self.addresses):
            stub = self.peers.stub(StorageService, self.addresses[n], wait_for_ready=False)
            try:
                response = await stub.append(
                    AppendRequest(TOPIC, self.queue_id, messages), timeout_ms=timeout_ms
                )
            except AngeliaError as exc:
                self.refusals.append(exc.code.name)
                continue
            for outcome in response.outcomes:
                self.acked[outcome.message_id] = outcome.queue_offset
            self.ok_at.append(time.monotonic())
            return True
        return False

    async def stored(self, node: int) -> dict[str, int]:
        """Every message of the queue on ``node`` (its master), by id."""
        stub = self.peers.stub(StorageService, self.addresses[node])
        found: dict[str, int] = {}
        offset = 0
        while True:
            response = await stub.read(ReadRequest(TOPIC, self.queue_id, offset, count_max=200))
            for m in response.messages:
                found[m.message.message_id] = m.queue_offset
            offset += len(response.messages)
            if offset >= response.end_offset or not response.messages:
                return found


# -- the controller away -----------------------------------------------------------------


def test_publishing_continues_while_the_controller_is_down(cluster: LocalCluster) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{cluster.broker_port()}")
    stub = service_pb2_grpc.MessagingServiceStub(channel)

    def send(serial: int) -> bool:
        message = pb.Message(
            topic=pb.Resource(name=TOPIC),
            body=b"published",
            system_properties=pb.SystemProperties(
                message_id=f"01CT{serial:028X}", message_type=pb.NORMAL, body_encoding=pb.IDENTITY
            ),
        )
        try:
            sent = stub.SendMessage(
                spb.SendMessageRequest(messages=[message]), metadata=META, timeout=5
            )
        except grpc.RpcError:
            return False
        return sent.status.code == pb.OK

    def publish_for(seconds: float, first: int) -> int:
        sent, serial = 0, first
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            serial += 1
            sent += send(serial)
        assert sent == serial - first, f"{serial - first - sent} of {serial - first} failed"
        return serial

    try:
        wait_until(lambda: send(0), timeout_s=30, what="a first publish")
        before = {g: (r.master, r.epoch) for g, r in _records(cluster).items()}
        nameserver = cluster.nameservers[1]
        nameserver.kill()
        serial = publish_for(2.5, 0)  # without the controller
        cluster.start_nameserver(1)
        wait_until(lambda: len(_records(cluster)) == GROUPS, timeout_s=30, what="the controller")
        # Past the time a restarted controller used to count a node still in its
        # reconnect backoff dead (1 s): nobody failed over, publishing went on.
        publish_for(2.5, serial)
        after = {g: (r.master, r.epoch) for g, r in _records(cluster).items()}
        assert after == before, "the controller's restart failed a live master over"
    finally:
        channel.close()


# -- a paused master ---------------------------------------------------------------------


def test_a_resumed_old_master_cannot_write(cluster: LocalCluster) -> None:
    record = _records(cluster)[1]
    old, epoch = record.master, record.epoch
    appender = Appender(dict(cluster.storage_addresses), _queue_of_group(1))

    async def scenario() -> None:
        try:
            await fence_scenario()
        finally:
            await appender.peers.close()

    async def fence_scenario() -> None:
        for _ in range(5):
            assert await appender.append_once(old)
        process = cluster.storage[old]
        assert process.popen is not None
        process.popen.send_signal(signal.SIGSTOP)
        try:
            new = (await _new_master(cluster, 1, epoch)).master
            assert new != old
            deadline = time.monotonic() + 10
            while not await appender.append_once(new):
                assert time.monotonic() < deadline, "the new master did not take appends"
        finally:
            process.popen.send_signal(signal.SIGCONT)
        # At once, the resumed process may still think it is master: nothing it takes
        # commits (its slave refuses its epoch), and it soon answers NOT_LEADER.
        appender.refusals.clear()
        for _ in range(5):
            if await appender.append_once(old, timeout_ms=3000):
                raise AssertionError("the fenced old master acknowledged an append")
        assert appender.refusals[-1] == errors.NOT_LEADER.name, appender.refusals
        stored = await appender.stored(new)
        for message_id, offset in appender.acked.items():
            assert stored.get(message_id) == offset, f"acknowledged {message_id} lost"

    asyncio.run(scenario())


# -- a killed master -----------------------------------------------------------------------


def test_a_killed_master_is_replaced_within_two_seconds(cluster: LocalCluster) -> None:
    wait_until(
        lambda: (
            len(_records(cluster).get(2, ctl.ReplicaSetInfo(2, [], 0, 0, [], 0)).sync_state_set)
            == 2
        ),
        timeout_s=30,
        what="group 2 with both nodes in sync",
    )
    record = _records(cluster)[2]
    _check_cluster_status(cluster, record)
    old = record.master
    appender = Appender(dict(cluster.storage_addresses), _queue_of_group(2))

    async def scenario() -> float:
        try:
            return await kill_scenario()
        finally:
            await appender.peers.close()

    async def kill_scenario() -> float:
        for _ in range(20):
            assert await appender.append_once()
        load = asyncio.create_task(_steady(appender))
        await asyncio.sleep(0.5)
        cluster.storage[old].kill()
        killed_at = time.monotonic()
        await asyncio.sleep(FAILOVER_MAX_S + 1.0)
        load.cancel()
        resumed = [t for t in appender.ok_at if t > killed_at]
        assert resumed, "no append succeeded after the master was killed"
        new = (await _new_master(cluster, 2, record.epoch)).master
        assert new != old
        stored = await appender.stored(new)
        lost = [m for m, offset in appender.acked.items() if stored.get(m) != offset]
        assert not lost, f"{len(lost)} acknowledged appends lost, e.g. {lost[:3]}"
        return resumed[0] - killed_at

    gap_s = asyncio.run(scenario())
    log.info("appends resumed %.2f s after the master was killed", gap_s)
    assert gap_s <= FAILOVER_MAX_S, f"appends resumed {gap_s:.2f} s after the kill"


def _check_cluster_status(cluster: LocalCluster, record: ctl.ReplicaSetInfo) -> None:
    """``rip5 admin cluster status`` names the mode and the group's controller record."""
    status = subprocess.run(
        [*RIP5, "admin", "cluster", "status", "--nameserver", cluster.nameserver_address],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "replication: controller" in status.stdout
    controller_table = status.stdout.split("controller groups", 1)[1]
    row = next(
        line
        for line in controller_table.splitlines()
        if re.match(rf"\W*{record.group_id}\W+1,2\W", line)
    )
    cells = re.findall(r"[\w,-]+", row)
    expected = [
        str(record.group_id),
        "1,2",
        str(record.master),
        str(record.epoch),
        ",".join(map(str, record.sync_state_set)),
        str(record.sync_state_set_epoch),
    ]
    assert cells == expected, row


async def _steady(appender: Appender) -> None:
    while True:
        if not await appender.append_once(timeout_ms=300):
            await asyncio.sleep(0.02)
