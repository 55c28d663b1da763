"""The storage node's clock: a wall-clock step moves what it stamps by at most the slew."""

from __future__ import annotations

import random

from storage_node.node_clock import SLEW_PPM, NodeClock
from storage_node.partition.timers import HeldMessage, TimerIndex

START_MS = 1_800_000_000_000


def test_first_read_takes_the_wall_clock() -> None:
    assert NodeClock().read(START_MS, 5.0) == START_MS


def test_follows_the_monotonic_clock_when_the_wall_agrees() -> None:
    clock = NodeClock()
    clock.read(START_MS, 0.0)
    assert clock.read(START_MS + 1_000, 1_000.0) == START_MS + 1_000


def test_a_wall_step_ahead_moves_the_time_by_the_slew_only() -> None:
    clock = NodeClock()
    clock.read(START_MS, 0.0)
    step_ms = 60_000
    for elapsed_ms in range(20, 4_001, 20):  # a 4 s hold, read every 20 ms
        now_ms = clock.read(START_MS + elapsed_ms + step_ms, float(elapsed_ms))
    ahead_ms = now_ms - (START_MS + 4_000)
    assert 0 < ahead_ms <= 4_000 * SLEW_PPM // 1_000_000  # 2 ms, not 60 s


def test_a_wall_step_back_never_moves_the_time_back() -> None:
    clock = NodeClock()
    clock.read(START_MS, 0.0)
    before = clock.read(START_MS + 1_000, 1_000.0)
    after = clock.read(START_MS - 60_000, 1_020.0)  # the wall stepped a minute back
    assert after >= before
    assert after >= START_MS + 1_020 - 1  # still about the monotonic time elapsed


def test_converges_to_the_wall_clock_at_the_slew_rate() -> None:
    clock = NodeClock()
    clock.read(START_MS, 0.0)
    gap_ms = 100
    hours_ms = 3_600_000
    now_ms = clock.read(START_MS + hours_ms + gap_ms, float(hours_ms))
    assert now_ms == START_MS + hours_ms + gap_ms  # 100 ms < 500 ppm of an hour (1.8 s)


def test_a_committed_time_ahead_pulls_the_clock_forward() -> None:
    clock = NodeClock()
    clock.read(START_MS, 0.0)
    # Another leader stamped this (this node's wall clock is behind).
    assert clock.observe(START_MS + 30_000, START_MS + 10, 10.0) == START_MS + 30_000
    # Then it runs on (slowed by the slew toward its wall clock, behind).
    assert START_MS + 30_009 <= clock.read(START_MS + 20, 20.0) <= START_MS + 30_010
    # An older committed time changes nothing.
    assert START_MS + 30_019 <= clock.observe(START_MS, START_MS + 30, 30.0) <= START_MS + 30_020


def test_a_committed_time_before_the_first_read_is_a_floor() -> None:
    clock = NodeClock()
    assert clock.observe(START_MS + 5_000, START_MS, 0.0) == START_MS + 5_000


def test_nodes_observing_each_others_stamps_do_not_run_ahead() -> None:
    """Three nodes with right clocks, each stamping and observing the others' stamps
    every 20 ms: observing must not count the time since the last read twice."""
    clocks = [NodeClock() for _ in range(3)]
    committed_ms = 0
    for step in range(1_000):
        for node, clock in enumerate(clocks):
            monotonic_ms = step * 20.0 + node * 7
            wall_ms = START_MS + int(monotonic_ms)
            committed_ms = max(committed_ms, clock.observe(committed_ms, wall_ms, monotonic_ms))
            assert committed_ms <= wall_ms, step


def test_timers_are_never_released_early_under_random_wall_steps() -> None:
    """A seeded model of a leader: it ticks every 20 ms with its clock while its wall
    clock steps by up to a minute either way; every message released was due by real
    time plus the slew bound."""
    rng = random.Random(7)
    clock = NodeClock()
    timers = TimerIndex()
    group_clock_ms = 0
    offset_ms = 0
    slack_ms = 0.0
    for step in range(5_000):
        real_ms = START_MS + step * 20
        if step % 250 == 0 and step:  # it started with a right clock; then steps
            offset_ms = rng.choice([0, 60_000, -60_000, rng.randint(-5_000, 5_000)])
        if step % 7 == 0:
            due_ms = real_ms + rng.randint(0, 3_000)
            timers.hold(HeldMessage(due_ms, step, 0, "t", 0, f"m{step}"))
        group_clock_ms = max(group_clock_ms, clock.read(real_ms + offset_ms, float(step * 20)))
        slack_ms += 20 * SLEW_PPM / 1_000_000
        for held in timers.pop_due(group_clock_ms):
            assert held.due_ms <= real_ms + slack_ms, (step, held, real_ms)
