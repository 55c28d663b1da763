"""nameserver.state: properties over random command sequences.

- a failing command changes nothing;
- restore(snapshot) then the same commands gives the same bytes and results;
- the watch stream (changes since 0) rebuilds every record a watcher follows;
- a bounded history answers exactly like a full one, or asks for a resync;
- revisions move by one per changing command.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver import commands as c
from nameserver.codec import pack, unpack_raw
from nameserver.errors import BadRequest, NameserverError
from nameserver.records import (
    NO_LOAD,
    Broker,
    ChangeKind,
    Cluster,
    RetryPolicy,
    StorageLoad,
    StorageNode,
)
from nameserver.state import GROUP_ID_MAX, Applied, MetadataState
from protocol.vocabulary import MessageType, Permission

CLUSTERS = ["c1", "c2"]
NODES = [1, 2, 3, 4, 5]
BROKERS = ["b1", "b2", "b3"]
TOPICS = ["t1", "t2", "t3", "bad/topic", "%DLQ%g1"]
GROUPS = ["g1", "g2"]
LEASES = ["l1", "l2"]
GROUP_IDS = st.integers(0, 7)
NOW = st.integers(0, 20_000)
CLUSTER = st.sampled_from(CLUSTERS)
NODE = st.sampled_from(NODES)


def _addr(node: int) -> str:
    return f"127.0.0.1:{7700 + node}"


COMMANDS: st.SearchStrategy[c.Command] = st.one_of(
    st.builds(c.CreateCluster, CLUSTER, st.integers(1, 3), st.integers(1, 3)),
    st.builds(
        c.StorageHeartbeat,
        NODE,
        CLUSTER,
        st.sampled_from([_addr(1), _addr(2), "localhost:1"]),
        NOW,
        st.builds(StorageLoad, bytes=st.integers(0, 100)),
    ),
    st.builds(
        c.BrokerHeartbeat,
        st.sampled_from(BROKERS),
        CLUSTER,
        st.just("127.0.0.1:8081"),
        NOW,
        st.lists(st.sampled_from(["P1", "P2"]), max_size=2).map(tuple),
    ),
    st.builds(
        c.CreateTopic,
        st.sampled_from(TOPICS),
        CLUSTER,
        st.integers(0, 5),
        st.sampled_from(list(MessageType)),
    ),
    st.builds(
        c.UpdateTopic,
        st.sampled_from(TOPICS),
        st.none() | st.integers(1, 8),
        st.none() | st.sampled_from(list(MessageType)),
        st.none() | st.integers(0, 10),
        st.none() | st.sampled_from(list(Permission)),
    ),
    st.builds(c.DeleteTopic, st.sampled_from(TOPICS)),
    st.builds(
        c.CreateTopics,
        st.lists(
            st.builds(c.CreateTopic, st.sampled_from(TOPICS), CLUSTER, st.integers(0, 5)),
            max_size=3,
        ).map(tuple),
        st.booleans(),
    ),
    st.builds(
        c.CreateConsumerGroup,
        st.sampled_from(GROUPS),
        CLUSTER,
        st.booleans(),
        st.integers(0, 3),
        st.builds(RetryPolicy, st.integers(0, 5), st.integers(0, 9)),
    ),
    st.builds(
        c.UpdateConsumerGroup,
        st.sampled_from(GROUPS),
        st.none() | st.booleans(),
        st.none() | st.integers(0, 3),
    ),
    st.builds(c.DeleteConsumerGroup, st.sampled_from(GROUPS)),
    st.builds(
        c.SetReplicas,
        st.lists(
            st.builds(
                c.ReplicaAssignment,
                GROUP_IDS,
                st.lists(NODE, max_size=3).map(tuple),
            ),
            max_size=2,
        ).map(tuple),
    ),
    st.builds(
        c.ReportLeaders,
        NODE,
        st.lists(
            st.builds(c.LeaderReport, GROUP_IDS, st.integers(0, 5), st.integers(0, 4)),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(c.Expire, NOW, st.integers(0, 5000), st.integers(1, 5000)),
    st.builds(
        c.AcquireLease, st.sampled_from(LEASES), st.sampled_from(BROKERS), NOW, st.integers(0, 5000)
    ),
    st.builds(
        c.RenewLease, st.sampled_from(LEASES), st.sampled_from(BROKERS), NOW, st.integers(1, 5000)
    ),
    st.builds(c.ReleaseLease, st.sampled_from(LEASES), st.sampled_from(BROKERS)),
    st.builds(c.RemoveBroker, st.sampled_from(BROKERS)),
    st.builds(c.RemoveStorageNode, NODE),
)
# Most interesting sequences need a cluster and nodes first.
PROLOGUE: list[c.Command] = [
    c.CreateCluster("c1", 4),
    *(c.StorageHeartbeat(n, "c1", _addr(n), 0) for n in (1, 2, 3)),
]
SEQUENCES = st.lists(COMMANDS, max_size=60).map(lambda rest: PROLOGUE + rest)


def run(state: MetadataState, command: c.Command) -> Applied | str:
    try:
        return state.apply(command)
    except NameserverError as error:
        return f"{error.code.name}: {error}"


def watched(record: object) -> object:
    """What a watcher sees of a record: soft state (heartbeat times, load) removed."""
    if isinstance(record, StorageNode):
        return replace(record, last_heartbeat_ms=0, load=NO_LOAD)
    if isinstance(record, Broker):
        return replace(record, last_heartbeat_ms=0)
    return record


def state_records(state: MetadataState) -> dict[tuple[ChangeKind, str], object]:
    records: dict[tuple[ChangeKind, str], object] = {}
    for kind, items, key in [
        (ChangeKind.CLUSTER, state.clusters(), lambda x: x.name),
        (ChangeKind.STORAGE_NODE, state.storage_nodes(), lambda x: x.node_id),
        (ChangeKind.BROKER, state.brokers(), lambda x: x.broker_id),
        (ChangeKind.TOPIC, state.topics(), lambda x: x.name),
        (ChangeKind.CONSUMER_GROUP, state.consumer_groups(), lambda x: x.name),
        (ChangeKind.LEASE, state.leases(), lambda x: x.name),
    ]:
        for item in items:
            records[(kind, str(key(item)))] = watched(item)
    for cluster in state.clusters():
        for group in state.raft_groups(cluster.name):
            records[(ChangeKind.RAFT_GROUP, str(group.group_id))] = group
    return records


@settings(max_examples=200, deadline=None)
@given(SEQUENCES)
def test_failed_commands_change_nothing_and_revisions_step_by_one(
    commands: list[c.Command],
) -> None:
    state = MetadataState()
    for command in commands:
        before = state.snapshot()
        revision = state.revision
        result = run(state, command)
        if isinstance(result, str):
            assert state.snapshot() == before, result
            assert state.revision == revision
        elif result.changes:
            assert result.revision == revision + 1 == state.revision
            assert {change.revision for change in result.changes} == {result.revision}
        else:
            assert result.revision == revision == state.revision


@settings(max_examples=200, deadline=None)
@given(SEQUENCES, st.data())
def test_restore_then_apply_equals_apply(commands: list[c.Command], data: st.DataObject) -> None:
    split = data.draw(st.integers(0, len(commands)), label="split")
    original = MetadataState(history_max=16)
    for command in commands[:split]:
        run(original, command)
    restored = MetadataState.restore(original.snapshot(), history_max=16)
    assert restored.snapshot() == original.snapshot()
    for command in commands[split:]:
        assert run(restored, command) == run(original, command)
    assert restored.snapshot() == original.snapshot()
    assert restored.changes_since(0) == original.changes_since(0)


@settings(max_examples=100, deadline=None)
@given(SEQUENCES, st.data())
def test_no_topic_changes_after_the_topics_revision_and_counts_kept(
    commands: list[c.Command], data: st.DataObject
) -> None:
    """What a topic list's ``unchanged_since`` relies on: the topics at any revision
    from ``topics_revision`` on are the topics now, restored or not; and the
    per-cluster counts the metrics read equal the tables'."""
    split = data.draw(st.integers(0, len(commands)), label="split")
    state = MetadataState(history_max=1_000_000)
    topics_at: dict[int, tuple[object, ...]] = {0: ()}
    for index, command in enumerate(commands):
        if index == split:
            state = MetadataState.restore(state.snapshot(), history_max=1_000_000)
        run(state, command)
        topics_at[state.revision] = state.topics()
        assert state.topics_revision <= state.revision
        # The counts kept as topics and groups come and go are the tables' counts.
        assert state.counts_by_cluster() == (
            Counter(topic.cluster for topic in state.topics()),
            Counter(group.cluster for group in state.consumer_groups()),
        )
        for revision, topics in topics_at.items():
            if revision >= state.topics_revision:
                assert topics == state.topics(), (revision, state.topics_revision)


@settings(max_examples=200, deadline=None)
@given(SEQUENCES)
def test_the_watch_stream_rebuilds_what_watchers_follow(commands: list[c.Command]) -> None:
    state = MetadataState(history_max=1_000_000)
    for command in commands:
        run(state, command)
    batch = state.changes_since(0)
    assert not batch.resync_required
    rebuilt: dict[tuple[ChangeKind, str], object] = {}
    for change in batch.changes:
        if change.value is None:
            del rebuilt[(change.kind, change.key)]
        else:
            rebuilt[(change.kind, change.key)] = watched(change.value)
    assert rebuilt == state_records(state)


@settings(max_examples=100, deadline=None)
@given(SEQUENCES, st.integers(1, 12))
def test_a_bounded_history_answers_like_a_full_one_or_asks_to_resync(
    commands: list[c.Command], history_max: int
) -> None:
    bounded = MetadataState(history_max=history_max)
    full = MetadataState(history_max=1_000_000)
    for command in commands:
        run(bounded, command)
        run(full, command)
    for revision in range(full.revision + 2):
        answer = bounded.changes_since(revision)
        if revision > full.revision:
            assert answer.resync_required
        elif not answer.resync_required:
            assert answer == full.changes_since(revision)
    # The newest revision is always answerable (nothing after it).
    assert bounded.changes_since(bounded.revision).changes == ()


def test_replicas_are_registered_nodes_of_the_same_cluster() -> None:
    state = MetadataState()
    for command in PROLOGUE:
        state.apply(command)
    state.apply(c.CreateCluster("c2", 1))
    state.apply(c.StorageHeartbeat(9, "c2", _addr(9), 0))
    with pytest.raises(BadRequest, match="belongs to cluster 'c1' but storage node 9 to 'c2'"):
        state.apply(c.SetReplicas((c.ReplicaAssignment(1, (1, 9)),)))
    with pytest.raises(BadRequest, match="registered in cluster 'c1', not 'c2'"):
        state.apply(c.StorageHeartbeat(1, "c2", _addr(1), 0))


def test_queries_name_what_is_missing() -> None:
    state = MetadataState()
    state.apply(c.CreateCluster("c1", 2))
    state.apply(c.CreateTopic("t", "c1", 2))
    assert state.group_of_queue("t", 1) in (1, 2)
    with pytest.raises(BadRequest, match=r"queues 0\.\.1, not 2"):
        state.group_of_queue("t", 2)
    assert state.lease("nothing") is None
    with pytest.raises(NameserverError, match="raft group 3 does not exist"):
        state.raft_group(3)
    with pytest.raises(NameserverError, match="broker 'b' is not registered"):
        state.broker("b")
    with pytest.raises(BadRequest, match="not a nameserver command"):
        state.apply("CreateTopic t")  # type: ignore[arg-type]


def test_restore_refuses_what_is_not_a_snapshot() -> None:
    with pytest.raises(NameserverError, match="not a version 1 nameserver snapshot"):
        MetadataState.restore(c.encode(c.DeleteTopic("t")))
    with pytest.raises(ValueError, match="history_max"):
        MetadataState(history_max=0)


@settings(max_examples=200, deadline=None)
@given(SEQUENCES)
def test_a_new_lease_tenure_always_gets_a_larger_fencing_token(commands: list[c.Command]) -> None:
    state = MetadataState()
    last: dict[str, tuple[str, int, int]] = {}  # name -> (owner, token, expires_ms)
    highest: dict[str, int] = {}  # name -> the largest token ever handed out
    for command in commands:
        result = run(state, command)
        for name in [name for name in last if state.lease(name) is None]:
            del last[name]  # released or swept: the next tenure is new whoever takes it
        if isinstance(result, str) or not isinstance(command, c.AcquireLease | c.RenewLease):
            continue
        lease = state.lease(command.name)
        assert lease is not None
        previous = last.get(command.name)
        if previous is not None and previous[0] == lease.owner and previous[2] > command.now_ms:
            assert lease.token == previous[1]  # the same tenure goes on
        else:
            assert lease.token > highest.get(command.name, 0)  # a new tenure
        highest[command.name] = max(highest.get(command.name, 0), lease.token)
        last[command.name] = (lease.owner, lease.token, lease.expires_ms)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (c.BrokerHeartbeat("", "c1", "h:1", 0), "broker id is empty"),
        (c.BrokerHeartbeat("b1", "c2", "h:1", 0), "registered in cluster 'c1', not 'c2'"),
        (
            c.CreateConsumerGroup("g", "c1", retry=RetryPolicy(backoff_ms=(1, -1))),
            r"backoff_ms must all be >= 0, got \[1, -1\]",
        ),
        (c.AcquireLease("l", "", 0, 1), "owner is empty"),
        (c.ReportLeaders(1, ()), None),
    ],
)
def test_more_refusals(command: c.Command, message: str | None) -> None:
    state = MetadataState()
    state.apply(c.CreateCluster("c1", 1))
    state.apply(c.CreateCluster("c2", 1))
    state.apply(c.StorageHeartbeat(1, "c1", _addr(1), 0))
    state.apply(c.BrokerHeartbeat("b1", "c1", "h:1", 0))
    before = state.snapshot()
    if message is None:
        assert state.apply(command).changes == ()
    else:
        with pytest.raises(BadRequest, match=message):
            state.apply(command)
    assert state.snapshot() == before


def test_restoring_with_a_smaller_history_drops_the_oldest_changes() -> None:
    state = MetadataState()
    for name in ("a", "b", "c"):
        state.apply(c.AcquireLease(name, "o", 0, 10))
    restored = MetadataState.restore(state.snapshot(), history_max=2)
    assert restored.changes_since(0).resync_required
    assert [x.key for x in restored.changes_since(1).changes] == ["b", "c"]
    with pytest.raises(NameserverError, match="history is not an array"):
        MetadataState.restore(pack([1, unpack_raw(state.snapshot())[1], "x"]))  # type: ignore[index]


@settings(max_examples=100, deadline=None)
@given(SEQUENCES, st.sets(st.sampled_from(list(ChangeKind))), st.integers(0, 30))
def test_a_filtered_watch_is_the_full_watch_filtered(
    commands: list[c.Command], kinds: set[ChangeKind], since: int
) -> None:
    state = MetadataState(history_max=1_000_000)
    for command in commands:
        run(state, command)
    full = state.changes_since(since)
    filtered = state.changes_since(since, frozenset(kinds))
    assert filtered.revision == full.revision
    assert filtered.resync_required == full.resync_required
    assert filtered.changes == tuple(x for x in full.changes if x.kind in kinds)


@settings(max_examples=100, deadline=None)
@given(SEQUENCES)
def test_groups_of_node_lists_exactly_the_groups_a_node_replicates(
    commands: list[c.Command],
) -> None:
    state = MetadataState()
    for command in commands:
        run(state, command)
    groups = [g for cluster in state.clusters() for g in state.raft_groups(cluster.name)]
    for node_id in NODES:
        expected = tuple(
            sorted((g for g in groups if node_id in g.replicas), key=lambda g: g.group_id)
        )
        assert state.groups_of_node(node_id) == expected


def test_group_ids_start_at_one_and_never_pass_the_wal_limit() -> None:
    state = MetadataState()
    assert state.apply(c.CreateCluster("a", 3)).value == Cluster("a", 3, 1, 3)
    assert state.apply(c.CreateCluster("b", 2)).value == Cluster("b", 2, 4, 3)
    big = MetadataState.restore(state.snapshot())
    big._next_group_id = GROUP_ID_MAX  # as if 4 billion group ids had been handed out
    assert big.apply(c.CreateCluster("c", 1)).value == Cluster("c", 1, GROUP_ID_MAX, 3)
    with pytest.raises(BadRequest, match="no room for 1 more raft group ids"):
        big.apply(c.CreateCluster("d", 1))
