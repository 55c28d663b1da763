"""``rip5 bench remoting``: publish msgs/s through the remoting protocol (4.x clients)
beside gRPC v2, in one sitting, to the same broker and storage.

Setup: a ``rip5 dev`` cluster (1 nameserver, 3 storage nodes replicating every raft
group with fsync on, 1 broker serving gRPC and remoting) on free ports. Topic
``bench-remoting`` (``queues`` queues) is created through the nameserver.

Each run measures the two protocols one after the other, alternating which goes
first, with the same load: ``in_flight`` concurrent sends of ``batch`` NORMAL
messages of ``message_bytes`` over ``channels`` connections from one client process
(uvloop), ``warmup`` seconds and then msgs/s over ``seconds`` and p50/p99 of a send
(every message of a send is stored, replicated and fsynced by a majority first):

- gRPC: SendMessage with the lean client of ``loadtest.grpc_lean`` (as ``rip5
  bench e2e`` publishes);
- remoting: SEND_BATCH_MESSAGE (code 320, short header keys, as ali-ons and the Java
  client send a batch) on raw connections, requests answered by opaque. Each message
  carries a fresh ``UNIQ_KEY`` (the id a 4.x client names its messages by), written
  into a batch body built once per sender.

Figures are indicative on a shared machine; the target is remoting >= gRPC (it has
no HTTP/2 framing to pay for).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from protocol.remoting import messages
from protocol.remoting.codes import RequestCode, ResponseCode
from protocol.remoting.frames import FrameDecoder, RemotingCommand, encode
from rip5 import dev_cluster, shell
from rip5.admin import MESSAGE_TYPES
from rip5.bench import harness, publish_load
from rip5.bench.e2e import Generator
from rip5.bench.e2e_client import count_failure

TOPIC = "bench-remoting"
QUEUES = 16
GRPC_CASE = "publish gRPC"
REMOTING_CASE = "publish remoting"
ID_HEX_LENGTH = 32
"""A 4.x client's message id: 16 bytes in hex."""


@dataclass
class _Connection:
    """One remoting connection: answers are matched to their requests by opaque."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    waiting: dict[int, asyncio.Future[RemotingCommand]] = field(default_factory=dict)
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    task: asyncio.Task[None] | None = None

    async def read_answers(self) -> None:
        """Resolve the waiting requests as their answers come (until the peer closes)."""
        try:
            while data := await self.reader.read(256 * 1024):
                self.decoder.receive(data)
                while (item := self.decoder.next_command()) is not None:
                    if isinstance(item, RemotingCommand):
                        future = self.waiting.pop(item.opaque, None)
                        if future is not None and not future.done():
                            future.set_result(item)
        finally:
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("the broker closed the connection"))


class BatchBodies:
    """Batch bodies of ``count`` messages with fresh ids: built once, ids rewritten."""

    def __init__(self, count: int, body: bytes, prefix: str) -> None:
        """``prefix``: 16 hex digits, then a counter's 16 make each id."""
        if len(prefix) != ID_HEX_LENGTH - 16:
            raise ValueError(f"an id prefix is {ID_HEX_LENGTH - 16} hex digits, not {prefix!r}")
        marks = [f"{i:0{ID_HEX_LENGTH}X}" for i in range(count)]
        records = [
            messages.BatchRecord(0, body, {messages.UNIQUE_ID: mark, messages.TAGS: "bench"})
            for mark in marks
        ]
        self.template = messages.format_batch(records)
        # Where each record's id sits (ids are fixed-length hex, unique in the template).
        at, self.slots = 0, []
        for mark in marks:
            at = self.template.index(mark.encode(), at)
            self.slots.append(at)
        self.prefix = prefix
        self.counter = itertools.count()

    def next(self) -> bytes:
        """The template with a new id in every record."""
        out = bytearray(self.template)
        for at in self.slots:
            text = f"{self.prefix}{next(self.counter):016X}".encode()
            out[at : at + ID_HEX_LENGTH] = text
        return bytes(out)


class RemotingPublisher:
    """SEND_BATCH_MESSAGE load over ``channels`` connections to one broker."""

    def __init__(self, address: str, channels: int, topic: str, queues: int) -> None:
        self.address = address
        self.channels = channels
        self.topic = topic
        self.queues = queues
        self.connections: list[_Connection] = []
        self.opaques = itertools.count(1)

    async def connect(self) -> None:
        """Open the connections."""
        host, _, port = self.address.rpartition(":")
        for _ in range(self.channels):
            reader, writer = await asyncio.open_connection(host, int(port))
            connection = _Connection(reader, writer)
            connection.task = asyncio.create_task(connection.read_answers())
            self.connections.append(connection)

    async def close(self) -> None:
        """Close the connections."""
        for connection in self.connections:
            connection.writer.close()
            if connection.task is not None:
                connection.task.cancel()

    async def publish(
        self, *, in_flight: int, batch: int, body: bytes, seconds: float, warmup_s: float
    ) -> tuple[harness.PhaseResult, int]:
        """The publish phase; also the number of messages stored (warm-up included)."""
        run = os.urandom(4).hex().upper()

        def call_of(index: int) -> harness.Call:
            connection = self.connections[index % len(self.connections)]
            bodies = BatchBodies(batch, body, f"{run}{index:08X}")
            fields = {"a": "bench-remoting-producer", "b": self.topic, "c": "TBW102",
                      "d": str(self.queues), "e": str(index % self.queues), "f": "0",
                      "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}  # fmt: skip
            loop = asyncio.get_running_loop()

            async def send(error_names: dict[str, int]) -> bool:
                opaque = next(self.opaques)
                fields["g"] = str(int(time.time() * 1000))
                command = RemotingCommand(
                    RequestCode.SEND_BATCH_MESSAGE,
                    opaque,
                    0,
                    "JAVA",
                    1,
                    None,
                    fields,
                    bodies.next(),
                )
                answer_future: asyncio.Future[RemotingCommand] = loop.create_future()
                connection.waiting[opaque] = answer_future
                connection.writer.write(encode(command))
                try:
                    answer = await asyncio.wait_for(answer_future, 30)
                except (TimeoutError, ConnectionError) as error:
                    connection.waiting.pop(opaque, None)
                    count_failure(error_names, type(error).__name__)
                    return False
                if answer.code != ResponseCode.SUCCESS:
                    count_failure(error_names, ResponseCode(answer.code).name)
                    return False
                return True

            return send

        return await harness.closed_loop(
            call_of, workers=in_flight, per_call=batch, seconds=seconds, warmup_s=warmup_s
        )


async def _runs(
    args: argparse.Namespace,
    report: harness.BenchReport,
    endpoint: str,
    remoting: str,
    server_pids: Callable[[], list[int]],
    broker_cpu_us: dict[str, list[float]],
) -> None:
    grpc_generator = Generator(endpoint, args.channels, args.topic, "unused-group", "lean")
    publisher = RemotingPublisher(remoting, args.channels, args.topic, args.queues)
    await publisher.connect()
    meter = harness.CpuMeter(server_pids)
    broker = harness.CpuMeter(lambda: [pid for pid in server_pids() if _is_broker(pid)])
    body = os.urandom(args.message_bytes)
    try:
        for run in range(args.runs):
            order: list[tuple[str, publish_load.Publisher]] = [
                (GRPC_CASE, grpc_generator),
                (REMOTING_CASE, publisher),
            ]
            for case, generator in order if run % 2 == 0 else order[::-1]:
                phase = publish_load.phase_of(generator, args, body)
                broker.start()
                result, _stored = await report.measure(run, case, meter, phase)
                broker_cpu_us[case].append(broker_us_per_message(broker.stop(), result))
                report.say(
                    f"{result.line(run, case, f'calls of {args.batch}')}; broker CPU "
                    f"{broker_cpu_us[case][-1]:.1f} us/msg"
                )
    finally:
        await publisher.close()
        await grpc_generator.close()


def _is_broker(pid: int) -> bool:
    """Whether ``pid`` is the dev cluster's broker (``python -m rip5 broker ...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return argv[2:4] == [b"rip5", b"broker"]


def broker_us_per_message(share: harness.CpuShare, result: harness.PhaseResult) -> float:
    """The broker's CPU microseconds per message stored over a phase (its CPU share of
    the window, warm-up included, over the measured rate: indicative)."""
    return share.server_pct / 100 / max(result.msgs_per_s, 1e-9) * 1e6


def _measure(
    args: argparse.Namespace, report: harness.BenchReport, broker_cpu_us: dict[str, list[float]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="rip5-bench-remoting-") as root:
        report.stage("starting the dev cluster")
        with dev_cluster.dev_cluster(Path(root) / "dev.log") as cluster:
            dev_cluster.ensure_resources(
                cluster.nameserver, [(args.topic, args.queues, MESSAGE_TYPES["normal"])], []
            )
            report.say(
                f"  dev cluster: broker {cluster.endpoint} (remoting {cluster.remoting}), "
                f"nameserver {cluster.nameserver}"
            )
            report.stage("waiting for the broker to store a message")
            dev_cluster.wait_until_serving(cluster.endpoint, [(args.topic, False)])
            shell.tune_gc()
            uvloop.run(
                _runs(
                    args,
                    report,
                    cluster.endpoint,
                    cluster.remoting,
                    cluster.server_pids,
                    broker_cpu_us,
                )
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = publish_load.parser_of(
        "remoting", description=__doc__, runs=3, topic=TOPIC, queues=QUEUES
    )
    args, report = publish_load.report_of("remoting", parser, argv)
    report.note(
        "dev cluster: 1 nameserver, 3 storage nodes (every group on all three, fsync on), "
        f"1 broker; {args.message_bytes} B messages, {args.batch} per send, {args.in_flight} "
        f"sends in flight over {args.channels} connections from one client process, the two "
        "protocols alternately"
    )
    broker_cpu_us: dict[str, list[float]] = {GRPC_CASE: [], REMOTING_CASE: []}
    try:
        with report.progress(args.runs * 2):
            _measure(args, report, broker_cpu_us)
    except (dev_cluster.ClusterError, RuntimeError) as exc:
        print(f"rip5 bench remoting: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    grpc_median = report.median(GRPC_CASE, "msgs_per_s")
    remoting_median = report.median(REMOTING_CASE, "msgs_per_s")
    if grpc_median > 0:
        report.note(
            f"remoting / gRPC publish medians = {remoting_median / grpc_median:.2f} "
            "(target >= 1.00)"
        )
    if broker_cpu_us[GRPC_CASE] and broker_cpu_us[REMOTING_CASE]:
        grpc_us = statistics.median(broker_cpu_us[GRPC_CASE])
        remoting_us = statistics.median(broker_cpu_us[REMOTING_CASE])
        report.note(
            f"broker CPU per message, medians: remoting {remoting_us:.1f} us, gRPC "
            f"{grpc_us:.1f} us (remoting / gRPC = {remoting_us / grpc_us:.2f})"
        )
    report.finish()
    return 1 if report.errors() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
