"""The simulated disk and network honour their fault models."""

from __future__ import annotations

import functools
import random

import pytest

from raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata
from tests.sim.disk import DiskCorrupted, SimDisk
from tests.sim.events import EventLoop
from tests.sim.network import LinkFaults, SimNetwork


def _entries(lo: int, hi: int, term: int) -> list[Entry]:
    return [Entry(term, i, data=f"{term}:{i}".encode()) for i in range(lo, hi)]


def test_disk_replays_entries_with_replacement_and_hard_state() -> None:
    disk = SimDisk()
    disk.write_entries(1, _entries(1, 6, 1))
    disk.write_hard_state(1, HardState(1, 2, 3))
    disk.write_entries(1, _entries(4, 7, 2))  # replaces 4 and 5
    disk.write_entries(2, _entries(1, 3, 5))
    disk.fsync()
    images = disk.recover()
    assert [(e.index, e.term) for e in images[1].entries] == [
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 2),
        (5, 2),
        (6, 2),
    ]
    assert images[1].hard_state == HardState(1, 2, 3)
    assert [e.data for e in images[2].entries] == [b"5:1", b"5:2"]


def test_crash_loses_everything_unsynced_or_a_prefix_of_it() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        disk = SimDisk()
        disk.write_entries(1, _entries(1, 4, 1))
        disk.write_hard_state(1, HardState(1, 1, 3))
        disk.fsync()
        for i in range(4, 10):
            disk.write_entries(1, [Entry(2, i, data=b"x" * rng.randint(0, 40))])
        disk.write_hard_state(1, HardState(2, 1, 9))
        disk.crash(rng)
        image = disk.recover()[1]
        # the durable prefix always survives; later entries survive only as a prefix
        assert image.last_index() >= 3
        assert [e.index for e in image.entries] == list(range(1, image.last_index() + 1))
        if image.hard_state.term == 2:
            assert image.last_index() == 9  # the hard state was written after its entries
        assert disk.unsynced_bytes == 0


def test_torn_write_is_detected_and_cut() -> None:
    torn_seen = 0
    for seed in range(300):
        rng = random.Random(seed)
        disk = SimDisk()
        disk.write_entries(1, _entries(1, 3, 1))
        disk.fsync()
        disk.write_entries(1, [Entry(1, 3, data=b"y" * 100)])
        report = disk.crash(rng, keep_rate=1.0)
        torn_seen += report.torn
        image = disk.recover()[1]
        assert image.last_index() in (2, 3)
        if image.last_index() == 3:
            assert image.entries[-1].data == b"y" * 100
        size = disk.size_bytes
        # a second recovery of the cut file changes nothing
        assert disk.recover()[1].last_index() == image.last_index()
        assert disk.size_bytes == size
    assert torn_seen > 50


def test_damage_inside_durable_bytes_is_reported() -> None:
    disk = SimDisk()
    disk.write_entries(1, _entries(1, 3, 1))
    disk.fsync()
    disk._data[10] ^= 0xFF  # simulate a disk that lied about fsync
    with pytest.raises(DiskCorrupted):
        disk.recover()


def test_snapshots_install_and_compact() -> None:
    disk = SimDisk()
    disk.write_entries(1, _entries(1, 11, 1))
    conf = ConfState(
        voters=frozenset({1, 2, 3}),
        voters_outgoing=frozenset({1, 2, 4}),
        learners_next=frozenset({4}),
        auto_leave=True,
    )
    disk.write_compaction(1, Snapshot(SnapshotMetadata(6, 1, conf), b"sm@6"))
    image = SimDisk.recover(disk)[1]
    assert image.first_index() == 7
    assert image.last_index() == 10
    disk.write_snapshot(1, Snapshot(SnapshotMetadata(20, 3, conf), b"sm@20"))
    disk.write_entries(1, _entries(21, 23, 3))
    image = disk.recover()[1]
    assert image.snapshot is not None
    assert image.snapshot.metadata.conf_state == conf
    assert image.snapshot.data == b"sm@20"
    assert (image.first_index(), image.last_index()) == (21, 22)


def _run_network(seed: int, faults: LinkFaults) -> list[tuple[int, int, int, object]]:
    loop = EventLoop()
    received: list[tuple[int, int, int, object]] = []

    def deliver(src: int, dst: int, payload: object) -> None:
        received.append((loop.now_ms, src, dst, payload))

    net = SimNetwork(loop, random.Random(seed), deliver, faults)
    for i in range(200):
        loop.call_at(i, functools.partial(net.send, 1 + i % 3, 1 + (i + 1) % 3, i))
    loop.run_until(10_000)
    return received


def test_network_is_deterministic_and_faulty() -> None:
    faults = LinkFaults(
        drop_rate=0.2, duplicate_rate=0.2, delay_min_ms=1, delay_max_ms=30, tail_rate=0.1
    )
    first = _run_network(7, faults)
    assert first == _run_network(7, faults)
    assert first != _run_network(8, faults)
    payloads = [int(str(p)) for _t, _s, _d, p in first]
    assert len(set(payloads)) < 200  # some dropped
    assert len(payloads) > len(set(payloads))  # some duplicated
    assert payloads != sorted(payloads)  # some reordered


def test_partitions_cut_links_until_healed() -> None:
    loop = EventLoop()
    got: list[tuple[int, int]] = []
    net = SimNetwork(loop, random.Random(1), lambda s, d, _p: got.append((s, d)))
    net.partition({1}, {2, 3}, one_way=True)
    for src, dst in [(1, 2), (2, 1), (1, 3), (3, 1), (2, 3)]:
        net.send(src, dst, None)
    loop.run_until(100)
    assert sorted(got) == [(2, 1), (2, 3), (3, 1)]
    net.send(2, 1, None)
    net.partition({1}, {2})  # cut while in flight: never arrives
    loop.run_until(200)
    assert len(got) == 3
    net.heal()
    net.send(1, 2, None)
    loop.run_until(300)
    assert got[-1] == (1, 2)
