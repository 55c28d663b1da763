"""tests/_datadriven.py: parsing, comparing and rewriting scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._datadriven import CmdArg, TestData, parse_args, run_file

FILE = """# a comment
echo a=1 b=(x,y) flag
line one
----
stale

echo a=2
----
old
"""


def _handler(d: TestData) -> str:
    return (
        f"{d.cmd} a={d.int_arg('a')} b={d.arg_values('b')} flag={d.has_arg('flag')} in={d.input!r}"
    )


def test_parse_args() -> None:
    assert parse_args("k=v l=(1,2) e=() f") == [
        CmdArg("k", ["v"]),
        CmdArg("l", ["1", "2"]),
        CmdArg("e", []),
        CmdArg("f", []),
    ]


def test_rewrite_then_compare(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text(FILE)
    with pytest.raises(AssertionError, match=r"s\.txt:2: echo"):
        run_file(path, _handler, rewrite=False)
    run_file(path, _handler, rewrite=True)
    text = path.read_text()
    assert text.startswith("# a comment\necho a=1 b=(x,y) flag\nline one\n----\n")
    assert "echo a=1 b=['x', 'y'] flag=True in='line one'\n\necho a=2\n" in text
    assert text.endswith("echo a=2 b=[] flag=False in=''\n")
    run_file(path, _handler, rewrite=False)


def test_outputs_with_blank_lines_are_fenced(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("cmd\n----\n")
    run_file(path, lambda d: "a\n\nb", rewrite=True)
    assert path.read_text() == "cmd\n----\n----\na\n\nb\n----\n----\n"
    run_file(path, lambda d: "a\n\nb", rewrite=False)


def test_a_command_without_separator_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("cmd\nno separator\n")
    with pytest.raises(ValueError, match="without a ----"):
        run_file(path, _handler, rewrite=False)


def test_argument_helpers() -> None:
    d = TestData("f:1", "c", [CmdArg("n", ["3"]), CmdArg("two", ["a", "b"])], "", "")
    assert d.int_arg("n") == 3
    assert d.int_arg("missing", 7) == 7
    assert d.arg("missing", "x") == "x"
    with pytest.raises(ValueError, match="needs missing="):
        d.arg("missing")
    with pytest.raises(ValueError, match="needs missing="):
        d.int_arg("missing")
    with pytest.raises(ValueError, match="exactly one value"):
        d.arg("two")
