"""The client-visible history of a run: invocations and their outcomes.

Times are the event loop's step counter at the moment an invocation was
sent or a response received, so "a completed before b was invoked" is a
strict comparison even when both happen at the same simulated millisecond.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OpKind(enum.Enum):
    """What a client asked for."""

    APPEND = "append"  # append a unique value to the group's queue (the register's write)
    READ = "read"  # linearizable read (ReadIndex): queue length and last value


class Outcome(enum.Enum):
    """How an operation ended, as far as its client knows."""

    PENDING = "pending"
    OK = "ok"  # took effect (append) or returned a value (read)
    FAIL = "fail"  # definitely did not take effect
    UNKNOWN = "unknown"  # timed out or lost: may or may not have taken effect


@dataclass(slots=True)
class Operation:
    """One invocation. ``completed_at`` is None while pending or when unknown."""

    op_id: int
    client: int
    group: int
    kind: OpKind
    value: int  # appends: the unique value written; reads: 0
    invoked_at: int
    completed_at: int | None = None
    outcome: Outcome = Outcome.PENDING
    position: int = 0  # appends: the 1-based queue position the service reported
    read_length: int = 0  # reads: queue length seen
    read_last: int = 0  # reads: last value seen (0: empty queue)

    def describe(self) -> str:
        """One line for a violation report."""
        body = f"{self.kind.value}({self.value})" if self.kind is OpKind.APPEND else "read()"
        result = ""
        if self.outcome is Outcome.OK:
            result = (
                f" -> pos {self.position}"
                if self.kind is OpKind.APPEND
                else f" -> len {self.read_length} last {self.read_last}"
            )
        return (
            f"op {self.op_id} client {self.client} group {self.group} {body}{result} "
            f"[{self.invoked_at}, {self.completed_at}] {self.outcome.value}"
        )


class History:
    """Records every operation of a run, in invocation order."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def invoke(self, client: int, group: int, kind: OpKind, value: int, at: int) -> Operation:
        """Record a new invocation and return it."""
        op = Operation(len(self.ops) + 1, client, group, kind, value, at)
        self.ops.append(op)
        return op

    @staticmethod
    def append_ok(op: Operation, at: int, position: int) -> None:
        """The append took effect at queue ``position``."""
        _complete(op, at, Outcome.OK)
        op.position = position

    @staticmethod
    def read_ok(op: Operation, at: int, length: int, last: int) -> None:
        """The read saw a queue of ``length`` ending with ``last``."""
        _complete(op, at, Outcome.OK)
        op.read_length = length
        op.read_last = last

    @staticmethod
    def fail(op: Operation, at: int) -> None:
        """The operation definitely did not take effect."""
        _complete(op, at, Outcome.FAIL)

    @staticmethod
    def unknown(op: Operation) -> None:
        """The client gave up without knowing the outcome."""
        assert op.outcome is Outcome.PENDING, op.describe()
        op.outcome = Outcome.UNKNOWN

    def close(self) -> None:
        """Every still-pending operation becomes unknown (the run is over)."""
        for op in self.ops:
            if op.outcome is Outcome.PENDING:
                op.outcome = Outcome.UNKNOWN

    def for_group(self, group: int) -> list[Operation]:
        """The operations on one group."""
        return [op for op in self.ops if op.group == group]


def _complete(op: Operation, at: int, outcome: Outcome) -> None:
    assert op.outcome is Outcome.PENDING, f"completed twice: {op.describe()}"
    assert at > op.invoked_at
    op.completed_at = at
    op.outcome = outcome
