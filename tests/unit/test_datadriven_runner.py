"""tests/_datadriven.py: parsing, comparing and rewriting scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._datadriven import TestData, parse_command, run_file

FILE = """# a comment
echo a=1 b=(x, y) flag
line one
----
stale

echo a=2
----
old
"""


def _handler(d: TestData) -> str:
    return f"{d.cmd} a={d.int_arg('a')} b={d.list_arg('b')} flag={d.has('flag')} in={d.input}"


def test_parse_command() -> None:
    assert parse_command("cmd k=v l=(1,2) e=() f") == (
        "cmd",
        {"k": ["v"], "l": ["1", "2"], "e": [], "f": []},
    )
    with pytest.raises(ValueError, match="empty"):
        parse_command("   ")


def test_rewrite_then_compare(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text(FILE)
    with pytest.raises(AssertionError, match=r"s\.txt:2: echo"):
        run_file(path, _handler, rewrite=False)
    run_file(path, _handler, rewrite=True)
    text = path.read_text()
    assert text.startswith("# a comment\necho a=1 b=(x, y) flag\nline one\n----\n")
    assert "echo a=1 b=['x', 'y'] flag=True in=['line one']\n\necho a=2\n" in text
    assert text.endswith("echo a=2 b=[] flag=False in=[]\n")
    run_file(path, _handler, rewrite=False)


def test_malformed_files_and_outputs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("cmd\nno separator\n")
    with pytest.raises(ValueError, match="no ----"):
        run_file(path, _handler, rewrite=False)
    path.write_text("cmd\n----\n")
    with pytest.raises(ValueError, match="blank lines"):
        run_file(path, lambda d: "a\n\nb", rewrite=False)


def test_argument_helpers() -> None:
    d = TestData("f:1", "c", {"n": ["3"], "two": ["a", "b"]}, [], "")
    assert d.int_arg("n") == 3
    assert d.int_arg("missing", 7) == 7
    assert d.arg("missing", "x") == "x"
    with pytest.raises(ValueError, match="needs missing="):
        d.arg("missing")
    with pytest.raises(ValueError, match="takes one value"):
        d.arg("two")
