"""Shared pytest options, and the lock that runs ``alone`` tests by themselves."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
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


# The test files that use the one Spark session (the ``spark`` fixture): under
# ``pytest -n N`` they run on one worker, so the run starts one JVM.
SPARK_FILES = frozenset(
    {
        "tests/integration/test_bench_spark.py",
        "tests/integration/test_spark.py",
        "tests/integration/test_spark_stream.py",
    }
)


def scope_of(nodeid: str) -> str:
    """The unit of work ``pytest -n N`` gives one worker: a test's file (its
    module-scoped cluster starts once), or "spark" for every file of :data:`SPARK_FILES`."""
    path = nodeid.split("::", 1)[0]
    return "spark" if path in SPARK_FILES else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that uses the Spark session outside :data:`SPARK_FILES`: under
    workers it would start a second JVM."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if "spark" in getattr(item, "fixturenames", ()) and path not in SPARK_FILES:
            raise pytest.UsageError(f"{path} uses the spark fixture: add it to SPARK_FILES")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``pytest -n N``: schedule by :func:`scope_of` (xdist's own ``loadgroup``
    marks do nothing under pytest 9, whose node ids ignore the suffix xdist sets)."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByFileSparkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByFileSparkTogether(config, log)


@contextlib.contextmanager
def _slot(alone: bool) -> Iterator[None]:
    """Under ``pytest -n N``: hold the workers' shared slot for a test, or the whole
    slot for a test marked ``alone``, so an ``alone`` test never runs beside another test.

    A readers-writer lock on two files that every worker of this run opens (flock locks
    of separate opens exclude each other across processes). An ``alone`` test takes the
    turnstile, then waits until no test holds the slot; while it holds the turnstile no
    new test can take the slot, so it cannot starve. Without workers this does nothing.
    """
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        yield
        return
    folder = Path(tempfile.gettempdir())
    with (
        (folder / f"rip5-tests-{run_id}.turnstile").open("a") as turnstile,
        (folder / f"rip5-tests-{run_id}.slot").open("a") as slot,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(slot, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(slot, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(slot, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Set-up, call and tear-down of each test inside its slot (see :func:`_slot`): a
    module's cluster fixture starts in its first test's set-up and stops in its last
    test's tear-down, so an ``alone`` module's clusters are covered too."""
    with _slot(item.get_closest_marker("alone") is not None):
        return (yield)


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
