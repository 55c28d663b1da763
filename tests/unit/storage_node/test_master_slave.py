"""The controller-mode replica core: commit by SyncStateSet, set changes, fencing."""

from __future__ import annotations

import pytest

from storage_node.errors import StorageNotLeader
from storage_node.master_slave import (
    AlterRequest,
    ControllerView,
    MasterSlaveReplica,
    PeerSync,
    Role,
)

GROUP = 7


def _pair() -> tuple[MasterSlaveReplica, MasterSlaveReplica]:
    """Node 1 master at epoch 1 (set {1}), node 2 its slave."""
    master = MasterSlaveReplica(1, GROUP, (1, 2), lag_ms=100)
    slave = MasterSlaveReplica(2, GROUP, (1, 2), lag_ms=100)
    view = ControllerView(GROUP, [1, 2], 1, 1, [1], 1)
    master.on_controller(view, 0)
    slave.on_controller(view, 0)
    return master, slave


def _ship(master: MasterSlaveReplica, slave: MasterSlaveReplica, now_ms: int) -> None:
    for to, append in master.appends():
        assert to == slave.node_id
        master.on_reply(slave.on_append(append), now_ms)


def test_a_master_alone_in_its_set_commits_at_once() -> None:
    master, slave = _pair()
    assert (master.role, slave.role) == (Role.MASTER, Role.SLAVE)
    assert master.propose(b"a") == 1
    assert master.commit == 1
    with pytest.raises(StorageNotLeader, match="node 2 is not the master of group 7"):
        slave.propose(b"b")


def test_an_expanded_set_commits_only_what_every_member_holds() -> None:
    master, slave = _pair()
    master.propose(b"a")
    assert master.sync_state_request(10) is None  # the slave never answered yet
    _ship(master, slave, 10)
    asked = master.sync_state_request(20)
    assert asked == AlterRequest(GROUP, 1, 1, 1, [1, 2])
    # From the request on, the slave counts: nothing commits without it.
    master.propose(b"b")
    assert master.commit == 1
    master.on_controller(ControllerView(GROUP, [1, 2], 1, 1, [1, 2], 2), 30)
    assert master.asked is None
    assert master.commit == 1
    _ship(master, slave, 40)
    assert master.commit == 2
    assert slave.log == master.log


def test_a_lagging_slave_is_dropped_only_once_the_controller_agrees() -> None:
    master, slave = _pair()
    _ship(master, slave, 0)
    master.sync_state_request(0)
    master.on_controller(ControllerView(GROUP, [1, 2], 1, 1, [1, 2], 2), 0)
    master.propose(b"a")  # the slave never gets it
    assert master.sync_state_request(50) is None  # not past the lag bound yet
    asked = master.sync_state_request(150)
    assert asked is not None
    assert asked.sync_state_set == [1]
    assert master.commit == 0  # still counts the slave while the change is under way
    master.on_controller(ControllerView(GROUP, [1, 2], 1, 1, [1], 3), 160)
    assert master.commit == 1


def test_a_slave_one_entry_behind_at_every_sample_is_caught_up_as_of_the_sample_before() -> None:
    peer = PeerSync(caught_up_ms=0)
    for step in range(1, 50):
        # At sample ``step`` the master's log ends at ``step``; the slave holds ``step - 1``.
        peer.observe(step - 1, step, step * 100)
        assert not peer.lags(step * 100, 500)
    assert peer.caught_up_ms == 4_800  # it reached the mark set at 4.8 s


def test_a_slave_reaching_marks_slower_than_the_lag_bound_lags() -> None:
    peer = PeerSync(caught_up_ms=0)
    peer.observe(0, 10, 0)  # mark: index 10 at 0 ms
    peer.observe(5, 20, 300)  # mark still pending
    assert not peer.lags(400, 500)
    peer.observe(10, 30, 600)  # reached the mark of 0 ms only now; new mark at 600 ms
    assert peer.caught_up_ms == 0
    assert peer.lags(600, 500)
    peer.observe(30, 30, 700)  # at the end: caught up now
    assert not peer.lags(700, 500)


def test_a_paused_master_is_fenced_by_a_slave_of_the_new_epoch() -> None:
    master, slave = _pair()
    _ship(master, slave, 0)
    master.sync_state_request(0)
    master.on_controller(ControllerView(GROUP, [1, 2], 1, 1, [1, 2], 2), 0)
    slave.on_controller(ControllerView(GROUP, [1, 2], 2, 2, [2], 3), 10)  # the controller elected 2
    assert slave.role is Role.MASTER
    master.propose(b"stale")
    _ship(master, slave, 20)
    assert master.role is Role.FENCED
    assert master.commit == 0  # the slave of its set refused the write
    with pytest.raises(StorageNotLeader, match="role fenced"):
        master.propose(b"more")
    # The new master's appends make the old one its slave and drop its stale entry.
    slave.propose(b"fresh")
    for _, append in slave.appends():
        slave.on_reply(master.on_append(append), 30)
    for _, append in slave.appends():
        slave.on_reply(master.on_append(append), 40)
    assert master.role is Role.SLAVE
    assert [e.data for e in master.log] == [b"fresh"]
    assert master.epoch == 2


def test_an_older_epoch_from_the_controller_changes_nothing() -> None:
    master, _ = _pair()
    master.on_controller(ControllerView(GROUP, [1, 2], 2, 0, [2], 0), 10)
    assert (master.role, master.epoch) == (Role.MASTER, 1)


def test_min_in_sync_holds_commits_back() -> None:
    master = MasterSlaveReplica(1, GROUP, (1, 2), min_in_sync=2)
    master.on_controller(ControllerView(GROUP, [1, 2], 1, 1, [1], 1), 0)
    master.propose(b"a")
    assert master.commit == 0
