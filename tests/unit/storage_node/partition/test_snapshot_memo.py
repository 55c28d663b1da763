"""Snapshots assembled from memos: byte for byte the encoding of the whole state.

The queue indexes and the dedup window keep their snapshot encoding by chunk
(``chunks.PackedChunks``). Whatever happened since the last snapshot (appends,
trims, evictions, updates of remembered outcomes, restores), a snapshot must
equal the plain encoding of ``_to_wire(state)``, and the per-chunk log index
sets must give every log index the state names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from unittest import mock

import crc32c
import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.vocabulary import MessageType, Placement
from storage_node.errors import StorageError
from storage_node.partition import chunks, dedup, queues
from storage_node.partition import commands as c
from storage_node.partition.config import PartitionConfig
from storage_node.partition.queues import QueueEntry, RecordOutcome
from storage_node.partition.snapshot import (
    SNAPSHOT_MAGIC,
    SNAPSHOT_VERSION,
    _to_wire,
    restore,
    take_snapshot,
)
from storage_node.partition.state import PartitionState
from storage_node.partition.wire import array_header, pack_items

from .harness import record
from .test_snapshot import CONFIG, command, queue_id, topic

IDS = [f"m{number}" for number in range(60)]


@st.composite
def a_record(draw: st.DrawFn) -> object:
    """Records of many ids (the dedup window fills), delayed up to a minute."""
    kind = draw(st.sampled_from([MessageType.NORMAL] * 3 + [MessageType.DELAY] * 2))
    kind = draw(st.sampled_from([kind, MessageType.TRANSACTION]))
    return record(
        draw(st.sampled_from(IDS)),
        topic=draw(topic),
        queue_id=draw(queue_id),
        tag=draw(st.sampled_from(["", "a"])),
        message_type=kind,
        delivery_timestamp_ms=draw(st.integers(1, 60_000)) if kind is MessageType.DELAY else 0,
    )


# The clock is set when a step is applied (see at_time), so now_ms here is a dummy.
append = st.builds(c.Append, st.just(0), st.lists(a_record(), min_size=1, max_size=8).map(tuple))
end_transaction = st.builds(
    c.EndTransaction, st.just(0), topic, st.sampled_from(IDS), st.booleans()
)
trim = st.builds(c.TrimQueue, st.just(0), topic, queue_id, st.integers(0, 40))
SNAPSHOT, REFERENCED, RESTART = "snapshot", "referenced", "restart"
# A command, proposed that many ms after the one before: the clock moves
# slowly, so store times differ along the dedup window, delayed messages are
# released while still remembered, and entries age out of the window.
# (Weights by sampled_from: one_of flattens nested one_ofs and drops repeats.)
timed = st.tuples(
    st.sampled_from([append] * 4 + [end_transaction, trim, command]).flatmap(lambda s: s),
    st.sampled_from([0] * 6 + [1, 7, 100, 500, 3_000, 30_000]),
)
step = st.sampled_from([timed] * 5 + [st.sampled_from([SNAPSHOT, REFERENCED, RESTART])]).flatmap(
    lambda s: s
)
config = st.sampled_from(
    [PartitionConfig(group_id=2, dedup_window_ms=50_000, dedup_entries_max=1000), CONFIG]
)


def reference_snapshot(state: PartitionState) -> bytes:
    """The snapshot as it was framed before memos: one packb of the whole layout."""
    payload: bytes = msgpack.packb(_to_wire(state), use_bin_type=True)
    crc = struct.pack(">I", crc32c.crc32c(payload))
    return SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + crc + payload


def referenced_by_brute_force(state: PartitionState) -> set[int]:
    referenced = {entry.log_index for index in state._queues.values() for entry in index}
    referenced.update(half.log_index for half in state._halves)
    referenced.update(held.log_index for held in state._timers.unordered())
    return referenced


def check_floor(state: PartitionState) -> None:
    """The kept truncate floor and message count equal a walk over every queue."""
    assert state.min_log_index_referenced() == min(referenced_by_brute_force(state), default=None)
    assert state.message_count() == sum(len(list(index)) for index in state._queues.values())


def check_snapshot(state: PartitionState) -> PartitionState:
    """Assert the snapshot is the reference, again from the memo, and after a restore."""
    image = take_snapshot(state)
    assert image == reference_snapshot(state)
    assert state.referenced_log_indexes() == referenced_by_brute_force(state)
    assert take_snapshot(state) == image
    restored = restore(image)
    assert take_snapshot(restored) == image
    assert restored.referenced_log_indexes() == referenced_by_brute_force(state)
    check_floor(restored)
    return restored


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    config,
    st.sampled_from([1, 2, 3, 4, 7]),
    st.sampled_from([0, 3, 64]),  # queues.MEMO_ENTRIES_MIN: memos for all, some, none
    st.lists(step, min_size=10, max_size=150),
)
def test_snapshots_from_memos_equal_the_whole_encoding(
    config: PartitionConfig, chunk: int, memo_entries_min: int, steps: list[object]
) -> None:
    with (
        mock.patch.object(chunks, "CHUNK", chunk),
        mock.patch.object(dedup, "RUNS_PER_CHUNK", chunk),
        mock.patch.object(queues, "MEMO_ENTRIES_MIN", memo_entries_min),
    ):
        state = PartitionState(config)
        now = 1
        for item in steps:
            if item == SNAPSHOT:
                check_snapshot(state)
            elif item == REFERENCED:
                assert state.referenced_log_indexes() == referenced_by_brute_force(state)
                check_floor(state)
            elif item == RESTART:
                state = check_snapshot(state)
            else:
                assert isinstance(item, tuple)
                proposed, elapsed = item
                now += elapsed
                with contextlib.suppress(StorageError):  # rejected: changes no more
                    state.apply_entry(c.encode(at_time(proposed, now)), state.applied_index + 1)
        check_floor(state)
        state.check_invariants()  # the floor heap's among them
        check_snapshot(state)


def at_time(command: c.Command, now: int) -> c.Command:
    """``command`` proposed at ``now``; an Append's delays count from then."""
    if isinstance(command, c.Append):
        records = tuple(
            r._replace(delivery_timestamp_ms=now + r.delivery_timestamp_ms)
            if r.delivery_timestamp_ms
            else r
            for r in command.records
        )
        command = dataclasses.replace(command, records=records)
    return dataclasses.replace(command, now_ms=now)


def test_full_size_chunks_through_trims_evictions_and_released_timers() -> None:
    config = PartitionConfig(dedup_window_ms=60_000, dedup_entries_max=5_000)
    state = PartitionState(config)
    now = 1_000

    def apply(command: c.Command) -> None:
        state.apply(command, state.applied_index + 1)

    def appends(first: int, count: int, delayed_until_ms: int = 0) -> None:
        nonlocal now
        kind = MessageType.DELAY if delayed_until_ms else MessageType.NORMAL
        for start in range(first, first + count, 16):
            now += 1
            records = tuple(
                record(
                    f"m{i}",
                    queue_id=i % 3,
                    tag=f"t{i % 5}",
                    message_type=kind,
                    delivery_timestamp_ms=delayed_until_ms,
                )
                for i in range(start, min(start + 16, first + count))
            )
            apply(c.Append(now, records))

    appends(0, 6_000)
    appends(6_000, 300, delayed_until_ms=now + 500)
    check_snapshot(state)
    assert len(state._dedup) == 5_000
    for trimmed, before in ((0, 1_500), (1, 1_024), (2, 3)):
        apply(c.TrimQueue(now, "orders", trimmed, before))
    now += 1_000  # the delayed messages are released: their remembered outcomes change
    appends(6_300, 2_500)
    check_snapshot(state)
    assert len(state._dedup) == 5_000
    now += 61_000  # everything stored before is forgotten
    appends(8_800, 100)
    check_snapshot(state)


def test_an_entry_packs_as_its_wire_list() -> None:
    entries = [
        QueueEntry(1, 0, 0),
        QueueEntry(2**40, 65_535, 1_700_000_000_000, "tág", "grüppe", dead_letter=True),
        QueueEntry(300, 2, 5, "", "A", dead_letter=False),
    ]
    for entry in entries:
        assert msgpack.packb(entry, use_bin_type=True) == msgpack.packb(
            entry.to_wire(), use_bin_type=True
        )
    wire = [entry.to_wire() for entry in entries]
    assert array_header(3) + pack_items(entries) == msgpack.packb(wire, use_bin_type=True)
    outcome = RecordOutcome("t", 1, "m", Placement.HALF)
    for count in (0, 1, 15, 16, 65_535, 65_536):
        assert array_header(count) + pack_items([outcome.to_wire()] * count) == msgpack.packb(
            [outcome.to_wire()] * count, use_bin_type=True
        )
