"""Failing over to a replicated service's leader: after a failed call, where next and when.

Every caller of a replicated service (the nameserver group, a storage raft
group) runs its calls through :func:`call_leader`. The first attempt goes to
the replica the caller believes leads (the first candidate); after each
failure :meth:`Failover.failed` decides from the error's own flags
(``retriable``, ``refresh_route``, ``leader_hint``) and the deadline, never
from its code:

- not ``retriable``: give up (the error is the answer);
- a ``leader_hint`` naming a replica that has not failed in this pass:
  follow it at once, at most ``hints_in_a_row_max`` times in a row (stale
  hints naming each other cannot bounce a call without a pause);
- otherwise the replica missed: pause, then the next candidate that has not
  failed in this pass. Once every candidate has failed (one pass), the route
  is read again (the caller's ``refresh``, if it has one) and a new pass
  starts from the first candidate;
- give up once the deadline has passed, or would pass during the pause.

The pause starts at ``pause_first_s`` and doubles after each miss up to
``pause_max_s``; a followed hint costs no pause. ``refresh_route`` tells a
replica that answered but does not serve the request (NOT_LEADER,
GROUP_NOT_HOSTED, SHUTTING_DOWN: it redirects) from one that could not
answer at all (UNAVAILABLE, DEADLINE_EXCEEDED ...): a policy with
``unreachable_ends`` gives up after a pass in which no replica redirected,
since waiting longer for a set of unreachable replicas would not help.

One :class:`Failover` holds the state of one call; a :class:`FailoverPolicy`
(frozen, made once per caller) holds its pacing and bounds.

PURE: time enters as ``now_s`` arguments and through the clock and the sleep
a caller hands :func:`call_leader`, which awaits nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from angelia_rpc.errors import AngeliaError

T = TypeVar("T")

HINTS_IN_A_ROW_MAX = 3
"""Leader hints followed without a pause (stale hints could otherwise bounce a call)."""


class FailureFlags(Protocol):
    """What a failover decides by: the flags every rip5 error carries."""

    @property
    def retriable(self) -> bool:
        """The same request may succeed if sent again."""
        ...

    @property
    def refresh_route(self) -> bool:
        """The replica answered but does not serve this request (a redirect)."""
        ...

    @property
    def leader_hint(self) -> str:
        """The replica the failing one names as the leader ("" when it knows none)."""
        ...


class Step(enum.Enum):
    """What a call does after a failed attempt."""

    FOLLOW_HINT = "follow_hint"
    """Call the hinted leader now."""
    NEXT_REPLICA = "next_replica"
    """Pause, then call the next candidate."""
    REFRESH_ROUTE = "refresh_route"
    """Pause, read the route again, then start a new pass at its first candidate."""
    GIVE_UP = "give_up"
    """Raise the error."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A step and the pause before it (seconds; 0 for FOLLOW_HINT and GIVE_UP)."""

    step: Step
    pause_s: float = 0.0


_FOLLOW_HINT = Decision(Step.FOLLOW_HINT)
_GIVE_UP = Decision(Step.GIVE_UP)


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    """How one kind of caller paces and bounds its calls (see the module docstring).

    ``pause_first_s`` .. ``pause_max_s``: the pause after a miss, doubling
    from the first to the max (equal: a fixed pause; both 0: no pause).
    ``call_timeout_ms``: the longest one attempt may take; less when the
    deadline is nearer. ``attempts_max``: give up after this many failed
    attempts (0: only the deadline bounds them). ``passes_max``: give up
    after this many passes over the candidates (0: no bound).
    ``unreachable_ends``: give up after a pass in which no replica redirected.
    """

    pause_first_s: float
    pause_max_s: float
    call_timeout_ms: int = 5_000
    attempts_max: int = 0
    passes_max: int = 0
    unreachable_ends: bool = False
    hints_in_a_row_max: int = HINTS_IN_A_ROW_MAX

    def __post_init__(self) -> None:
        if not 0 <= self.pause_first_s <= self.pause_max_s:
            raise ValueError(
                f"failover pauses need 0 <= pause_first_s ({self.pause_first_s}) "
                f"<= pause_max_s ({self.pause_max_s})"
            )
        if self.call_timeout_ms < 1:
            raise ValueError(f"call_timeout_ms must be at least 1, not {self.call_timeout_ms}")
        for name in ("attempts_max", "passes_max", "hints_in_a_row_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")


def attempt_timeout_ms(call_timeout_ms: int, deadline_s: float, now_s: float) -> int:
    """The timeout of an attempt made at ``now_s``: ``call_timeout_ms``, or what is
    left until ``deadline_s`` when that is less (at least 1 ms; the deadline may be
    ``math.inf``)."""
    remaining_ms = (deadline_s - now_s) * 1000
    if remaining_ms >= call_timeout_ms:
        return call_timeout_ms
    return max(1, int(remaining_ms))


def starting_at(first: str, addresses: Sequence[str]) -> list[str]:
    """``addresses`` in turn from ``first``: rotated when it is one of them, else
    ``first`` before them all (a leader learned from a hint)."""
    if first in addresses:
        index = addresses.index(first)
        return [*addresses[index:], *addresses[:index]]
    return [first, *addresses]


class Failover:
    """The failover state of one call over ``candidates`` (see the module docstring).

    ``candidates``: the replicas in the order to try them, the one believed
    to lead first (at least one). ``deadline_s``: on the caller's clock
    (``math.inf``: bounded by the policy's attempts or passes only).

    Invariant: :attr:`address` names the replica of the next attempt; after
    a success, the one that answered; after GIVE_UP, the one that failed last.
    """

    __slots__ = (
        "_failed",
        "_hints_in_a_row",
        "_leader",
        "_pause_s",
        "_redirected",
        "_turn",
        "attempts_failed",
        "candidates",
        "deadline_s",
        "passes",
        "policy",
    )

    def __init__(
        self, candidates: Sequence[str], policy: FailoverPolicy, deadline_s: float
    ) -> None:
        if not candidates:
            raise ValueError("a failover needs at least one candidate replica")
        self.candidates: Sequence[str] = candidates
        self.policy = policy
        self.deadline_s = deadline_s
        self.attempts_failed = 0
        self.passes = 0  # passes completed
        self._turn = 0  # the candidate of the next attempt without a leader to follow
        self._leader = ""  # a followed hint (overrides the turn until it fails)
        self._failed: set[str] = set()  # replicas that failed in this pass
        self._redirected = False  # a replica of this pass redirected (hint or refresh_route)
        self._hints_in_a_row = 0
        self._pause_s = policy.pause_first_s

    @property
    def address(self) -> str:
        """The replica the next attempt goes to (see the class invariant)."""
        return self._leader or self.candidates[self._turn]

    def timeout_ms(self, now_s: float) -> int:
        """The timeout of the attempt made at ``now_s`` (see :func:`attempt_timeout_ms`)."""
        return attempt_timeout_ms(self.policy.call_timeout_ms, self.deadline_s, now_s)

    def failed(self, error: FailureFlags, now_s: float) -> Decision:
        """The attempt at :attr:`address` failed with ``error`` at ``now_s``: what next.

        The state moves to the next attempt's replica unless the answer is GIVE_UP.
        """
        self.attempts_failed += 1
        policy = self.policy
        if (
            not error.retriable
            or now_s >= self.deadline_s
            or (policy.attempts_max and self.attempts_failed >= policy.attempts_max)
        ):
            return _GIVE_UP
        self._failed.add(self.address)
        hint = error.leader_hint
        if hint or error.refresh_route:
            self._redirected = True
        if hint and hint not in self._failed and self._hints_in_a_row < policy.hints_in_a_row_max:
            self._hints_in_a_row += 1
            self._leader = hint
            return _FOLLOW_HINT
        turn = self._turn
        while turn < len(self.candidates) and self.candidates[turn] in self._failed:
            turn += 1
        step = Step.NEXT_REPLICA
        if turn == len(self.candidates):  # every candidate failed: the pass is over
            if (policy.passes_max and self.passes + 1 >= policy.passes_max) or (
                policy.unreachable_ends and not self._redirected
            ):
                return _GIVE_UP
            step = Step.REFRESH_ROUTE
        pause_s = self._pause_s
        if now_s + pause_s >= self.deadline_s:
            return _GIVE_UP
        self._pause_s = min(pause_s * 2, policy.pause_max_s)
        self._hints_in_a_row = 0
        self._leader = ""
        if step is Step.REFRESH_ROUTE:
            self.passes += 1
            turn = 0
            self._failed.clear()
            self._redirected = False
        self._turn = turn
        return Decision(step, pause_s)

    def refreshed(self, candidates: Sequence[str]) -> None:
        """The route was read again: the new pass goes over ``candidates`` (kept as
        they were when the route names none)."""
        if candidates:
            self.candidates = candidates
            self._turn = 0


async def call_leader(
    failover: Failover,
    attempt: Callable[[str, int], Awaitable[T]],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[object]],
    refresh: Callable[[], Awaitable[Sequence[str]]] | None = None,
    failure: AngeliaError | None = None,
) -> T:
    """``attempt(address, timeout_ms)`` until one succeeds, failing over as ``failover``
    decides; the last :class:`AngeliaError` when it gives up.

    ``clock`` reads the time ``failover.deadline_s`` is on; ``sleep`` pauses
    (both the caller's: tests pass fakes). ``refresh`` reads the route again
    and returns its candidates (without it a new pass starts over the same
    ones). ``failure``: the caller made the first attempt itself, at
    ``failover.address``, and it failed with this (a caller's fast path).
    Exceptions other than AngeliaError pass through at once.
    """
    while True:
        if failure is None:
            try:
                return await attempt(failover.address, failover.timeout_ms(clock()))
            except AngeliaError as error:
                failure = error
        decision = failover.failed(failure, clock())
        if decision.step is Step.GIVE_UP:
            raise failure
        failure = None
        if decision.pause_s > 0:
            await sleep(decision.pause_s)
        if decision.step is Step.REFRESH_ROUTE and refresh is not None:
            failover.refreshed(await refresh())
