"""The dashboard reads a connector's rules from its metrics text (rip5/dashboard/cluster.py
``connector_rules``), here the text of the connector's own metric set."""

from __future__ import annotations

from prometheus_client import generate_latest

from connector.runner import Metrics
from rip5.dashboard.cluster import ConnectorRule, connector_rules


def test_each_rule_gets_its_figures_and_unreported_ones_are_zero() -> None:
    metrics = Metrics()
    metrics.messages.labels("b-rule").inc(3)
    metrics.bytes.labels("b-rule").inc(300)
    metrics.lag.labels("b-rule").set(4)
    metrics.delay.labels("b-rule").set(12)
    metrics.last_sync.labels("b-rule").set(1_700_000_000_000)
    metrics.errors.labels("a-rule").inc()
    text = generate_latest(metrics.registry).decode()
    assert connector_rules("c:9", text) == [
        ConnectorRule("c:9", "a-rule", errors=1),
        ConnectorRule("c:9", "b-rule", 3, 300, 4, 12, 1_700_000_000_000, 0),
    ]


def test_other_series_are_ignored() -> None:
    text = "# TYPE up gauge\nup 1\n# TYPE rip5_connector_lag_messages gauge\n"
    text += "rip5_connector_lag_messages 5\n"  # no rule label
    assert connector_rules("c:9", text) == []
