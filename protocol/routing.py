"""Which raft group serves a queue: the one function brokers, storage nodes and
the nameserver must agree on.

``group_index(topic, queue_id, group_count)`` is CRC-32 (IEEE, as in zlib) of
the topic's UTF-8 bytes, a zero byte, and the queue id as 4 big-endian bytes,
mod ``group_count``. Python's ``hash()`` is salted per process and must never
be used here.

FROZEN: changing this function moves every queue of every existing cluster to
another group (and so to another log). A new scheme needs a new function and a
per-cluster setting saying which one the cluster was created with.

PURE.
"""

from __future__ import annotations

import zlib

QUEUE_ID_MAX = 2**32 - 1


def group_index(topic: str, queue_id: int, group_count: int) -> int:
    """The index (0 <= index < group_count) of the group serving (topic, queue_id).

    A cluster whose groups have ids ``first .. first + group_count - 1`` serves
    the queue in group ``first + group_index(...)``.
    """
    if group_count < 1:
        raise ValueError(f"group_count must be >= 1, got {group_count}")
    if not 0 <= queue_id <= QUEUE_ID_MAX:
        raise ValueError(f"queue_id must be in [0, {QUEUE_ID_MAX}], got {queue_id}")
    key = topic.encode("utf-8") + b"\x00" + queue_id.to_bytes(4, "big")
    return zlib.crc32(key) % group_count
