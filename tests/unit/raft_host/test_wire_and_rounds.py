"""The batch encoding, and MultiRaft rounds driven synchronously (as the simulation does)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from raft import wire
from raft.config import Config
from raft.errors import NotLeader
from raft.logstore import LogStore
from raft.multiraft import MultiRaft, Outcome
from raft.node import RawNode
from raft.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Ready,
    Snapshot,
    SnapshotMetadata,
)


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
        (7, Message(MessageType.HEARTBEAT, to=2, from_=1, term=3, commit=5)),
        (
            8,
            Message(
                MessageType.APP,
                to=2,
                from_=1,
                term=3,
                log_term=2,
                index=10,
                commit=9,
                entries=(Entry(3, 11, EntryType.NORMAL, b"a"), Entry(3, 12, EntryType.CONF_CHANGE)),
            ),
        ),
        (9, Message(MessageType.APP_RESP, to=2, from_=1, term=3, reject=True, reject_hint=4)),
        (10, Message(MessageType.SNAP, to=2, from_=1, term=3, snapshot=snapshot)),
        (11, Message(MessageType.READ_INDEX_RESP, to=2, from_=1, term=3, context=b"ctx")),
    ]
    notices = [wire.QuiesceNotice(12, 3, 40, 40)]
    data = wire.encode_batch(1, 2, messages, notices)
    batch = wire.decode_batch(data)
    assert batch.from_node == 1
    assert batch.to_node == 2
    assert batch.messages == messages
    assert batch.quiesce == notices
    # A heartbeat costs a handful of bytes: coalesced per node pair, not per group.
    beats = [
        (g, Message(MessageType.HEARTBEAT, to=2, from_=1, term=3, commit=5)) for g in range(64)
    ]
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
    assert isinstance(error, NotLeader)
    assert error.leader == 1
    for node_id in (1, 2, 3):
        assert machines[node_id, 1].values == [b"one"]
        assert machines[node_id, 2].values == [b"two"]
        stores[node_id].close()


def test_outgoing_splits_a_large_catch_up_into_bounded_batches() -> None:
    """A follower catching up gets several batches, none above the byte budget."""
    from raft.multiraft import Round, _Group

    host = MultiRaft(1)
    data = b"x" * 1000
    messages = [
        Message(
            MessageType.APP,
            to=2,
            from_=1,
            term=1,
            index=i * 10,
            entries=tuple(Entry(1, i * 10 + k + 1, EntryType.NORMAL, data) for k in range(10)),
        )
        for i in range(20)
    ] + [Message(MessageType.HEARTBEAT, to=3, from_=1, term=1)]
    group = _Group(7, None, None, (2, 3))  # type: ignore[arg-type]
    rnd = Round([group], [Ready(messages=messages)], False, [], {})
    sent = list(host.outgoing(rnd, batch_bytes_max=25_000))
    to_2 = [wire.decode_batch(data) for to, data in sent if to == 2]
    assert len(to_2) == 10
    assert all(len(data) < 25_000 + 2_000 for to, data in sent)
    assert [m for b in to_2 for _g, m in b.messages] == messages[:-1]
    assert [to for to, _ in sent].count(3) == 1
