"""Benchmark: SendMessage throughput through the gRPC adapter and processors.

Starts the in-memory broker process (``memory_broker``), then drives it from
this process with ``--senders`` concurrent grpc.aio callers, one message per
request (as the Python client sends), for ``--seconds``, and prints the
messages per second of each run and their median. Client and broker share
the machine's cores. Not a test: run it by hand::

    .venv/bin/python -m tests.contract.bench_send --senders 64 --seconds 5 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.waiting import wait_until

META = (("x-mq-client-id", "bench"),)


async def _run(port: int, senders: int, seconds: float, body_bytes: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + seconds
        counts = [0] * senders

        async def sender(index: int) -> None:
            n = 0
            while time.monotonic() < deadline:
                message = pb.Message(
                    topic=pb.Resource(name="normal"),
                    body=b"x" * body_bytes,
                    system_properties=pb.SystemProperties(
                        message_id=f"01{index:08X}{n:024X}",
                        message_type=pb.NORMAL,
                        body_encoding=pb.IDENTITY,
                    ),
                )
                response = await stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]), metadata=META
                )
                if response.status.code != pb.OK:
                    raise RuntimeError(response.status.message)
                n += 1
            counts[index] = n

        started = time.monotonic()
        await asyncio.gather(*(sender(i) for i in range(senders)))
        return sum(counts) / (time.monotonic() - started)


def main() -> None:
    """Run the benchmark and print the median of the runs."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--body-bytes", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        broker = subprocess.Popen(
            [sys.executable, "-m", "tests.contract.memory_broker", str(port_file)]
        )
        try:
            wait_until(port_file.exists, what="the broker to listen")
            port = int(port_file.read_text())
            rates = [
                asyncio.run(_run(port, args.senders, args.seconds, args.body_bytes))
                for _ in range(args.runs)
            ]
        finally:
            broker.terminate()
            broker.wait(timeout=10)
    print(
        f"senders={args.senders} body={args.body_bytes}B runs={[round(r) for r in rates]} "
        f"median={statistics.median(rates):.0f} msg/s"
    )


if __name__ == "__main__":
    main()
