"""rip5.units: sizes, durations and ages as people read them."""

from __future__ import annotations

import pytest

from rip5.units import ago, duration_text, size_text

NOW_MS = 1_800_000_000_000


@pytest.mark.parametrize(
    ("size_bytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (10 * 1024, "10 KiB"),
        (64 << 20, "64 MiB"),
        ((1 << 30) + (1 << 29), "1.5 GiB"),
        (5 << 50, "5.0 PiB"),
        (3000 << 50, "3000 PiB"),  # past the last unit: no wrap
    ],
)
def test_sizes_read_in_binary_units(size_bytes: int, text: str) -> None:
    assert size_text(size_bytes) == text


@pytest.mark.parametrize(
    ("duration_ms", "text"),
    [
        (0, "0 ms"),
        (250, "250 ms"),
        (1_000, "1 s"),
        (125_000, "2 min 5 s"),
        (5_400_000, "1 h 30 min"),
        (3 * 86_400_000, "3 d"),
        (86_400_000 + 300_000, "1 d"),  # a skipped unit ends the text
        (90_061_001, "1 d 1 h"),  # two units at most
    ],
)
def test_durations_read_in_their_two_largest_units(duration_ms: int, text: str) -> None:
    assert duration_text(duration_ms) == text


@pytest.mark.parametrize("function", [size_text, duration_text])
def test_a_negative_amount_is_refused(function: object) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        function(-1)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("then_ms", "text"),
    [
        (-1, "-"),
        (NOW_MS, "0 s ago"),
        (NOW_MS - 3_000, "3 s ago"),
        (NOW_MS - 59_999, "59 s ago"),
        (NOW_MS - 120_000, "2 min ago"),
        (NOW_MS - 7_200_000, "2 h ago"),
        (NOW_MS - 3 * 86_400_000, "3 d ago"),
        (NOW_MS + 5_000, "0 s ago"),  # a clock ahead of ours: not in the future
    ],
)
def test_ago_reads_for_people(then_ms: int, text: str) -> None:
    assert ago(then_ms, NOW_MS) == text
