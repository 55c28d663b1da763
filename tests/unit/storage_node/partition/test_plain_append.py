"""Appends of plain records in whole runs (``_append_plain``) against record by record.

Every replica takes the run path for an append whose records are all
plain, and the record-by-record path otherwise; the two must leave the same
state and give the same result, or replicas that took different paths (the
leader applies records it already holds, followers decode the entry) would
drift apart. Each case applies one random history three ways: decoded from
the entry bytes (followers), from the decoded command (the leader), and with
the run path switched off (the reference).
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import (
    MessageRecord,
    decode_batch,
    decode_columns,
    encode_batch,
    encode_packed_batch,
)
from protocol.vocabulary import MessageType, Placement
from storage_node.partition import commands
from storage_node.partition.commands import Append, Command, Tick
from storage_node.partition.config import PartitionConfig
from storage_node.partition.results import AppendResult, Result
from storage_node.partition.snapshot import take_snapshot
from storage_node.partition.state import PartitionState

START_MS = 1_000_000

_records = st.builds(
    MessageRecord,
    topic=st.sampled_from(["orders", "audit"]),
    queue_id=st.integers(0, 2),
    message_id=st.sampled_from([f"m{i}" for i in range(12)]),
    body=st.binary(max_size=8),
    tag=st.sampled_from(["", "a", "b"]),
    keys=st.sampled_from([(), ("k1",), ("k1", "k2")]),
    message_group=st.sampled_from(["", "g1"]),
    properties=st.sampled_from([(), (("p", "v"),)]),
    delivery_timestamp_ms=st.sampled_from([0, START_MS - 1, START_MS + 50, START_MS + 5_000]),
    message_type=st.sampled_from(list(MessageType)),
    born_timestamp_ms=st.just(START_MS - 10),
    born_host=st.just("host"),
    dead_letter_topic=st.just(""),
    dead_letter_message_id=st.just(""),
)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(_records, min_size=1, max_size=6)),
        st.tuples(st.just("tick"), st.integers(0, 3_000)),
    ),
    min_size=1,
    max_size=12,
)


def _history(steps: list[tuple[str, object]]) -> list[Command]:
    now_ms = START_MS
    history: list[Command] = []
    for kind, value in steps:
        if kind == "tick":
            assert isinstance(value, int)
            now_ms += value
            history.append(Tick(now_ms))
        else:
            assert isinstance(value, list)
            history.append(Append(now_ms, tuple(value)))
    return history


def _run(history: list[Command], how: str) -> tuple[list[Result | None], bytes]:
    # A small dedup window, so that eviction happens inside runs too.
    state = PartitionState(PartitionConfig(dedup_window_ms=2_000, dedup_entries_max=8))
    results: list[Result | None] = []
    for index, command in enumerate(history, start=1):
        data = commands.encode(command)
        if how == "entry":
            results.append(state.apply_entry(data, index))
        else:
            results.append(state.apply(commands.decode(data), index))
    return results, take_snapshot(state)


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_runs_of_plain_records_apply_as_record_by_record(
    steps: list[tuple[str, object]],
) -> None:
    history = _history(steps)
    from_entry = _run(history, "entry")
    from_command = _run(history, "command")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PartitionState, "_append_plain", lambda *_args: None)
        reference = _run(history, "command")
    assert from_entry == reference
    assert from_command == reference


def test_a_batch_of_plain_records_takes_the_run_path() -> None:
    """The case the run path is for, so the property above compares two paths."""
    history: list[Command] = [
        Append(START_MS, tuple(MessageRecord("orders", i % 2, f"m{i}", b"x") for i in range(5)))
    ]
    with pytest.MonkeyPatch.context() as patch:
        taken: list[int] = []
        run_path = PartitionState._append_plain

        def counted(state: PartitionState, *args: object) -> object:
            result = run_path(state, *args)  # type: ignore[arg-type]
            taken.append(result is not None)
            return result

        patch.setattr(PartitionState, "_append_plain", counted)
        _run(history, "entry")
        _run(history, "command")
    assert taken == [True, True]


@settings(max_examples=200, deadline=None)
@given(st.lists(_records, min_size=1, max_size=6), st.integers(0, 2**40))
def test_columns_hold_the_fields_of_the_decoded_records(
    records: list[MessageRecord], store_ms: int
) -> None:
    data = encode_batch(records, store_ms)
    found = decode_columns(data)
    assert found is not None
    now_ms, columns = found
    batch = decode_batch(data)
    assert now_ms == batch.store_timestamp_ms
    assert [MessageRecord(*row) for row in zip(*columns, strict=True)] == list(batch.records)


def _batch_of(*arrays: list[object]) -> bytes:
    """A batch of the given record arrays, written as they are."""
    return encode_packed_batch([msgpack.packb(array) for array in arrays], len(arrays), 7)


def test_columns_give_way_to_what_the_fast_decoding_does_not_take() -> None:
    plain = MessageRecord("orders", 0, "m1", b"x")
    assert decode_columns(_batch_of(list(plain))) is not None
    # An older writer's record array (fewer fields): decode_batch fills in the rest.
    older = _batch_of(["orders", 0, "m1", b"x"])
    assert decode_columns(older) is None
    assert decode_batch(older).records == (plain,)
    # An unknown message type, a bool for an int: decode_batch names them.
    assert decode_columns(_batch_of([*plain[:10], 99, *plain[11:]])) is None
    assert decode_columns(_batch_of(["orders", True, *plain[2:]])) is None
    # A key that is not a string, a property that is not a pair.
    assert decode_columns(_batch_of([*plain[:5], [1], *plain[6:]])) is None
    assert decode_columns(_batch_of([*plain[:7], [["p"]], *plain[8:]])) is None


def test_a_column_of_one_value_is_taken_only_if_the_value_has_the_field_type() -> None:
    first = list(MessageRecord("orders", 0, "m1", b"x"))
    second = [*first[:2], "m2", *first[3:]]
    assert decode_columns(_batch_of(first, second)) is not None
    other = msgpack.ExtType(1, b"")
    # The tag (4) and the keys (5): of another type in every record or in one.
    for field, values in ((4, (b"", b"")), (4, ("", b"")), (4, ("", other)), (5, ((), other))):
        arrays = [
            [*array[:field], value, *array[field + 1 :]]
            for array, value in zip((first, second), values, strict=True)
        ]
        assert decode_columns(_batch_of(*arrays)) is None


def test_a_held_message_sent_again_after_the_dedup_window_stays_held_once() -> None:
    """The one plain-looking record the run path must leave alone: its id is no longer
    remembered, but its first send still waits for its delivery time."""
    later = START_MS + 60_000
    history: list[Command] = [
        Append(START_MS, (MessageRecord("orders", 0, "m1", b"x", delivery_timestamp_ms=later),)),
        Tick(START_MS + 3_000),  # past the 2 s dedup window: m1 is forgotten, still held
        Append(START_MS + 3_000, (MessageRecord("orders", 0, "m1", b"x"),)),
    ]
    results, _snapshot = _run(history, "entry")
    again = results[2]
    assert isinstance(again, AppendResult)
    assert [(o.placement, o.duplicate) for o in again.outcomes] == [(Placement.DELAYED, True)]
    assert _run(history, "command") == _run(history, "entry")
