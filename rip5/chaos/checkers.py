"""What a chaos history proves, as OpenChaos reports it, with its faults fixed.

Counts (per run):

- sends ``invoked``, ``acked``, ``failed``, ``unknown``; of the failed and
  unknown ones, ``unknown_stored``: delivered anyway (the send was stored
  though the client never heard so). OpenChaos counts these as duplicates;
  here they are neither lost nor duplicated.
- ``consumed``: distinct messages delivered.
- ``lost``: a message that must be visible (acked; for a transaction, also
  committed with an acked EndTransaction) and was never delivered.
- ``duplicated``: delivered again after a delivery whose ack succeeded (a
  redelivery after a failed ack is at-least-once working, counted apart as
  ``redelivered``).
- ``out_of_order`` (fifo): per message group, a first delivery of a message
  sent before one delivered earlier.
- ``rolled_back_visible`` (txn): a rolled-back message delivered;
  ``committed_visible``: committed messages delivered.
- ``early`` (timer): a timed message delivered before it was due;
  ``lateness_p99_ms``.
- ``unexpected``: a delivery of a message no producer of this run sent.

Per fault window (from its start to the next fault's), the recovery time:
from the first send that failed or went unknown to the first acked send
started after that failure ended; 0 if nothing failed. And the slowest send
started in the window (a fault that only stalls sends shows there).

Latency percentiles are of acked sends (completed - invoked) and of first
deliveries (delivered - invoked); the series bins acked sends per second.

PURE.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rip5 import stats
from rip5.chaos.history import Delivery, History, Intent, Outcome, Send

SAMPLE_LIMIT = 20
"""How many message ids each finding lists (the counts are exact)."""


def percentile(values: Sequence[float], fraction: float) -> float:
    """:func:`rip5.stats.percentile`, but 0.0 for no values (a report shows a number)."""
    return stats.percentile(values, fraction) if values else 0.0


@dataclass(frozen=True)
class Recovery:
    """One fault window and how long sends stayed failing after it began."""

    fault: str
    target: str
    start_ms: int
    end_ms: int
    first_error_ms: int | None
    recovered_ms: int | None
    recovery_ms: int | None
    """None: failures began and no send succeeded after them within the run."""
    slowest_send_ms: int = 0
    """The longest a send started in the window took (a pause shows here, not as errors)."""


@dataclass(frozen=True)
class SeriesPoint:
    """One second of the run: sends acked in it and their latency."""

    second: int
    acked: int
    failed: int
    latency_p50_ms: float
    latency_p99_ms: float


@dataclass(frozen=True)
class Verdict:
    """Everything a history proves (see the module docstring for each count)."""

    model: str
    invoked: int
    acked: int
    failed: int
    unknown: int
    unknown_stored: int
    consumed: int
    lost: int
    duplicated: int
    redelivered: int
    out_of_order: int
    committed_visible: int
    rolled_back_visible: int
    early: int
    unexpected: int
    lateness_p99_ms: float
    send_latency_ms: dict[str, float]
    e2e_latency_ms: dict[str, float]
    recoveries: tuple[Recovery, ...]
    series: tuple[SeriesPoint, ...]
    samples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No loss, no duplicate, no reordering, nothing visible that must not be."""
        return not (
            self.lost
            or self.duplicated
            or self.out_of_order
            or self.rolled_back_visible
            or self.early
            or self.unexpected
        )

    def as_dict(self) -> dict[str, object]:
        """Every figure by name (JSON-ready)."""
        return {
            "model": self.model,
            "ok": self.ok,
            "invoked": self.invoked,
            "acked": self.acked,
            "failed": self.failed,
            "unknown": self.unknown,
            "unknown_stored": self.unknown_stored,
            "consumed": self.consumed,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "redelivered": self.redelivered,
            "out_of_order": self.out_of_order,
            "committed_visible": self.committed_visible,
            "rolled_back_visible": self.rolled_back_visible,
            "early": self.early,
            "unexpected": self.unexpected,
            "lateness_p99_ms": self.lateness_p99_ms,
            "send_latency_ms": self.send_latency_ms,
            "e2e_latency_ms": self.e2e_latency_ms,
            "recoveries": [r.__dict__ for r in self.recoveries],
            "series": [p.__dict__ for p in self.series],
            "samples": self.samples,
        }


def must_be_visible(send: Send) -> bool:
    """Whether a consumer must eventually get ``send``'s message."""
    if send.outcome is not Outcome.ACKED:
        return False
    if send.intent is Intent.ROLLBACK:
        return False
    if send.intent is Intent.COMMIT:
        return send.ended is Outcome.ACKED
    return True


def _latencies(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 0.50),
        "p90": percentile(values, 0.90),
        "p99": percentile(values, 0.99),
        "max": max(values, default=0.0),
    }


def _sample(ids: Iterable[str]) -> list[str]:
    return sorted(ids)[:SAMPLE_LIMIT]


def out_of_order(sends: Sequence[Send], deliveries: Sequence[Delivery]) -> list[str]:
    """Messages whose first delivery came after that of a later message of their group."""
    sequence = {s.message_id: (s.group, s.sequence) for s in sends if s.group is not None}
    highest: dict[str, int] = {}
    seen: set[str] = set()
    wrong: list[str] = []
    for delivery in sorted(deliveries, key=lambda d: d.at_ms):
        key = sequence.get(delivery.message_id)
        if key is None or delivery.message_id in seen:
            continue
        seen.add(delivery.message_id)
        group, number = key
        assert group is not None
        if number < highest.get(group, -1):
            wrong.append(delivery.message_id)
        highest[group] = max(highest.get(group, -1), number)
    return wrong


def recoveries(sends: Sequence[Send], history: History) -> tuple[Recovery, ...]:
    """Each fault window's recovery time and slowest send (see the module docstring)."""
    faults = sorted(history.faults, key=lambda f: f.start_ms)
    by_invoked = sorted(sends, key=lambda s: s.invoked_ms)
    found: list[Recovery] = []
    for i, fault in enumerate(faults):
        until = faults[i + 1].start_ms if i + 1 < len(faults) else history.end_ms
        during = [s for s in by_invoked if fault.start_ms <= s.invoked_ms < until]
        slowest = max((s.completed_ms - s.invoked_ms for s in during), default=0)
        first_error = next((s for s in during if s.outcome is not Outcome.ACKED), None)
        recovered = (
            None
            if first_error is None
            else min(
                (
                    s.completed_ms
                    for s in by_invoked
                    if s.outcome is Outcome.ACKED and s.invoked_ms >= first_error.completed_ms
                ),
                default=None,
            )
        )
        if first_error is None:
            recovery_ms: int | None = 0
        else:
            recovery_ms = None if recovered is None else recovered - first_error.invoked_ms
        found.append(
            Recovery(
                fault.fault,
                fault.target,
                fault.start_ms,
                fault.end_ms,
                first_error.invoked_ms if first_error is not None else None,
                recovered,
                recovery_ms,
                slowest,
            )
        )
    return tuple(found)


def series(sends: Sequence[Send], start_ms: int, end_ms: int) -> tuple[SeriesPoint, ...]:
    """Per second of the run: sends acked and failed (by completion), latency of the acked."""
    seconds = max(1, (end_ms - start_ms + 999) // 1000)
    latencies: dict[int, list[float]] = defaultdict(list)
    failed: dict[int, int] = defaultdict(int)
    for send in sends:
        second = min(seconds - 1, max(0, (send.completed_ms - start_ms) // 1000))
        if send.outcome is Outcome.ACKED:
            latencies[second].append(float(send.completed_ms - send.invoked_ms))
        else:
            failed[second] += 1
    return tuple(
        SeriesPoint(
            second,
            len(latencies[second]),
            failed[second],
            percentile(latencies[second], 0.50),
            percentile(latencies[second], 0.99),
        )
        for second in range(seconds)
    )


def check(history: History) -> Verdict:
    """Everything ``history`` proves."""
    sends = {s.message_id: s for s in history.sends}
    deliveries_of: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in sorted(history.deliveries, key=lambda d: d.at_ms):
        deliveries_of[delivery.message_id].append(delivery)

    acked = [s for s in history.sends if s.outcome is Outcome.ACKED]
    not_acked = [s for s in history.sends if s.outcome is not Outcome.ACKED]
    unknown_stored = [s.message_id for s in not_acked if s.message_id in deliveries_of]
    lost = [
        s.message_id
        for s in history.sends
        if must_be_visible(s) and s.message_id not in deliveries_of
    ]
    duplicated: list[str] = []
    redelivered: list[str] = []
    for message_id, delivered in deliveries_of.items():
        for earlier, later in itertools.pairwise(delivered):
            del later
            (duplicated if earlier.acked else redelivered).append(message_id)
    unexpected = [m for m in deliveries_of if m not in sends]
    rolled_back = [
        s.message_id
        for s in history.sends
        if s.intent is Intent.ROLLBACK and s.message_id in deliveries_of
    ]
    committed = [
        s.message_id
        for s in history.sends
        if s.intent is Intent.COMMIT and s.message_id in deliveries_of
    ]
    early: list[str] = []
    lateness: list[float] = []
    for send in history.sends:
        if send.intent is not Intent.TIMER or send.due_ms is None:
            continue
        first = deliveries_of.get(send.message_id, [None])[0]
        if first is None:
            continue
        if first.at_ms < send.due_ms:
            early.append(send.message_id)
        lateness.append(float(first.at_ms - send.due_ms))
    wrong_order = out_of_order(history.sends, history.deliveries)
    e2e = [
        float(deliveries_of[s.message_id][0].at_ms - s.invoked_ms)
        for s in acked
        if s.message_id in deliveries_of
    ]
    return Verdict(
        model=history.model,
        invoked=len(history.sends),
        acked=len(acked),
        failed=sum(1 for s in not_acked if s.outcome is Outcome.FAILED),
        unknown=sum(1 for s in not_acked if s.outcome is Outcome.UNKNOWN),
        unknown_stored=len(unknown_stored),
        consumed=sum(1 for m in deliveries_of if m in sends),
        lost=len(lost),
        duplicated=len(duplicated),
        redelivered=len(redelivered),
        out_of_order=len(wrong_order),
        committed_visible=len(committed),
        rolled_back_visible=len(rolled_back),
        early=len(early),
        unexpected=len(unexpected),
        lateness_p99_ms=percentile(lateness, 0.99),
        send_latency_ms=_latencies([float(s.completed_ms - s.invoked_ms) for s in acked]),
        e2e_latency_ms=_latencies(e2e),
        recoveries=recoveries(history.sends, history),
        series=series(history.sends, history.start_ms, history.end_ms),
        samples={
            name: _sample(ids)
            for name, ids in (
                ("lost", lost),
                ("duplicated", duplicated),
                ("out_of_order", wrong_order),
                ("rolled_back_visible", rolled_back),
                ("early", early),
                ("unexpected", unexpected),
                ("unknown_stored", unknown_stored),
            )
            if ids
        },
    )
