"""Shared pytest options."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--rewrite``: data-driven tests write their actual output back to the files."""
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite the expected output of data-driven scenario files",
    )


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """True when the run should rewrite scenario files instead of checking them."""
    return bool(request.config.getoption("--rewrite"))
