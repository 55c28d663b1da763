"""Recall handles: what a producer gets back for a timed message, to cancel it later.

RocketMQ 5.3 answers the send of a timer message with a recall handle, the
URL-safe base64 of ``v1 <topic> <broker name> <delivery ms> <message id>``,
and RecallMessage(topic, handle) cancels the message while it is still held.
rip5's handle has the same shape with the message's queue id where RocketMQ
names its broker: a timed message is held in the raft group of its queue, so
any broker can find it from the handle alone. Nothing secret is in it: the
topic and message id are all a bearer could name anyway, and storage cancels
only a message it still holds.

PURE.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from broker.domain import QueueRef
from broker.errors import BrokerError
from protocol import errors as codes

_VERSION = "v1"


class RecallTarget(NamedTuple):
    """The timed message a handle names: its queue, id and delivery time (ms)."""

    queue: QueueRef
    message_id: str
    delivery_ms: int


def encode(queue: QueueRef, message_id: str, delivery_ms: int) -> str:
    """The recall handle of timed message ``message_id`` held in ``queue`` until ``delivery_ms``."""
    text = f"{_VERSION} {queue.topic} {queue.queue_id} {delivery_ms} {message_id}"
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode(handle: str, topic: str) -> RecallTarget:
    """The message ``handle`` names, checked against the request's ``topic``.

    Raises BAD_REQUEST for a blank or malformed handle, or one of another topic.
    """
    if not handle.strip():
        raise BrokerError(codes.BAD_REQUEST, "recall handle is blank")
    try:
        text = base64.urlsafe_b64decode(handle.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    parts = text.split(" ")
    if (
        len(parts) != 5
        or parts[0] != _VERSION
        or not parts[2].isdigit()
        or not parts[3].isdigit()
        or not parts[4]
    ):
        raise BrokerError(codes.BAD_REQUEST, f"recall handle {handle!r} was not issued by rip5")
    _version, handle_topic, queue_id, delivery_ms, message_id = parts
    if handle_topic != topic:
        raise BrokerError(
            codes.BAD_REQUEST,
            f"recall handle names topic {handle_topic!r}, the request topic {topic!r}",
        )
    return RecallTarget(QueueRef(topic, int(queue_id)), message_id, int(delivery_ms))
