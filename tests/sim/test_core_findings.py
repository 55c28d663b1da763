"""Minimal reproductions of raft core bugs the simulation found.

Each test pins one finding with the smallest setup that shows it, through
the core tests' own in-memory group harness, so the fix can be checked
without running the simulation.
"""

from __future__ import annotations

from collections.abc import Callable

from raft.types import Message, MessageType
from tests.unit.raft_core.network import Network


def _drop_appends_to(node_id: int) -> Callable[[Message], bool]:
    return lambda m: not (m.to == node_id and m.type == MessageType.APP)


def test_lost_appends_with_a_full_inflight_window_are_resent() -> None:
    """Found by sim seeds 12 and 81 (max_inflight_msgs=4, 5% drops): liveness.

    The leader streams appends to a follower in the replicate state until
    its inflight window is full. If every one of those appends is lost, no
    append response ever frees the window; heartbeat responses keep
    arriving, but the leader never sends that follower another append, so
    it stays behind forever (etcd frees one inflight slot on a heartbeat
    response for exactly this case).
    """
    net = Network([1, 2, 3], max_inflight_msgs=2)
    net.elect(1)
    for i in range(4):
        net.node(1).propose(b"x%d" % i)
        net.stabilize(keep=_drop_appends_to(3))
    assert net.data_applied(3) == []
    for _ in range(30):  # heartbeats flow normally now; nothing else is lost
        net.tick(1)
        net.stabilize()
    assert net.data_applied(3) == [b"x0", b"x1", b"x2", b"x3"]
