"""A small runner for data-driven scenario files (after cockroachdb/datadriven).

A file is a sequence of test cases::

    # comments and blank lines between cases are kept as they are
    command arg key=value key=(a,b)
    optional input lines
    ----
    expected output
    (ends at the first blank line)

An expected output that itself contains blank lines is fenced by a doubled
separator::

    command
    ----
    ----
    output

    with blank lines
    ----
    ----

``run_file(path, handler, rewrite)`` runs every case through ``handler``
and compares; with ``rewrite`` it writes the actual outputs back instead
(review the diff before committing it). pytest's ``--rewrite`` option sets it.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SEPARATOR = "----"
_ARG = re.compile(r"^([A-Za-z0-9_.\-]+)=(.*)$")


@dataclass
class CmdArg:
    """One argument: ``key``, ``key=value`` or ``key=(v1,v2)``."""

    key: str
    values: list[str] = field(default_factory=list)

    def value(self) -> str:
        """The single value (raises if there is not exactly one)."""
        if len(self.values) != 1:
            raise ValueError(f"argument {self.key} needs exactly one value, has {self.values}")
        return self.values[0]


@dataclass
class TestData:
    """One case: where it is, its command line, input and expected output."""

    __test__ = False  # not a pytest test class

    pos: str
    cmd: str
    args: list[CmdArg]
    input: str
    expected: str

    def has_arg(self, key: str) -> bool:
        """True if an argument named ``key`` is present."""
        return any(arg.key == key for arg in self.args)

    def arg(self, key: str, default: str | None = None) -> str:
        """The single value of ``key`` (or ``default`` if absent)."""
        for arg in self.args:
            if arg.key == key:
                return arg.value()
        if default is None:
            raise ValueError(f"{self.pos}: {self.cmd} needs {key}=")
        return default

    def int_arg(self, key: str, default: int | None = None) -> int:
        """The single value of ``key`` as an int (or ``default`` if absent)."""
        if not self.has_arg(key):
            if default is None:
                raise ValueError(f"{self.pos}: {self.cmd} needs {key}=")
            return default
        return int(self.arg(key))

    def arg_values(self, key: str) -> list[str]:
        """Every value of ``key`` (empty if absent)."""
        for arg in self.args:
            if arg.key == key:
                return arg.values
        return []

    def positional(self) -> list[str]:
        """Arguments without a value, in order."""
        return [arg.key for arg in self.args if not arg.values]


def parse_args(text: str) -> list[CmdArg]:
    """Split a command line's arguments."""
    args: list[CmdArg] = []
    for token in shlex.split(text):
        match = _ARG.match(token)
        if match is None:
            args.append(CmdArg(token))
            continue
        key, raw = match.group(1), match.group(2)
        if raw.startswith("(") and raw.endswith(")"):
            inner = raw[1:-1].strip()
            values = [v.strip() for v in inner.split(",")] if inner else []
        else:
            values = [raw]
        args.append(CmdArg(key, values))
    return args


@dataclass
class _Chunk:
    """Either verbatim text between cases or one case."""

    text: str = ""
    case: TestData | None = None
    fenced: bool = False


def _parse(path: Path) -> list[_Chunk]:
    lines = path.read_text().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    chunks: list[_Chunk] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            chunks.append(_Chunk(text=line))
            i += 1
            continue
        start = i + 1
        command_line = line
        i += 1
        input_lines: list[str] = []
        while i < len(lines) and lines[i] != SEPARATOR:
            input_lines.append(lines[i])
            i += 1
        if i >= len(lines):
            raise ValueError(f"{path}:{start}: command without a {SEPARATOR} line")
        i += 1
        fenced = i < len(lines) and lines[i] == SEPARATOR
        output: list[str] = []
        if fenced:
            i += 1
            while i + 1 < len(lines) and not (lines[i] == SEPARATOR and lines[i + 1] == SEPARATOR):
                output.append(lines[i])
                i += 1
            i += 2
        else:
            while i < len(lines) and lines[i].strip():
                output.append(lines[i])
                i += 1
        cmd, _, rest = command_line.partition(" ")
        case = TestData(
            pos=f"{path.name}:{start}",
            cmd=cmd,
            args=parse_args(rest),
            input="\n".join(input_lines),
            expected="\n".join(output),
        )
        chunks.append(_Chunk(text=command_line, case=case, fenced=fenced))
    return chunks


def _format_case(case: TestData, command_line: str, output: str) -> list[str]:
    lines = [command_line]
    if case.input:
        lines.extend(case.input.split("\n"))
    lines.append(SEPARATOR)
    body = output.rstrip("\n")
    if any(not line.strip() for line in body.split("\n")) and body:
        lines.append(SEPARATOR)
        lines.extend(body.split("\n"))
        lines.append(SEPARATOR)
        lines.append(SEPARATOR)
    elif body:
        lines.extend(body.split("\n"))
    return lines


def run_file(path: Path, handler: Callable[[TestData], str], rewrite: bool = False) -> None:
    """Run every case of ``path``; raise AssertionError on the first mismatch."""
    chunks = _parse(path)
    out_lines: list[str] = []
    for chunk in chunks:
        if chunk.case is None:
            out_lines.append(chunk.text)
            continue
        actual = handler(chunk.case).rstrip("\n")
        if rewrite:
            out_lines.extend(_format_case(chunk.case, chunk.text, actual))
            continue
        if actual != chunk.case.expected:
            diff = "\n".join(
                difflib.unified_diff(
                    chunk.case.expected.split("\n"),
                    actual.split("\n"),
                    "expected",
                    "actual",
                    lineterm="",
                )
            )
            raise AssertionError(f"{chunk.case.pos}: {chunk.text}\n{diff}")
    if rewrite:
        path.write_text("\n".join(out_lines) + "\n")
