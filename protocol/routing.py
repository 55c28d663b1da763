"""Which raft group serves a queue: the rule brokers, storage nodes and the
nameserver must agree on.

A cluster's raft groups have the global ids ``first_group_id ..
first_group_id + group_count - 1`` (both fixed when the cluster is created).

- An ordinary topic's queues are ``0 .. queue_count - 1``; queue ``q`` is
  served by group ``first_group_id + group_index(topic, q, group_count)``,
  where ``group_index`` is CRC-32 (IEEE, as in zlib) of the topic's UTF-8
  bytes, a zero byte and ``q`` as 4 big-endian bytes, mod ``group_count``.
  Python's ``hash()`` is salted per process and must never be used here.
- A FIFO message goes to the writable queue a hash of its message group
  picks (``group_queue_index``: SHA-256 of the group's UTF-8 bytes, the
  first 8 bytes big-endian, mod the number of writable queues), so every
  message of a group lands in one queue whatever broker or client sent it
  (brokers choose by it; the connector predicts where its copies land).
- A dead-letter topic (``%DLQ%<consumer group>``) has one queue per raft group
  of its cluster, and its queue id IS the group id: a storage group moves a
  message to the dead-letter queue by appending to its own queue, locally.

FROZEN: changing these rules moves queues of existing clusters to other groups
(and so to other logs). A new scheme needs new functions and a per-cluster
setting saying which one the cluster was created with.

PURE.
"""

from __future__ import annotations

import hashlib
import zlib

QUEUE_ID_MAX = 2**32 - 1
DLQ_TOPIC_PREFIX = "%DLQ%"
RETRY_TOPIC_PREFIX = "%RETRY%"


def is_dead_letter_topic(topic: str) -> bool:
    """Whether ``topic`` is a consumer group's dead-letter topic."""
    return topic.startswith(DLQ_TOPIC_PREFIX)


def is_retry_topic(topic: str) -> bool:
    """Whether ``topic`` is a consumer group's retry topic (an ordinary topic of one
    queue, holding what the group's 4.x consumers gave back)."""
    return topic.startswith(RETRY_TOPIC_PREFIX)


def group_index(topic: str, queue_id: int, group_count: int) -> int:
    """The hash of (topic, queue_id) mod ``group_count`` (0 <= index < group_count)."""
    if group_count < 1:
        raise ValueError(f"group_count must be >= 1, got {group_count}")
    if not 0 <= queue_id <= QUEUE_ID_MAX:
        raise ValueError(f"queue_id must be in [0, {QUEUE_ID_MAX}], got {queue_id}")
    key = topic.encode("utf-8") + b"\x00" + queue_id.to_bytes(4, "big")
    return zlib.crc32(key) % group_count


def group_queue_index(message_group: str, queue_count: int) -> int:
    """The index (into the writable queues) a message group maps to."""
    digest = hashlib.sha256(message_group.encode()).digest()
    return int.from_bytes(digest[:8], "big") % queue_count


def queue_ids(topic: str, queue_count: int, first_group_id: int, group_count: int) -> range:
    """The queue ids of a topic: ``0 .. queue_count - 1``, or for a dead-letter
    topic the cluster's group ids."""
    if is_dead_letter_topic(topic):
        return range(first_group_id, first_group_id + group_count)
    return range(queue_count)


def group_id(topic: str, queue_id: int, first_group_id: int, group_count: int) -> int:
    """The global id of the raft group serving (topic, queue_id) in a cluster.

    Raises ValueError for a dead-letter queue id that is not one of the
    cluster's group ids (the queue does not exist).
    """
    if is_dead_letter_topic(topic):
        if not first_group_id <= queue_id < first_group_id + group_count:
            raise ValueError(
                f"dead-letter queue ids are the cluster's group ids "
                f"{first_group_id}..{first_group_id + group_count - 1}, not {queue_id}"
            )
        return queue_id
    return first_group_id + group_index(topic, queue_id, group_count)
