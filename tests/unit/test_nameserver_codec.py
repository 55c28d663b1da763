"""nameserver.codec on the values the service will send: routes, cluster status,
change events; and the type checks that keep bad bytes out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nameserver import commands as c
from nameserver.codec import from_wire, pack, to_wire, unpack
from nameserver.errors import DecodeFailed
from nameserver.records import (
    ChangeKind,
    ClusterStatus,
    TopicRoute,
    change_from_wire,
    change_to_wire,
)
from nameserver.state import MetadataState


def _state() -> MetadataState:
    state = MetadataState()
    state.apply(c.CreateCluster("c1", 3))
    for node in (1, 2, 3):
        state.apply(c.StorageHeartbeat(node, "c1", f"127.0.0.1:{7700 + node}", 5))
    state.apply(c.BrokerHeartbeat("b1", "c1", "127.0.0.1:8081", 5, ("P1",)))
    state.apply(c.SetReplicas(tuple(c.ReplicaAssignment(g, (1, 2, 3)) for g in (1, 2, 3))))
    state.apply(c.ReportLeaders(1, (c.LeaderReport(1, 1, 1), c.LeaderReport(2, 3, 1))))
    state.apply(c.CreateTopic("t", "c1", 4))
    state.apply(c.AcquireLease("l", "b1", 0, 10))
    state.apply(c.CreateConsumerGroup("g", "c1"))
    return state


def test_routes_and_status_round_trip() -> None:
    state = _state()
    route = state.route("t")
    assert unpack(TopicRoute, pack(route)) == route
    status = state.cluster_status("c1")
    assert unpack(ClusterStatus, pack(status)) == status


def test_every_change_kind_round_trips() -> None:
    state = _state()
    state.apply(c.DeleteTopic("t"))
    changes = state.changes_since(0).changes
    assert {change.kind for change in changes} == set(ChangeKind)
    for change in changes:
        assert change_from_wire(change_to_wire(change)) == change


@pytest.mark.parametrize(
    "raw", [[1, 4, "k"], "change", [1, 99, "k", None], [1, 4, 7, None], [1, 4, "k", [1]]]
)
def test_bad_changes_are_refused(raw: object) -> None:
    with pytest.raises(DecodeFailed):
        change_from_wire(raw)


@dataclass(frozen=True)
class Pair:
    numbers: tuple[int, str]
    ratio: float
    blob: bytes
    maybe: int | None = None


def test_fixed_tuples_floats_and_bytes() -> None:
    value = Pair((1, "a"), 2.0, b"\x00\x01", 5)
    assert unpack(Pair, pack(value)) == value
    assert from_wire(Pair, [[1, "a"], 3, b""]) == Pair((1, "a"), 3.0, b"")
    with pytest.raises(DecodeFailed, match="expected 2 items"):
        from_wire(Pair, [[1], 3, b""])
    with pytest.raises(DecodeFailed, match="expected bytes"):
        from_wire(Pair, [[1, "a"], 3, "text"])


def test_unsupported_types_are_programming_errors() -> None:
    with pytest.raises(TypeError, match="cannot encode a set"):
        to_wire({1})
    with pytest.raises(TypeError, match=r"only X \| None unions"):
        from_wire(int | str, 1)
    with pytest.raises(TypeError, match="cannot decode into"):
        from_wire(dict, {})


class _Text(str):
    """A str subclass (not an enum): encoded as plain text."""


def test_scalar_edge_cases() -> None:
    assert to_wire(_Text("x")) == "x"
    with pytest.raises(DecodeFailed, match="expected float, got str"):
        from_wire(float, "1.0")
    with pytest.raises(DecodeFailed, match="expected float, got bool"):
        from_wire(float, True)
    with pytest.raises(DecodeFailed, match="expected bool, got int"):
        from_wire(bool, 1)
