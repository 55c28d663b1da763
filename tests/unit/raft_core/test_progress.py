"""Progress states and the in-flight window (etcd-io/raft's tracker design)."""

from __future__ import annotations

from raft.core.progress import Inflights, Progress, ProgressState


def test_inflights_fill_by_count_and_free_in_order() -> None:
    window = Inflights(count_max=3)
    for index in (5, 7, 9):
        assert not window.full()
        window.add(index, 10)
    assert window.full()
    window.free_le(7)
    assert window.count() == 1
    assert not window.full()
    window.free_le(100)
    assert window.count() == 0
    window.reset()
    assert window.count() == 0


def test_inflights_fill_by_bytes() -> None:
    window = Inflights(count_max=100, bytes_max=50)
    window.add(1, 30)
    assert not window.full()
    window.add(2, 30)
    assert window.full()
    window.free_le(1)
    assert not window.full()


def progress(next_index: int = 5, match: int = 0, count_max: int = 2) -> Progress:
    return Progress(next_index, Inflights(count_max), match=match)


def test_probe_sends_one_append_per_round_trip() -> None:
    pr = progress()
    assert pr.state == ProgressState.PROBE
    assert not pr.is_paused()
    pr.sent_entries(7, 3)
    assert pr.is_paused()
    assert pr.next == 5  # a probe does not advance next optimistically
    assert pr.maybe_update(4)
    assert not pr.is_paused()
    assert (pr.match, pr.next) == (4, 5)
    assert not pr.maybe_update(3)  # stale


def test_replicate_streams_until_the_window_is_full() -> None:
    pr = progress(match=4)
    pr.become_replicate()
    assert pr.next == 5
    pr.sent_entries(6, 1)
    assert not pr.is_paused()
    pr.sent_entries(8, 1)
    assert pr.is_paused()
    assert not pr.can_send_entries()
    assert pr.next == 9
    pr.inflights.free_le(6)
    assert pr.can_send_entries()


def test_rejections_move_next_back_unless_stale() -> None:
    pr = progress(next_index=10, match=3)
    # Probe: only a rejection of the last probe (next - 1) counts.
    assert not pr.maybe_decr_to(5, 5)
    assert pr.maybe_decr_to(9, 6)
    assert pr.next == 7
    # The hint never moves next below match + 1.
    pr.next = 10
    assert pr.maybe_decr_to(9, 0)
    assert pr.next == 4
    # Replicate: a rejection at or below match is stale; otherwise restart at match + 1.
    pr.become_replicate()
    pr.next = 12
    assert not pr.maybe_decr_to(3, 0)
    assert pr.maybe_decr_to(11, 0)
    assert pr.next == 4


def test_snapshot_state_pauses_until_probe() -> None:
    pr = progress(next_index=3, match=2)
    pr.become_snapshot(20)
    assert pr.is_paused()
    assert pr.state == ProgressState.SNAPSHOT
    assert pr.pending_snapshot == 20
    pr.become_probe()
    assert (pr.state, pr.next, pr.pending_snapshot) == (ProgressState.PROBE, 21, 0)
    pr.become_snapshot(20)
    pr.pending_snapshot = 0  # the send failed
    pr.become_probe()
    assert pr.next == 3
