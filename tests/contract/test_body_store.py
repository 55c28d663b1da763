"""One contract for every BodyStore: memory and WAL segment files.

Each case gets a store and ``commit(group, index, data)``, which makes an
APPEND entry committed and applied on the node the way the storage node
does (the WAL store needs the entry in the WAL first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol.records import MessageRecord, encode_batch
from raft.types import ConfState, Entry, Snapshot, SnapshotMetadata
from raft.wal.logstore import LogStore
from storage_node.errors import BodyUnavailable
from storage_node.partition.commands import Op
from storage_node.store.base import BodyStore
from storage_node.store.memory import MemoryBodyStore
from storage_node.store.segment_files import WalBodyStore

Commit = Callable[[int, int, bytes], None]


def append_entry(index: int, text: str) -> bytes:
    """The bytes of an APPEND entry holding one message."""
    record = MessageRecord("t", 0, f"m{index}", text.encode())
    return bytes([Op.APPEND]) + encode_batch([record], 1000 + index)


@pytest.fixture(params=["memory", "segment_files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[BodyStore, Commit]]:
    """A fresh store of each kind and its commit function."""
    if request.param == "memory":
        memory = MemoryBodyStore()
        yield memory, memory.keep_applied
        return
    log = LogStore.open(tmp_path / "wal", segment_bytes=4096)
    wal = WalBodyStore(log)

    def commit(group: int, index: int, data: bytes) -> None:
        last = log.group(group).last_index()
        if last == 0 and index > 1:  # the group's log starts after a snapshot, as on a node
            meta = SnapshotMetadata(index - 1, 1, ConfState(voters=frozenset({1})))
            log.install_snapshot(group, Snapshot(meta, b""))
            last = index - 1
        filler = [Entry(term=1, index=i, data=b"") for i in range(last + 1, index)]
        log.append(group, [*filler, Entry(term=1, index=index, data=data)])
        log.commit()
        wal.keep_applied(group, index, data)

    yield wal, commit
    log.close()


def test_an_applied_entry_reads_back_byte_for_byte(store: tuple[BodyStore, Commit]) -> None:
    messages, commit = store
    for index in range(1, 40):
        commit(7, index, append_entry(index, "x" * (index * 37)))
    for index in range(1, 40):
        assert messages.read_entry(7, index) == append_entry(index, "x" * (index * 37))


def test_groups_are_independent(store: tuple[BodyStore, Commit]) -> None:
    messages, commit = store
    commit(1, 1, append_entry(1, "one"))
    commit(2, 1, append_entry(1, "two"))
    assert messages.read_entry(1, 1) != messages.read_entry(2, 1)
    with pytest.raises(BodyUnavailable, match="group 3"):
        messages.read_entry(3, 1)


def test_an_unknown_entry_is_unavailable_and_retriable(store: tuple[BodyStore, Commit]) -> None:
    messages, commit = store
    commit(1, 1, append_entry(1, "one"))
    with pytest.raises(BodyUnavailable, match="2") as caught:
        messages.read_entry(1, 2)
    assert caught.value.code.retriable


def test_adopted_bodies_read_back_and_are_carried_while_referenced(
    store: tuple[BodyStore, Commit],
) -> None:
    messages, commit = store
    messages.adopt(4, {3: append_entry(3, "c"), 5: append_entry(5, "e")})
    commit(4, 9, append_entry(9, "i"))
    assert messages.read_entry(4, 3) == append_entry(3, "c")
    carried = messages.bodies_to_carry(4, {5, 9})
    assert carried[5] == append_entry(5, "e")
    assert 3 not in carried
    with pytest.raises(BodyUnavailable):
        messages.read_entry(4, 3)  # released: no longer referenced
    assert messages.read_entry(4, 5) == append_entry(5, "e")


def test_a_peer_gets_every_referenced_body(store: tuple[BodyStore, Commit]) -> None:
    messages, commit = store
    messages.adopt(2, {1: append_entry(1, "a")})
    for index in (2, 3, 4):
        commit(2, index, append_entry(index, "b"))
    sent = messages.bodies_for_peer(2, {1, 3, 4})
    assert sent == {i: messages.read_entry(2, i) for i in (1, 3, 4)}
    with pytest.raises(BodyUnavailable):
        messages.bodies_for_peer(2, {99})


def test_an_entry_location_holds_the_entrys_bytes(store: tuple[BodyStore, Commit]) -> None:
    """Where a store says an entry lies, a reader on any thread finds its bytes; a store
    without files says nothing (None) and its entries read with read_entry."""
    from storage_node.store.segment_files import read_file_ranges

    messages, commit = store
    for index in range(1, 30):
        commit(1, index, append_entry(index, f"body {index}" * (index % 5 + 1)))
    places = {i: messages.entry_location(1, i) for i in range(1, 30)}
    located = {i: place for i, place in places.items() if place is not None}
    assert not located or len(located) == len(places)
    assert read_file_ranges(located.items()) == {i: messages.read_entry(1, i) for i in located}
    if isinstance(messages, WalBodyStore):
        assert located
