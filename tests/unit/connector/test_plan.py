"""The connector's rules file, reload plan, queue mapping and offset translation."""

from __future__ import annotations

import pytest

from connector.plan import (
    RESEND_SAFE_MS,
    Mark,
    Pending,
    RulesError,
    first_pending,
    format_mark,
    format_pending,
    last_pending,
    parse_marks,
    parse_rules,
    plan_reload,
    resend_unsafe,
    target_queue,
    target_type,
    translate,
)
from protocol.routing import group_queue_index
from protocol.vocabulary import MessageType

GOOD = """\
[clusters.east]
endpoints = ["127.0.0.1:8081"]      # brokers' client endpoints (gRPC v2)
[clusters.west]
endpoints = ["127.0.0.1:8091", "127.0.0.1:8092"]

[[rules]]
name = "orders"                     # unique; names metrics and checkpoints
from = "east"
to = "west"
topic = "Orders"
target_topic = "OrdersCopy"         # optional, default: the same name
filter = "TagA || TagB"             # optional tag expression, default "*"
start = "latest"                    # "latest" (default) or "earliest"

[[rules]]
name = "audit"
from = "west"
to = "east"
topic = "Audit"
owner = "ops"                       # more keys are allowed
"""


def test_the_issue_example_parses_with_its_defaults() -> None:
    rules = parse_rules(GOOD, "rules.toml")
    assert rules.clusters["west"].endpoints == ("127.0.0.1:8091", "127.0.0.1:8092")
    orders, audit = rules.rules
    assert (orders.name, orders.source, orders.target) == ("orders", "east", "west")
    assert (orders.topic, orders.target_topic) == ("Orders", "OrdersCopy")
    assert orders.filter == "TagA||TagB"
    assert orders.start == "latest"
    assert orders.group == "connector-orders"
    assert (audit.target_topic, audit.filter, audit.start) == ("Audit", "*", "latest")


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "problem"),
    [
        ('start = "latest"', 'start = "soon"', 13, "rules[0] (orders).start", "'soon' is not"),
        ('to = "west"', 'to = "north"', 9, "rules[0] (orders).to", "no cluster 'north'"),
        ('name = "audit"', 'name = "orders"', 16, "rules[1] (orders).name", "a second rule"),
        ('topic = "Audit"', 'topic = "Au dit"', 19, "rules[1] (audit).topic", "not a topic"),
        ('topic = "Audit"', "topic = 7", 19, "rules[1] (audit).topic", "must be a string"),
        ('"127.0.0.1:8081"', '"127.0.0.1"', 2, "clusters.east.endpoints", "not host:port"),
        (
            'topic = "Audit"\n',
            'topic = "Audit"\ncreate = true\n',
            20,
            "rules[1] (audit).create",
            "needs the nameservers of cluster 'east'",
        ),
        (
            'topic = "Audit"\n',
            'topic = "Audit"\ncreate = "yes"\n',
            20,
            "rules[1] (audit).create",
            "must be true or false",
        ),
        (
            '"127.0.0.1:8081"]',
            '"127.0.0.1:8081"]\nnameservers = ["ns"]',
            3,
            "clusters.east.nameservers",
            "'ns' is not host:port",
        ),
    ],
)
def test_a_bad_value_is_refused_with_its_line_and_key(
    old: str, new: str, line: int, key: str, problem: str
) -> None:
    text = GOOD.replace(old, new, 1)
    with pytest.raises(RulesError) as caught:
        parse_rules(text, "rules.toml")
    assert (caught.value.line, caught.value.key) == (line, key)
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"rules.toml line {line}, key '{key}': ")


def test_a_missing_key_names_the_rule_table_line() -> None:
    text = GOOD.replace('from = "west"\n', "")
    with pytest.raises(RulesError) as caught:
        parse_rules(text, "rules.toml")
    assert (caught.value.line, caught.value.key) == (15, "rules[1] (audit).from")
    assert caught.value.problem == "is required"


def test_a_syntax_error_names_its_line() -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(GOOD.replace('topic = "Orders"', "topic = Orders"), "rules.toml")
    assert caught.value.line == 10
    assert "not valid TOML" in caught.value.problem


def test_a_file_without_rules_or_clusters_is_refused() -> None:
    with pytest.raises(RulesError, match=r"no \[\[rules\]\] table"):
        parse_rules(GOOD.split("[[rules]]", maxsplit=1)[0])
    with pytest.raises(RulesError, match=r"no \[clusters\.NAME\] table"):
        parse_rules("[[rules]]\nname = 'x'\n")


def test_a_reload_sees_added_removed_changed_and_kept_rules() -> None:
    old = parse_rules(GOOD)
    new_text = (
        GOOD.replace('filter = "TagA || TagB"', 'filter = "TagC"').replace(
            'name = "audit"', 'name = "audit2"'
        )
        + '\n[[rules]]\nname = "more"\nfrom = "east"\nto = "west"\ntopic = "More"\n'
    )
    plan = plan_reload(old, parse_rules(new_text))
    assert plan.changed == ("orders",)
    assert plan.added == ("audit2", "more")
    assert plan.removed == ("audit",)
    assert plan.kept == ()
    moved = GOOD.replace('"127.0.0.1:8081"', '"127.0.0.1:9081"')  # audit writes to east
    assert plan_reload(old, parse_rules(moved)).changed == ("orders", "audit")
    assert plan_reload(old, parse_rules(GOOD)).kept == ("orders", "audit")


def test_source_queues_map_to_stable_target_queues_and_groups_follow_their_hash() -> None:
    assert [target_queue(i, None, [2, 0, 1]) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    for group in ("g1", "g2", "orders-42"):
        expected = [0, 1, 2, 3][group_queue_index(group, 4)]
        assert {target_queue(i, group, [3, 2, 1, 0]) for i in range(5)} == {expected}
    with pytest.raises(ValueError, match="no writable queue"):
        target_queue(0, None, [])


def test_marks_round_trip_and_a_torn_line_is_skipped() -> None:
    marks = [Mark(0, 5, 1, 100), Mark(1, 7, 0, 3)]
    text = "# east Orders -> west OrdersCopy\n" + "".join(map(format_mark, marks)) + "2 9 1"
    assert parse_marks(text) == marks


def test_translate_resumes_at_the_last_mark_at_or_before_the_committed_offset() -> None:
    # Source queue 0 -> target queue 0 (batches at source 0, 32, 64 -> target 10, 42, 74);
    # source queue 1 -> target queue 1 (source 5 -> 0, source 40 -> 35),
    # and a FIFO group of source queue 1 landed in target queue 0 at 50.
    marks = [
        Mark(0, 0, 0, 10),
        Mark(0, 32, 0, 42),
        Mark(0, 64, 0, 74),
        Mark(1, 5, 1, 0),
        Mark(1, 40, 1, 35),
        Mark(1, 41, 0, 50),
    ]
    assert translate(marks, {0: 64, 1: 41}) == {0: 50, 1: 35}
    assert translate(marks, {0: 40, 1: 60}) == {0: 42, 1: 35}
    # A group behind the connector's first copy starts at the first copies.
    assert translate(marks, {}) == {0: 10, 1: 0}
    assert translate([], {0: 3}) == {}


def test_the_last_pending_send_of_each_queue_is_read_back() -> None:
    text = (
        "# east Orders -> west OrdersCopy\n"
        + format_pending(Pending(0, 0, 1_000))
        + format_mark(Mark(0, 0, 1, 100))
        + format_pending(Pending(0, 32, 2_000))
        + format_pending(Pending(1, 5, 2_500))
        + "P 1 9"  # torn
    )
    assert last_pending(text) == {0: Pending(0, 32, 2_000), 1: Pending(1, 5, 2_500)}
    assert parse_marks(text) == [Mark(0, 0, 1, 100)]
    # From the checkpoints: the last send at each (later ones followed it), else the
    # first past it (filtered-out messages moved the position before a send).
    resent = (
        text.removesuffix("P 1 9")
        + format_pending(Pending(0, 0, 3_000))
        + format_pending(Pending(1, 7, 3_100))
    )
    assert first_pending(resent, {0: 0, 1: 5}) == {0: Pending(0, 0, 3_000), 1: Pending(1, 5, 2_500)}
    past = {0: Pending(0, 32, 2_000), 1: Pending(1, 7, 3_100)}
    assert first_pending(resent, {0: 1, 1: 6}) == past
    assert first_pending(resent, {0: 64, 1: 9}) == {}


def test_a_resend_is_unsafe_only_for_an_unfinished_batch_older_than_the_safe_span() -> None:
    pending = Pending(0, 32, 1_000)
    assert resend_unsafe(pending, 32, 1_000 + RESEND_SAFE_MS, RESEND_SAFE_MS)
    assert not resend_unsafe(pending, 32, 999 + RESEND_SAFE_MS, RESEND_SAFE_MS)
    assert not resend_unsafe(pending, 64, 10**12, RESEND_SAFE_MS)  # that batch was committed
    assert not resend_unsafe(None, 32, 10**12, RESEND_SAFE_MS)
    assert RESEND_SAFE_MS == 90_000  # 2 minutes of dedup window less 30 s of clock skew


def test_create_takes_the_target_clusters_nameservers() -> None:
    text = GOOD.replace(
        '"127.0.0.1:8081"]',
        '"127.0.0.1:8081"]\nnameservers = ["127.0.0.1:9876"]\nstorage_cluster = "east-store"',
        1,
    ).replace('topic = "Audit"\n', 'topic = "Audit"\ncreate = true\n')
    rules = parse_rules(text, "rules.toml")
    east = rules.clusters["east"]
    assert (east.nameservers, east.storage_cluster) == (("127.0.0.1:9876",), "east-store")
    assert rules.clusters["west"].nameservers == ()
    assert rules.clusters["west"].storage_cluster == "DefaultCluster"
    assert (rules.rule("audit").create, rules.rule("orders").create) == (True, False)


def test_a_created_target_topic_takes_the_sources_kind_of_messages() -> None:
    assert target_type(frozenset({MessageType.FIFO})) is MessageType.FIFO
    assert target_type(frozenset({MessageType.DELAY, MessageType.NORMAL})) is MessageType.DELAY
    assert target_type(frozenset({MessageType.TRANSACTION})) is MessageType.NORMAL
    assert target_type(frozenset()) is MessageType.NORMAL
