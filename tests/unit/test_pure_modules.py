"""The one list of pure modules (the import contract "pure" in pyproject.toml) agrees
with what the modules declare, and the Makefile's mypy --strict list is derived from it."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.pure_modules import (
    ROOT,
    covers,
    declares_pure,
    declares_shell,
    docstring,
    project_modules,
    pure_modules,
    source_path,
)


def test_every_listed_module_exists_and_declares_itself_pure() -> None:
    listed = pure_modules()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    missing = [m for m in listed if not source_path(m).exists()]
    assert missing == [], f"listed as pure but not found: {missing}"
    undeclared = [m for m in listed if not declares_pure(docstring(source_path(m)))]
    assert undeclared == [], f"listed as pure, but their docstrings do not say PURE: {undeclared}"


def test_every_module_declaring_itself_pure_is_listed() -> None:
    listed = pure_modules()
    unlisted = [
        module
        for module, path in project_modules()
        if declares_pure(docstring(path)) and not covers(listed, module)
    ]
    assert unlisted == [], (
        f"these docstrings say PURE but the import contract 'pure' does not list them: {unlisted}"
    )


def test_no_listed_module_declares_itself_a_shell() -> None:
    listed = pure_modules()
    shells = [
        module
        for module, path in project_modules()
        if covers(listed, module) and declares_shell(docstring(path))
    ]
    assert shells == [], f"listed (or inside a listed package) as pure, but say SHELL: {shells}"


def test_a_package_listed_whole_declares_itself_pure() -> None:
    packages = [m for m in pure_modules() if source_path(m).is_dir()]
    assert packages, "the list names no package (the check below would be vacuous)"
    assert all((source_path(m) / "__init__.py").exists() for m in packages)


def test_the_declarations_are_read_by_paragraph() -> None:
    assert declares_pure("The codec.\n\nPURE.")
    assert declares_pure("PURE: time comes in as now_ms.")
    assert declares_pure("The store.\n\n  PURE (the whole package).")
    assert not declares_pure("Nothing here does I/O: PURE.")
    assert not declares_pure("- ``MemoryStore`` (PURE): keeps every entry")
    assert declares_shell("The driver.\n\nSHELL: the only place with a clock.")
    assert not declares_shell("A view of the SHELL's state.")


def test_the_makefile_takes_its_strict_list_from_the_contract() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    definitions = re.findall(r"^PURE\s*\??=\s*(.*)$", makefile, re.M)
    assert definitions == ["$(shell $(BIN)/python -m tests.pure_modules)"]
    assert "mypy --strict $(PURE)" in makefile
    printed = subprocess.run(
        [sys.executable, "-m", "tests.pure_modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert printed == [str(source_path(m).relative_to(ROOT)) for m in pure_modules()]
    assert all((ROOT / path).exists() for path in printed)
