"""Server CPU per delivered message on a real cluster: a SQL92 filter matching 1 in 10
against ``*``.

``python -m tests.bench.bench_sql_filter_cluster [MESSAGES]`` starts a local
cluster (1 nameserver, 3 storage nodes, 1 broker), sends MESSAGES messages of
1 KiB (property ``n`` = index mod 10) to a topic of 4 queues, then lets 8
receivers (ReceiveMessage batch 32, then AckMessage) drain it, first as group
``all`` with ``*``, then as group ``sql`` with a SQL92 filter matching 1 in 10.
For each it prints the CPU the broker and the storage processes spent (from
/proc) from the first receive until the last wanted message was acked,
divided by the messages delivered: the broker's and the storage nodes' apart
(the storage leaders evaluate a SQL92 filter; the broker only passes on what
matched) and their sum, then each one's ratio of the filter to ``*``.
Indicative on a shared machine.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import grpc

from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.e2e.cluster import LocalCluster

META = (("x-mq-client-id", "sql-filter-bench"),)
TOPIC = "bench"
RECEIVERS = 8
EXPRESSION = "n = '3' AND region IN ('eu', 'us')"


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the processes so far."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Roles(NamedTuple):
    """The process ids measured: the broker's and the storage nodes'."""

    broker: list[int]
    storage: list[int]


class Spent(NamedTuple):
    """CPU seconds spent by the broker and by the storage nodes."""

    broker_s: float
    storage_s: float

    @staticmethod
    def now(roles: Roles) -> Spent:
        """The CPU seconds the roles' processes spent so far."""
        return Spent(_cpu_s(roles.broker), _cpu_s(roles.storage))

    def __sub__(self, other: object) -> Spent:
        assert isinstance(other, Spent)
        return Spent(self.broker_s - other.broker_s, self.storage_s - other.storage_s)


async def _send(stub: service_pb2_grpc.MessagingServiceStub, count: int) -> None:
    body = bytes(1024)
    for start in range(0, count, 32):
        messages = [
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=body,
                user_properties={"n": str(i % 10), "region": "eu"},
                system_properties=pb.SystemProperties(
                    message_id=uuid.uuid4().hex.upper(),
                    message_type=pb.NORMAL,
                    body_encoding=pb.IDENTITY,
                ),
            )
            for i in range(start, min(count, start + 32))
        ]
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=messages), metadata=META)
        assert sent.status.code == pb.OK, sent.status


async def _drain(
    stub: service_pb2_grpc.MessagingServiceStub,
    roles: Roles,
    group: str,
    expression: pb.FilterExpression,
    wanted: int,
) -> tuple[int, Spent, float]:
    """Receive and ack until ``wanted`` came: (delivered, CPU, wall s) up to then."""
    delivered = 0
    finished: list[tuple[Spent, float]] = []
    spent, started = Spent.now(roles), time.monotonic()

    async def receiver() -> None:
        nonlocal delivered
        while delivered < wanted:
            request = spb.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
                filter_expression=expression,
                batch_size=32,
            )
            request.invisible_duration.FromSeconds(60)
            request.long_polling_timeout.FromSeconds(5)
            entries = [
                spb.AckMessageEntry(
                    message_id=response.message.system_properties.message_id,
                    receipt_handle=response.message.system_properties.receipt_handle,
                )
                async for response in stub.ReceiveMessage(request, metadata=META, timeout=10)
                if response.WhichOneof("content") == "message"
            ]
            if not entries:
                continue
            delivered += len(entries)
            acked = await stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC), entries=entries
                ),
                metadata=META,
            )
            assert acked.status.code == pb.OK, acked.status
            if delivered >= wanted and not finished:
                finished.append((Spent.now(roles), time.monotonic()))

    await asyncio.gather(*(receiver() for _ in range(RECEIVERS)))
    end_spent, end_s = finished[0]
    return delivered, end_spent - spent, end_s - started


async def _measure(cluster: LocalCluster, count: int) -> None:
    roles = Roles([], [])
    for pids, processes in (
        (roles.broker, cluster.brokers),
        (roles.storage, list(cluster.storage.values())),
    ):
        for process in processes:
            assert process.popen is not None
            pids.append(process.popen.pid)
    per_message_us: list[tuple[float, float]] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.broker_port()}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        await _send(stub, count)
        for group, expression, wanted in (
            ("all", pb.FilterExpression(type=pb.TAG, expression="*"), count),
            ("sql", pb.FilterExpression(type=pb.SQL, expression=EXPRESSION), count // 10),
        ):
            delivered, spent, wall_s = await _drain(stub, roles, group, expression, wanted)
            broker_us = spent.broker_s / delivered * 1e6
            storage_us = spent.storage_s / delivered * 1e6
            per_message_us.append((broker_us, storage_us))
            print(
                f"{group} {expression.expression!r}: {delivered} delivered in {wall_s:.1f} s; "
                f"CPU per delivered message: broker {broker_us:.0f} us, storage "
                f"{storage_us:.0f} us, broker + storage {broker_us + storage_us:.0f} us",
                flush=True,
            )
    (all_broker, all_storage), (sql_broker, sql_storage) = per_message_us
    print(
        f"ratio of the filter to '*': broker {sql_broker / all_broker:.2f}x, "
        f"storage {sql_storage / all_storage:.2f}x, "
        f"broker + storage {(sql_broker + sql_storage) / (all_broker + all_storage):.2f}x",
        flush=True,
    )


def main() -> None:
    """Start the cluster, measure, stop."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root), groups=4)
        cluster.start()
        try:
            cluster.create({TOPIC: (4, 1)}, {"all": (False, 16), "sql": (False, 16)})
            asyncio.run(_measure(cluster, count))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
