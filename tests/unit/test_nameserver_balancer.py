"""The nameserver leader's placement duties (nameserver.balancer) over a real MetadataState."""

from __future__ import annotations

from nameserver import commands as c
from nameserver.balancer import plan_leader_balance, plan_placement
from nameserver.placement import LoadBalancedPlacement
from nameserver.state import MetadataState

POLICY = LoadBalancedPlacement()
CLUSTER = "c1"


def _state(nodes: int, groups: int = 6) -> MetadataState:
    state = MetadataState()
    state.apply(c.CreateCluster(CLUSTER, groups, 3))
    for node_id in range(1, nodes + 1):
        state.apply(c.StorageHeartbeat(node_id, CLUSTER, f"127.0.0.1:{7000 + node_id}", 0))
    return state


def test_nothing_is_placed_until_enough_nodes_are_alive() -> None:
    assert plan_placement(_state(2), CLUSTER, POLICY) is None


def test_groups_are_placed_on_three_distinct_nodes_once() -> None:
    state = _state(4)
    command = plan_placement(state, CLUSTER, POLICY)
    assert command is not None
    assert [a.group_id for a in command.assignments] == list(range(1, 7))
    for assignment in command.assignments:
        assert len(set(assignment.replicas)) == 3
    state.apply(command)
    counts = [len(state.groups_of_node(n)) for n in range(1, 5)]
    assert max(counts) - min(counts) <= 1
    assert plan_placement(state, CLUSTER, POLICY) is None  # placed: nothing more to do


def test_dead_nodes_are_not_given_replicas() -> None:
    state = _state(4)
    state.apply(c.StorageHeartbeat(4, CLUSTER, "127.0.0.1:7004", 0))
    for node_id in (1, 2, 3):
        state.apply(c.StorageHeartbeat(node_id, CLUSTER, f"127.0.0.1:{7000 + node_id}", 5000))
    state.apply(c.Expire(5000, 2000, 2000))  # node 4 is silent: down
    command = plan_placement(state, CLUSTER, POLICY)
    assert command is not None
    assert all(4 not in a.replicas for a in command.assignments)


def test_leaders_are_balanced_only_once_every_group_has_one() -> None:
    state = _state(3)
    command = plan_placement(state, CLUSTER, POLICY)
    assert command is not None
    state.apply(command)
    reports = tuple(c.LeaderReport(g, 1, 1) for g in range(1, 6))
    state.apply(c.ReportLeaders(1, reports))
    assert plan_leader_balance(state, CLUSTER, POLICY) == []  # group 6 has no leader yet
    state.apply(c.ReportLeaders(1, (c.LeaderReport(6, 1, 1),)))
    transfers = plan_leader_balance(state, CLUSTER, POLICY)
    assert all(t.from_node == 1 for t in transfers)
    led = dict.fromkeys((1, 2, 3), 0)
    led[1] = 6
    for t in transfers:
        led[t.from_node] -= 1
        led[t.to_node] += 1
    assert sorted(led.values()) == [2, 2, 2]
