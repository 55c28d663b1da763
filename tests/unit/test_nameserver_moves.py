"""Replica moves (nameserver.moves) over a real MetadataState, with the storage
side modelled: each group's leader reaches its assignment when asked, and
reports the membership it applied."""

from __future__ import annotations

import pytest

from nameserver import commands as c
from nameserver.balancer import plan_placement
from nameserver.errors import BadRequest, NotFound
from nameserver.moves import Membership, plan_moves
from nameserver.placement import LoadBalancedPlacement
from nameserver.records import NO_NODE
from nameserver.state import MetadataState

POLICY = LoadBalancedPlacement()
CLUSTER = "c1"
GROUPS = 12
EVACUATE_MS = 30_000


def _address(node_id: int) -> str:
    return f"127.0.0.1:{7000 + node_id}"


class Model:
    """A metadata state and what the storage leaders report."""

    def __init__(self, nodes: int = 3, groups: int = GROUPS) -> None:
        self.state = MetadataState()
        self.now_ms = 0
        self.state.apply(c.CreateCluster(CLUSTER, groups, 3))
        for node_id in range(1, nodes + 1):
            self.heartbeat(node_id)
        placement = plan_placement(self.state, CLUSTER, POLICY)
        assert placement is not None
        self.state.apply(placement)
        self.memberships: dict[int, Membership] = {}
        self.converge()
        self.most_moving = 0

    def heartbeat(self, node_id: int) -> None:
        self.state.apply(c.StorageHeartbeat(node_id, CLUSTER, _address(node_id), self.now_ms))

    def converge(self) -> None:
        """Every group's leader reaches its assignment (learners added and promoted,
        leaving voters removed) and reports it; a group without an alive leader
        elects the lowest alive replica."""
        alive = {n.node_id for n in self.state.storage_nodes() if n.alive}
        for group in self.state.raft_groups(CLUSTER):
            voters = frozenset(group.replicas)
            self.memberships[group.group_id] = Membership(voters)
            if group.leader not in alive or group.leader in group.leaving:
                stay = sorted((voters & alive) - set(group.joining) - set(group.leaving))
                report = c.LeaderReport(group.group_id, stay[0], group.term + 1)
                self.state.apply(c.ReportLeaders(stay[0], (report,)))

    def plan(self, moves_max: int = 4) -> c.SetReplicas | None:
        return plan_moves(
            self.state,
            CLUSTER,
            POLICY,
            self.memberships,
            self.now_ms,
            evacuate_after_ms=EVACUATE_MS,
            moves_max=moves_max,
        )

    def run(self, moves_max: int = 4, rounds_max: int = 200) -> int:
        """Plan, apply and converge until nothing is left to do; the rounds taken."""
        for rounds in range(rounds_max):
            command = self.plan(moves_max)
            if command is None:
                return rounds
            self.state.apply(command)
            moving = sum(1 for g in self.state.raft_groups(CLUSTER) if g.joining or g.leaving)
            self.most_moving = max(self.most_moving, moving)
            self.converge()
        raise AssertionError("moves did not finish")

    def counts(self, nodes: set[int]) -> dict[int, int]:
        return {n: len(self.state.groups_of_node(n)) for n in nodes}

    def check_settled(self, nodes: set[int]) -> None:
        for group in self.state.raft_groups(CLUSTER):
            assert len(set(group.replicas)) == 3 == len(group.replicas)
            assert set(group.replicas) <= nodes
            assert not group.joining
            assert not group.leaving
        counts = self.counts(nodes)
        assert max(counts.values()) - min(counts.values()) <= 1


def test_a_joined_node_gets_its_share_a_bounded_number_of_groups_at_a_time() -> None:
    model = Model()
    assert model.plan() is None  # balanced already
    model.heartbeat(4)
    first = model.plan(moves_max=4)
    assert first is not None
    assert len(first.assignments) == 4
    for step in first.assignments:
        assert step.joining == (4,)
        assert len(step.replicas) == 4
        assert len(step.leaving) == 1
    model.state.apply(first)
    model.converge()
    model.run(moves_max=4)
    assert model.most_moving <= 4
    model.check_settled({1, 2, 3, 4})
    assert model.counts({4}) == {4: GROUPS * 3 // 4}


def test_the_drop_step_waits_until_the_joining_replica_is_a_voter() -> None:
    model = Model()
    model.heartbeat(4)
    command = model.plan(moves_max=1)
    assert command is not None
    model.state.apply(command)
    (step,) = command.assignments
    # The leader still reports the old membership, then the learner, then the voter.
    old = frozenset(r for r in step.replicas if r != 4)
    model.memberships[step.group_id] = Membership(old)
    assert model.plan(moves_max=1) is None  # busy, and the bound is 1
    model.memberships[step.group_id] = Membership(old, frozenset({4}))
    assert model.plan(moves_max=1) is None
    model.memberships[step.group_id] = Membership(old | {4})
    drop = model.plan(moves_max=1)
    assert drop is not None
    (second,) = drop.assignments
    assert second.group_id == step.group_id
    assert set(second.replicas) == (old | {4}) - set(step.leaving)
    assert second.joining == ()
    assert second.leaving == ()
    model.state.apply(drop)
    # Until the leader reports the removal, the group still counts as moving.
    assert model.plan(moves_max=1) is None
    model.converge()
    assert model.plan(moves_max=1) is not None


def test_no_move_starts_without_a_leader_or_its_membership() -> None:
    model = Model()
    model.heartbeat(4)
    model.memberships.clear()
    assert model.plan() is None
    model.converge()
    assert model.plan() is not None
    # A group whose leader is not known (an election) does not start a move.
    model.state.apply(c.SetReplicas((c.ReplicaAssignment(1, (2, 3, 4)),)))  # leader 1 gone
    model.memberships[1] = Membership(frozenset({2, 3, 4}))
    assert model.state.raft_group(1).leader == NO_NODE
    command = model.plan(moves_max=GROUPS)
    assert command is not None
    assert 1 not in {a.group_id for a in command.assignments}


def test_a_dead_node_is_evacuated_only_after_the_evacuation_time() -> None:
    model = Model(nodes=4)
    model.run()
    model.now_ms = 10_000
    for node_id in (1, 2, 3):
        model.heartbeat(node_id)
    model.state.apply(c.Expire(model.now_ms, 2000, 2000))  # node 4 is silent: down
    model.converge()
    assert not model.state.storage_node(4).alive
    assert model.plan() is None  # down, but not for long: no evacuation, no rebalance
    model.now_ms = EVACUATE_MS  # 30 s after node 4's last heartbeat
    for node_id in (1, 2, 3):
        model.heartbeat(node_id)
    model.run()
    model.check_settled({1, 2, 3})
    assert model.state.groups_of_node(4) == ()


def test_a_move_to_a_node_that_goes_down_is_cancelled() -> None:
    model = Model()
    model.heartbeat(4)
    command = model.plan(moves_max=1)
    assert command is not None
    model.state.apply(command)
    (step,) = command.assignments
    model.now_ms = 5000
    for node_id in (1, 2, 3):
        model.heartbeat(node_id)
    model.state.apply(c.Expire(model.now_ms, 2000, 2000))
    cancel = model.plan(moves_max=1)
    assert cancel is not None
    (undo,) = cancel.assignments
    assert undo.group_id == step.group_id
    assert 4 not in undo.replicas
    assert undo.joining == ()
    assert undo.leaving == ()
    assert set(undo.replicas) == set(step.replicas) - {4}


def test_a_nameserver_failover_resumes_moves_from_the_replicated_state() -> None:
    model = Model()
    model.heartbeat(4)
    command = model.plan(moves_max=4)
    assert command is not None
    model.state.apply(command)
    # A new leader restores the state; memberships are soft and arrive afresh.
    model.state = MetadataState.restore(model.state.snapshot())
    moving = [g for g in model.state.raft_groups(CLUSTER) if g.joining]
    assert len(moving) == 4
    model.converge()
    model.run()
    model.check_settled({1, 2, 3, 4})


def test_set_replicas_refuses_moves_outside_the_replicas() -> None:
    model = Model()
    model.heartbeat(4)
    with pytest.raises(BadRequest, match="must be distinct replicas"):
        model.state.apply(c.SetReplicas((c.ReplicaAssignment(1, (1, 2, 3), (4,), ()),)))
    with pytest.raises(BadRequest, match="must be distinct replicas"):
        model.state.apply(c.SetReplicas((c.ReplicaAssignment(1, (1, 2, 3, 4), (4,), (4,)),)))
    group = model.state.raft_group(1)
    assert group.joining == ()
    assert group.leader != NO_NODE


def test_a_draining_node_is_emptied_while_alive_then_removed_and_gets_nothing_back() -> None:
    model = Model(nodes=4)
    model.run()
    assert model.state.groups_of_node(4) != ()
    drained = model.state.apply(c.DrainStorageNode(4)).value
    assert drained is not None
    assert model.state.storage_node(4).draining
    first = model.plan(moves_max=3)
    assert first is not None
    assert len(first.assignments) == 3  # bounded
    assert all(a.leaving == (4,) and 4 not in a.joining for a in first.assignments)
    model.state.apply(first)
    model.converge()
    model.run(moves_max=3)
    assert model.most_moving <= 3
    model.check_settled({1, 2, 3})
    assert model.state.groups_of_node(4) == ()
    assert model.plan() is None  # still draining: the rebalance leaves it empty
    with pytest.raises(NotFound, match="storage node 9 is not registered"):
        model.state.apply(c.DrainStorageNode(9))
    model.state.apply(c.RemoveStorageNode(4))
    assert 4 not in {n.node_id for n in model.state.storage_nodes()}


def test_stopping_a_drain_lets_the_rebalance_give_the_node_its_share_again() -> None:
    model = Model(nodes=4)
    model.run()
    model.state.apply(c.DrainStorageNode(4))
    model.run()
    assert model.state.groups_of_node(4) == ()
    model.state.apply(c.DrainStorageNode(4, draining=False))
    model.run()
    model.check_settled({1, 2, 3, 4})
