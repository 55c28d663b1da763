"""The self-checks: a damaged state or snapshot is reported, never used quietly."""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pytest

from storage_node.errors import BadCommand, SnapshotCorrupted
from storage_node.partition.commands import Append, Receive
from storage_node.partition.pop import GroupQueue, Lease
from storage_node.partition.queues import QueueEntry, QueueIndex
from storage_node.partition.snapshot import restore
from storage_node.partition.state import PartitionState
from storage_node.partition.timers import HeldMessage

from .harness import record


def test_a_healthy_group_queue_passes() -> None:
    group_queue = GroupQueue(2)
    group_queue.set_lease(0, Lease(1, 10, 1))
    group_queue.set_lease(1, Lease(2, 10, 0))  # handed back undelivered (a Release)
    group_queue.done_ahead = {3}
    group_queue.check_invariants(0, 5)


@pytest.mark.parametrize(
    ("cursor", "leases", "done_ahead", "message"),
    [
        (6, {}, set(), "cursor 6 outside"),
        (2, {3: 1}, {3}, "both leased and done"),
        (2, {}, {1}, "done_ahead"),
        (2, {7: 1}, set(), "leases"),
        (2, {2: 1}, set(), "not settled"),
        (3, {1: -1}, set(), "attempt < 0"),
        (2, {3: 1}, set(), "expiry heap"),  # set behind set_lease's back
    ],
)
def test_a_broken_group_queue_is_reported(
    cursor: int, leases: dict[int, int], done_ahead: set[int], message: str
) -> None:
    group_queue = GroupQueue(cursor)
    group_queue.leases = {o: Lease(1, 10, attempt) for o, attempt in leases.items()}
    group_queue.done_ahead = done_ahead
    with pytest.raises(AssertionError, match=message):
        group_queue.check_invariants(0, 5)


def test_a_broken_state_is_reported() -> None:
    state = PartitionState()
    state.apply(Append(0, (record("a"),)), 1)
    state.apply(Receive(0, "g", "orders", 0, 1, 1000, 3), 2)
    state.check_invariants()

    state._queues[("x", 0)] = QueueIndex(0, [QueueEntry(9, 0, 0)])
    with pytest.raises(AssertionError, match="after the applied index"):
        state.check_invariants()
    state._queues[("x", 0)] = QueueIndex(-1)
    with pytest.raises(AssertionError, match="has offsets"):
        state.check_invariants()
    del state._queues[("x", 0)]

    state._timers.hold(HeldMessage(0, 1, 0, "orders", 0, "late"))
    with pytest.raises(AssertionError, match="not released"):
        state.check_invariants()


def test_applying_something_that_is_not_a_command_is_refused() -> None:
    with pytest.raises(BadCommand, match="not a partition command"):
        PartitionState().apply("nonsense", 1)  # type: ignore[arg-type]


def _image(wire: object, raw: bytes | None = None) -> bytes:
    payload = raw if raw is not None else msgpack.packb(wire)
    return b"R5PS\x01" + struct.pack(">I", crc32c.crc32c(payload)) + payload


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (_image(None, raw=b"\xc1"), "does not decode"),
        (
            _image([[0, 1, 2, 3], 0, 0, [["t", 0, 0, [[1, 0, 0, 7, "", False]]]], [], [], [], []]),
            "tag",
        ),
        (_image([[0, 1, 2, 3], 0, 0, "queues", [], [], [], []]), "queues"),
        (_image([[0, 1, 2, 3], 0, 0, [["t", 0, 0]], [], [], [], []]), "expected 4 items"),
    ],
)
def test_snapshots_with_bad_contents_are_refused(image: bytes, message: str) -> None:
    with pytest.raises(SnapshotCorrupted, match=message):
        restore(image)
