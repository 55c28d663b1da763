"""``rip5 bench connector``'s rules file is one the connector takes; its delay stages are
read from the connector's log."""

from __future__ import annotations

import io
import json
import logging

from connector.plan import parse_rules
from rip5.bench.connector import GROUP, RULE, _rules, stages_of
from rip5.logs import EventFormatter


def test_the_bench_rule_copies_east_to_west_from_the_earliest_offset() -> None:
    rules = parse_rules(_rules("127.0.0.1:1001", "127.0.0.1:1002", "bench-connector"))
    rule = rules.rule(RULE)
    assert (rule.source, rule.target, rule.topic, rule.target_topic) == (
        "east", "west", "bench-connector", "bench-connector",
    )  # fmt: skip
    assert (rule.start, rule.group, rule.filter) == ("earliest", GROUP, "*")
    assert rules.clusters["west"].endpoints == ("127.0.0.1:1002",)


def test_the_stages_are_read_from_the_connectors_json_log_within_the_window() -> None:
    """The connector's "batch copied" lines, as its log formatter writes them, inside
    the measured window only."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EventFormatter("connector", "json"))
    logger = logging.getLogger("test.bench.stages")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("rule started")
        for delay_ms in (100, 200):
            logger.debug("batch copied", extra={"send_ms": 10, "delay_ms": delay_ms})
    finally:
        logger.removeHandler(handler)
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == [
        "rule started",
        "batch copied",
        "batch copied",
    ]
    assert stages_of(out.getvalue(), 0, 4e9) == {
        "send_ms": [10.0, 10.0],
        "delay_ms": [100.0, 200.0],
    }
    assert stages_of(out.getvalue(), 4e9, 5e9) == {}
