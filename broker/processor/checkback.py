"""Check-back of orphaned transactions: the policy and the plan of one round.

A half message nobody ended is an orphan once it is ``delay_ms`` old; it is
then checked back (a producer of its group is asked to resolve it) at most
every ``interval_ms``, at most ``check_max`` times. When its next check would
be one too many it is rolled back instead (RocketMQ gives up the same way).

Counting: every round notes one check for every orphan it handled, whether
or not a live producer could be reached (an orphan whose producers are all
gone must still be rolled back in the end). Storage rolls back a half message
once its count exceeds ``check_max``, so noting an orphan already checked
``check_max`` times is its rollback.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.domain import HalfMessage

CHECK_DELAY_MS = 6_000
CHECK_INTERVAL_MS = 30_000
CHECK_MAX = 15
LEASE_NAME = "broker/transaction-check"


@dataclass(frozen=True, slots=True)
class CheckPolicy:
    """When and how often orphans are checked back; ``scan_period_ms`` is how often the
    lease holder looks for them, ``lease_ttl_ms`` how long a dead holder blocks the others."""

    delay_ms: int = CHECK_DELAY_MS
    interval_ms: int = CHECK_INTERVAL_MS
    check_max: int = CHECK_MAX
    scan_period_ms: int = 1_000
    lease_ttl_ms: int = 10_000
    batch_max: int = 256

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.interval_ms < 0:
            raise ValueError("transaction check delay and interval must be >= 0 ms")
        if self.check_max < 1:
            raise ValueError("transaction check max must be >= 1")
        if self.scan_period_ms < 1 or self.lease_ttl_ms <= self.scan_period_ms:
            raise ValueError("the check lease must outlive one scan period")
        if self.batch_max < 1:
            raise ValueError("transaction check batch must be >= 1")

    def window(self, now_ms: int) -> tuple[int, int]:
        """(stored before, last checked before) for the orphans due at ``now_ms``."""
        return now_ms - self.delay_ms, now_ms - self.interval_ms


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """One round: orphans to check back now, and orphans to roll back unasked."""

    check: tuple[HalfMessage, ...]
    give_up: tuple[HalfMessage, ...]


def plan_round(orphans: Sequence[HalfMessage], check_max: int) -> CheckPlan:
    """Split due orphans into those still to be asked and those out of checks."""
    check = tuple(half for half in orphans if half.check_count < check_max)
    give_up = tuple(half for half in orphans if half.check_count >= check_max)
    return CheckPlan(check, give_up)
