"""Quorum arithmetic against brute-force definitions (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raft.core.quorum import (
    UNBOUNDED,
    VoteResult,
    joint_committed,
    joint_vote,
    majority_committed,
    majority_vote,
)

ids = st.frozensets(st.integers(1, 9), max_size=7)


def brute_committed(voters: frozenset[int], match: dict[int, int]) -> int:
    """The largest index held by a strict majority, by trying every index."""
    if not voters:
        return UNBOUNDED
    best = 0
    for index in {match.get(v, 0) for v in voters}:
        holders = sum(1 for v in voters if match.get(v, 0) >= index)
        if holders > len(voters) // 2:
            best = max(best, index)
    return best


@given(ids, st.dictionaries(st.integers(1, 9), st.integers(0, 50)))
def test_majority_committed_is_the_largest_index_a_majority_holds(
    voters: frozenset[int], match: dict[int, int]
) -> None:
    assert majority_committed(voters, lambda v: match.get(v, 0)) == brute_committed(voters, match)


@given(ids, ids, st.dictionaries(st.integers(1, 9), st.integers(0, 50)))
def test_joint_committed_needs_both_majorities(
    incoming: frozenset[int], outgoing: frozenset[int], match: dict[int, int]
) -> None:
    expected = min(brute_committed(incoming, match), brute_committed(outgoing, match))
    assert joint_committed(incoming, outgoing, lambda v: match.get(v, 0)) == expected


def brute_vote(voters: frozenset[int], votes: dict[int, bool]) -> VoteResult:
    if not voters:
        return VoteResult.WON
    yes = sum(1 for v in voters if votes.get(v) is True)
    undecided = sum(1 for v in voters if v not in votes)
    need = len(voters) // 2 + 1
    if yes >= need:
        return VoteResult.WON
    if yes + undecided >= need:
        return VoteResult.PENDING
    return VoteResult.LOST


@given(ids, st.dictionaries(st.integers(1, 9), st.booleans()))
def test_majority_vote_matches_its_definition(
    voters: frozenset[int], votes: dict[int, bool]
) -> None:
    assert majority_vote(voters, votes) == brute_vote(voters, votes)


@given(ids, ids, st.dictionaries(st.integers(1, 9), st.booleans()))
def test_joint_vote_wins_only_when_both_halves_win(
    incoming: frozenset[int], outgoing: frozenset[int], votes: dict[int, bool]
) -> None:
    first, second = brute_vote(incoming, votes), brute_vote(outgoing, votes)
    result = joint_vote(incoming, outgoing, votes)
    if VoteResult.LOST in (first, second):
        assert result == VoteResult.LOST
    elif first == second == VoteResult.WON:
        assert result == VoteResult.WON
    else:
        assert result == VoteResult.PENDING


def test_a_single_voter_is_its_own_majority() -> None:
    assert majority_committed({4}, lambda v: 17) == 17
    assert majority_committed(set(), lambda v: 0) == UNBOUNDED
