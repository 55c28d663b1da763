"""nameserver.load_monitor: degraded marks from heartbeat windows, load history by step;
forecast_placement.AvoidingNodes keeps another policy off degraded nodes."""

from __future__ import annotations

import pytest

from nameserver.anomaly import DegradationTracker
from nameserver.forecast_placement import AvoidingNodes
from nameserver.load_monitor import LoadMonitor
from nameserver.placement import LoadBalancedPlacement, NodeLoad

NODES = (1, 2, 3, 4)


def beat_all(monitor: LoadMonitor, now_ms: int, slow: int = 0) -> None:
    for node_id in NODES:
        fsync_us = 250_000 if node_id == slow else 2_000 + 100 * node_id
        monitor.heartbeat(node_id, now_ms, fsync_us, {})


def test_a_slow_node_is_marked_after_three_windows_and_cleared_after_six() -> None:
    monitor = LoadMonitor(window_ms=1000, tracker=DegradationTracker(mark_after=3, clear_after=6))
    now = 0
    monitor.tick(now)
    for _ in range(2):
        now += 500
        beat_all(monitor, now, slow=3)
        now += 500
        assert monitor.tick(now) == frozenset()
    now += 500
    beat_all(monitor, now, slow=3)
    now += 500
    assert monitor.tick(now) == {3}
    assert monitor.fsync_p99_us(3) == 250_000
    for window in range(6):
        assert monitor.degraded == {3}, window
        now += 1000
        beat_all(monitor, now)
        monitor.tick(now)
    assert monitor.degraded == frozenset()


def test_no_figure_is_no_judgement_and_a_window_closes_only_when_due() -> None:
    monitor = LoadMonitor(window_ms=1000, tracker=DegradationTracker(mark_after=1))
    monitor.tick(0)
    for node_id in NODES:
        monitor.heartbeat(node_id, 100, 0, {})  # no sync ran: no figure
    assert monitor.tick(1000) == frozenset()
    beat_all(monitor, 1100, slow=2)
    assert monitor.tick(1500) == frozenset()  # the window is not over yet
    assert monitor.tick(2000) == {2}
    monitor.forget(2)
    assert monitor.degraded == frozenset()
    assert monitor.fsync_p99_us(2) == 0


def test_group_rates_become_one_sample_per_step_weighted_by_heartbeat_intervals() -> None:
    monitor = LoadMonitor(step_ms=10_000)
    monitor.tick(0)
    monitor.heartbeat(1, 0, 0, {7: 999})  # the first heartbeat has no interval yet
    for now in range(1000, 10_001, 1000):
        monitor.heartbeat(1, now, 0, {7: 100} if now <= 5000 else {})
    monitor.tick(10_000)
    # 100 msgs/s for 5 s of a 10 s step: a mean of 50.
    assert monitor.book.group_peak(7, 1, 1) == pytest.approx(50.0)
    for now in range(11_000, 20_001, 1000):
        monitor.heartbeat(1, now, 0, {})
    monitor.tick(20_000)  # an idle step is a sample of 0 for a group with history
    assert monitor.book.group_peak(7, 2, 1) < 50.0


def test_bad_figures_and_options_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        LoadMonitor().heartbeat(1, 0, -1, {})
    with pytest.raises(ValueError, match="window_ms"):
        LoadMonitor(window_ms=0)


def test_the_default_history_is_hourly_with_a_daily_season() -> None:
    assert LoadMonitor().book.params.season_steps == 24
    assert LoadMonitor(step_ms=86_400_000).book.params.season_steps == 0


def test_avoiding_degraded_places_and_leads_only_on_healthy_nodes() -> None:
    nodes = [NodeLoad(n) for n in range(1, 6)]
    policy = AvoidingNodes(LoadBalancedPlacement(), frozenset({2}))
    placed = policy.place_groups(range(1, 11), nodes, 3)
    assert all(2 not in replicas for replicas in placed.values())
    assignment = dict.fromkeys(range(1, 5), (1, 2, 3))
    leaders = {1: 2, 2: 2, 3: 1, 4: 3}
    transfers = policy.plan_leaders(assignment, leaders, nodes[:3])
    final = leaders | {t.group_id: t.to_node for t in transfers}
    assert 2 not in final.values()
    # Evacuations and rebalances send nothing to the degraded node.
    evacuation = policy.plan_evacuation({1: (1, 3, 4)}, nodes, frozenset({1}))
    assert [m.to_node for m in evacuation] == [5]
    uneven = dict.fromkeys(range(1, 7), (1, 3, 4))
    assert all(m.to_node != 2 for m in policy.plan_rebalance(uneven, nodes, 3))
    # Too few healthy nodes: the base plan over all of them.
    crowded = AvoidingNodes(LoadBalancedPlacement(), frozenset({1, 2, 3}))
    assert crowded.place_groups([1], nodes[:3], 3) == {1: (1, 2, 3)}


def test_a_node_that_lost_its_data_is_degraded_until_its_heartbeats_say_otherwise() -> None:
    monitor = LoadMonitor(window_ms=1000)
    monitor.heartbeat(1, 0, 1000, {})
    monitor.heartbeat(2, 0, 1000, {}, data_lost=True)  # its WAL was set aside
    assert monitor.degraded == {2}
    assert monitor.tick(100) == {2}
    monitor.heartbeat(2, 500, 1000, {}, data_lost=False)  # every group re-admitted it
    assert monitor.degraded == frozenset()
    monitor.heartbeat(3, 600, 1000, {}, data_lost=True)
    monitor.forget(3)  # removed from the cluster
    assert monitor.degraded == frozenset()
