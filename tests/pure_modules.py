"""The pure modules: ONE list, the source modules of the import contract ``id = "pure"``
in pyproject.toml (import-linter keeps them free of I/O, clocks and randomness).

The Makefile's ``mypy --strict`` paths come from here (``python -m tests.pure_modules``
prints them); tests/unit/test_pure_modules.py checks the list against what the modules
say of themselves: a module (or package ``__init__``) whose docstring has a paragraph
starting with ``PURE`` is pure, one with a paragraph starting with ``SHELL`` is not.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT_ID = "pure"

_PURE = re.compile(r"(?:\A|\n[ \t]*\n)[ \t]*PURE\b")
_SHELL = re.compile(r"(?:\A|\n[ \t]*\n)[ \t]*SHELL\b")


def _importlinter(root: Path) -> dict[str, object]:
    with (root / "pyproject.toml").open("rb") as f:
        config: dict[str, object] = tomllib.load(f)["tool"]["importlinter"]
    return config


def pure_modules(root: Path = ROOT) -> list[str]:
    """The dotted names (modules or whole packages) the "pure" contract lists."""
    contracts = _importlinter(root)["contracts"]
    assert isinstance(contracts, list)
    for contract in contracts:
        if contract.get("id") == CONTRACT_ID:
            return list(contract["source_modules"])
    raise LookupError(f'pyproject.toml has no import contract with id "{CONTRACT_ID}"')


def root_packages(root: Path = ROOT) -> list[str]:
    """The project's top-level packages (import-linter's root packages)."""
    packages = _importlinter(root)["root_packages"]
    assert isinstance(packages, list)
    return [str(p) for p in packages]


def source_path(module: str, root: Path = ROOT) -> Path:
    """The package directory or the ``.py`` file of a dotted module name."""
    base = root.joinpath(*module.split("."))
    return base if base.is_dir() else base.with_suffix(".py")


def docstring(path: Path) -> str:
    """The docstring of a module file, or of a package directory's ``__init__.py``."""
    if path.is_dir():
        path = path / "__init__.py"
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def declares_pure(doc: str) -> bool:
    """Whether a paragraph of ``doc`` starts with PURE."""
    return _PURE.search(doc) is not None


def declares_shell(doc: str) -> bool:
    """Whether a paragraph of ``doc`` starts with SHELL."""
    return _SHELL.search(doc) is not None


def project_modules(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """Every module of the root packages as (dotted name, file), packages by their
    ``__init__.py``; generated protobuf modules left out."""
    for package in root_packages(root):
        for path in sorted((root / package).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def covers(listed: list[str], module: str) -> bool:
    """Whether ``module`` is listed, or lies in a listed package."""
    return any(module == entry or module.startswith(entry + ".") for entry in listed)


def main() -> None:
    """Print the pure modules' paths, relative to the project root, for mypy --strict."""
    print(" ".join(str(source_path(m).relative_to(ROOT)) for m in pure_modules()))


if __name__ == "__main__":
    main()
