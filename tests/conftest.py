"""Options shared by the whole suite."""

from __future__ import annotations

import contextlib

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--rewrite``: datadriven tests write their actual output into the files."""
    # Another conftest may define it already (after a merge): keep one.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--rewrite",
            action="store_true",
            default=False,
            help="rewrite the expected output of datadriven scenario files",
        )


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """Whether datadriven tests should rewrite their files instead of comparing."""
    return bool(request.config.getoption("--rewrite"))
