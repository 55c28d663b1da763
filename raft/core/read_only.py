"""ReadIndex: linearizable reads confirmed by a heartbeat round.

The leader records the commit index when a read arrives, then broadcasts a
heartbeat carrying the read's context. Once a quorum acknowledges that
heartbeat, the leader knows it was still leader when the read arrived, so
the read may be served after the state machine applies the recorded index.
A quorum ack for one read also confirms every read queued before it.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raft.types import NONE


@dataclass(slots=True)
class ReadRequest:
    """One pending read: who asked (NONE or the leader itself: local) and its index."""

    context: bytes
    from_: int
    index: int
    acks: dict[int, bool] = field(default_factory=dict)


class ReadOnly:
    """The leader's pending reads, in arrival order."""

    __slots__ = ("_pending", "_queue")

    def __init__(self) -> None:
        self._pending: dict[bytes, ReadRequest] = {}
        self._queue: list[bytes] = []

    def add_request(self, index: int, context: bytes, from_: int = NONE) -> None:
        """Queue a read at commit ``index``; a context already pending is ignored."""
        if context in self._pending:
            return
        self._pending[context] = ReadRequest(context, from_, index)
        self._queue.append(context)

    def recv_ack(self, node_id: int, context: bytes) -> dict[int, bool] | None:
        """Record a heartbeat ack for ``context``; the acks so far, or None if unknown."""
        request = self._pending.get(context)
        if request is None:
            return None
        request.acks[node_id] = True
        return request.acks

    def advance(self, context: bytes) -> list[ReadRequest]:
        """Release the read for ``context`` (pending) and every read queued before it."""
        position = self._queue.index(context) + 1
        released = [self._pending.pop(ctx) for ctx in self._queue[:position]]
        del self._queue[:position]
        return released

    def last_pending_context(self) -> bytes:
        """The context of the newest pending read (b"" if none)."""
        return self._queue[-1] if self._queue else b""
