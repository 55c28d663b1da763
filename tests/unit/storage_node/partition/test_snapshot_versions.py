"""Partition snapshot versions: version 2 (the dedup window by run) is pinned,
version 1 (one array per dedup entry) is still read, and a damaged window is refused."""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pytest

from protocol.vocabulary import MessageType, Placement
from storage_node.errors import SnapshotCorrupted
from storage_node.partition import commands as c
from storage_node.partition.config import PartitionConfig
from storage_node.partition.queues import RecordOutcome
from storage_node.partition.results import ReceiveResult
from storage_node.partition.snapshot import SNAPSHOT_MAGIC, _to_wire, restore, take_snapshot
from storage_node.partition.state import PartitionState

from .harness import record

# The snapshot of _state() as the code before version 2 wrote it (byte for byte).
VERSION_1 = bytes.fromhex(
    "523550530132048d22989403ce0001d4c0ce000186a0cd100003cd07d09294a66f7264657273000095960100"
    "cd03e8a0a0c2960101cd03e8a0a0c2960200cd03e8a0a0c2960201cd07d0a0a0c2960300cd07d0a0a0c294a6"
    "6f7264657273010091960102cd03e8a0a0c290969295a66f726465727300a1610000cd03e89295a66f726465"
    "727300a1620001cd03e89295a66f726465727301a1630000cd03e89295a66f726465727300a1640002cd03e8"
    "9295a66f726465727300a1650003cd03e89295a66f726465727300a1660004cd07d09090"
)
VERSION_2 = bytes.fromhex(
    "523550530284cb38aa989403ce0001d4c0ce000186a0cd100003cd07d09294a66f7264657273000095960100"
    "cd03e8a0a0c2960101cd03e8a0a0c2960200cd03e8a0a0c2960201cd07d0a0a0c2960300cd07d0a0a0c294a6"
    "6f7264657273010091960102cd03e8a0a0c290929596a66f7264657273000000cd03e892a161a16296a66f72"
    "64657273010000cd03e891a16396a66f7264657273000002cd03e891a16496a66f72646572730001ffcd03e8"
    "91a16596a66f7264657273000004cd07d091a1669196a66f7264657273a165000003cd03e89090"
)


def _state() -> PartitionState:
    """Queued runs (one continuing across appends of one millisecond), a delayed message
    released since (its remembered outcome changed), a later append."""
    state = PartitionState(PartitionConfig(group_id=3))
    state.apply(c.Append(1_000, (record("a"), record("b"), record("c", queue_id=1))), 1)
    delayed = record("e", message_type=MessageType.DELAY, delivery_timestamp_ms=1_500)
    state.apply(c.Append(1_000, (record("d"), delayed)), 2)
    state.apply(c.Append(2_000, (record("f"),)), 3)
    return state


def test_version_2_keeps_the_dedup_window_by_run_and_its_changed_outcomes() -> None:
    state = _state()
    assert take_snapshot(state) == VERSION_2
    assert state._dedup.to_wire() == [
        [
            ("orders", 0, int(Placement.QUEUED), 0, 1_000, ("a", "b")),
            ("orders", 1, int(Placement.QUEUED), 0, 1_000, ("c",)),
            ("orders", 0, int(Placement.QUEUED), 2, 1_000, ("d",)),
            ("orders", 0, int(Placement.DELAYED), -1, 1_000, ("e",)),
            ("orders", 0, int(Placement.QUEUED), 4, 2_000, ("f",)),
        ],
        [("orders", "e", 0, int(Placement.QUEUED), 3, 1_000)],
    ]
    assert take_snapshot(restore(VERSION_2)) == VERSION_2


def test_a_version_1_snapshot_restores_the_same_state() -> None:
    state = _state()
    restored = restore(VERSION_1)
    # Everything but the window's layout is as before; the window holds the same
    # entries (the released message's outcome as it is now).
    ours, theirs = _to_wire(state), _to_wire(restored)
    assert theirs[:5] + theirs[6:] == ours[:5] + ours[6:]
    assert restored._dedup.to_entries_wire() == state._dedup.to_entries_wire()
    for message_id in "abcdef":
        assert restored._dedup.lookup("orders", message_id) == state._dedup.lookup(
            "orders", message_id
        )
    assert restored._dedup.lookup("orders", "e") == RecordOutcome(
        "orders", 0, "e", Placement.QUEUED, 3
    )
    restored._dedup.check_invariants()
    # It is written as version 2 from then on, and goes on as the original does.
    image = take_snapshot(restored)
    assert image[4] == 2
    assert take_snapshot(restore(image)) == image
    for one in (state, restored):
        one.apply(c.Append(2_000, (record("g"),)), 4)
        one.apply(c.Tick(200_000), 5)  # the window's time passes: everything leaves
    assert take_snapshot(restored) == take_snapshot(state)


def _with_dedup(dedup: object) -> bytes:
    wire = msgpack.unpackb(VERSION_2[9:])
    wire[5] = dedup
    payload = msgpack.packb(wire, use_bin_type=True)
    return SNAPSHOT_MAGIC + b"\x02" + struct.pack(">I", crc32c.crc32c(payload)) + payload


RUN = ["orders", 0, 0, 0, 1_000, ["a", "b"]]


@pytest.mark.parametrize(
    ("dedup", "message"),
    [
        ([[RUN]], "dedup: expected 2 items"),
        ([[RUN[:5]], []], "dedup run: expected 6 items"),
        ([[[*RUN[:5], []]], []], "expected message ids"),
        ([[[*RUN[:5], ["a", 7]]], []], "expected message ids"),
        ([[["orders", 0, 1, 0, 1_000, ["a", "b"]]], []], "placement 1 with 2 ids"),
        ([[["orders", 0, 99, 0, 1_000, ["a"]]], []], "unknown placement 99"),
        ([[RUN, ["orders", 0, 0, 2, 999, ["c"]]], []], "store times go back"),
        ([[RUN, ["orders", 1, 0, 0, 1_000, ["b"]]], []], "remembered twice"),
        ([[RUN], [["orders", "z", 0, 0, 3, 1_000]]], "not remembered"),
        ([[RUN], [["orders", "a", 0]]], "changed outcome: expected 6 items"),
    ],
)
def test_a_damaged_dedup_window_is_refused(dedup: object, message: str) -> None:
    with pytest.raises(SnapshotCorrupted, match=message):
        restore(_with_dedup(dedup))


def test_a_consumed_group_queue_with_an_attempt_as_written_before_cursors_is_read() -> None:
    # Before group queues consumed to their end were kept as their cursors, such a
    # queue was written with its latest attempt; the state now drops it (it names no
    # lease), so a snapshot of the restored state writes it as a cursor's.
    state = _state()
    received = state.apply(c.Receive(2_000, "g", "orders", 1, 8, 30_000, 16, attempt_id="a"), 4)
    assert isinstance(received, ReceiveResult)
    state.apply(c.Ack(2_000, "g", tuple(d.handle for d in received.deliveries)), 5)
    wire = _to_wire(state)
    assert wire[4] == [["g", "orders", 1, [1, [], [], ["", 0, []]]]]  # the cursor's form
    wire[4] = [["g", "orders", 1, [1, [], [], ["a", 4, [0]]]]]
    payload = msgpack.packb(wire, use_bin_type=True)
    before = SNAPSHOT_MAGIC + b"\x02" + struct.pack(">I", crc32c.crc32c(payload)) + payload
    restored = restore(before)
    assert restored._groups.objects() == 0
    assert take_snapshot(restored) == take_snapshot(state)
    restored.check_invariants()
