"""``rip5 bench e2e``'s idle run: what consumers long-polling an empty topic cost.

``in_flight`` simple consumers long-poll (:data:`IDLE_POLL_MS` each, at most
the run's length) an empty topic; the servers' CPU over the run is the
figure. Calls are the receives that came back empty; a receive that brings a
message or fails counts as an error.

SHELL (network).
"""

from __future__ import annotations

import asyncio
import time

import grpc

from loadtest.client import CallFailed, receive_request, received_of
from rip5.bench.e2e_client import Clients, count_failure, failed
from rip5.bench.harness import PhaseResult

IDLE_POLL_MS = 5_000
IDLE_CASE = "idle long polls"


async def idle(clients: Clients, *, topic: str, in_flight: int, seconds: float) -> PhaseResult:
    """Consumers long-polling the empty ``topic`` for ``seconds``: empty receives.

    A receive that brings a message or fails counts as an error.
    """
    clock = time.perf_counter
    end = clock() + seconds
    latencies: list[float] = []
    error_names: dict[str, int] = {}
    poll_ms = int(min(IDLE_POLL_MS, seconds * 1000))
    request = receive_request(
        clients.group,
        topic,
        clients.endpoints,
        batch_size=32,
        invisible_ms=60_000,
        long_polling_ms=poll_ms,
    )

    async def worker(index: int) -> None:
        stub = clients.stubs[index % len(clients.stubs)]
        while clock() < end:
            sent = clock()
            try:
                async for response in stub.ReceiveMessage(
                    request, timeout=poll_ms / 1000 + 10, metadata=clients.metadata
                ):
                    if received_of(response) is not None:
                        count_failure(error_names, "MESSAGE_IN_IDLE_TOPIC")
            except (CallFailed, grpc.aio.AioRpcError) as error:
                await failed(error_names, error)
                continue
            latencies.append((clock() - sent) * 1000)

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    return PhaseResult.of(0.0, latencies, len(latencies), error_names)
