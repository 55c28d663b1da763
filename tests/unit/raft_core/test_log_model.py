"""The raft log against a plain-list model, under random host behaviour (hypothesis).

The host persists Readys late (two may be in flight), acknowledges them in
order, and compacts applied entries; the leader side appends batches that
may replace any uncommitted suffix. Whatever the interleaving, the log's
view must equal the model's list of entries.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raft.core.log import RaftLog
from raft.core.memory_log import MemoryLog
from raft.types import ConfState, Entry

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6), st.integers(1, 4)),
        st.tuples(st.just("ready"), st.just(0), st.just(0)),
        st.tuples(st.just("persist"), st.just(0), st.just(0)),
        st.tuples(st.just("commit"), st.integers(0, 8), st.just(0)),
        st.tuples(st.just("compact"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_log_always_reads_like_the_model(ops: list[tuple[str, int, int]]) -> None:
    storage = MemoryLog(ConfState(frozenset({1})))
    log = RaftLog(storage)
    model: list[Entry] = []  # model[i] has index i + 1
    in_flight: list[list[Entry]] = []  # handed out, not yet persisted
    term = 1
    for op, a, b in ops:
        if op == "append":
            # Replace from a random uncommitted point with b entries of a newer term.
            start = max(log.committed + 1, len(model) + 1 - a)
            term += 1
            batch = [Entry(term, start + i, data=b"%d" % term) for i in range(b)]
            log.append(batch)
            del model[start - 1 :]
            model.extend(batch)
        elif op == "ready":
            entries = log.unstable.next_entries()
            log.unstable.accept_in_progress()
            if entries:
                in_flight.append(entries)
        elif op == "persist" and in_flight:
            entries = in_flight.pop(0)
            storage.append(entries)
            log.stable_to(entries[-1].index, entries[-1].term)
        elif op == "commit":
            # Only what the host has persisted and the model agrees on.
            target = min(log.committed + a, storage.last_index(), len(model))
            if target > log.committed and storage.term(target) == model[target - 1].term:
                log.commit_to(target)
        elif op == "compact" and log.committed >= storage.first_index():
            index = log.committed
            storage.create_snapshot(index, ConfState(frozenset({1})), b"")
            storage.compact(index)
        # The log's view equals the model from its first index on.
        assert log.last_index() == len(model)
        first = log.first_index()
        assert log.entries(first) == model[first - 1 :]
        for index in range(first - 1, len(model) + 1):
            expected = 0 if index == 0 else model[index - 1].term
            assert log.term(index) == expected
