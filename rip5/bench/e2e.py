"""``rip5 bench e2e``: publish and receive+ack msgs/s through a broker, end to end.

Setup: a ``rip5 dev`` cluster (1 nameserver, 3 storage nodes replicating
every raft group with fsync on, 1 broker) on free ports, or a running broker
with ``--endpoint``. Topic ``bench-e2e`` (``queues`` queues) and group
``bench-e2e-group`` are created through the nameserver.

The load generator is one client process speaking RocketMQ gRPC v2 over
``channels`` connections, with the lean client of ``rip5.bench.grpc_lean``
on uvloop (``--client lean``, the default) or grpc.aio on asyncio
(``--client grpcio``). The lean client leaves more of the machine to the
servers: grpc.aio took half of the 2 cores in the receive+ack phase. Per run:

1. publish: ``in_flight`` concurrent SendMessage calls, each carrying
   ``batch`` NORMAL messages of ``message_bytes``; after ``warmup`` seconds,
   msgs/s over ``seconds`` and p50/p99 of a call (every message of a call is
   stored, replicated and fsynced by a majority before it answers);
2. receive + ack: ``in_flight`` simple consumers (ReceiveMessage of up to
   ``receive_batch``, long polling, then one AckMessage for what came) until
   every message published in the run is consumed: msgs/s (a message's
   receive+ack counts once) over the time until the last of them is acked,
   and p99 of a receive+ack pair. Consumers then still in a long poll (the
   broker holds an empty receive for 5 s at least) finish uncounted.

3. pull (``--pull-batch`` > 0): offset-based consumption of the same
   messages again, as pull consumers read them (PullMessage of up to
   ``pull_batch`` from an offset; no ack, nothing kept by the broker): every
   queue's offsets of the run, from its end offset before the publish to its
   end after the receive+ack, cut into segments of ``PULL_SEGMENT`` offsets
   that ``in_flight`` workers each read in order: msgs/s over the time
   until every segment is read, and p50/p99 of a pull call.

Then ``runs`` times, the official Python client (rocketmq-python-client) in
its own process: one Producer sending one message at a time for
``official_seconds``: its msgs/s and p99.

Last, for ``idle_seconds``: ``in_flight`` simple consumers long-polling
(``IDLE_POLL_MS`` each, at most ``idle_seconds``) the empty topic ``bench-e2e-idle`` (``queues``
queues): what idle consumers cost the servers (their CPU %); calls are the
receives that came back empty, errors any that came back otherwise.

Client and server CPU are recorded separately (server: every process of the
dev cluster, from /proc). ``--yardstick MSGS_PER_S`` adds the publish
median's ratio to that figure (measure the yardstick in the same sitting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import uvloop

from loadtest.client import (
    CLIENT_ID_HEADER,
    CallFailed,
    SendRequests,
    ack_request,
    build_message,
    check_ack,
    check_send,
    check_status,
    endpoints_of,
    receive_request,
    received_of,
)
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from rip5 import dev_cluster, shell, stats
from rip5.admin import MESSAGE_TYPES
from rip5.bench import harness
from rip5.bench.grpc_lean import LeanChannel

TOPIC = "bench-e2e"
QUEUES = 16
IDLE_TOPIC = "bench-e2e-idle"
GROUP = "bench-e2e-group"
IDLE_POLL_MS = 5_000
IDLE_CASE = "idle long polls"
PULL_SEGMENT = 1024
"""Offsets of one queue a pull worker reads in a row (the pull phase's unit of work)."""
Metadata = Sequence[tuple[str, str]]
METRICS = (
    harness.Metric("msgs_per_s", "msgs/s"),
    harness.Metric("p50_ms", "p50 ms", ".1f"),
    harness.Metric("p99_ms", "p99 ms", ".1f"),
    harness.Metric("errors", "errors"),
    harness.Metric("calls", "calls"),
)


@dataclass
class PhaseResult:
    """One measured phase."""

    msgs_per_s: float
    p50_ms: float
    p99_ms: float
    calls: int
    errors: int
    error_names: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, msgs_per_s: float, latencies: list[float], calls: int, error_names: dict[str, int]
    ) -> PhaseResult:
        """A phase's figures from its rate, its calls' latencies (ms), how many calls
        it counts and its failures by name."""
        return cls(
            msgs_per_s,
            stats.percentile(latencies, 0.5),
            stats.percentile(latencies, 0.99),
            calls,
            sum(error_names.values()),
            error_names,
        )

    def values(self) -> dict[str, float]:
        """The figures by metric key."""
        return {
            "msgs_per_s": self.msgs_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "calls": self.calls,
            "errors": self.errors,
        }


def _failure_name(error: Exception) -> str:
    if isinstance(error, CallFailed):
        return error.name
    if isinstance(error, grpc.aio.AioRpcError):
        return str(error.code().name)
    return type(error).__name__


def _count(error_names: dict[str, int], name: str) -> None:
    error_names[name] = error_names.get(name, 0) + 1


async def _failed(error_names: dict[str, int], error: Exception) -> None:
    """Count a failed call by its name and back off a little before the next."""
    _count(error_names, _failure_name(error))
    await asyncio.sleep(0.01)


_SERVICE = "/apache.rocketmq.v2.MessagingService/"


class LeanStub:
    """The MessagingService calls the generator makes, over a lean channel, with the
    signatures of grpc's generated stub."""

    def __init__(self, channel: LeanChannel) -> None:
        """Calls go over ``channel``."""
        self._channel = channel

    async def _unary(
        self, method: str, request: Any, timeout_s: float, metadata: Metadata
    ) -> bytes:
        """One unary call of ``request``, a message or its serialized bytes."""
        data = request if isinstance(request, bytes) else request.SerializeToString()
        return await self._channel.unary(
            _SERVICE + method, data, timeout_s=timeout_s, metadata=metadata
        )

    async def SendMessage(
        self,
        request: spb.SendMessageRequest | bytes,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> spb.SendMessageResponse:
        """One SendMessage call (of a request, or of its serialized bytes)."""
        return spb.SendMessageResponse.FromString(
            await self._unary("SendMessage", request, timeout, metadata)
        )

    async def ReceiveMessage(
        self,
        request: spb.ReceiveMessageRequest,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """One ReceiveMessage call: its responses as they come."""
        parse = spb.ReceiveMessageResponse.FromString
        async for answer in self._channel.stream(
            _SERVICE + "ReceiveMessage",
            request.SerializeToString(),
            timeout_s=timeout,
            metadata=metadata,
        ):
            yield parse(answer)

    async def call_all(
        self,
        method: str,
        request: Any,
        parse: Callable[[bytes], Any],
        *,
        timeout: float,  # noqa: ASYNC109 - as the stub's calls
        metadata: Metadata,
    ) -> list[Any]:
        """One call of ``method`` (unary or server streaming): all its responses (each
        read by ``parse``), once it ended."""
        answers = await self._channel.call(
            _SERVICE + method, request.SerializeToString(), timeout_s=timeout, metadata=metadata
        )
        return [parse(answer) for answer in answers]

    async def AckMessage(
        self,
        request: spb.AckMessageRequest,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> spb.AckMessageResponse:
        """One AckMessage call."""
        return spb.AckMessageResponse.FromString(
            await self._unary("AckMessage", request, timeout, metadata)
        )


async def _unary_answer(
    stub: Any, method: str, request: Any, parse: Callable[[bytes], Any], metadata: Metadata
) -> Any:
    """The response of a unary call of ``method``, through either client."""
    if isinstance(stub, LeanStub):  # a unary call is a call of one answer
        (answer,) = await stub.call_all(method, request, parse, timeout=30, metadata=metadata)
        return answer
    return await getattr(stub, method)(request, timeout=30, metadata=metadata)


async def _all_answers(
    stub: Any, method: str, request: Any, parse: Callable[[bytes], Any], metadata: Metadata
) -> list[Any]:
    """The responses of a server-streaming call, once it ended: in one piece from the
    lean client, gathered from grpc's stream otherwise."""
    if isinstance(stub, LeanStub):
        return await stub.call_all(method, request, parse, timeout=10, metadata=metadata)
    call = getattr(stub, method)
    return [response async for response in call(request, timeout=10, metadata=metadata)]


class Generator:
    """The load generator: ``channels`` connections to one broker (see the module)."""

    def __init__(
        self, endpoint: str, channels: int, topic: str, group: str, client: str = "lean"
    ) -> None:
        """Open the channels (connected lazily) of ``client``: "lean" or "grpcio"."""
        self.endpoint = endpoint
        self.topic = topic
        self.group = group
        self.endpoints = endpoints_of(endpoint)
        self.metadata = ((CLIENT_ID_HEADER, f"bench-e2e-{os.getpid()}-{uuid.uuid4()}"),)
        self._channels: list[Any]  # each with an async close()
        self.stubs: list[Any]
        if client == "lean":
            self._channels = [LeanChannel(endpoint) for _ in range(channels)]
            self.stubs = [LeanStub(c) for c in self._channels]
        else:
            self._channels = [
                grpc.aio.insecure_channel(
                    endpoint,
                    options=[
                        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                        ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
                    ],
                )
                for _ in range(channels)
            ]
            self.stubs = [service_pb2_grpc.MessagingServiceStub(c) for c in self._channels]
        self.born_host = socket.gethostname()

    async def close(self) -> None:
        """Close every channel."""
        for channel in self._channels:
            await channel.close()

    async def publish(
        self, *, in_flight: int, batch: int, body: bytes, seconds: float, warmup_s: float
    ) -> tuple[PhaseResult, int]:
        """The publish phase; also the number of messages stored (warm-up included)."""
        clock = time.perf_counter
        measure_from = clock() + warmup_s
        end = measure_from + seconds
        latencies: list[float] = []
        measured = 0
        stored = 0
        error_names: dict[str, int] = {}

        async def worker(index: int) -> None:
            nonlocal measured, stored
            stub = self.stubs[index % len(self.stubs)]
            # Built once, sent anew (fresh ids and born times) by every call: the load
            # generator's CPU goes to the calls, not to building messages.
            requests = SendRequests(
                [build_message(self.topic, body, self.born_host) for _ in range(batch)]
            )
            # grpc's stub takes request objects only.
            parse = None if isinstance(stub, LeanStub) else spb.SendMessageRequest.FromString
            while True:
                sent = clock()
                if sent >= end:
                    return
                request = requests.next() if parse is None else parse(requests.next())
                try:
                    response = await stub.SendMessage(request, timeout=30, metadata=self.metadata)
                    check_send(response, batch)
                except (CallFailed, grpc.aio.AioRpcError) as error:
                    await _failed(error_names, error)
                    continue
                done = clock()
                stored += batch
                if sent >= measure_from and done <= end:
                    latencies.append((done - sent) * 1000)
                    measured += batch

        await asyncio.gather(*(worker(i) for i in range(in_flight)))
        result = PhaseResult.of(measured / seconds, latencies, len(latencies), error_names)
        return result, stored

    async def consume(
        self,
        *,
        expected: int,
        in_flight: int,
        receive_batch: int,
        timeout_s: float,
        meter: harness.CpuMeter,
    ) -> tuple[PhaseResult, harness.CpuShare]:
        """Receive and ack until ``expected`` messages are consumed (or ``timeout_s``).

        The rate and the CPU shares (``meter``) are over the time until the
        ack that completed ``expected``; consumers still in a long poll then go
        on until it ends, uncounted.
        """
        meter.start()
        clock = time.perf_counter
        started = clock()
        deadline = started + timeout_s
        latencies: list[float] = []
        consumed = 0
        calls = 0
        # When, how many and the CPU shares, at the ack that completed ``expected``.
        completed: tuple[float, int, harness.CpuShare] | None = None
        error_names: dict[str, int] = {}
        request = receive_request(
            self.group,
            self.topic,
            self.endpoints,
            batch_size=receive_batch,
            invisible_ms=60_000,
            long_polling_ms=1_000,
        )

        async def worker(index: int) -> None:
            nonlocal consumed, calls, completed
            stub = self.stubs[index % len(self.stubs)]
            while consumed < expected and clock() < deadline:
                sent = clock()
                try:
                    received = [
                        message
                        for response in await _all_answers(
                            stub,
                            "ReceiveMessage",
                            request,
                            spb.ReceiveMessageResponse.FromString,
                            self.metadata,
                        )
                        if (message := received_of(response)) is not None
                    ]
                    if not received:
                        continue
                    ack = await stub.AckMessage(
                        ack_request(self.group, self.topic, received),
                        timeout=30,
                        metadata=self.metadata,
                    )
                    check_ack(ack)
                except (CallFailed, grpc.aio.AioRpcError) as error:
                    await _failed(error_names, error)
                    continue
                acked = clock()
                latencies.append((acked - sent) * 1000)
                consumed += len(received)
                calls += 1
                if completed is None and consumed >= expected:
                    completed = (acked, consumed, meter.stop())

        await asyncio.gather(*(worker(i) for i in range(in_flight)))
        ended, counted, share = (
            (clock(), consumed, meter.stop()) if completed is None else completed
        )
        elapsed = ended - started
        if consumed < expected:
            error_names["NOT_ALL_CONSUMED"] = expected - consumed
        result = PhaseResult.of(
            counted / elapsed if elapsed > 0 else 0.0, latencies, calls, error_names
        )
        return result, share

    async def end_offsets(self) -> dict[int, int]:
        """The end offset of every queue of the topic (its route, then QueryOffset END)."""
        stub = self.stubs[0]
        topic = pb.Resource(name=self.topic)
        route = await _unary_answer(
            stub,
            "QueryRoute",
            spb.QueryRouteRequest(topic=topic, endpoints=self.endpoints),
            spb.QueryRouteResponse.FromString,
            self.metadata,
        )
        check_status(route.status)
        ends: dict[int, int] = {}
        for queue_id in sorted({queue.id for queue in route.message_queues}):
            answer = await _unary_answer(
                stub,
                "QueryOffset",
                spb.QueryOffsetRequest(
                    message_queue=pb.MessageQueue(topic=topic, id=queue_id),
                    query_offset_policy=pb.END,
                ),
                spb.QueryOffsetResponse.FromString,
                self.metadata,
            )
            check_status(answer.status)
            ends[queue_id] = answer.offset
        return ends

    async def pull(
        self,
        *,
        starts: dict[int, int],
        ends: dict[int, int],
        in_flight: int,
        pull_batch: int,
        meter: harness.CpuMeter,
    ) -> tuple[PhaseResult, harness.CpuShare]:
        """Pull every offset in [starts[q], ends[q]) of every queue q (see the module)."""
        segments = iter(
            [
                (queue_id, offset, min(offset + PULL_SEGMENT, ends[queue_id]))
                for queue_id, start in starts.items()
                for offset in range(start, ends[queue_id], PULL_SEGMENT)
            ]
        )
        expected = sum(ends[q] - start for q, start in starts.items())
        meter.start()
        clock = time.perf_counter
        started = clock()
        latencies: list[float] = []
        pulled = 0
        error_names: dict[str, int] = {}
        topic = pb.Resource(name=self.topic)
        group = pb.Resource(name=self.group)
        everything = pb.FilterExpression(type=pb.TAG, expression="*")

        async def worker(index: int) -> None:
            nonlocal pulled
            stub = self.stubs[index % len(self.stubs)]
            for queue_id, first, end in segments:
                queue = pb.MessageQueue(topic=topic, id=queue_id)
                offset = first
                while offset < end:
                    request = spb.PullMessageRequest(
                        group=group,
                        message_queue=queue,
                        offset=offset,
                        batch_size=min(pull_batch, end - offset),
                        filter_expression=everything,
                    )
                    sent = clock()
                    try:
                        responses = await _all_answers(
                            stub,
                            "PullMessage",
                            request,
                            spb.PullMessageResponse.FromString,
                            self.metadata,
                        )
                    except (CallFailed, grpc.aio.AioRpcError) as error:
                        await _failed(error_names, error)
                        break  # the segment's rest counts as not pulled
                    latencies.append((clock() - sent) * 1000)
                    found = next_offset = 0
                    for response in responses:
                        which = response.WhichOneof("content")
                        if which == "message":
                            found += 1
                        elif which == "next_offset":
                            next_offset = response.next_offset
                        elif response.status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                            _count(error_names, pb.Code.Name(response.status.code))
                    if next_offset <= offset:  # no progress: count it, skip the segment
                        _count(error_names, "NO_PROGRESS")
                        break
                    pulled += min(found, end - offset)
                    offset = next_offset

        await asyncio.gather(*(worker(i) for i in range(in_flight)))
        elapsed = clock() - started
        share = meter.stop()
        if pulled < expected:
            error_names["NOT_ALL_PULLED"] = expected - pulled
        result = PhaseResult.of(
            pulled / elapsed if elapsed > 0 else 0.0, latencies, len(latencies), error_names
        )
        return result, share

    async def idle(self, *, topic: str, in_flight: int, seconds: float) -> PhaseResult:
        """Consumers long-polling the empty ``topic`` for ``seconds``: empty receives.

        A receive that brings a message or fails counts as an error.
        """
        clock = time.perf_counter
        end = clock() + seconds
        latencies: list[float] = []
        error_names: dict[str, int] = {}
        poll_ms = int(min(IDLE_POLL_MS, seconds * 1000))
        request = receive_request(
            self.group,
            topic,
            self.endpoints,
            batch_size=32,
            invisible_ms=60_000,
            long_polling_ms=poll_ms,
        )

        async def worker(index: int) -> None:
            stub = self.stubs[index % len(self.stubs)]
            while clock() < end:
                sent = clock()
                try:
                    async for response in stub.ReceiveMessage(
                        request, timeout=poll_ms / 1000 + 10, metadata=self.metadata
                    ):
                        if received_of(response) is not None:
                            _count(error_names, "MESSAGE_IN_IDLE_TOPIC")
                except (CallFailed, grpc.aio.AioRpcError) as error:
                    await _failed(error_names, error)
                    continue
                latencies.append((clock() - sent) * 1000)

        await asyncio.gather(*(worker(i) for i in range(in_flight)))
        return PhaseResult.of(0.0, latencies, len(latencies), error_names)


def official_send(args: argparse.Namespace, endpoint: str) -> dict[str, float]:
    """One run of the official client's producer in its own process; its JSON line."""
    command = [
        sys.executable, "-m", "rip5.bench.official_send", endpoint, args.topic,
        f"{args.official_seconds:g}", str(args.message_bytes), f"{args.warmup:g}",
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=args.official_seconds + args.warmup + 120,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(
            f"the official client failed (exit {result.returncode}): {result.stderr[-2000:]}"
        )
    values: dict[str, float] = json.loads(lines[-1])
    return values


async def _runs(
    args: argparse.Namespace,
    report: harness.BenchReport,
    endpoint: str,
    server_pids: Callable[[], list[int]],
    probes: int,
) -> None:
    generator = Generator(endpoint, args.channels, args.topic, args.group, args.client)
    meter = harness.CpuMeter(server_pids)
    body = os.urandom(args.message_bytes)
    try:
        for run in range(args.runs):
            starts = await generator.end_offsets() if args.pull_batch > 0 else {}
            report.stage(f"run {run + 1}: publish")
            meter.start()
            publish, stored = await generator.publish(
                in_flight=args.in_flight,
                batch=args.batch,
                body=body,
                seconds=args.seconds,
                warmup_s=args.warmup,
            )
            report.record("publish", publish.values(), meter.stop())
            report.say(
                f"  run {run + 1}: publish {publish.msgs_per_s:,.0f} msgs/s "
                f"p50 {publish.p50_ms:.1f} ms p99 {publish.p99_ms:.1f} ms "
                f"({publish.calls} calls of {args.batch}; errors {publish.error_names or 0})"
            )
            report.stage(f"run {run + 1}: receive+ack")
            consume, consume_cpu = await generator.consume(
                expected=stored + (probes if run == 0 else 0),
                in_flight=args.in_flight,
                receive_batch=args.receive_batch,
                timeout_s=max(60.0, args.seconds * 10),
                meter=meter,
            )
            report.record("receive+ack", consume.values(), consume_cpu)
            report.say(
                f"  run {run + 1}: receive+ack {consume.msgs_per_s:,.0f} msgs/s "
                f"p99 {consume.p99_ms:.1f} ms ({stored:,} messages; "
                f"errors {consume.error_names or 0})"
            )
            if args.pull_batch > 0:
                report.stage(f"run {run + 1}: pull")
                pull, pull_cpu = await generator.pull(
                    starts=starts,
                    ends=await generator.end_offsets(),
                    in_flight=args.in_flight,
                    pull_batch=args.pull_batch,
                    meter=meter,
                )
                report.record("pull", pull.values(), pull_cpu)
                report.say(
                    f"  run {run + 1}: pull {pull.msgs_per_s:,.0f} msgs/s "
                    f"p50 {pull.p50_ms:.1f} ms p99 {pull.p99_ms:.1f} ms "
                    f"({pull.calls} pulls of up to {args.pull_batch}; "
                    f"errors {pull.error_names or 0})"
                )
        if args.idle_seconds > 0:
            report.stage("idle long polls")
            meter.start()
            idle = await generator.idle(
                topic=args.idle_topic, in_flight=args.in_flight, seconds=args.idle_seconds
            )
            share = meter.stop()
            report.record(IDLE_CASE, idle.values(), share)
            report.say(
                f"  idle: {args.in_flight} consumers long-polling {args.idle_topic}: servers "
                f"{share.server_pct:.0f}% CPU ({idle.calls} empty receives; "
                f"errors {idle.error_names or 0})"
            )
    finally:
        await generator.close()


def _measure(args: argparse.Namespace, report: harness.BenchReport) -> None:
    def go(endpoint: str, server_pids: Callable[[], list[int]]) -> None:
        report.stage("waiting for the broker to store a message")
        probes = dev_cluster.wait_until_serving(endpoint, [(args.topic, False)])
        runs = _runs(args, report, endpoint, server_pids, probes)
        # The lean client on uvloop and with the servers' collector settings: less of
        # the machine goes to the generator. grpc.aio keeps the loop it was made for.
        shell.tune_gc()
        if args.client == "lean":
            uvloop.run(runs)
        else:
            asyncio.run(runs)
        for run in range(args.runs if args.official_seconds > 0 else 0):
            report.stage(f"official client, run {run + 1}")
            meter = harness.CpuMeter(server_pids)
            meter.start()
            values = official_send(args, endpoint)
            share = meter.stop()
            window_s = args.official_seconds + args.warmup
            # The client is the child process: its CPU comes from its own report.
            client_pct = values.pop("cpu_s") / args.official_seconds * 100
            cpu = harness.CpuShare(client_pct, share.server_pct, share.machine_pct)
            report.record("official client send (1 process)", values, cpu)
            report.say(
                f"  official client: {values['msgs_per_s']:,.0f} msgs/s "
                f"p99 {values['p99_ms']:.1f} ms ({window_s:g} s incl. warm-up)"
            )

    if args.endpoint:
        go(args.endpoint, list)
        return
    with tempfile.TemporaryDirectory(prefix="rip5-bench-e2e-") as root:
        report.stage("starting the dev cluster")
        extra = () if args.metrics == "on" else ("--no-metrics",)
        with dev_cluster.dev_cluster(Path(root) / "dev.log", extra_args=extra) as cluster:
            dev_cluster.ensure_resources(
                cluster.nameserver,
                [
                    (args.topic, args.queues, MESSAGE_TYPES["normal"]),
                    (args.idle_topic, args.queues, MESSAGE_TYPES["normal"]),
                ],
                [args.group],
            )
            report.say(f"  dev cluster: broker {cluster.endpoint}, nameserver {cluster.nameserver}")
            go(cluster.endpoint, cluster.server_pids)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench e2e", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured publish window")
    parser.add_argument("--warmup", type=float, default=2.0, help="publish warm-up seconds")
    parser.add_argument("--in-flight", type=int, default=64, help="concurrent calls")
    parser.add_argument("--batch", type=int, default=32, help="messages per SendMessage")
    parser.add_argument("--receive-batch", type=int, default=32, help="messages per receive")
    parser.add_argument(
        "--pull-batch",
        type=int,
        default=32,
        help="messages per PullMessage in the pull phase (0: skip the phase)",
    )
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument("--channels", type=int, default=4, help="connections to the broker")
    parser.add_argument(
        "--client",
        choices=("lean", "grpcio"),
        default="lean",
        help="the load generator's gRPC client: lean (rip5.bench.grpc_lean) or grpc.aio",
    )
    parser.add_argument(
        "--queues",
        type=int,
        default=None,
        help=f"queues of the bench topic, in the bench's own cluster [default: {QUEUES}]",
    )
    parser.add_argument(
        "--official-seconds",
        type=float,
        default=10.0,
        help="official client send window per run (0: skip it)",
    )
    parser.add_argument("--endpoint", default=None, help="a running broker [default: rip5 dev]")
    parser.add_argument(
        "--metrics",
        choices=("on", "off"),
        default="on",
        help="whether the bench's own cluster serves and counts its metrics (docs/metrics.md; "
        "compare both in one sitting for their overhead)",
    )
    parser.add_argument("--topic", default=TOPIC, help="the NORMAL topic (created in dev)")
    parser.add_argument("--group", default=GROUP, help="the consumer group (created in dev)")
    parser.add_argument(
        "--idle-topic", default=IDLE_TOPIC, help="an empty NORMAL topic (created in dev)"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=10.0,
        help="how long in-flight consumers long-poll the empty topic (0: skip)",
    )
    parser.add_argument(
        "--yardstick",
        type=float,
        default=0.0,
        metavar="MSGS_PER_S",
        help="a peer's publish figure measured in the same sitting: report the ratio to it",
    )
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.endpoint and args.queues is not None:
        parser.error(
            "--queues sets up the bench's own cluster; with --endpoint the topics are used as "
            "that cluster has them (rip5 dev auto-creates a topic with 8 queues: create "
            f"{args.topic!r} with `rip5 admin topic create` first to choose)"
        )
    if args.queues is None:
        args.queues = QUEUES
    for name in (
        "runs",
        "in_flight",
        "batch",
        "receive_batch",
        "message_bytes",
        "channels",
        "queues",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.pull_batch < 0:
        parser.error("--pull-batch must not be negative")
    if args.seconds <= 0 or min(args.warmup, args.official_seconds, args.idle_seconds) < 0:
        parser.error(
            "--seconds must be positive; --warmup, --official-seconds and --idle-seconds "
            "not negative"
        )
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "e2e",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    where = (
        f"broker {args.endpoint} (its CPU is not measured: server CPU reads 0; topics "
        "as that cluster has them)"
        if args.endpoint
        else "dev cluster: 1 nameserver, 3 storage nodes (every group on all three, fsync on), "
        f"1 broker, metrics {args.metrics}"
    )
    report.note(
        f"{where}; {args.message_bytes} B messages, {args.batch} per SendMessage, "
        f"{args.in_flight} calls in flight over {args.channels} connections from one client "
        f"process ({args.client} gRPC client)"
    )
    official = 1 if args.official_seconds > 0 else 0
    try:
        idle = 1 if args.idle_seconds > 0 else 0
        pulls = 1 if args.pull_batch > 0 else 0
        with report.progress(args.runs * (2 + pulls + official) + idle):
            _measure(args, report)
    except (dev_cluster.ClusterError, RuntimeError) as exc:
        print(f"rip5 bench e2e: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    if args.yardstick > 0:
        publish = harness.summarize([r["msgs_per_s"] for r in report.cases["publish"].runs])
        report.note(
            f"publish median / yardstick {args.yardstick:,.0f} msgs/s = "
            f"{publish['median'] / args.yardstick:.2f}"
        )
    document = report.finish()
    failed = sum(run.get("errors", 0) for case in report.cases.values() for run in case.runs)
    del document
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
