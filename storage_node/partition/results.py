"""What applying each partition command returns to its proposer.

Every replica computes the same result; only the leader hands it back to
the caller that proposed the command.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count, repeat
from typing import NamedTuple

from protocol.errors import ErrorCode
from protocol.positional import positional
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import Placement
from storage_node.partition.queues import QueueEntry, RecordOutcome


class QueuedRun(NamedTuple):
    """Consecutive records of one Append, all of one queue, each queued for the first
    time (not a duplicate), in order, at consecutive offsets from ``first_offset``."""

    topic: str
    queue_id: int
    message_ids: tuple[str, ...]
    first_offset: int


class AppendResult:
    """One outcome per record of the Append, in order.

    Built from the outcomes, or from :class:`QueuedRun` s when every record was
    queued for the first time: then the outcomes are made only if asked for
    (a follower never asks, and a leader answering in the queued form need
    not). Results are equal when their outcomes are, however they were built.
    """

    __slots__ = ("_outcomes", "_runs")

    def __init__(self, outcomes: tuple[RecordOutcome, ...]) -> None:
        self._outcomes: tuple[RecordOutcome, ...] | None = outcomes
        self._runs: tuple[QueuedRun, ...] = ()

    @classmethod
    def of_runs(cls, runs: tuple[QueuedRun, ...]) -> AppendResult:
        """The result of an Append whose records are ``runs``, back to back."""
        result = cls(())
        result._outcomes = None
        result._runs = runs
        return result

    @property
    def outcomes(self) -> tuple[RecordOutcome, ...]:
        """One outcome per record, in order."""
        if self._outcomes is None:
            self._outcomes = tuple(
                _new_outcome(outcome)
                for run in self._runs
                for outcome in zip(
                    repeat(run.topic),
                    repeat(run.queue_id),
                    run.message_ids,
                    repeat(Placement.QUEUED),
                    count(run.first_offset),
                    repeat(False),
                )
            )
        return self._outcomes

    def queued_run(self) -> QueuedRun | None:
        """The result as one :class:`QueuedRun`, if it was built as exactly one."""
        return self._runs[0] if len(self._runs) == 1 else None

    def part(self, first: int, size: int) -> AppendResult:
        """The result of the ``size`` records from position ``first`` alone (one of
        several appends joined into one Append)."""
        if self._outcomes is not None:
            return AppendResult(self._outcomes[first : first + size])
        runs = []
        start = 0  # the position of the run's first record
        end = first + size
        for run in self._runs:
            run_end = start + len(run.message_ids)
            low, high = max(first, start), min(end, run_end)
            if low < high:
                runs.append(
                    run._replace(
                        message_ids=run.message_ids[low - start : high - start],
                        first_offset=run.first_offset + low - start,
                    )
                )
            start = run_end
        return AppendResult.of_runs(tuple(runs))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppendResult):
            return NotImplemented
        return self.outcomes == other.outcomes

    def __hash__(self) -> int:
        return hash(self.outcomes)

    def __repr__(self) -> str:
        return f"AppendResult(outcomes={self.outcomes!r})"


_new_outcome = positional(RecordOutcome)


class Delivery(NamedTuple):
    """A message handed to a consumer group by a receive.

    The body is in the log: read the APPEND entry at ``entry.log_index`` and
    take record ``entry.position`` (see ``queues.view_record``).
    ``delivery_attempt`` is 1 on first delivery. Immutable; a named tuple,
    built in one step (one per delivered message).
    """

    handle: ReceiptHandle
    delivery_attempt: int
    invisible_until_ms: int
    entry: QueueEntry


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """A message moved from a group's queue to the group's dead-letter queue.

    ``attempts`` is how many deliveries it had; the copy went to
    ``dead_letter_topic`` (``%DLQ%<group>``) queue ``dead_letter_queue_id``
    (this raft group's id) at ``dead_letter_offset``.
    """

    topic: str
    queue_id: int
    queue_offset: int
    attempts: int
    dead_letter_topic: str
    dead_letter_queue_id: int
    dead_letter_offset: int


@dataclass(frozen=True, slots=True)
class ReceiveResult:
    """Messages handed out, those dead-lettered on the way, and the queue's end offset
    when the receive applied (-1: not reported), so a long poll can tell later growth."""

    deliveries: tuple[Delivery, ...]
    dead_lettered: tuple[DeadLettered, ...] = ()
    end_offset: int = -1


class AckOutcome(NamedTuple):
    """One handle of an Ack: ``error`` is None when acknowledged (a named tuple, as
    :class:`Delivery`)."""

    handle: ReceiptHandle
    error: ErrorCode | None = None


@dataclass(frozen=True, slots=True)
class AckResult:
    """One outcome per handle of the Ack, in order."""

    outcomes: tuple[AckOutcome, ...]


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """How many of the Release's handles were current and handed back."""

    released: int


@dataclass(frozen=True, slots=True)
class ChangeInvisibleDurationResult:
    """The new handle (the old one is now stale) and the new deadline."""

    handle: ReceiptHandle
    invisible_until_ms: int
    delivery_attempt: int


@dataclass(frozen=True, slots=True)
class DeadLetterResult:
    """Where the dead-lettered message went."""

    dead_lettered: DeadLettered


@dataclass(frozen=True, slots=True)
class CommitOffsetResult:
    """The offset stored (after clamping to the queue)."""

    offset: int


@dataclass(frozen=True, slots=True)
class EndTransactionResult:
    """A committed half message's new place, or None after a rollback."""

    committed: bool
    outcome: RecordOutcome | None = None


@dataclass(frozen=True, slots=True)
class TransactionChecksResult:
    """Which half messages had a check noted, were discarded, or were unknown."""

    noted: tuple[str, ...]
    discarded: tuple[str, ...]
    unknown: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TickResult:
    """How many held messages this command released (any command may release)."""

    released: int


@dataclass(frozen=True, slots=True)
class CancelTimerResult:
    """Whether a held message was found and cancelled."""

    cancelled: bool


@dataclass(frozen=True, slots=True)
class TrimQueueResult:
    """The queue's first offset after trimming."""

    first_offset: int


@dataclass(frozen=True, slots=True)
class DropTopicResult:
    """What a topic's drop freed in this group: queues, messages, consumer group
    positions, held timers and half messages."""

    queues: int
    messages: int
    consumer_queues: int
    timers: int
    halves: int
    tier_objects: tuple[str, ...] = ()
    """The names of the topic's tier objects, no longer recorded: the leader deletes them."""


@dataclass(frozen=True, slots=True)
class RecordUploadResult:
    """Whether the object was recorded (else ``refusal`` says why), and the queue's
    upload point after the command."""

    recorded: bool
    upload_point: int
    refusal: str = ""


@dataclass(frozen=True, slots=True)
class ExpireTierResult:
    """The names of the objects no longer recorded (the leader deletes their bytes)."""

    expired: tuple[str, ...]


Result = (
    AppendResult
    | ReceiveResult
    | AckResult
    | ChangeInvisibleDurationResult
    | DeadLetterResult
    | CommitOffsetResult
    | EndTransactionResult
    | TransactionChecksResult
    | TickResult
    | CancelTimerResult
    | TrimQueueResult
    | ReleaseResult
    | DropTopicResult
    | RecordUploadResult
    | ExpireTierResult
)
