"""Micro-benchmark: storage CPU per delivered message, SQL92 filter against ``*``.

Drives one partition state machine as the storage node's receive does: for
``*``, propose (encode, decode, apply) a ``Receive`` and cut the delivered
records out of their log entries; for a SQL92 filter that matches 1 message
in ``--selectivity``, first evaluate the filter on the fresh offsets
(``partition.property_filter``), then the same. The log is held in memory,
so this counts CPU, not disk. Prints the CPU per delivered message of each
and their ratio. Indicative on a shared machine.

``rip5 bench sql_filter [--messages N] [--selectivity K]``.

SHELL.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from protocol import sql92
from protocol.records import MessageRecord
from storage_node.partition import commands, property_filter
from storage_node.partition.commands import Append, FilteredReceive, Receive
from storage_node.partition.reads import record_items_of
from storage_node.partition.results import ReceiveResult
from storage_node.partition.state import PartitionState

TOPIC = "bench"
BATCH = 32
EXPRESSION = "n = 3 AND region IN ('eu', 'us')"


def _loaded(messages: int, selectivity: int) -> tuple[PartitionState, dict[int, bytes]]:
    """A partition holding ``messages`` 1 KiB messages in batches of 32, and its log."""
    state = PartitionState()
    log: dict[int, bytes] = {}
    body = bytes(1024)
    for start in range(0, messages, BATCH):
        records = tuple(
            MessageRecord(
                TOPIC,
                0,
                f"m{i}",
                body,
                tag="t",
                keys=(f"k{i}",),
                properties=(("n", str(i % selectivity)), ("region", "eu"), ("shop", "s1")),
            )
            for i in range(start, min(start + BATCH, messages))
        )
        data = commands.encode(Append(1_000, records))
        index = state.applied_index + 1
        log[index] = data
        state.apply_entry(data, index)
    return state, log


def _drain(
    state: PartitionState, log: dict[int, bytes], prepare: Callable[[Receive], Receive]
) -> tuple[int, float]:
    """Receive everything as group ``g``: (messages delivered, CPU seconds)."""
    delivered = 0
    started = time.process_time()
    while True:
        command = prepare(Receive(2_000, "g", TOPIC, 0, BATCH, 60_000, 16))
        data = commands.encode(command)
        index = state.applied_index + 1
        log[index] = data
        result = state.apply_entry(data, index)
        assert isinstance(result, ReceiveResult)
        if not result.deliveries:
            if not isinstance(command, FilteredReceive) or not command.unmatched:
                break
            continue
        items = record_items_of(
            log.__getitem__, 0, (TOPIC, 0), [d.entry for d in result.deliveries]
        )
        delivered += len(items)
    return delivered, time.process_time() - started


def main(argv: list[str]) -> int:
    """Run both drains and print the CPU per delivered message."""
    parser = argparse.ArgumentParser(prog="rip5 bench sql_filter", description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--selectivity", type=int, default=10)
    args = parser.parse_args(argv)
    sql = sql92.parse(EXPRESSION)

    state, log = _loaded(args.messages, args.selectivity)
    plain_count, plain_s = _drain(state, log, lambda command: command)
    state, log = _loaded(args.messages, args.selectivity)

    def with_verdicts(command: Receive) -> Receive:
        return property_filter.evaluate(state, log.__getitem__, command, sql).command

    sql_count, sql_s = _drain(state, log, with_verdicts)
    plain_us = plain_s / plain_count * 1e6
    sql_us = sql_s / sql_count * 1e6
    print(f"'*': {plain_count} delivered, {plain_us:.1f} us CPU per delivered message")
    print(
        f"{EXPRESSION!r} (1 in {args.selectivity}): {sql_count} delivered, "
        f"{sql_us:.1f} us CPU per delivered message"
    )
    print(f"ratio: {sql_us / plain_us:.2f}")
    return 0
