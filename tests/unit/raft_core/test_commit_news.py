"""How followers learn the commit index: at once (eager) or with what comes next (lazy).

``Config.eager_commit_news``: eager, a leader whose commit index moved sends
every follower an append, empty if it has no entries for it; lazy, the news
rides on the next append or heartbeat. Either way followers apply the same
entries in the same order, and a leader quiesces only once each follower was
told its whole log is committed.
"""

from __future__ import annotations

from raft.types import MsgType
from tests.unit.raft_core.network import Network


def _empty_appends_sent(net: Network, since: int) -> int:
    """Appends without entries the leader (node 1) sent in Readys after the first ``since``."""
    return sum(
        1
        for node_id, ready in net.readys[since:]
        if node_id == 1
        for m in ready.messages
        if m.type == MsgType.APP and not m.entries
    )


def _commit(net: Network, node_id: int) -> int:
    return net.node(node_id).status().commit


def test_eager_news_tells_followers_the_commit_at_once() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    since = len(net.readys)
    net.node(1).propose(b"a")
    net.stabilize()
    last = net.node(1).status().last_index
    assert [_commit(net, n) for n in (1, 2, 3)] == [last] * 3
    assert _empty_appends_sent(net, since) == 2  # one to each follower
    assert net.data_applied(2) == net.data_applied(3) == [b"a"]


def test_lazy_news_rides_on_the_next_append_or_heartbeat() -> None:
    net = Network([1, 2, 3], eager_commit_news=False, heartbeat_tick=1)
    net.elect(1)
    since = len(net.readys)
    net.node(1).propose(b"a")
    net.stabilize()
    first = net.node(1).status().last_index
    assert _commit(net, 1) == first
    assert _commit(net, 2) < first
    assert _commit(net, 3) < first
    assert net.data_applied(2) == []
    assert _empty_appends_sent(net, since) == 0

    net.node(1).propose(b"b")  # its append carries the commit of "a"
    net.stabilize()
    assert _commit(net, 2) >= first
    assert _commit(net, 3) >= first
    assert net.data_applied(2) == net.data_applied(3) == [b"a"]

    net.tick(1)  # a heartbeat carries the commit of "b"
    net.stabilize()
    last = net.node(1).status().last_index
    assert [_commit(net, n) for n in (1, 2, 3)] == [last] * 3
    assert net.data_applied(2) == net.data_applied(3) == [b"a", b"b"]
    assert _empty_appends_sent(net, since) == 0


def test_a_leader_quiesces_only_once_every_follower_was_told_the_commit() -> None:
    net = Network([1, 2, 3], eager_commit_news=False, heartbeat_tick=1)
    net.elect(1)
    net.node(1).propose(b"a")
    net.stabilize()
    leader = net.node(1)
    assert leader.status().commit == leader.status().last_index
    assert leader.quiesce_point() is None  # matched and committed, followers not told
    net.tick(1)
    net.stabilize()
    status = leader.status()
    assert leader.quiesce_point() == (status.term, status.last_index)
    assert _commit(net, 2) == _commit(net, 3) == status.last_index
