"""A broker process over the in-memory ports, for contract tests with the official clients.

Usage: ``python -m tests.contract.memory_broker PORT_FILE``. Serves on
127.0.0.1 (a free port), writes the port to PORT_FILE once serving, and runs
until SIGTERM; then writes the consumer state (per group and queue: the
committed offset and the deliveries still in flight) as JSON to
PORT_FILE.state, so a test can check what the clients acknowledged.

Topics: ``normal`` (NORMAL, 4 queues), ``fifo`` (FIFO, 2 queues), ``mixed``
(NORMAL and FIFO, 2 queues). Group ``fifo-group`` is FIFO; every other group
is created on first use. All have 3 delivery attempts, so dead-lettering is
quick to reach.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from broker.domain import GroupInfo, MessageType, QueueInfo, RetryPolicy, TopicInfo
from broker.grpc.server import GrpcEndpoint, Ports, build_service
from broker.services.clock import SystemClock
from broker.services.memory import MemoryMetadata, MemoryStore

SECRET = b"contract-test-cluster-secret"


def _topic(name: str, queue_count: int, *types: MessageType) -> TopicInfo:
    return TopicInfo(name, tuple(QueueInfo(i) for i in range(queue_count)), frozenset(types))


class _Metadata(MemoryMetadata):
    async def get_group(self, name: str, *, topics: Sequence[str] = ()) -> GroupInfo:
        if name not in self._groups and self.auto_create_groups:
            self.put_group(GroupInfo(name, retry=RetryPolicy(max_delivery_attempts=3)))
        return await super().get_group(name, topics=topics)


async def main(port_file: Path) -> None:
    clock = SystemClock()
    metadata = _Metadata(
        [
            _topic("normal", 4, MessageType.NORMAL),
            _topic("fifo", 2, MessageType.FIFO),
            _topic("mixed", 2, MessageType.NORMAL, MessageType.FIFO),
        ],
        [GroupInfo("fifo-group", fifo=True, retry=RetryPolicy(max_delivery_attempts=3))],
    )
    store = MemoryStore(clock, metadata)
    endpoint = GrpcEndpoint(
        build_service(Ports(metadata, store, clock), receipt_secret=SECRET, endpoint="127.0.0.1:0"),
        "127.0.0.1:0",
    )
    port = await endpoint.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(port))
    tmp.rename(port_file)
    await stopping.wait()
    await endpoint.stop(0.5)
    state = [
        {
            "group": group,
            "topic": queue.topic,
            "queue_id": queue.queue_id,
            "committed": committed,
            "in_flight": in_flight,
        }
        for (group, queue), (committed, in_flight) in store.consumer_states().items()
    ]
    port_file.with_suffix(".state").write_text(json.dumps(state))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
