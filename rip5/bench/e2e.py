"""``rip5 bench e2e``: publish and receive+ack msgs/s through a broker, end to end.

Setup: a ``rip5 dev`` cluster (1 nameserver, 3 storage nodes replicating
every raft group with fsync on, 1 broker) on free ports, or a running broker
with ``--endpoint``. Topic ``bench-e2e`` (``queues`` queues) and group
``bench-e2e-group`` are created through the nameserver.

The load generator is one client process speaking RocketMQ gRPC v2 over
``channels`` connections, with the lean client of ``loadtest.grpc_lean``
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

The phases live in their own modules: the connections and calls every phase
makes in ``rip5.bench.e2e_client``, the pull phase in ``rip5.bench.e2e_pull``,
the idle run in ``rip5.bench.e2e_idle``, the official client's run in
``rip5.bench.official_send``.

Client and server CPU are recorded separately (server: every process of the
dev cluster, from /proc). ``--yardstick MSGS_PER_S`` adds the publish
median's ratio to that figure (measure the yardstick in the same sitting).

``--acl``: the bench's cluster runs with ACL 2.0 on (``rip5 dev --acl``) and
every call (load generator, probes, official client) is signed as a normal user
whose policy allows the bench's topics and group (``rip5/bench/acl.py``):
compare its publish figure with a run without, in the same sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import uvloop

from loadtest.client import (
    CallFailed,
    SendRequests,
    ack_request,
    build_message,
    check_ack,
    check_send,
    receive_request,
    received_of,
)
from protocol.rocketmq.v2 import service_pb2 as spb
from rip5 import dev_cluster, shell
from rip5.admin import MESSAGE_TYPES
from rip5.bench import acl, harness, official_send, publish_load
from rip5.bench.e2e_client import Clients, LeanStub, all_answers, failed
from rip5.bench.e2e_idle import IDLE_CASE
from rip5.bench.e2e_idle import idle as idle_phase
from rip5.bench.e2e_pull import end_offsets
from rip5.bench.e2e_pull import pull as pull_phase
from rip5.bench.harness import PhaseResult

TOPIC = "bench-e2e"
QUEUES = 16
IDLE_TOPIC = "bench-e2e-idle"
GROUP = "bench-e2e-group"


class Generator(Clients):
    """The load generator: ``channels`` connections to one broker (see the module)."""

    async def publish(
        self, *, in_flight: int, batch: int, body: bytes, seconds: float, warmup_s: float
    ) -> tuple[PhaseResult, int]:
        """The publish phase; also the number of messages stored (warm-up included)."""

        def call_of(index: int) -> harness.Call:
            stub = self.stubs[index % len(self.stubs)]
            # Built once, sent anew (fresh ids and born times) by every call: the load
            # generator's CPU goes to the calls, not to building messages.
            requests = SendRequests(
                [build_message(self.topic, body, self.born_host) for _ in range(batch)]
            )
            # grpc's stub takes request objects only.
            parse = None if isinstance(stub, LeanStub) else spb.SendMessageRequest.FromString

            async def send(error_names: dict[str, int]) -> bool:
                request = requests.next() if parse is None else parse(requests.next())
                try:
                    response = await stub.SendMessage(request, timeout=30, metadata=self.metadata)
                    check_send(response, batch)
                except (CallFailed, grpc.aio.AioRpcError) as error:
                    await failed(error_names, error)
                    return False
                return True

            return send

        return await harness.closed_loop(
            call_of, workers=in_flight, per_call=batch, seconds=seconds, warmup_s=warmup_s
        )

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
                        for response in await all_answers(
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
                    await failed(error_names, error)
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


async def _runs(
    args: argparse.Namespace,
    report: harness.BenchReport,
    endpoint: str,
    server_pids: Callable[[], list[int]],
    probes: int,
    credentials: tuple[str, str] | None = None,
) -> None:
    generator = Generator(endpoint, args.channels, args.topic, args.group, args.client, credentials)
    meter = harness.CpuMeter(server_pids)
    body = os.urandom(args.message_bytes)
    try:
        for run in range(args.runs):
            generator.sign()
            starts = await end_offsets(generator) if args.pull_batch > 0 else {}
            publish, stored = await report.measure(
                run, "publish", meter, publish_load.phase_of(generator, args, body)
            )
            report.say(publish.line(run, "publish", f"calls of {args.batch}"))
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
                pull, pull_cpu = await pull_phase(
                    generator,
                    starts=starts,
                    ends=await end_offsets(generator),
                    in_flight=args.in_flight,
                    pull_batch=args.pull_batch,
                    meter=meter,
                )
                report.record("pull", pull.values(), pull_cpu)
                report.say(pull.line(run, "pull", f"pulls of up to {args.pull_batch}"))
        if args.idle_seconds > 0:
            generator.sign()
            report.stage("idle long polls")
            meter.start()
            idle = await idle_phase(
                generator,
                topic=args.idle_topic,
                in_flight=args.in_flight,
                seconds=args.idle_seconds,
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
    credentials: tuple[str, str] | None = None

    def go(endpoint: str, server_pids: Callable[[], list[int]]) -> None:
        report.stage("waiting for the broker to store a message")
        probes = dev_cluster.wait_until_serving(
            endpoint, [(args.topic, False)], metadata=acl.headers(credentials)
        )
        runs = _runs(args, report, endpoint, server_pids, probes, credentials)
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
            values = official_send.run(args, endpoint, credentials)
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
        log_path = Path(root) / "dev.log"
        extra_args = ("--acl",) if args.acl else ()
        if args.metrics != "on":
            extra_args = (*extra_args, "--no-metrics")
        with dev_cluster.dev_cluster(log_path, extra_args=extra_args) as cluster:
            super_user = acl.super_user_of_dev_log(log_path) if args.acl else None
            dev_cluster.ensure_resources(
                cluster.nameserver,
                [
                    (args.topic, args.queues, MESSAGE_TYPES["normal"]),
                    (args.idle_topic, args.queues, MESSAGE_TYPES["normal"]),
                ],
                [args.group],
                acl.signed(super_user),
            )
            if super_user is not None:
                credentials = acl.create_bench_user(
                    cluster.nameserver, super_user, [args.topic, args.idle_topic], args.group
                )
                report.say(f"  ACL on: every call signed as the normal user {credentials[0]}")
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
        help="the load generator's gRPC client: lean (loadtest.grpc_lean) or grpc.aio",
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
    parser.add_argument(
        "--acl",
        action="store_true",
        help="ACL 2.0 on in the bench's cluster; every call signed as a normal user whose "
        "policy allows the bench (compare with a run without: --yardstick)",
    )
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.acl and args.endpoint:
        parser.error("--acl sets up the bench's own cluster; it does not go with --endpoint")
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
        harness.PHASE_METRICS,
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
        report.note(
            f"publish median / yardstick {args.yardstick:,.0f} msgs/s = "
            f"{report.median('publish', 'msgs_per_s') / args.yardstick:.2f}"
        )
    report.finish()
    return 1 if report.errors() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
