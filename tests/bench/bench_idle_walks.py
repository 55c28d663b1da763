"""CPU of a storage node's periodic walks at many idle queues (one process, no I/O).

Run: ``.venv/bin/python -m tests.bench.bench_idle_walks [--queues N] [--runs R]``.
Builds one partition state with N queues (8 per topic) holding one message
each, then times, as this process's CPU (``time.process_time``, median of R):

- the truncate floor: the kept counts and heap (``min_log_index_referenced``) after
  one more message, against the walk over every queue it replaced
  (``walked_floor``);
- the queue and message gauges of one group: the kept counts against the walk
  over every queue they replaced;
- retention: the walk over every queue (``storage_node.retention.plan``), with
  nothing expired and with every queue expired, against a leader's rounds
  (``retention.GroupRetention``): its first (every queue looked at and filed),
  one after one more message, and one as every queue's oldest message has
  expired (the trims themselves not applied);
- the consumer gauges, every queue received and acked by one group: the kept
  figures (``consumer_changes`` after one more receive and ack, summed into
  ``ConsumerTotals``) against the walk over every group queue they replaced
  (``consumer_walk.consumer_figures``), and the figures the collector is given at
  the end of a walk (one per (group, topic): the answer's size).

Figures are indicative (a shared machine); docs/scale.md quotes them.
Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from protocol.records import MessageRecord
from storage_node import retention
from storage_node.partition import commands as c
from storage_node.partition.consumer_tally import ConsumerTotals
from storage_node.partition.results import ReceiveResult
from storage_node.partition.state import PartitionState
from tests.unit.storage_node.consumer_walk import consumer_figures

QUEUES_PER_TOPIC = 8
BATCH = 1_000
GROUP = "bench-group"


def idle_state(queues: int) -> PartitionState:
    """A state with ``queues`` queues of one message each."""
    state = PartitionState()
    for start in range(0, queues, BATCH):
        records = tuple(
            MessageRecord(f"t{n // QUEUES_PER_TOPIC}", n % QUEUES_PER_TOPIC, f"m{n}", b"x")
            for n in range(start, min(start + BATCH, queues))
        )
        state.apply(c.Append(1_000, records), state.applied_index + 1)
    return state


def consume(state: PartitionState, topic: str, queue_id: int) -> None:
    """One receive and ack of the queue by ``GROUP``."""
    received = state.apply(
        c.Receive(1_000, GROUP, topic, queue_id, 32, 30_000, 16), state.applied_index + 1
    )
    assert isinstance(received, ReceiveResult)
    handles = tuple(delivery.handle for delivery in received.deliveries)
    if handles:
        state.apply(c.Ack(1_000, GROUP, handles), state.applied_index + 1)


def median_ms(
    runs: int, body: Callable[[], object], setup: Callable[[], object] = lambda: None
) -> float:
    """CPU ms of ``body``, median of ``runs`` (``setup`` before each, not timed)."""
    samples = []
    for _ in range(runs):
        setup()
        started = time.process_time()
        body()
        samples.append(time.process_time() - started)
    return statistics.median(samples) * 1_000


def walked_floor(state: PartitionState) -> int | None:
    """The truncate floor as the walk over every queue computed it before."""
    mins = [index.min_log_index() for index in state._queues.values()]
    indexes = [least for least in mins if least is not None]
    indexes += [half.log_index for half in state._halves]
    indexes += [held.log_index for held in state._timers.unordered()]
    return min(indexes, default=None)


def walked_counts(state: PartitionState) -> tuple[int, int]:
    """The gauges' (queues, messages) as the metrics walk computed them before."""
    queues = messages = 0
    for topic, queue_id in state.queue_ids():
        queues += 1
        messages += state.end_offset(topic, queue_id) - state.first_offset(topic, queue_id)
    return queues, messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    state = idle_state(args.queues)
    state.min_log_index_referenced()  # the first query builds the heap (one pass)

    def kept_floor() -> None:
        state.apply(
            c.Append(1_000, (MessageRecord("t0", 0, "more", b"x"),)), state.applied_index + 1
        )
        state.min_log_index_referenced()

    assert state.min_log_index_referenced() == walked_floor(state)
    assert (state.queue_count(), state.message_count()) == walked_counts(state)
    limits = {f"t{n}": retention.TopicLimits(3_600_000) for n in range(args.queues // 8 + 1)}
    for topic, queue_id in state.queue_ids():
        consume(state, topic, queue_id)
    totals = ConsumerTotals()
    totals.apply(state.consumer_changes())  # the first read counts every group queue

    def one_more_consumed() -> None:
        state.apply(
            c.Append(1_000, (MessageRecord("t0", 0, f"more-{state.applied_index}", b"x"),)),
            state.applied_index + 1,
        )
        consume(state, "t0", 0)

    assert totals.figures(2_000) == consumer_figures([state], 2_000)
    planner = retention.GroupRetention()

    def retention_round(now_ms: int) -> list[object]:
        planner.before_listing(state)
        return [*planner.plan(state, limits, now_ms, lambda _index: 0)]

    retention_round(2_000)  # the first round files every queue (one pass)

    def one_more_message() -> None:
        state.apply(
            c.Append(1_000, (MessageRecord("t0", 0, f"again-{state.applied_index}", b"x"),)),
            state.applied_index + 1,
        )

    def refiled() -> None:
        planner.forget()
        retention_round(2_000)  # every queue filed again (the trims are not applied)

    figures = {
        "floor, walk over every queue": median_ms(args.runs, lambda: walked_floor(state)),
        "floor, kept (one append + query)": median_ms(args.runs, kept_floor),
        "queue/message gauges, walk": median_ms(args.runs, lambda: walked_counts(state)),
        "queue/message gauges, kept": median_ms(
            args.runs, lambda: (state.queue_count(), state.message_count())
        ),
        "retention plan, walk over every queue": median_ms(
            args.runs, lambda: retention.plan(state, limits, (), 2_000, lambda _index: 0)
        ),
        "retention plan, walk, every queue expired": median_ms(
            args.runs, lambda: retention.plan(state, limits, (), 3_602_000, lambda _index: 0)
        ),
        "retention round, first (files every queue)": median_ms(
            args.runs, lambda: retention_round(2_000), planner.forget
        ),
        "retention round, kept (after one append)": median_ms(
            args.runs, lambda: retention_round(2_000), one_more_message
        ),
        "retention round, every queue expired": median_ms(
            args.runs, lambda: retention_round(3_602_000), refiled
        ),
        "consumer gauges, walk": median_ms(args.runs, lambda: consumer_figures([state], 2_000)),
        "consumer gauges, kept (after one consumed)": median_ms(
            args.runs, lambda: totals.apply(state.consumer_changes()), one_more_consumed
        ),
        "consumer gauges, figures given (per topic)": median_ms(
            args.runs, lambda: totals.figures(2_000)
        ),
    }
    assert totals.figures(2_000) == consumer_figures([state], 2_000)
    print(f"{args.queues:,} idle queues, one message each; CPU ms, median of {args.runs}")
    for name, ms in figures.items():
        print(f"  {name:42s} {ms:9.3f}")


if __name__ == "__main__":
    main()
