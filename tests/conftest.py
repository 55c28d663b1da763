"""Shared pytest options."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--rewrite``: data-driven tests write their actual output back to the files."""
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite the expected output of data-driven scenario files",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group tests for ``pytest -n N --dist loadgroup`` (what ``make test`` runs): a file's
    tests stay on one worker, so its module-scoped cluster starts once; every test that needs
    the one Spark session runs on one worker, so the run starts one JVM."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        group = "spark" if "spark" in fixtures else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """True when the run should rewrite scenario files instead of checking them."""
    return bool(request.config.getoption("--rewrite"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """ONE local Spark session for the whole test run (its JVM takes seconds to start),
    with the ``rip5`` format registered; tasks may fail and be retried (local[2, 3])."""
    from spark_batch.session import spark_session

    session = spark_session("local[2,3]", "rip5 tests")
    yield session
    session.stop()
