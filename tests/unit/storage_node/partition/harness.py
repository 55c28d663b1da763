"""A partition state machine driven like a raft group's apply loop, for tests.

Every command goes through the log codec (encode, then apply the bytes) so
the tests cover what replicas really apply; the log is kept in memory so a
queue entry can be resolved to its record, as the storage node reads bodies
from the commit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.records import MessageRecord
from protocol.storage_api import ReceiptHandle
from storage_node.partition import commands
from storage_node.partition.commands import Append, Command, Receive
from storage_node.partition.config import PartitionConfig
from storage_node.partition.queues import QueueEntry
from storage_node.partition.reads import record_at
from storage_node.partition.results import (
    AckResult,
    AppendResult,
    ReceiveResult,
    Result,
)
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState


def record(
    message_id: str,
    *,
    topic: str = "orders",
    queue_id: int = 0,
    body: bytes | None = None,
    **fields: object,
) -> MessageRecord:
    """A record with a body derived from its id unless given."""
    return MessageRecord(
        topic,
        queue_id,
        message_id,
        body if body is not None else message_id.encode(),
        **fields,  # type: ignore[arg-type]
    )


@dataclass
class Harness:
    """One replica: a state, its log and the clock the leader proposes."""

    config: PartitionConfig = field(default_factory=PartitionConfig)
    now_ms: int = 1_000_000
    state: PartitionState = field(init=False)
    log: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = PartitionState(self.config)

    @property
    def next_index(self) -> int:
        return self.state.applied_index + 1

    def apply(self, command: Command) -> Result:
        data = commands.encode(command)
        index = self.next_index
        self.log[index] = data
        result = self.state.apply_entry(data, index)
        assert result is not None
        return result

    def append(self, *records: MessageRecord) -> AppendResult:
        result = self.apply(Append(self.now_ms, records))
        assert isinstance(result, AppendResult)
        return result

    def receive(
        self,
        group: str = "g",
        *,
        topic: str = "orders",
        queue_id: int = 0,
        max_messages: int = 32,
        invisible_ms: int = 30_000,
        max_attempts: int = 16,
        filter_expression: str = "*",
        fifo: bool = False,
        **fields: object,
    ) -> ReceiveResult:
        result = self.apply(
            Receive(
                self.now_ms,
                group,
                topic,
                queue_id,
                max_messages,
                invisible_ms,
                max_attempts,
                filter_expression,
                fifo,
                **fields,  # type: ignore[arg-type]
            )
        )
        assert isinstance(result, ReceiveResult)
        return result

    def ack(self, *handles: ReceiptHandle, group: str = "g") -> AckResult:
        result = self.apply(commands.Ack(self.now_ms, group, handles))
        assert isinstance(result, AckResult)
        return result

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def resolve(self, entry: QueueEntry, topic: str, queue_id: int) -> MessageRecord:
        """The message a reader of (topic, queue_id) sees at ``entry``, read from the log."""
        return record_at(self.log[entry.log_index], entry, (topic, queue_id))

    def bodies(self, result: ReceiveResult) -> list[bytes]:
        return [
            self.resolve(d.entry, d.handle.topic, d.handle.queue_id).body for d in result.deliveries
        ]

    def queue_bodies(self, topic: str = "orders", queue_id: int = 0) -> list[bytes]:
        entries = self.state.read(topic, queue_id, 0, 1 << 30)
        return [self.resolve(e, topic, queue_id).body for e in entries]

    def restart_from_snapshot(self) -> None:
        """Replace the state by one restored from its own snapshot."""
        self.state = restore(take_snapshot(self.state))
