"""``rip5 admin`` for consumers: how times are read and shown, and body previews."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rip5 import admin_consumers, cli

NOW_MS = 1_800_000_000_000


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
    assert admin_consumers.ago(then_ms, NOW_MS) == text


def test_iso_times_are_utc_unless_they_name_a_zone() -> None:
    assert admin_consumers.parse_time_ms("1970-01-01T00:00:01", "--begin", 0) == 1000
    assert admin_consumers.parse_time_ms("1970-01-01T01:00:01+01:00", "--begin", 0) == 1000
    assert admin_consumers.parse_time_ms(None, "--begin", 7) == 7


def test_a_body_preview_is_text_or_hex_and_says_what_it_left_out() -> None:
    assert admin_consumers.body_preview(b"hello") == "hello"
    assert admin_consumers.body_preview(b"\xff\x00") == "ff 00"
    long = admin_consumers.body_preview(b"a" * 300)
    assert long == "a" * 256 + " ... (44 more bytes)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["message", "query", "--topic", "t", "--key", "k", "--begin", "soon"], "--begin: 'soon'"),
        (["group", "reset-offset", "g", "--topic", "t"], "give one of --to"),
        (
            ["group", "reset-offset", "g", "--topic", "t", "--to", "latest", "--to-time", "x"],
            "give one of --to",
        ),
        (["group", "lag", "bad name!"], "bad name!"),
        (["message", "query", "--topic", "bad topic!", "--key", "k"], "bad topic!"),
    ],
)
def test_bad_options_are_refused_before_anything_is_sent(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.main, ["admin", *argv, "--nameserver", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert message in result.output
