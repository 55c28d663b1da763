"""The batch encoding, and MultiRaft rounds driven synchronously (as the simulation does)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from raft.core.config import Config
from raft.core.node import RawNode
from raft.errors import RaftNotLeader
from raft.host import wire
from raft.host.group_state import Outcome
from raft.host.multiraft import MultiRaft
from raft.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MsgType,
    Ready,
    Role,
    Snapshot,
    SnapshotMetadata,
    SoftState,
)
from raft.wal.logstore import LogStore


def test_batch_roundtrip_keeps_every_field() -> None:
    snapshot = Snapshot(
        SnapshotMetadata(
            index=9,
            term=2,
            conf_state=ConfState(voters=frozenset({1, 2}), learners=frozenset({4})),
        ),
        b"image",
    )
    messages = [
        (7, Message(MsgType.HEARTBEAT, to=2, from_=1, term=3, commit=5)),
        (
            8,
            Message(
                MsgType.APP,
                to=2,
                from_=1,
                term=3,
                log_term=2,
                index=10,
                commit=9,
                entries=(Entry(3, 11, EntryType.NORMAL, b"a"), Entry(3, 12, EntryType.CONF_CHANGE)),
            ),
        ),
        (9, Message(MsgType.APP_RESP, to=2, from_=1, term=3, reject=True, reject_hint=4)),
        (10, Message(MsgType.SNAP, to=2, from_=1, term=3, snapshot=snapshot)),
        (11, Message(MsgType.READ_INDEX_RESP, to=2, from_=1, term=3, context=b"ctx")),
    ]
    notices = [wire.QuiesceNotice(12, 3, 40, 40)]
    data = wire.encode_batch(1, 2, messages, notices)
    batch = wire.decode_batch(data)
    assert batch.from_node == 1
    assert batch.to_node == 2
    assert batch.messages == messages
    assert batch.quiesce == notices
    # A heartbeat costs a handful of bytes: coalesced per node pair, not per group.
    beats = [(g, Message(MsgType.HEARTBEAT, to=2, from_=1, term=3, commit=5)) for g in range(64)]
    assert len(wire.encode_batch(1, 2, beats)) < 64 * 12


@pytest.mark.parametrize("data", [b"", b"\x93\x01\x02", b"\x94\x02\x01\x02\x90", b"\xc1"])
def test_bad_batches_are_refused_with_a_reason(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode_batch(data)


class Counter:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def apply(self, entry: Entry) -> object:
        self.values.append(entry.data)
        return entry.index

    def restore(self, snapshot: Snapshot) -> None:
        raise AssertionError("no snapshots here")

    def snapshot_data(self) -> bytes:
        return b"".join(self.values)


def test_rounds_driven_synchronously(tmp_path: Path) -> None:
    """Three hosts, two groups, real WALs, messages delivered by hand, time by hand."""
    rng = random.Random(5)
    hosts: dict[int, MultiRaft] = {}
    stores: dict[int, LogStore] = {}
    machines: dict[tuple[int, int], Counter] = {}
    for node_id in (1, 2, 3):
        store = LogStore.open(tmp_path / f"n{node_id}", segment_bytes=1 << 20)
        host = MultiRaft(node_id, quiesce_after_ticks=1000)
        for group_id in (1, 2):
            store.set_conf_state(group_id, 0, ConfState(voters=frozenset({1, 2, 3})))
            node = RawNode(Config(id=node_id), store.group(group_id), rng.randrange)
            machines[node_id, group_id] = Counter()
            host.add_group(group_id, node, machines[node_id, group_id], (1, 2, 3))
        hosts[node_id] = host
        stores[node_id] = store

    in_flight: list[tuple[int, bytes]] = []
    outcomes: list[Outcome] = []
    now_ms = 0

    def run_rounds() -> None:
        while any(h.has_work() for h in hosts.values()) or in_flight:
            for host in hosts.values():
                sent, ended = host.run_round(stores[host.node_id], stores[host.node_id].sync)
                in_flight.extend(sent)
                outcomes.extend(ended)
            delivering = list(in_flight)
            in_flight.clear()
            for to_node, data in delivering:
                hosts[to_node].receive(wire.decode_batch(data), now_ms)

    hosts[1].node(1).campaign()  # type: ignore[attr-defined]
    hosts[2].node(2).campaign()  # type: ignore[attr-defined]
    run_rounds()
    assert hosts[3].leader_of(1) == 1
    assert hosts[3].leader_of(2) == 2

    hosts[1].propose(1, b"one", "token-1")
    hosts[2].propose(2, b"two", "token-2")
    hosts[3].propose(1, b"refused", "token-3")
    run_rounds()
    by_token = {o.token: o for o in outcomes}
    assert by_token["token-1"].error is None
    assert by_token["token-2"].error is None
    error = by_token["token-3"].error
    assert isinstance(error, RaftNotLeader)
    assert error.leader == 1
    for node_id in (1, 2, 3):
        assert machines[node_id, 1].values == [b"one"]
        assert machines[node_id, 2].values == [b"two"]
        stores[node_id].close()


def test_outgoing_splits_a_large_catch_up_into_bounded_batches() -> None:
    """A follower catching up gets several batches, none above the byte budget."""
    from raft.host.group_state import HostedGroup, Round

    host = MultiRaft(1)
    data = b"x" * 1000
    messages = [
        Message(
            MsgType.APP,
            to=2,
            from_=1,
            term=1,
            index=i * 10,
            entries=tuple(Entry(1, i * 10 + k + 1, EntryType.NORMAL, data) for k in range(10)),
        )
        for i in range(20)
    ] + [Message(MsgType.HEARTBEAT, to=3, from_=1, term=1)]
    group = HostedGroup(7, None, None, (2, 3))  # type: ignore[arg-type]
    rnd = Round([group], [Ready(messages=messages)], False, [], {})
    sent = list(host.outgoing(rnd, batch_bytes_max=25_000))
    to_2 = [wire.decode_batch(data) for to, data in sent if to == 2]
    assert len(to_2) == 10
    assert all(len(data) < 25_000 + 2_000 for to, data in sent)
    assert [m for b in to_2 for _g, m in b.messages] == messages[:-1]
    assert [to for to, _ in sent].count(3) == 1


def test_only_a_settled_leaders_appends_and_heartbeats_go_before_the_fsync() -> None:
    from raft.host.group_state import HostedGroup, Round
    from raft.host.outgoing import needs_a_follower, split_early

    app = Message(MsgType.APP, to=2, from_=1, term=1)
    beat = Message(MsgType.HEARTBEAT, to=3, from_=1, term=1)
    vote = Message(MsgType.VOTE_RESP, to=3, from_=1, term=1)
    settled = Ready(messages=[app, beat, vote], must_sync=True)
    assert split_early(settled, True) == ([app, beat], [vote])
    assert split_early(settled, False) == ((), [app, beat, vote])
    just_elected = Ready(soft_state=SoftState(1, Role.LEADER), messages=[app], must_sync=True)
    assert split_early(just_elected, True) == ((), [app])
    assert split_early(Ready(messages=[vote]), True) == ((), [vote])

    three = ConfState(voters=frozenset({1, 2, 3}))
    assert needs_a_follower(three)
    assert not needs_a_follower(ConfState(voters=frozenset({1}), learners=frozenset({2})))
    joint = ConfState(voters=frozenset({1, 2}), voters_outgoing=frozenset({1}))
    assert not needs_a_follower(joint)

    host = MultiRaft(1)
    group = HostedGroup(7, None, None, (2, 3), early_send=True)  # type: ignore[arg-type]
    notice = wire.QuiesceNotice(7, 1, 4, 4)
    rnd = Round([group], [settled], True, [], {3: [notice]})
    early = [(to, wire.decode_batch(data)) for to, data in host.outgoing(rnd, part="early")]
    late = [(to, wire.decode_batch(data)) for to, data in host.outgoing(rnd, part="late")]
    assert [(to, [m for _g, m in b.messages], b.quiesce) for to, b in early] == [
        (2, [app], []),
        (3, [beat], []),
    ]
    assert [(to, [m for _g, m in b.messages], b.quiesce) for to, b in late] == [
        (3, [vote], [notice])
    ]


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def apply(self, entry: Entry) -> object:
        self.count += 1
        return self.count

    def restore(self, snapshot: Snapshot) -> None:
        self.count = int(snapshot.data)

    def snapshot_data(self) -> bytes:
        return b"%d" % self.count


def test_compaction_by_wal_bytes_stops_at_applied_and_the_truncate_floor(tmp_path: Path) -> None:
    """One-node groups over a real WAL with 4 KiB segments."""
    store = LogStore.open(tmp_path, segment_bytes=4096, spare_segments_max=8)
    host = MultiRaft(1)
    for group_id in (1, 2, 3):
        log = store.group(group_id)
        store.set_conf_state(group_id, 0, ConfState(voters=frozenset({1})))
        config = Config(id=1, election_tick=10, heartbeat_tick=1)
        node = RawNode(config, log, random.Random(group_id).randrange)
        host.add_group(group_id, node, _Counter(), (1,))
        node.campaign()
    host.set_truncate_floor(2, 3)
    for i in range(30):
        for group_id in (1, 2, 3):
            host.propose(group_id, b"%03d" % i + b"x" * 200, (group_id, i))
        host.run_round(store, store.sync)
        store.maybe_collect_garbage()
    host.run_round(store, store.sync)
    assert len(store.segment_seqs()) > 4
    targets = store.compaction_targets(keep_segments=2)
    assert set(targets) == {1, 2, 3}
    oldest_kept = store.segment_seqs()[-2]
    for group_id, index in targets.items():
        assert store.locate(group_id, index).segment_seq < oldest_kept
        assert store.locate(group_id, index + 1).segment_seq >= oldest_kept
    steps = host.plan_compaction({**targets, 99: 5})  # an unknown group is skipped
    by_group = {s.group_id: s for s in steps}
    assert sorted(by_group) == [1, 2, 3]
    assert by_group[2].index == 3  # held back by its floor
    assert by_group[1].index == targets[1]
    snapshot = by_group[1].snapshot
    assert snapshot is not None
    assert snapshot.metadata.index >= targets[1]
    pack = store.begin_snapshot_pack()
    pack.write_durably([(s.group_id, s.snapshot) for s in steps if s.snapshot])
    before = store.retained_bytes()
    host.finish_compaction(steps, store)
    store.end_snapshot_pack(pack)
    store.commit()
    assert store.group(1).first_index() == targets[1] + 1
    assert store.group(2).first_index() == 4
    assert store.retained_bytes() == before  # group 2's floor still pins the oldest segment
    # Its floor at its log's start: a new plan would discard nothing, so no step.
    host.set_truncate_floor(2, 3)
    planned = host.plan_compaction(targets, unpins=store.compaction_unpins)
    assert 2 not in {s.group_id for s in planned}
    # A floor a few entries on, still inside the oldest segment: the step would
    # discard entries but release no segment, so none either (no snapshot taken).
    first = store.group(2).first_index()
    assert store.locate(2, first + 2).segment_seq == store.locate(2, first).segment_seq
    host.set_truncate_floor(2, first + 1)
    assert not store.compaction_unpins(2, first + 1)
    planned = host.plan_compaction(targets, unpins=store.compaction_unpins)
    assert 2 not in {s.group_id for s in planned}
    assert store.compaction_unpins(2, targets[2])  # the whole way would release the segment
    assert not store.compaction_unpins(2, first - 1)  # discards nothing
    host.set_truncate_floor(2, None)
    steps = host.plan_compaction(store.compaction_targets(keep_segments=2))
    assert [s.group_id for s in steps] == [2]
    pack = store.begin_snapshot_pack()
    pack.write_durably([(s.group_id, s.snapshot) for s in steps if s.snapshot])
    host.finish_compaction(steps, store)
    store.end_snapshot_pack(pack)
    store.commit()
    assert store.retained_bytes() < before
    # Nothing more to snapshot for group 1: a second plan only compacts.
    again = {s.group_id: s for s in host.plan_compaction({1: targets[1]})}
    assert again[1].snapshot is None
    # A stale snapshot (older than the one recorded) is refused.
    assert not store.note_local_snapshot(1, Snapshot(SnapshotMetadata(index=2, term=1)))
    store.close()
    reopened = LogStore.open(tmp_path, segment_bytes=4096)
    assert reopened.group(1).first_index() == targets[1] + 1
    assert reopened.group(1).snapshot().data == snapshot.data
    reopened.close()
