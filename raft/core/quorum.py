"""Quorum arithmetic: the commit index and the outcome of a vote.

A configuration is a majority set of voter ids, or a joint pair of them
(incoming, outgoing) during a joint-consensus membership change; a joint
decision needs a majority of *both* halves. An empty majority set agrees with
everything (its commit index is unbounded and it wins every vote), so a
non-joint configuration is just a joint one whose outgoing half is empty.

PURE.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping

UNBOUNDED = 1 << 64
"""The commit index of an empty majority set: it never limits a joint minimum."""


class VoteResult(enum.IntEnum):
    """Where an election (or any yes/no poll of the voters) stands."""

    PENDING = 0  # neither side has a majority yet
    LOST = 1  # a majority can no longer be reached
    WON = 2  # a majority said yes


def majority_committed(voters: Collection[int], match: Callable[[int], int]) -> int:
    """The largest index that a majority of ``voters`` has acknowledged.

    ``match(id)`` gives the index a voter is known to hold.
    """
    n = len(voters)
    if n == 0:
        return UNBOUNDED
    if n == 1:
        return match(next(iter(voters)))
    indexes = sorted([match(voter) for voter in voters], reverse=True)
    return indexes[n // 2]


def majority_vote(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """The outcome of ``votes`` (id -> granted; absent means not yet answered)."""
    if not voters:
        return VoteResult.WON
    granted = missing = 0
    for voter in voters:
        vote = votes.get(voter)
        if vote is None:
            missing += 1
        elif vote:
            granted += 1
    quorum = len(voters) // 2 + 1
    if granted >= quorum:
        return VoteResult.WON
    if granted + missing >= quorum:
        return VoteResult.PENDING
    return VoteResult.LOST


def joint_committed(
    incoming: Collection[int], outgoing: Collection[int], match: Callable[[int], int]
) -> int:
    """The commit index of a joint configuration: the smaller of both halves'."""
    committed = majority_committed(incoming, match)
    if outgoing:
        committed = min(committed, majority_committed(outgoing, match))
    return committed


def joint_vote(
    incoming: Collection[int], outgoing: Collection[int], votes: Mapping[int, bool]
) -> VoteResult:
    """The outcome of a vote in a joint configuration: both halves must win."""
    first = majority_vote(incoming, votes)
    second = majority_vote(outgoing, votes)
    if first == second:
        return first
    if VoteResult.LOST in (first, second):
        return VoteResult.LOST
    return VoteResult.PENDING
