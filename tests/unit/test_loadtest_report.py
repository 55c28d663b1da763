"""Reading Locust's CSV files, and the named scenarios."""

from __future__ import annotations

from loadtest.report import parse_failures, parse_stats
from loadtest.scenarios import SCENARIOS

STATS = """Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,\
Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,\
90%,95%,98%,99%,99.9%,99.99%,100%
grpc,SendMessage normal,179,2,19,20.7,4.3,132.7,1024.0,89.4,0.0,19,22,22,23,27,33,50,130,130,130,130
,Aggregated,658,2,19,23.2,3.3,211.7,7804.5,328.6,0.0,19,22,24,26,39,60,78,120,210,210,210
"""
FAILURES = """Method,Name,Error,Occurrences,First Seen,Last Seen
grpc,SendMessage normal,CallFailed(UNAVAILABLE),2,1,2
"""


def test_stats_rows() -> None:
    normal, total = parse_stats(STATS)
    assert (normal.request_type, normal.name, normal.requests, normal.failures) == (
        "grpc",
        "SendMessage normal",
        179,
        2,
    )
    assert normal.p99_ms == 130
    assert normal.requests_per_s == 89.4
    assert total.name == "Aggregated"
    assert total.median_ms == 19


def test_failures_by_request_and_error() -> None:
    assert parse_failures(FAILURES) == {"SendMessage normal: CallFailed(UNAVAILABLE)": 2}


def test_scenarios_name_existing_users() -> None:
    users = {"NormalProducer", "FifoProducer", "BatchProducer", "Consumer"}
    for name, scenario in SCENARIOS.items():
        assert scenario.name == name
        assert set(scenario.user_classes) <= users
        assert scenario.users >= len(scenario.user_classes)
