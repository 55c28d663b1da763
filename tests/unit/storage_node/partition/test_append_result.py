"""An append's result built from queued runs is the result of its outcomes, whole and in parts."""

from __future__ import annotations

from itertools import count

from hypothesis import given
from hypothesis import strategies as st

from protocol.vocabulary import Placement
from storage_node.partition.queues import RecordOutcome
from storage_node.partition.results import AppendResult, QueuedRun

runs_st = st.lists(
    st.builds(
        QueuedRun,
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),
        st.lists(st.text(max_size=4), max_size=6).map(tuple),
        st.integers(0, 1 << 40),
    ),
    max_size=4,
).map(tuple)


def _outcomes(runs: tuple[QueuedRun, ...]) -> tuple[RecordOutcome, ...]:
    return tuple(
        RecordOutcome(run.topic, run.queue_id, message_id, Placement.QUEUED, offset, False)
        for run in runs
        for message_id, offset in zip(run.message_ids, count(run.first_offset), strict=False)
    )


@given(runs=runs_st)
def test_a_result_of_runs_has_one_queued_outcome_per_record(runs: tuple[QueuedRun, ...]) -> None:
    result = AppendResult.of_runs(runs)
    assert result.outcomes == _outcomes(runs)
    assert result == AppendResult(_outcomes(runs))
    assert hash(result) == hash(AppendResult(_outcomes(runs)))
    assert result.queued_run() == (runs[0] if len(runs) == 1 else None)
    assert AppendResult(_outcomes(runs)).queued_run() is None  # built from outcomes


@given(runs=runs_st, data=st.data())
def test_a_part_is_the_result_of_its_records(
    runs: tuple[QueuedRun, ...], data: st.DataObject
) -> None:
    outcomes = _outcomes(runs)
    first = data.draw(st.integers(0, len(outcomes)))
    size = data.draw(st.integers(0, len(outcomes) - first))
    part = AppendResult.of_runs(runs).part(first, size)
    assert part == AppendResult(outcomes[first : first + size])
    assert AppendResult(outcomes).part(first, size) == part
    run = part.queued_run()
    if run is not None:  # the queued form an append is answered in
        assert [(run.topic, run.queue_id, message_id) for message_id in run.message_ids] == [
            (o.topic, o.queue_id, o.message_id) for o in outcomes[first : first + size]
        ]
        assert run.first_offset == outcomes[first].queue_offset
