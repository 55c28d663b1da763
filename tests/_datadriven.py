"""A small runner for datadriven scenario files (after etcd-io/raft's testdata).

A file is a sequence of blocks::

    # comments and blank lines between blocks are kept as they are
    command key=value list=(a,b,c) flag
    optional input lines
    ----
    expected output (no blank lines)
    <blank line or end of file>

The handler gets each block as :class:`TestData` and returns the actual
output. With ``pytest --rewrite`` the expected sections are replaced by the
actual ones (review the diff before committing); otherwise the first
mismatch fails the test, naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = "----"
_TOKEN = re.compile(r"(\S+?=\([^)]*\)|\S+)")


@dataclass
class TestData:
    """One block: the command, its arguments, input lines and expected output."""

    __test__ = False  # not a pytest test class

    pos: str
    cmd: str
    args: dict[str, list[str]]
    input: list[str]
    expected: str

    def has(self, key: str) -> bool:
        """Whether the argument was given."""
        return key in self.args

    def arg(self, key: str, default: str | None = None) -> str:
        """The argument's single value (``default`` if absent and given)."""
        values = self.args.get(key)
        if values is None:
            if default is None:
                raise ValueError(f"{self.pos}: {self.cmd} needs {key}=")
            return default
        if len(values) != 1:
            raise ValueError(f"{self.pos}: {key} takes one value, got {values}")
        return values[0]

    def int_arg(self, key: str, default: int | None = None) -> int:
        """The argument as an int."""
        if key not in self.args and default is not None:
            return default
        return int(self.arg(key))

    def list_arg(self, key: str) -> list[str]:
        """The argument's values (``key=(a,b)`` or ``key=a``); empty if absent."""
        return self.args.get(key, [])


def parse_command(line: str) -> tuple[str, dict[str, list[str]]]:
    """``cmd k=v k=(a,b) flag`` -> ("cmd", {"k": [...], "flag": []})."""
    tokens = _TOKEN.findall(line)
    if not tokens:
        raise ValueError("empty command line")
    args: dict[str, list[str]] = {}
    for token in tokens[1:]:
        key, eq, value = token.partition("=")
        if not eq:
            args[key] = []
        elif value.startswith("(") and value.endswith(")"):
            inner = value[1:-1]
            args[key] = [v.strip() for v in inner.split(",")] if inner.strip() else []
        else:
            args[key] = [value]
    return tokens[0], args


def run_file(path: Path, handler: Callable[[TestData], str], *, rewrite: bool) -> None:
    """Run every block of ``path`` through ``handler`` in order."""
    lines = path.read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            out.append(line)
            i += 1
            continue
        start = i
        block_input: list[str] = []
        i += 1
        while i < len(lines) and lines[i] != SEPARATOR:
            block_input.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path.name}:{start + 1}: no {SEPARATOR} after the command")
        i += 1
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        cmd, args = parse_command(line)
        data = TestData(f"{path.name}:{start + 1}", cmd, args, block_input, "\n".join(expected))
        actual = handler(data).rstrip("\n")
        if any(not row.strip() for row in actual.split("\n")):
            raise ValueError(f"{data.pos}: output has blank lines:\n{actual}")
        if not rewrite and actual != data.expected:
            raise AssertionError(
                f"{data.pos}: {line}\n--- expected\n{data.expected}\n--- actual\n{actual}"
            )
        out.extend([line, *block_input, SEPARATOR, *actual.split("\n")])
    if rewrite:
        path.write_text("\n".join(out) + "\n")
