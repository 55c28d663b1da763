"""A replica that joins a group (a replica move): what it copied from its peers (the
leader's group image, the log entries after it) against what the tier holds of the
group's history (storage_node.replica, the figures behind the joined-bytes metrics)."""

from __future__ import annotations

from protocol.message_objects import ObjectEntry
from raft.types import Entry, Snapshot, SnapshotMetadata
from storage_node.partition.commands import Append, RecordUpload, TrimQueue, encode
from storage_node.replica import GroupReplica

from .partition.harness import record

GROUP = 1
NOW_MS = 1_000_000


def _leader_with_history() -> tuple[GroupReplica, int]:
    """A replica that applied 10 appends of 100-byte bodies, the first 8 recorded in the
    tier and trimmed locally; its last index."""
    leader = GroupReplica(GROUP)
    index = 0
    for i in range(10):
        index += 1
        batch = Append(NOW_MS, (record(f"m{i}", body=b"x" * 100),))
        leader.apply(Entry(1, index, data=encode(batch)))
    uploaded = ObjectEntry("o-0", 0, 8, NOW_MS, NOW_MS, 4_000, 7)
    for command in (
        RecordUpload(NOW_MS, "orders", 0, uploaded),
        TrimQueue(NOW_MS, "orders", 0, 8),
    ):
        index += 1
        leader.apply(Entry(1, index, data=encode(command)))
    return leader, index


def test_a_joining_replica_counts_the_image_and_entries_from_peers_and_the_tier() -> None:
    leader, index = _leader_with_history()
    taken = Snapshot(SnapshotMetadata(index, 1), leader.snapshot_data())
    image = leader.snapshot_for_peer(taken)  # the bodies the receiver cannot have
    joining = GroupReplica(GROUP)
    joining.join()
    joining.restore(Snapshot(taken.metadata, image))
    assert joining.joined_snapshot_bytes == len(image)
    assert joining.joined_tier_bytes == 4_000  # the recorded object: read from the tier
    # Only the local window's two bodies came along, not the eight in the tier.
    assert len(joining.bodies.bodies_for_peer(GROUP, joining.state.referenced_log_indexes())) == 2
    assert joining.state.first_offset("orders", 0) == 8
    assert joining.state.tier.first_offset(("orders", 0)) == 0
    after = encode(Append(NOW_MS, (record("late"),)))
    joining.apply(Entry(1, index + 1, data=after))
    assert joining.joined_entry_bytes == len(after)
    joining.caught_up()  # a voter now: what it applies next is new traffic
    joining.apply(Entry(1, index + 2, data=after))
    assert joining.joined_entry_bytes == len(after)


def test_a_replica_that_did_not_join_counts_nothing() -> None:
    leader, index = _leader_with_history()
    restarted = GroupReplica(GROUP)  # e.g. restored from its own WAL's snapshot
    restarted.restore(Snapshot(SnapshotMetadata(index, 1), leader.snapshot_data()))
    restarted.apply(Entry(1, index + 1, data=encode(Append(NOW_MS, (record("late"),)))))
    assert (restarted.joined_snapshot_bytes, restarted.joined_entry_bytes) == (0, 0)
    assert restarted.joined_tier_bytes == 0
