"""``rip5 bench e2e``'s pull phase: offset-based consumption of what a run published.

Every queue's offsets of the run, from its end offset before the publish to
its end after the receive+ack, are cut into segments of :data:`PULL_SEGMENT`
offsets that ``in_flight`` workers each read in order with PullMessage (no
ack, nothing kept by the broker): msgs/s over the time until every segment
is read, and p50/p99 of a pull call.

SHELL (network).
"""

from __future__ import annotations

import asyncio
import time

import grpc

from loadtest.client import CallFailed, check_status
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from rip5.bench import harness
from rip5.bench.e2e_client import (
    Clients,
    all_answers,
    count_failure,
    failed,
    unary_answer,
)

PULL_SEGMENT = 1024
"""Offsets of one queue a pull worker reads in a row (the pull phase's unit of work)."""


async def end_offsets(clients: Clients) -> dict[int, int]:
    """The end offset of every queue of the topic (its route, then QueryOffset END)."""
    stub = clients.stubs[0]
    topic = pb.Resource(name=clients.topic)
    route = await unary_answer(
        stub,
        "QueryRoute",
        spb.QueryRouteRequest(topic=topic, endpoints=clients.endpoints),
        spb.QueryRouteResponse.FromString,
        clients.metadata,
    )
    check_status(route.status)
    ends: dict[int, int] = {}
    for queue_id in sorted({queue.id for queue in route.message_queues}):
        answer = await unary_answer(
            stub,
            "QueryOffset",
            spb.QueryOffsetRequest(
                message_queue=pb.MessageQueue(topic=topic, id=queue_id),
                query_offset_policy=pb.END,
            ),
            spb.QueryOffsetResponse.FromString,
            clients.metadata,
        )
        check_status(answer.status)
        ends[queue_id] = answer.offset
    return ends


async def pull(
    clients: Clients,
    *,
    starts: dict[int, int],
    ends: dict[int, int],
    in_flight: int,
    pull_batch: int,
    meter: harness.CpuMeter,
) -> tuple[harness.PhaseResult, harness.CpuShare]:
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
    topic = pb.Resource(name=clients.topic)
    group = pb.Resource(name=clients.group)
    everything = pb.FilterExpression(type=pb.TAG, expression="*")

    async def worker(index: int) -> None:
        nonlocal pulled
        stub = clients.stubs[index % len(clients.stubs)]
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
                    responses = await all_answers(
                        stub,
                        "PullMessage",
                        request,
                        spb.PullMessageResponse.FromString,
                        clients.metadata,
                    )
                except (CallFailed, grpc.aio.AioRpcError) as error:
                    await failed(error_names, error)
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
                        count_failure(error_names, pb.Code.Name(response.status.code))
                if next_offset <= offset:  # no progress: count it, skip the segment
                    count_failure(error_names, "NO_PROGRESS")
                    break
                pulled += min(found, end - offset)
                offset = next_offset

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    elapsed = clock() - started
    share = meter.stop()
    if pulled < expected:
        error_names["NOT_ALL_PULLED"] = expected - pulled
    result = harness.PhaseResult.of(
        pulled / elapsed if elapsed > 0 else 0.0, latencies, len(latencies), error_names
    )
    return result, share
