"""A broker process over the in-memory ports, for contract tests with the official clients.

Usage: ``python -m tests.contract.memory_broker PORT_FILE [--brokers N]
[--check-delay-ms MS] [--check-interval-ms MS] [--check-max N]
[--grpc-server h2|grpcio] [--tls-cert FILE --tls-key FILE [--tls-client-ca
FILE]]`` (SIGHUP reloads the certificate). Serves on 127.0.0.1 (free ports),
writes the first broker's port to PORT_FILE (and every broker's,
comma-separated, to PORT_FILE.all; their remoting ports, for 4.x clients, to
PORT_FILE.remoting) once serving, and runs
until SIGTERM; then writes the consumer state (per group and queue: the
committed offset and the deliveries still in flight) as JSON to
PORT_FILE.state, so a test can check what the clients acknowledged, and the
check-backs each broker delivered to PORT_FILE.checks.

With ``--brokers 2`` the brokers share one store, one coordination (leases,
producer registrations: each broker reports its producer groups every
100 ms, as its nameserver heartbeat would) and reach each other directly:
the stand-in for a cluster when the memory ports are all there is.

Topics: ``normal`` (NORMAL, 4 queues), ``fifo`` (FIFO, 2 queues), ``mixed``
(NORMAL and FIFO, 2 queues), ``timed`` (DELAY, 2 queues), ``txn``
(TRANSACTION, 2 queues). Group ``fifo-group`` is FIFO; every other group is
created on first use. All have 3 delivery attempts, so dead-lettering is
quick to reach.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from collections.abc import Sequence
from pathlib import Path

from angelia_rpc import TlsConfig
from broker.config import BrokerConfig
from broker.domain import GroupInfo, QueueInfo, RetryPolicy, TopicInfo
from broker.grpc.server import SERVERS, GrpcEndpoint, Ports, build_service, client_tls
from broker.processor.checkback import CheckPolicy
from broker.remoting.producers import RemotingProducers
from broker.remoting.server import RemotingServer
from broker.remoting.service import FixedBrokers, RemotingService
from broker.services.clock import SystemClock
from broker.services.memory import MemoryCoordination, MemoryMetadata, MemoryPeers, MemoryStore
from protocol.vocabulary import MessageType

SECRET = b"contract-test-cluster-secret"


def _topic(name: str, queue_count: int, *types: MessageType) -> TopicInfo:
    return TopicInfo(name, tuple(QueueInfo(i) for i in range(queue_count)), frozenset(types))


class _Metadata(MemoryMetadata):
    async def get_group(self, name: str, *, topics: Sequence[str] = ()) -> GroupInfo:
        if name not in self._groups and self.auto_create_groups:
            self.put_group(GroupInfo(name, retry=RetryPolicy(max_delivery_attempts=3)))
        return await super().get_group(name, topics=topics)


async def _report_producers(
    coordination: MemoryCoordination,
    endpoints: list[GrpcEndpoint],
    remoting: list[RemotingProducers],
    names: list[str],
) -> None:
    while True:
        for name, endpoint, producers in zip(names, endpoints, remoting, strict=True):
            groups = {*endpoint.service.sessions.producer_groups, *producers.topics}
            coordination.register_producers(name, sorted(groups))
        await asyncio.sleep(0.1)


async def main(
    port_file: Path,
    brokers: int,
    policy: CheckPolicy,
    grpc_server: str = "h2",
    tls: TlsConfig | None = None,
) -> None:
    clock = SystemClock()
    metadata = _Metadata(
        [
            _topic("normal", 4, MessageType.NORMAL),
            _topic("fifo", 2, MessageType.FIFO),
            _topic("mixed", 2, MessageType.NORMAL, MessageType.FIFO),
            _topic("timed", 2, MessageType.DELAY),
            _topic("txn", 2, MessageType.TRANSACTION),
        ],
        [GroupInfo("fifo-group", fifo=True, retry=RetryPolicy(max_delivery_attempts=3))],
    )
    store = MemoryStore(clock, metadata)
    coordination = MemoryCoordination(clock)
    peers = MemoryPeers()
    endpoints: list[GrpcEndpoint] = []
    names = [f"broker-{n}" for n in range(1, brokers + 1)]
    producers = [RemotingProducers() for _ in names]
    for name, remoting_producers in zip(names, producers, strict=True):
        service = build_service(
            Ports(metadata, store, clock, coordination, peers),
            receipt_secret=SECRET,
            endpoint="127.0.0.1:0",
            broker_id=name,
            check_policy=policy,
            more_producers=remoting_producers,
        )
        assert service.transactions is not None
        peers.add(name, service.transactions)
        endpoints.append(GrpcEndpoint(service, "127.0.0.1:0", grpc_server, tls))
    ports = [await endpoint.start() for endpoint in endpoints]
    remoting_brokers = FixedBrokers([])
    remoting = [
        RemotingServer(
            RemotingService(
                route=endpoint.service.route_processor,
                producer=endpoint.service.producer_processor,
                store=store,
                clock=clock,
                brokers=remoting_brokers,
                cluster="DefaultCluster",
                address="127.0.0.1:0",
                transactions=endpoint.service.transactions,
                producers=remoting_producers,
                pulls=endpoint.service.pulls,
                coordination=coordination,
            ),
            "127.0.0.1:0",
        )
        for endpoint, remoting_producers in zip(endpoints, producers, strict=True)
    ]
    remoting_ports = [await server.start() for server in remoting]
    for server, port in zip(remoting, remoting_ports, strict=True):
        server.service.address = server.service.producers.store_address = f"127.0.0.1:{port}"
        remoting_brokers.addresses.append(server.service.address)
    reporter = asyncio.create_task(_report_producers(coordination, endpoints, producers, names))
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    for endpoint in endpoints:  # as the broker role does
        if endpoint.tls is not None:
            loop.add_signal_handler(signal.SIGHUP, endpoint.reload_tls)
    for path, text in [
        (port_file.with_suffix(".remoting"), ",".join(map(str, remoting_ports))),
        (port_file.with_suffix(".all"), ",".join(map(str, ports))),
        (port_file, str(ports[0])),
    ]:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.rename(path)
    await stopping.wait()
    reporter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reporter
    for server in remoting:
        await server.stop(0.5)
    for endpoint in endpoints:
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
    checks = {}
    for name, endpoint in zip(names, endpoints, strict=True):
        transactions = endpoint.service.transactions
        assert transactions is not None
        checks[name] = {
            "local": transactions.delivered_local,
            "via_peer": transactions.delivered_via_peer,
        }
    port_file.with_suffix(".checks").write_text(json.dumps(checks))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port_file", type=Path)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--check-delay-ms", type=int, default=6_000)
    parser.add_argument("--check-interval-ms", type=int, default=30_000)
    parser.add_argument("--check-max", type=int, default=15)
    parser.add_argument("--grpc-server", choices=SERVERS, default="h2")
    parser.add_argument("--tls-cert", default="")
    parser.add_argument("--tls-key", default="")
    parser.add_argument("--tls-client-ca", default="")
    args = parser.parse_args()
    check_policy = CheckPolicy(
        delay_ms=args.check_delay_ms,
        interval_ms=args.check_interval_ms,
        check_max=args.check_max,
        scan_period_ms=200,
    )
    tls = BrokerConfig(
        tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca
    )
    asyncio.run(main(args.port_file, args.brokers, check_policy, args.grpc_server, client_tls(tls)))
