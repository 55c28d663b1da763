"""The fault schedule: names parsed and checked, targets drawn from the seed, partitions shaped."""

from __future__ import annotations

import pytest

from rip5.chaos.schedule import (
    FaultSpec,
    ScheduleError,
    SplitMix64,
    parse_fault,
    partition_sides,
    plan,
    role_of,
)

PROCESSES = ["nameserver", "storage-1", "storage-2", "storage-3", "broker-1"]


def test_role_of_a_process_name() -> None:
    assert role_of("storage-12") == "storage"
    assert role_of("nameserver") == "nameserver"


def test_fault_names_are_parsed_and_checked() -> None:
    assert parse_fault("kill", PROCESSES) == FaultSpec("kill")
    assert parse_fault("pause@broker", PROCESSES) == FaultSpec("pause", "broker")
    assert parse_fault("disk-full@storage-2", PROCESSES) == FaultSpec("disk-full", "storage-2")
    assert parse_fault("kill@leader", PROCESSES) == FaultSpec("kill", "leader")
    assert parse_fault("partition", PROCESSES) == FaultSpec("partition", "one")
    assert parse_fault("partition@bridge", PROCESSES) == FaultSpec("partition", "bridge")
    with pytest.raises(ScheduleError, match="unknown fault 'explode'"):
        parse_fault("explode", PROCESSES)
    with pytest.raises(ScheduleError, match="no process or role"):
        parse_fault("kill@storage-9", PROCESSES)
    with pytest.raises(ScheduleError, match="storage nodes only"):
        parse_fault("disk-full@broker-1", PROCESSES)
    with pytest.raises(ScheduleError, match="needs 5 storage nodes"):
        parse_fault("partition@ring", PROCESSES)


def test_the_plan_takes_faults_in_turn_and_heals_each_before_the_end() -> None:
    specs = [FaultSpec("kill", "storage-1"), FaultSpec("pause", "broker-1")]
    steps = plan(
        specs, PROCESSES, duration_ms=30_000, interval_ms=10_000, hold_ms=4_000, warmup_ms=3_000,
        seed=1,
    )  # fmt: skip
    assert [(s.at_ms, s.kind, s.target) for s in steps] == [
        (3_000, "kill", "storage-1"),
        (13_000, "pause", "broker-1"),
        (23_000, "kill", "storage-1"),
    ]
    assert all(s.at_ms + s.hold_ms <= 30_000 for s in steps)
    with pytest.raises(ScheduleError, match="shorter than the interval"):
        plan(specs, PROCESSES, duration_ms=1, interval_ms=5, hold_ms=5, warmup_ms=0, seed=1)


def test_targets_come_from_the_seed() -> None:
    def targets(seed: int) -> list[str]:
        steps = plan(
            [FaultSpec("kill")], PROCESSES, duration_ms=100_000, interval_ms=1_000, hold_ms=500,
            warmup_ms=0, seed=seed,
        )  # fmt: skip
        return [s.target for s in steps]

    assert targets(7) == targets(7)
    assert targets(7) != targets(8)
    assert set(targets(7)) == set(PROCESSES)  # kill's default roles: all of them


def test_splitmix64_is_the_reference_generator() -> None:
    # splitmix64 from seed 0: the reference sequence's first values.
    draws = SplitMix64(0)
    assert draws.next() == 0xE220A8397B1DCDAF
    assert draws.next() == 0x6E789E6AA1B965F4


def test_partition_shapes() -> None:
    storage = [f"storage-{i}" for i in range(1, 6)]
    one = partition_sides("storage-2", storage, ["broker-1", "nameserver"])
    assert len(one) == 6
    assert all("storage-2" in pair for pair in one)
    ring = partition_sides("ring", storage, ["broker-1"])
    # each node loses the two that are not its neighbours: 5 * 2 / 2 links
    assert len(ring) == 5
    assert ("storage-1", "storage-3") in ring
    assert ("storage-1", "storage-2") not in ring
    bridge = partition_sides("bridge", storage, [])
    assert bridge == [
        ("storage-1", "storage-4"), ("storage-1", "storage-5"),
        ("storage-2", "storage-4"), ("storage-2", "storage-5"),
    ]  # fmt: skip
