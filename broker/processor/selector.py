"""Choosing the queue a sent message goes to.

FIFO messages: a stable hash of the message group picks the queue, so every
message of a group lands in one queue whatever broker or client sent it.
Others: the queue the client named if it is writable, else round robin.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.domain import Message
from protocol.routing import group_queue_index

__all__ = ["group_queue_index", "select_queue"]


def select_queue(message: Message, writable_queue_ids: Sequence[int], turn: int) -> int:
    """The queue id for ``message``; ``turn`` is the caller's round-robin counter."""
    if not writable_queue_ids:
        raise ValueError("no writable queue")
    if message.message_group is not None:
        return writable_queue_ids[group_queue_index(message.message_group, len(writable_queue_ids))]
    if message.queue_id is not None and message.queue_id in writable_queue_ids:
        return message.queue_id
    return writable_queue_ids[turn % len(writable_queue_ids)]
