"""Micro-benchmark of the partition state machine (one core, no I/O).

Run: ``.venv/bin/python -m tests.bench.bench_partition [--messages N] [--runs R] [--cpu]``.
Prints the median of R runs for: applying APPEND entries (decode included),
receive + ack cycles, snapshot take / restore of the resulting state, and
a snapshot taken again at once and after 1% more messages (with the time
of ``referenced_log_indexes``, which each group snapshot also asks).
``--cpu`` times this process's CPU (``time.process_time``) instead of the
wall clock: steadier on a machine shared with other work.
Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from protocol.records import MessageRecord
from storage_node.partition import commands as c
from storage_node.partition.results import ReceiveResult
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState

BATCH = 16
BODY = b"x" * 1024


def append_entries(messages: int) -> list[bytes]:
    entries = []
    for start in range(0, messages, BATCH):
        records = tuple(
            MessageRecord("bench", (start // BATCH) % 4, f"m{i:012d}", BODY, tag="t")
            for i in range(start, min(start + BATCH, messages))
        )
        entries.append(c.encode(c.Append(1_000 + start, records)))
    return entries


def run_appends(entries: list[bytes]) -> PartitionState:
    state = PartitionState()
    for index, data in enumerate(entries, start=1):
        state.apply_entry(data, index)
    return state


def run_receive_ack(state: PartitionState, messages: int) -> None:
    now = 10_000_000
    done = 0
    queue = 0
    while done < messages:
        index = state.applied_index + 1
        got = state.apply_entry(
            c.encode(c.Receive(now, "bench-group", "bench", queue, 32, 30_000, 16)), index
        )
        assert isinstance(got, ReceiveResult)
        if not got.deliveries:
            queue += 1
            continue
        handles = tuple(d.handle for d in got.deliveries)
        state.apply_entry(c.encode(c.Ack(now, "bench-group", handles)), index + 1)
        done += len(handles)


def median_s(
    runs: int, body: Callable[[], object], clock: Callable[[], float] = time.perf_counter
) -> float:
    samples = []
    for _ in range(runs):
        started = clock()
        body()
        samples.append(clock() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="time CPU, not the wall clock")
    args = parser.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    n = args.messages
    entries = append_entries(n)
    t_append = median_s(args.runs, lambda: run_appends(entries), clock)
    print(f"append  : {n / t_append:>10,.0f} msg/s  ({BATCH}/entry, 1 KiB bodies)")

    def receive_ack() -> None:
        run_receive_ack(run_appends(entries), n)

    t_both = median_s(args.runs, receive_ack, clock)
    t_pop = t_both - t_append
    print(f"recv+ack: {n / t_pop:>10,.0f} msg/s  (32/receive, one ack entry per receive)")
    state = run_appends(entries)
    run_receive_ack(state, n // 2)
    image = take_snapshot(state)
    # The first snapshot of a state (a restored one: nothing remembered yet).
    t_take = median_cold_s(args.runs, image, take_snapshot, clock)
    t_restore = median_s(args.runs, lambda: restore(image), clock)
    print(
        f"snapshot: {len(image):,} bytes; take {t_take * 1000:.1f} ms; "
        f"restore {t_restore * 1000:.1f} ms ({n:,} messages, {n // 2:,} acked)"
    )
    print_again("snapshot", state, n, args.runs, clock)
    # Appends only: the dedup window is full too (the receives above jump the clock past it).
    state = run_appends(entries)
    image = take_snapshot(state)
    t_take = median_cold_s(args.runs, image, take_snapshot, clock)
    print(
        f"appended: {len(image):,} bytes; take {t_take * 1000:.1f} ms "
        f"({n:,} messages, {state.dedup_size():,} in the dedup window)"
    )
    print_again("appended", state, n, args.runs, clock)


def median_cold_s(
    runs: int, image: bytes, body: Callable[[PartitionState], object], clock: Callable[[], float]
) -> float:
    """``body`` timed on states restored from ``image`` (restoring is not timed)."""
    states = [restore(image) for _ in range(runs)]
    return median_s(runs, lambda: body(states.pop()), clock)


def print_again(
    label: str, state: PartitionState, n: int, runs: int, clock: Callable[[], float]
) -> None:
    """Snapshot (and referenced log indexes) again at once, and after 1% more messages."""
    take_snapshot(state)
    t_again = median_s(runs, lambda: take_snapshot(state), clock)
    t_refs = median_s(runs, state.referenced_log_indexes, clock)
    more = n // 100
    grown: list[float] = []
    grown_refs: list[float] = []
    for _ in range(runs):
        first = state.applied_index + 1
        now = state.clock_ms
        for offset, start in enumerate(range(0, more, BATCH)):
            records = tuple(
                MessageRecord("bench", (start // BATCH) % 4, f"more{first}-{i}", BODY, tag="t")
                for i in range(start, min(start + BATCH, more))
            )
            state.apply_entry(c.encode(c.Append(now, records)), first + offset)
        grown_refs.append(time_s(state.referenced_log_indexes, clock))
        grown.append(time_s(lambda: take_snapshot(state), clock))
    # After more messages, in GroupReplica.snapshot_data's order: refs, then take.
    print(
        f"{label}: again {t_again * 1000:.1f} ms (refs {t_refs * 1000:.1f} ms); "
        f"after +{more:,} messages refs {statistics.median(grown_refs) * 1000:.1f} ms "
        f"then take {statistics.median(grown) * 1000:.1f} ms"
    )


def time_s(body: Callable[[], object], clock: Callable[[], float]) -> float:
    started = clock()
    body()
    return clock() - started


if __name__ == "__main__":
    main()
