"""The dashboard's throughput chart: counter samples in, rates and an SVG out.

The dashboard samples the brokers' ``rocketmq_messages_in_total`` and
``rocketmq_messages_out_total`` (summed over every series and broker) every few
seconds; :class:`Throughput` keeps the last samples and turns consecutive ones
into rates. A sum that went down (a broker restarted, its counters at zero) is
counted from zero, as Prometheus' ``rate`` does. :func:`svg_chart` draws the
rates as two polylines, server-side (no script in the page).

PURE.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

SAMPLES_KEPT = 150
"""How many samples the chart spans (5 minutes at the default 2 s)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The brokers' message counters at ``at_ms``."""

    at_ms: int
    messages_in: float
    messages_out: float


@dataclass(frozen=True, slots=True)
class Rate:
    """Messages per second in and out over the interval ending at ``at_ms``."""

    at_ms: int
    in_per_s: float
    out_per_s: float


def _increase(before: float, after: float) -> float:
    return after - before if after >= before else after


class Throughput:
    """The last :data:`SAMPLES_KEPT` samples."""

    def __init__(self, kept: int = SAMPLES_KEPT) -> None:
        """Keep ``kept`` samples (at least two make a rate)."""
        if kept < 2:
            raise ValueError(f"a chart needs at least 2 samples, not {kept}")
        self._samples: deque[Sample] = deque(maxlen=kept)

    def add(self, sample: Sample) -> None:
        """Record a sample; one not later than the last is ignored."""
        if self._samples and sample.at_ms <= self._samples[-1].at_ms:
            return
        self._samples.append(sample)

    def rates(self) -> list[Rate]:
        """The rate over each interval between consecutive samples, oldest first."""
        samples = list(self._samples)
        found: list[Rate] = []
        for before, after in itertools.pairwise(samples):
            seconds = (after.at_ms - before.at_ms) / 1000
            found.append(
                Rate(
                    after.at_ms,
                    _increase(before.messages_in, after.messages_in) / seconds,
                    _increase(before.messages_out, after.messages_out) / seconds,
                )
            )
        return found


def _points(values: list[float], top: float, width: int, height: int) -> str:
    if len(values) == 1:
        values = values * 2
    step = width / (len(values) - 1)
    return " ".join(
        f"{index * step:.1f},{height - (value / top) * height:.1f}"
        for index, value in enumerate(values)
    )


def svg_chart(rates: list[Rate], width: int = 720, height: int = 160) -> str:
    """An SVG of the in (blue) and out (green) rates, scaled to the highest one; a note
    instead while there are none."""
    if not rates:
        return (
            f'<svg class="chart" width="{width}" height="{height}" role="img">'
            f'<text x="10" y="{height // 2}">waiting for two samples of the brokers\' '
            "metrics</text></svg>"
        )
    top = max(*(r.in_per_s for r in rates), *(r.out_per_s for r in rates), 1.0)
    span_s = (rates[-1].at_ms - rates[0].at_ms) // 1000
    in_points = _points([r.in_per_s for r in rates], top, width, height)
    out_points = _points([r.out_per_s for r in rates], top, width, height)
    return (
        f'<svg class="chart" width="{width}" height="{height + 20}" role="img" '
        f'aria-label="messages per second, in and out">'
        f'<polyline class="in" fill="none" stroke="#1f6feb" stroke-width="2" '
        f'points="{in_points}"/>'
        f'<polyline class="out" fill="none" stroke="#2da44e" stroke-width="2" '
        f'points="{out_points}"/>'
        f'<text x="4" y="12">{top:.0f} msg/s</text>'
        f'<text x="4" y="{height + 16}">last {span_s} s: in {rates[-1].in_per_s:.1f}/s '
        f"(blue), out {rates[-1].out_per_s:.1f}/s (green)</text></svg>"
    )
