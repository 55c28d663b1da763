"""What one written queue costs a partition: its index, its one message's entry and
dedup record, and a consumer group's pop state after reading and acking it.

Measured with tracemalloc over the pure state machine (no host, no raft log), for
many queues of 8 per topic (as ``rip5 bench queues`` makes them), each given one
message that a group then receives and acks, a snapshot taken after. The bound is
the 1 KiB per queue a storage node may spend (the million-queue target). This
test measured 2,428 bytes per queue before group queues shared their empty
containers, short queues kept no snapshot memo and names were interned, and 862
after, on CPython 3.11 (about 410 of them are the message's: its index entry,
its id and dedup record, which the dedup window evicts later). With the truncate
floor's counts 871, and 880 with the consumer tally asked too (it keeps nothing per
idle group queue: the 9 bytes are each topic's tuple of group names, 8 queues a
topic); 809 once a group queue consumed to its end is kept as its cursor, and 753
once group queues share their queue's key (the queue index keeps it: 8 bytes).
With a leader's retention rounds too (each queue filed under the second its oldest
message expires, each topic's queue count; the topic list itself is the node's
either way): 757 against 744 without them. 582 once a queue's entries are held
packed in one flat list (no tuple per entry: 96 bytes), the queue index has four
slots (64 bytes, not 80) and the dedup window keeps its runs by column (no tuple per
run, a lone id without a tuple of one).
"""

from __future__ import annotations

import gc
import tracemalloc

from protocol.records import MessageRecord
from storage_node.partition.commands import Ack, Append, Receive, encode
from storage_node.partition.pop import GroupQueue
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState
from storage_node.retention import GroupRetention, TopicLimits

QUEUES_PER_TOPIC = 8
GROUP = "bench-queues-group"
BYTES_PER_QUEUE_MAX = 640  # measured 582; the storage node's budget is 1 KiB
READ_BYTES_PER_QUEUE_MAX = 64


class Writer:
    """Applies commands to one partition in log order."""

    def __init__(self) -> None:
        self.state = PartitionState()
        self.log_index = 0

    def apply(self, command: Append | Receive | Ack) -> object:
        self.log_index += 1
        return self.state.apply_entry(encode(command), self.log_index)

    def write_and_read(self, prefix: str, topics: int, now_ms: int) -> None:
        """One message to each queue of ``topics`` topics, then received and acked."""
        self.write(prefix, topics, now_ms)
        self.read(prefix, topics, now_ms)

    def write(self, prefix: str, topics: int, now_ms: int) -> None:
        """One message to each queue of ``topics`` topics."""
        for t in range(topics):
            topic = f"{prefix}-{t}"
            self.apply(
                Append(
                    now_ms,
                    tuple(
                        MessageRecord(topic, q, f"{topic}-{q}-0123456789abcdef0123", b"x" * 16)
                        for q in range(QUEUES_PER_TOPIC)
                    ),
                )
            )

    def read(self, prefix: str, topics: int, now_ms: int) -> None:
        """Each queue of ``topics`` topics received and acked by ``GROUP``, as a simple
        consumer does."""
        for t in range(topics):
            topic = f"{prefix}-{t}"
            for q in range(QUEUES_PER_TOPIC):
                received = self.apply(Receive(now_ms, GROUP, topic, q, 32, 30_000, 16))
                handles = tuple(d.handle for d in received.deliveries)  # type: ignore[attr-defined]
                assert len(handles) == 1
                self.apply(Ack(now_ms, GROUP, handles))


def snapshot_and_queries(
    state: PartitionState, planner: GroupRetention, listed: dict[str, TopicLimits]
) -> None:
    """What a node does now and then: a snapshot, the floor, the consumer figures and,
    where it leads, a retention round over the ``listed`` topics (nothing expires yet)."""
    take_snapshot(state)
    state.referenced_log_indexes()
    state.min_log_index_referenced()  # the floor heap holds every queue
    state.consumer_changes()  # the tally keeps nothing per idle group queue
    planner.before_listing(state)
    planner.plan(state, listed, 3_000, lambda _log_index: 0)  # each queue filed by its due time
    gc.collect()


def test_a_written_and_read_queue_costs_at_most_640_bytes() -> None:
    writer = Writer()
    writer.write_and_read("warm", 50, 1_000)  # caches, interned names, grown tables
    writer.state.min_log_index_referenced()  # the node asks the floor now and then
    writer.state.consumer_changes()  # and, where it leads, the consumer figures
    topics = 250
    # The cluster's topic list, which the node holds whether it plans or not.
    listed = {f"{p}-{t}": TopicLimits(3_600_000) for p in ("warm", "bq") for t in range(topics)}
    planner = GroupRetention()  # and retention (its first round: every queue)
    snapshot_and_queries(writer.state, planner, listed)
    queues = topics * QUEUES_PER_TOPIC
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        writer.write("bq", topics, 2_000)
        snapshot_and_queries(writer.state, planner, listed)
        written = tracemalloc.take_snapshot()
        writer.read("bq", topics, 2_000)
        snapshot_and_queries(writer.state, planner, listed)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    per_queue = grown / queues
    assert 0 < per_queue <= BYTES_PER_QUEUE_MAX, f"{per_queue:.0f} bytes per queue"
    # Of which the read as a simple consumer (receive and ack, then the snapshot and
    # queries again): mostly the group queue's slot in its table (about 30 bytes) and
    # its topic's share of the consumer tally's names (9). It measured 46 (753 in all);
    # 110 (809) with a (group, topic, queue id) key of its own (64 bytes), and 182
    # (881) with that and a GroupQueue object kept (72) for a queue consumed to its end.
    read = sum(stat.size_diff for stat in after.compare_to(written, "filename")) / queues
    assert 0 < read <= READ_BYTES_PER_QUEUE_MAX, f"{read:.0f} bytes per queue read"


def test_a_consumed_queue_holds_no_containers_of_its_own() -> None:
    writer = Writer()
    writer.write_and_read("t", 2, 1_000)
    empty = GroupQueue()
    for key in writer.state.group_queues():
        group_queue = writer.state._groups[key]
        assert group_queue.leases is empty.leases
        assert group_queue.done_ahead is empty.done_ahead
        assert group_queue._expiry is empty._expiry
    for index in writer.state._queues.values():
        index.packed()
        assert index._memo is None  # short: packed afresh, no memo kept
    # A restored state shares them too, and a receive after it gets its own again.
    restored = restore(take_snapshot(writer.state))
    index = restored._queues[("t-0", 0)]
    assert index.end_offset == 1
    group_queue = restored._groups[(GROUP, "t-0", 0)]
    assert group_queue.leases is empty.leases
    group_queue.check_invariants(index.first_offset, index.end_offset)


def test_a_queue_consumed_to_its_end_is_kept_as_its_cursor() -> None:
    writer = Writer()
    writer.write_and_read("t", 2, 1_000)
    groups = writer.state._groups
    assert len(groups) == 2 * QUEUES_PER_TOPIC
    assert groups.objects() == 0  # every one consumed to its end: its cursor alone
    writer.apply(Append(2_000, (MessageRecord("t-0", 0, "one-more", b"x"),)))
    received = writer.apply(Receive(2_000, GROUP, "t-0", 0, 32, 30_000, 16, attempt_id="a"))
    handles = tuple(d.handle for d in received.deliveries)  # type: ignore[attr-defined]
    assert groups.objects() == 1  # a message in flight: an object, with its own leases
    assert writer.state.consumer_offset(GROUP, "t-0", 0) == 1
    assert writer.state.committed_offset(GROUP, "t-0", 0) == 2
    snapshot = take_snapshot(writer.state)
    assert restore(snapshot)._groups.objects() == 1
    writer.apply(Ack(2_000, GROUP, handles))
    assert groups.objects() == 0
    assert writer.state.consumer_offset(GROUP, "t-0", 0) == 2
    # A receive repeating the attempt finds no lease to hand out again, as before.
    again = writer.apply(Receive(2_000, GROUP, "t-0", 0, 32, 30_000, 16, attempt_id="a"))
    assert again.deliveries == ()  # type: ignore[attr-defined]
    assert groups.objects() == 0
    restored = restore(take_snapshot(writer.state))
    assert restored._groups.objects() == 0
    assert take_snapshot(restored) == take_snapshot(writer.state)
    restored.check_invariants()
    # Each group queue is kept under its queue's own key tuple: no key of its own.
    for state in (writer.state, restored):
        queue_keys = {id(key) for key in state._queues}
        assert all(id(key) in queue_keys for key in state._groups._table[GROUP])
