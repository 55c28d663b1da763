"""The failover decision (one test per flag and bound) and the loop around it, on a fake clock."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from angelia_rpc.errors import AngeliaError
from angelia_rpc.failover import (
    Decision,
    Failover,
    FailoverPolicy,
    Step,
    attempt_timeout_ms,
    call_leader,
    starting_at,
)
from protocol import errors

POLICY = FailoverPolicy(pause_first_s=0.02, pause_max_s=0.5, call_timeout_ms=1000)
REPLICAS = ["a", "b", "c"]


@dataclass(frozen=True)
class Flags:
    """An error as the failover sees it: its three flags and nothing else."""

    retriable: bool = True
    refresh_route: bool = False
    leader_hint: str = ""


UNREACHABLE = Flags()
REDIRECT = Flags(refresh_route=True)
FINAL = Flags(retriable=False)


def hint(to: str) -> Flags:
    return Flags(refresh_route=True, leader_hint=to)


def _failover(policy: FailoverPolicy = POLICY, deadline_s: float = 10.0) -> Failover:
    return Failover(list(REPLICAS), policy, deadline_s)


# -- one decision per flag --------------------------------------------------------------


def test_an_error_that_is_not_retriable_gives_up_and_stays_put() -> None:
    failover = _failover()
    assert failover.failed(FINAL, 0.0) == Decision(Step.GIVE_UP)
    assert failover.address == "a"


def test_a_retriable_error_without_a_hint_pauses_then_tries_the_next_replica() -> None:
    failover = _failover()
    assert failover.failed(UNREACHABLE, 0.0) == Decision(Step.NEXT_REPLICA, 0.02)
    assert failover.address == "b"


def test_a_redirect_without_a_hint_also_moves_on_to_the_next_replica() -> None:
    failover = _failover()
    assert failover.failed(REDIRECT, 0.0) == Decision(Step.NEXT_REPLICA, 0.02)
    assert failover.address == "b"


def test_a_leader_hint_is_followed_at_once() -> None:
    failover = _failover()
    assert failover.failed(hint("c"), 0.0) == Decision(Step.FOLLOW_HINT)
    assert failover.address == "c"


def test_a_hint_naming_a_replica_outside_the_candidates_is_followed() -> None:
    failover = _failover()
    assert failover.failed(hint("z"), 0.0).step is Step.FOLLOW_HINT
    assert failover.address == "z"


def test_a_hint_is_read_whatever_the_code_only_its_flags_count() -> None:
    # An UNAVAILABLE that names a leader is followed like a NOT_LEADER would be.
    failover = _failover()
    error = AngeliaError(errors.UNAVAILABLE, "moved", leader_hint="c")
    assert failover.failed(error, 0.0).step is Step.FOLLOW_HINT
    # A NOT_LEADER the peer marked as not retriable ends the call.
    final = AngeliaError(errors.NOT_LEADER, "stop", retriable=False, leader_hint="b")
    assert failover.failed(final, 0.0).step is Step.GIVE_UP


def test_a_hint_naming_a_replica_that_failed_in_this_pass_is_not_followed() -> None:
    failover = _failover()
    assert failover.failed(hint("b"), 0.0).step is Step.FOLLOW_HINT
    # b names a, which just failed: a stale hint; b's turn is over too, so c.
    assert failover.failed(hint("a"), 0.0) == Decision(Step.NEXT_REPLICA, 0.02)
    assert failover.address == "c"


def test_a_hint_naming_the_failing_replica_itself_is_not_followed() -> None:
    failover = _failover()
    assert failover.failed(hint("a"), 0.0).step is Step.NEXT_REPLICA
    assert failover.address == "b"


def test_hints_in_a_row_are_bounded_then_a_pause_comes() -> None:
    failover = Failover(["a"], POLICY, 10.0)
    for to in ("h1", "h2", "h3"):
        assert failover.failed(hint(to), 0.0).step is Step.FOLLOW_HINT
    # The fourth hint in a row is not followed: the call pauses (a new pass: one candidate).
    assert failover.failed(hint("h4"), 0.0) == Decision(Step.REFRESH_ROUTE, 0.02)
    assert failover.address == "a"
    assert failover.failed(hint("h5"), 0.0).step is Step.FOLLOW_HINT  # counted afresh


def test_every_candidate_failed_ends_the_pass_with_a_route_refresh() -> None:
    failover = _failover()
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(UNREACHABLE, 0.0) == Decision(Step.REFRESH_ROUTE, 0.08)
    assert failover.passes == 1
    assert failover.address == "a"  # the new pass starts at the first candidate
    failover.refreshed(["x", "y"])
    assert failover.address == "x"
    failover.refreshed([])  # a route naming no replica keeps the candidates
    assert failover.candidates == ["x", "y"]


def test_a_failed_hint_goes_back_to_the_candidate_whose_turn_it_was() -> None:
    failover = _failover()
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA  # a
    assert failover.failed(hint("z"), 0.0).step is Step.FOLLOW_HINT  # b names z
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA  # z is down
    assert failover.address == "c"


def test_pauses_double_up_to_the_max_and_hints_cost_none() -> None:
    failover = Failover(["a"], POLICY, math.inf)
    pauses = [failover.failed(UNREACHABLE, 0.0).pause_s for _ in range(7)]
    assert pauses == [0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5]
    assert failover.failed(hint("b"), 0.0).pause_s == 0


# -- the bounds ---------------------------------------------------------------------------


def test_a_failure_at_or_after_the_deadline_gives_up_even_with_a_hint() -> None:
    failover = _failover(deadline_s=1.0)
    assert failover.failed(hint("c"), 1.0) == Decision(Step.GIVE_UP)


def test_a_pause_that_would_reach_the_deadline_gives_up() -> None:
    failover = _failover(deadline_s=1.0)
    assert failover.failed(UNREACHABLE, 0.97).step is Step.NEXT_REPLICA  # 0.97 + 0.02 < 1
    assert failover.failed(UNREACHABLE, 0.97) == Decision(Step.GIVE_UP)  # 0.97 + 0.04 >= 1
    assert failover.address == "b"  # the replica that failed last


def test_attempts_max_bounds_the_failed_attempts() -> None:
    policy = FailoverPolicy(0.1, 0.1, attempts_max=3)
    failover = Failover(["a"], policy, math.inf)
    assert failover.failed(REDIRECT, 0.0).step is Step.REFRESH_ROUTE
    assert failover.failed(hint("b"), 0.0).step is Step.FOLLOW_HINT
    assert failover.failed(REDIRECT, 0.0) == Decision(Step.GIVE_UP)


def test_passes_max_gives_up_once_every_candidate_failed_that_often() -> None:
    policy = FailoverPolicy(0.0, 0.0, passes_max=1)
    failover = _failover(policy, math.inf)
    assert failover.failed(REDIRECT, 0.0) == Decision(Step.NEXT_REPLICA, 0.0)
    assert failover.failed(hint("a"), 0.0).step is Step.NEXT_REPLICA  # a failed already
    assert failover.failed(UNREACHABLE, 0.0) == Decision(Step.GIVE_UP)


def test_unreachable_ends_gives_up_after_a_pass_in_which_no_replica_redirected() -> None:
    policy = FailoverPolicy(0.1, 0.1, unreachable_ends=True)
    failover = _failover(policy, math.inf)
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(UNREACHABLE, 0.0) == Decision(Step.GIVE_UP)


def test_unreachable_ends_goes_on_while_some_replica_redirects() -> None:
    policy = FailoverPolicy(0.1, 0.1, unreachable_ends=True)
    failover = _failover(policy, math.inf)
    assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(REDIRECT, 0.0).step is Step.NEXT_REPLICA  # b is up: an election
    assert failover.failed(UNREACHABLE, 0.0).step is Step.REFRESH_ROUTE
    # The next pass starts afresh: every replica unreachable now ends it.
    for _ in range(2):
        assert failover.failed(UNREACHABLE, 0.0).step is Step.NEXT_REPLICA
    assert failover.failed(UNREACHABLE, 0.0).step is Step.GIVE_UP


# -- every sequence of failures -----------------------------------------------------------

_FLAGS = st.builds(
    Flags,
    retriable=st.booleans(),
    refresh_route=st.booleans(),
    leader_hint=st.sampled_from(["", "a", "b", "c", "x", "y"]),
)


@given(
    failures=st.lists(st.tuples(_FLAGS, st.floats(0.0, 0.3)), max_size=40),
    passes_max=st.integers(0, 3),
    unreachable_ends=st.booleans(),
)
def test_any_sequence_of_failures_keeps_the_decision_within_its_bounds(
    failures: list[tuple[Flags, float]], passes_max: int, unreachable_ends: bool
) -> None:
    policy = FailoverPolicy(
        0.02, 0.5, passes_max=passes_max, unreachable_ends=unreachable_ends, attempts_max=30
    )
    failover = Failover(list(REPLICAS), policy, deadline_s=2.0)
    now_s = 0.0
    hints_in_a_row = 0
    for flags, took_s in failures:
        now_s += took_s
        before = failover.address
        decision = failover.failed(flags, now_s)
        if decision.step is Step.GIVE_UP:
            assert failover.address == before  # the replica that failed last
            return
        assert flags.retriable
        assert now_s + decision.pause_s < 2.0
        assert decision.pause_s <= 0.5
        if decision.step is Step.FOLLOW_HINT:
            hints_in_a_row += 1
            assert failover.address == flags.leader_hint != before
            assert decision.pause_s == 0
            assert hints_in_a_row <= policy.hints_in_a_row_max
        else:
            hints_in_a_row = 0
            assert failover.address in REPLICAS
            assert decision.pause_s > 0
        now_s += decision.pause_s
    assert failover.attempts_failed < 30


# -- helpers ------------------------------------------------------------------------------


def test_the_attempt_timeout_is_the_call_timeout_or_what_is_left() -> None:
    assert attempt_timeout_ms(1000, 10.0, 0.0) == 1000
    assert attempt_timeout_ms(1000, 10.0, 9.75) == 250
    assert attempt_timeout_ms(1000, 10.0, 10.5) == 1
    assert attempt_timeout_ms(1000, math.inf, 5.0) == 1000


def test_starting_at_rotates_the_addresses_or_puts_a_stranger_first() -> None:
    assert starting_at("b", REPLICAS) == ["b", "c", "a"]
    assert starting_at("a", REPLICAS) == REPLICAS
    assert starting_at("z", REPLICAS) == ["z", "a", "b", "c"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pause_first_s": 0.5, "pause_max_s": 0.1}, "pause_first_s"),
        ({"pause_first_s": -1.0, "pause_max_s": 0.1}, "pause_first_s"),
        ({"pause_first_s": 0.1, "pause_max_s": 0.1, "call_timeout_ms": 0}, "call_timeout_ms"),
        ({"pause_first_s": 0.1, "pause_max_s": 0.1, "attempts_max": -1}, "attempts_max"),
        ({"pause_first_s": 0.1, "pause_max_s": 0.1, "passes_max": -1}, "passes_max"),
        ({"pause_first_s": 0.1, "pause_max_s": 0.1, "hints_in_a_row_max": -1}, "hints_in"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_naming_the_field(
    fields: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        FailoverPolicy(**fields)  # type: ignore[arg-type]


def test_a_failover_needs_a_candidate() -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        Failover([], POLICY, 1.0)


# -- the loop -----------------------------------------------------------------------------


class FakeTime:
    """A clock that moves only when the loop sleeps (or an attempt takes time)."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now_s += seconds


class Replicas:
    """Scripted answers per address: an AngeliaError to raise, or a value to return."""

    def __init__(self, answers: dict[str, list[object]], time: FakeTime, cost_s: float = 0.0):
        self.answers = answers
        self.time = time
        self.cost_s = cost_s
        self.calls: list[tuple[str, int]] = []

    async def attempt(self, address: str, timeout_ms: int) -> object:
        self.calls.append((address, timeout_ms))
        self.time.now_s += self.cost_s
        answers = self.answers[address]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _not_leader(to: str = "") -> AngeliaError:
    return AngeliaError(errors.NOT_LEADER, "not the leader", leader_hint=to)


def _unavailable() -> AngeliaError:
    return AngeliaError(errors.UNAVAILABLE, "down")


async def test_the_loop_follows_a_hint_and_reports_who_answered() -> None:
    time = FakeTime()
    replicas = Replicas({"a": [_not_leader("c")], "c": ["ok"]}, time)
    failover = _failover()
    result = await call_leader(failover, replicas.attempt, clock=time.clock, sleep=time.sleep)
    assert result == "ok"
    assert [address for address, _ in replicas.calls] == ["a", "c"]
    assert failover.address == "c"
    assert time.pauses == []


async def test_the_loop_pauses_refreshes_the_route_and_gives_each_attempt_what_is_left() -> None:
    time = FakeTime()
    replicas = Replicas({"a": [_unavailable()], "b": [_unavailable()], "n": ["ok"]}, time, 0.25)
    refreshes: list[int] = []

    async def refresh() -> list[str]:
        refreshes.append(1)
        return ["n"]

    policy = FailoverPolicy(pause_first_s=0.25, pause_max_s=0.5, call_timeout_ms=1000)
    failover = Failover(["a", "b"], policy, deadline_s=2.0)
    result = await call_leader(
        failover, replicas.attempt, clock=time.clock, sleep=time.sleep, refresh=refresh
    )
    assert result == "ok"
    # a at 0, b at 0.5 (after 0.25 in a and a pause), n at 1.25: 0.75 s left.
    assert replicas.calls == [("a", 1000), ("b", 1000), ("n", 750)]
    assert time.pauses == [0.25, 0.5]
    assert refreshes == [1]


async def test_the_loop_raises_the_last_error_when_it_gives_up() -> None:
    time = FakeTime()
    final = AngeliaError(errors.NOT_FOUND, "no such topic")
    replicas = Replicas({"a": [_not_leader()], "b": [final]}, time)
    with pytest.raises(AngeliaError) as raised:
        await call_leader(_failover(), replicas.attempt, clock=time.clock, sleep=time.sleep)
    assert raised.value is final


async def test_the_loop_gives_up_at_the_deadline_with_the_last_retriable_error() -> None:
    time = FakeTime()
    replicas = Replicas({"a": [_unavailable()]}, time)
    failover = Failover(["a"], POLICY, deadline_s=0.5)
    with pytest.raises(AngeliaError) as raised:
        await call_leader(failover, replicas.attempt, clock=time.clock, sleep=time.sleep)
    assert raised.value.code is errors.UNAVAILABLE
    assert time.pauses == [0.02, 0.04, 0.08, 0.16]  # the next (0.32) would pass 0.5
    assert len(replicas.calls) == 5


async def test_the_loop_takes_over_after_a_first_attempt_the_caller_made() -> None:
    time = FakeTime()
    replicas = Replicas({"b": ["ok"]}, time)
    result = await call_leader(
        _failover(),
        replicas.attempt,
        clock=time.clock,
        sleep=time.sleep,
        failure=_not_leader("b"),
    )
    assert result == "ok"
    assert replicas.calls == [("b", 1000)]


async def test_other_exceptions_pass_through_the_loop_at_once() -> None:
    time = FakeTime()
    replicas = Replicas({"a": [KeyError("bug")]}, time)
    with pytest.raises(KeyError):
        await call_leader(_failover(), replicas.attempt, clock=time.clock, sleep=time.sleep)
    assert len(replicas.calls) == 1
