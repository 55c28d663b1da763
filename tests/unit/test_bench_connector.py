"""``rip5 bench connector``'s rules file is one the connector takes."""

from __future__ import annotations

from connector.plan import parse_rules
from rip5.bench.connector import GROUP, RULE, _rules


def test_the_bench_rule_copies_east_to_west_from_the_earliest_offset() -> None:
    rules = parse_rules(_rules("127.0.0.1:1001", "127.0.0.1:1002", "bench-connector"))
    rule = rules.rule(RULE)
    assert (rule.source, rule.target, rule.topic, rule.target_topic) == (
        "east", "west", "bench-connector", "bench-connector",
    )  # fmt: skip
    assert (rule.start, rule.group, rule.filter) == ("earliest", GROUP, "*")
    assert rules.clusters["west"].endpoints == ("127.0.0.1:1002",)
