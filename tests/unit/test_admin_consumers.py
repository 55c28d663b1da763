"""``rip5 admin`` for consumers: how times are read and shown, and body previews."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from angelia_rpc import AngeliaError, errors
from protocol import storage_api as st
from rip5 import admin_consumers, cli
from rip5.admin_storage import ClusterAdmin

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


class _Groups:
    """Raft groups answering a query: each its messages, or a failure."""

    def __init__(self, answers: dict[int, st.QueryMessagesResponse | AngeliaError]) -> None:
        self.answers = answers

    async def group_ids(self) -> list[int]:
        return sorted(self.answers)

    async def call_group(self, group_id: int, method: object) -> st.QueryMessagesResponse:
        answer = self.answers[group_id]
        if isinstance(answer, AngeliaError):
            raise answer
        return answer


def _admin(answers: dict[int, st.QueryMessagesResponse | AngeliaError]) -> ClusterAdmin:
    admin_api = ClusterAdmin(None, None, "c")  # type: ignore[arg-type]
    groups = _Groups(answers)
    admin_api.group_ids = groups.group_ids  # type: ignore[method-assign]
    admin_api.call_group = groups.call_group  # type: ignore[method-assign,assignment]
    return admin_api


def _stored(message_id: str, store_ms: int) -> st.StoredMessage:
    return st.StoredMessage(0, store_ms, st.Message("t", 0, message_id, b""))


def test_a_query_shows_what_the_groups_that_answered_found_and_names_the_others() -> None:
    admin_api = _admin(
        {
            1: st.QueryMessagesResponse([_stored("b", 20)], 5, True),
            2: errors.unavailable("node 3 is down"),
            3: st.QueryMessagesResponse([_stored("a", 10)], 5, False),
        }
    )
    outcome = asyncio.run(admin_api.query_messages(message_id="x"))
    assert [(f.group_id, f.stored.message.message_id) for f in outcome.found] == [
        (3, "a"),
        (1, "b"),
    ]
    assert not outcome.complete  # group 3 ran out of budget
    assert outcome.unanswered == {2: "UNAVAILABLE: node 3 is down"}
    document = admin_consumers.outcome_json(outcome)
    assert document["unanswered_groups"] == {"2": "UNAVAILABLE: node 3 is down"}


def test_a_query_no_group_answered_is_the_first_failure() -> None:
    admin_api = _admin({1: errors.unavailable("down"), 2: errors.unavailable("down too")})
    with pytest.raises(AngeliaError, match="down"):
        asyncio.run(admin_api.query_messages(message_id="x"))
