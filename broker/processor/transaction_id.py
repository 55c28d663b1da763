"""Transaction ids: self-describing, so any broker can end any transaction.

A half message is found in storage by its queue and message id, and the
EndTransaction request names only the topic and the message id, so the id
carries the queue: ``T1:<queue id>:<message id>``. Nothing secret is in it:
a forged id can only name a half message its bearer could name anyway (the
topic and message id are in the request), and storage rejects unknown ones.

PURE.
"""

from __future__ import annotations

from broker.domain import QueueRef
from broker.errors import BrokerError, Reason

_PREFIX = "T1"


def encode(queue: QueueRef, message_id: str) -> str:
    """The transaction id of the half message ``message_id`` appended to ``queue``."""
    return f"{_PREFIX}:{queue.queue_id}:{message_id}"


def decode(transaction_id: str, topic: str, message_id: str) -> tuple[QueueRef, str]:
    """The queue and message id of a transaction, checked against the request's topic
    and message id (an empty ``message_id`` is taken from the transaction id).

    Raises ``Reason.INVALID_TRANSACTION_ID`` for a blank, malformed or
    mismatched id.
    """
    if not transaction_id.strip():
        raise BrokerError.of(Reason.INVALID_TRANSACTION_ID, "transaction id is blank")
    prefix, _, rest = transaction_id.partition(":")
    queue_text, _, embedded_id = rest.partition(":")
    if prefix != _PREFIX or not queue_text.isdigit() or not embedded_id:
        raise BrokerError.of(
            Reason.INVALID_TRANSACTION_ID,
            f"transaction id {transaction_id!r} was not issued by this cluster",
        )
    if message_id and embedded_id != message_id:
        raise BrokerError.of(
            Reason.INVALID_TRANSACTION_ID,
            f"transaction id {transaction_id!r} belongs to another message than {message_id!r}",
        )
    return QueueRef(topic, int(queue_text)), embedded_id
