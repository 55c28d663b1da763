"""The dedup window remembers, evicts the oldest first and keeps its keys' order."""

from __future__ import annotations

from unittest import mock

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.vocabulary import Placement
from storage_node.partition import chunks, dedup
from storage_node.partition.dedup import DedupWindow
from storage_node.partition.queues import RecordOutcome


@given(
    batches=st.lists(st.lists(st.integers(0, 30), max_size=8), max_size=12),
    entries_max=st.integers(1, 20),
)
def test_the_newest_entries_max_stay_in_store_order(
    batches: list[list[int]], entries_max: int
) -> None:
    window = DedupWindow(window_ms=1_000, entries_max=entries_max)
    expected: dict[str, int] = {}  # id -> offset, in store order
    offset = 0
    for clock_ms, batch in enumerate(batches):
        fresh = [f"m{n}" for n in dict.fromkeys(batch) if f"m{n}" not in expected]
        window.remember_queued("t", 0, fresh, offset, clock_ms)
        for message_id in fresh:
            expected[message_id] = offset
            offset += 1
        while len(expected) > entries_max:
            del expected[next(iter(expected))]
        window.check_invariants()
        assert [key[1] for key in window] == list(expected)
    for message_id, queue_offset in expected.items():
        assert window.lookup("t", message_id) == RecordOutcome(
            "t", 0, message_id, Placement.QUEUED, queue_offset
        )


def test_an_id_remembered_again_keeps_its_place_and_the_order_holds() -> None:
    # Callers never do this (an append checks first), but the window stays whole.
    window = DedupWindow(window_ms=1_000, entries_max=3)
    window.remember_queued("t", 0, ["a", "b"], 0, 1)
    window.remember_queued("t", 0, ["b", "c"], 2, 2)
    window.check_invariants()
    assert [key[1] for key in window] == ["a", "b", "c"]
    window.remember_queued("t", 0, ["d"], 4, 3)  # evicts the oldest
    window.check_invariants()
    assert [key[1] for key in window] == ["b", "c", "d"]


def test_entries_older_than_the_window_leave_from_the_front() -> None:
    window = DedupWindow(window_ms=100, entries_max=1_000)
    window.remember_queued("t", 0, ["a", "b"], 0, 1_000)
    window.remember(RecordOutcome("t", 1, "c", Placement.DELAYED), 1_050)
    assert window.maybe_evict(1_120) == 2
    window.check_invariants()
    assert [key[1] for key in window] == ["c"]
    assert window.lookup("t", "a") is None


# A model of the window: a map in store order, as the window behaves for callers
# that remember fresh ids only.
_Model = dict[tuple[str, str], tuple[int, int, int, int]]

_step = st.one_of(
    st.tuples(
        st.just("queued"),
        st.sampled_from(["t", "u"]),
        st.integers(0, 2),
        st.integers(0, 6),
    ),
    st.tuples(st.just("single"), st.sampled_from(["t", "u"]), st.sampled_from(list(Placement))),
    st.tuples(st.just("update"), st.integers(0, 200)),
    st.tuples(st.just("tick"), st.integers(0, 30)),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("restore")),
    st.tuples(st.just("restore_entries")),
)


def _evict(model: _Model, entries_max: int, horizon: int) -> None:
    while model and (len(model) > entries_max or next(iter(model.values()))[3] < horizon):
        del model[next(iter(model))]


@settings(max_examples=300, derandomize=True, database=None)
@given(
    steps=st.lists(_step, max_size=40),
    entries_max=st.integers(1, 25),
    chunk=st.sampled_from([1, 2, 3, 5, 1024]),
)
def test_the_window_agrees_with_a_map_in_store_order(
    steps: list[tuple[object, ...]], entries_max: int, chunk: int
) -> None:
    # The memo is by run: its chunks are RUNS_PER_CHUNK runs.
    with (
        mock.patch.object(chunks, "CHUNK", chunk),
        mock.patch.object(dedup, "RUNS_PER_CHUNK", chunk),
    ):
        _agrees_with_a_map(steps, entries_max)


def _agrees_with_a_map(steps: list[tuple[object, ...]], entries_max: int) -> None:
    window = DedupWindow(window_ms=40, entries_max=entries_max)
    model: _Model = {}
    clock_ms = 0
    offsets: dict[tuple[str, int], int] = {}
    fresh = (f"m{n}" for n in range(10_000))
    for step in steps:
        kind = step[0]
        if kind == "queued":
            _, topic, queue_id, count = step
            assert isinstance(topic, str)
            assert isinstance(queue_id, int)
            assert isinstance(count, int)
            ids = [next(fresh) for _ in range(count)]
            first = offsets.get((topic, queue_id), 0)
            offsets[(topic, queue_id)] = first + count
            window.remember_queued(topic, queue_id, ids, first, clock_ms)
            for i, message_id in enumerate(ids):
                model[(topic, message_id)] = (queue_id, int(Placement.QUEUED), first + i, clock_ms)
        elif kind == "single":
            _, topic, placement = step
            assert isinstance(topic, str)
            assert isinstance(placement, Placement)
            message_id = next(fresh)
            offset = offsets.get((topic, 1), 0) if placement is Placement.QUEUED else -1
            if placement is Placement.QUEUED:
                offsets[(topic, 1)] = offset + 1
            window.remember(RecordOutcome(topic, 1, message_id, placement, offset), clock_ms)
            model[(topic, message_id)] = (1, int(placement), offset, clock_ms)
        elif kind == "update":
            if model:
                index = step[1]
                assert isinstance(index, int)
                key = list(model)[index % len(model)]
                queue_id, _placement, offset, stored = model[key]
                moved = offsets.get((key[0], 7), 0)
                offsets[(key[0], 7)] = moved + 1
                window.update(RecordOutcome(key[0], 7, key[1], Placement.QUEUED, moved))
                model[key] = (7, int(Placement.QUEUED), moved, stored)
        elif kind == "tick":
            advance = step[1]
            assert isinstance(advance, int)
            clock_ms += advance
            window.maybe_evict(clock_ms)
        elif kind == "snapshot":
            assert window.packed() == msgpack.packb(window.to_wire(), use_bin_type=True)
        elif kind == "restore":
            restored = DedupWindow(window_ms=40, entries_max=entries_max)
            restored.load_wire(msgpack.unpackb(msgpack.packb(window.to_wire()), use_list=True))
            assert restored.packed() == window.packed()  # the runs a restore holds
            window = restored
        else:  # a version-1 snapshot: the same entries
            restored = DedupWindow(window_ms=40, entries_max=entries_max)
            wire = msgpack.unpackb(msgpack.packb(window.to_entries_wire()), use_list=True)
            restored.load_entries_wire(wire)
            window = restored
        _evict(model, entries_max, clock_ms - 40 if kind == "tick" else -1)
        window.check_invariants()
        assert len(window) == len(model)
        assert list(window) == list(model)
        assert window.to_entries_wire() == [
            [[topic, queue_id, message_id, placement, offset], stored]
            for (topic, message_id), (queue_id, placement, offset, stored) in model.items()
        ]
    for (topic, message_id), (queue_id, placement, offset, _stored) in model.items():
        assert window.lookup(topic, message_id) == RecordOutcome(
            topic, queue_id, message_id, Placement(placement), offset
        )
        assert window.knows_any_of(topic, ["x", message_id])
        assert window.knows_any([("x", "y"), (topic, message_id)])
    assert not window.knows_any_of("t", ["x"])
    assert not window.knows_any([("t", "x")])
    assert window.packed() == msgpack.packb(window.to_wire(), use_bin_type=True)
