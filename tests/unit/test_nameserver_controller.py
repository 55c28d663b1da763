"""The RIP-44 controller's decisions and the control state that applies them."""

from __future__ import annotations

import pytest

from nameserver import commands as c
from nameserver import control_commands as cc
from nameserver import controller
from nameserver.control_state import ControlState, unwrap_snapshot, wrap_snapshot
from nameserver.controller import Fenced, NoEligibleMaster, ReplicaSet
from nameserver.errors import BadRequest, DecodeFailed, NotFound
from protocol import errors


def _group(sync_state_set: tuple[int, ...] = (1, 2)) -> ReplicaSet:
    """Group 7 on nodes 1 and 2, mastered by 1 at epoch 3, its set at epoch 5."""
    return ReplicaSet(7, (1, 2), 1, 3, sync_state_set, 5)


# -- elections ------------------------------------------------------------------------------


def test_first_election_takes_a_live_replica_rotating_with_the_group() -> None:
    group = controller.place(7, (2, 1))
    assert group.replicas == (1, 2)
    assert group.master == controller.NO_MASTER
    elected = controller.elect_master(group, frozenset({2}))
    assert (elected.master, elected.epoch, elected.sync_state_set) == (2, 1, (2,))
    assert elected.sync_state_set_epoch == 1
    masters = {
        controller.elect_master(controller.place(g, (1, 2)), frozenset({1, 2})).master
        for g in range(4)
    }
    assert masters == {1, 2}


def test_a_live_master_is_not_replaced() -> None:
    group = _group()
    assert controller.elect_master(group, frozenset({1, 2})) is group
    assert not controller.needs_election(group, frozenset({1}))


def test_a_dead_master_is_replaced_from_the_sync_state_set_with_a_new_epoch() -> None:
    group = _group()
    assert controller.needs_election(group, frozenset({2}))
    elected = controller.elect_master(group, frozenset({2}))
    assert (elected.master, elected.epoch) == (2, 4)
    assert elected.sync_state_set == (2,)
    assert elected.sync_state_set_epoch == 6


def test_a_new_controller_counts_every_node_heard_until_its_grace_ends() -> None:
    # Began to lead at 10 s with a grace of 3 s: nodes count as heard at 13 s.
    assert controller.alive((1, 2), {}, 13_000, 13_900, 1_000) == {1, 2}
    assert controller.alive((1, 2), {}, 13_000, 14_000, 1_000) == frozenset()
    # Heard before it led (an earlier term): still the grace; heard since: from then.
    assert controller.alive((1, 2), {1: 5_000, 2: 13_500}, 13_000, 14_200, 1_000) == {2}


def test_a_replica_outside_the_sync_state_set_is_never_elected() -> None:
    group = _group(sync_state_set=(1,))
    assert not controller.needs_election(group, frozenset({2}))
    with pytest.raises(NoEligibleMaster, match=r"no live replica of the SyncStateSet \[1\]") as e:
        controller.elect_master(group, frozenset({2}))
    assert e.value.code is errors.UNAVAILABLE


# -- the SyncStateSet -------------------------------------------------------------------------


def test_the_master_shrinks_and_expands_its_set() -> None:
    shrunk = controller.alter_sync_state_set(_group(), 1, 3, 5, (1,))
    assert (shrunk.sync_state_set, shrunk.sync_state_set_epoch) == ((1,), 6)
    grown = controller.alter_sync_state_set(shrunk, 1, 3, 6, (2, 1))
    assert (grown.sync_state_set, grown.sync_state_set_epoch) == ((1, 2), 7)
    assert controller.alter_sync_state_set(grown, 1, 3, 7, (1, 2)) is grown


def test_an_old_master_is_fenced_by_epoch() -> None:
    group = controller.elect_master(_group(), frozenset({2}))  # 2 masters at epoch 4
    with pytest.raises(Fenced, match="node 1 at epoch 3 is not the master") as e:
        controller.alter_sync_state_set(group, 1, 3, group.sync_state_set_epoch, (1,))
    assert (e.value.master, e.value.epoch) == (2, 4)
    assert e.value.code is errors.NOT_LEADER
    with pytest.raises(Fenced):
        controller.check_master(group, 2, 3)  # right node, old epoch
    controller.check_master(group, 2, 4)


def test_a_stale_set_epoch_is_refused() -> None:
    with pytest.raises(Fenced, match="SyncStateSet epoch 4 is stale"):
        controller.alter_sync_state_set(_group(), 1, 3, 4, (1,))


@pytest.mark.parametrize(
    ("members", "why"),
    [((2,), "must hold the master"), ((1, 9), r"nodes \[9\] are not replicas")],
)
def test_a_bad_set_is_refused(members: tuple[int, ...], why: str) -> None:
    with pytest.raises(BadRequest, match=why):
        controller.alter_sync_state_set(_group(), 1, 3, 5, members)


@pytest.mark.parametrize("replicas", [(), (1, 1), (0, 1)])
def test_bad_replicas_are_refused(replicas: tuple[int, ...]) -> None:
    with pytest.raises(BadRequest, match="distinct positive node ids"):
        controller.place(7, replicas)


# -- commands and the control state -----------------------------------------------------------


def test_control_commands_round_trip_and_are_told_from_metadata_commands() -> None:
    commands: list[cc.ControlCommand] = [
        cc.SetNameserverAddress(4, "h:1"),
        cc.ForgetNameserver(4),
        cc.PlaceReplicaSet(7, (1, 2)),
        cc.ElectMaster(7, (1,)),
        cc.AlterSyncStateSet(7, 1, 1, 1, (1, 2)),
    ]
    for command in commands:
        data = cc.encode(command)
        assert cc.is_control(data)
        assert cc.decode(data) == command
    assert not cc.is_control(c.encode(c.DeleteTopic("t")))
    with pytest.raises(DecodeFailed, match="control command is an array"):
        cc.decode(c.encode(c.DeleteTopic("t")))
    with pytest.raises(DecodeFailed, match="unknown control op 99"):
        cc.decode(b"\x93\xa7control\x63\x90")


def test_the_control_state_applies_a_group_s_life() -> None:
    state = ControlState()
    assert state.is_empty()
    state.apply(cc.SetNameserverAddress(4, "h:4"))
    assert state.addresses == {4: "h:4"}
    placed = state.apply(cc.PlaceReplicaSet(7, (1, 2)))
    assert state.apply(cc.PlaceReplicaSet(7, (3, 4))) == placed  # placed once
    elected = state.apply(cc.ElectMaster(7, (1, 2)))
    assert isinstance(elected, ReplicaSet)
    assert elected.master == 2  # 7 % 2 picks the second candidate
    grown = state.apply(cc.AlterSyncStateSet(7, 2, 1, 1, (1, 2)))
    assert isinstance(grown, ReplicaSet)
    assert grown.sync_state_set == (1, 2)
    with pytest.raises(Fenced):
        state.apply(cc.AlterSyncStateSet(7, 1, 1, 2, (1,)))
    assert state.replica_set(7) == grown  # a refused command changes nothing
    with pytest.raises(NotFound, match="group 8 is not a controller-mode group"):
        state.apply(cc.ElectMaster(8, (1,)))
    state.apply(cc.ForgetNameserver(4))
    assert state.addresses == {}

    restored = ControlState.restore(state.snapshot())
    assert restored.replica_sets == state.replica_sets


def test_the_snapshot_wrapper_keeps_plain_metadata_snapshots() -> None:
    empty = ControlState()
    assert wrap_snapshot(empty, b"\x93\x01metadata") == b"\x93\x01metadata"
    control, metadata = unwrap_snapshot(b"\x93\x01metadata")
    assert control.is_empty()
    assert metadata == b"\x93\x01metadata"

    state = ControlState()
    state.apply(cc.SetNameserverAddress(4, "h:4"))
    control, metadata = unwrap_snapshot(wrap_snapshot(state, b"meta"))
    assert control.addresses == {4: "h:4"}
    assert metadata == b"meta"
