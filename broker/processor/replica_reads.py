"""Read replicas: which replica of a raft group serves an offset read of a hot queue.

For a topic whose record says so (the nameserver's topic attribute
``read_replicas``: ``rip5 admin topic create|update T --read-replicas on``),
the broker's offset reads (pull consumers) go round-robin over the replicas
of the queue's group, the leader included, instead of all to the leader;
each replica serves what it has applied, which is committed (storage
follower reads never go past the commit index). The broker reads the
attribute from the topic's route, which it caches and drops when the
nameserver's watch reports the topic changed: a change takes effect with the
next read after the watch delivers it.

Semantics kept (read-your-acks):

- every message a read returns is committed: an acknowledged send is never
  taken back, so nothing read from a follower disappears;
- a consumer never moves backwards: a follower that has not applied up to
  the offset asked (its end offset is below it) does not answer; the read
  goes to the leader (:func:`usable_answer`);
- a message acknowledged to its producer is readable from the leader at once
  and from a follower once it applied it (a raft round later, typically):
  a consumer reading at the tail may see it one poll later than from the
  leader, never out of order;
- offset commits and everything that changes a queue (pops, acks) still go
  to the leader.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.nameserver_api import TopicInfo


class ReadSpread:
    """Round-robin choice of a replica per raft group, for topics with read replicas."""

    def __init__(self) -> None:
        self._turn: dict[int, int] = {}  # group -> reads spread so far

    @staticmethod
    def spreads(topic: TopicInfo) -> bool:
        """Whether reads of ``topic`` (its record, as routed) go over its replicas."""
        return topic.read_replicas

    def pick(self, group_id: int, replicas: Sequence[str]) -> str | None:
        """The replica (address) for the next read of ``group_id``; None if none."""
        if not replicas:
            return None
        turn = self._turn.get(group_id, 0)
        self._turn[group_id] = turn + 1
        return sorted(replicas)[turn % len(replicas)]


def usable_answer(requested_offset: int, end_offset: int) -> bool:
    """Whether a follower's answer to a read from ``requested_offset`` may be used: it
    has applied the queue at least up to there (else the leader must answer)."""
    return end_offset >= requested_offset
