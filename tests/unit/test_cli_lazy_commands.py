"""The CLI's lazy subcommands: each resolves to the command it names, and parsing the
CLI (every process start does) imports none of them."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from rip5.cli import LazyGroup, main


def _lazy_groups(group: click.Group, ctx: click.Context) -> list[tuple[click.Context, LazyGroup]]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, LazyGroup):
            found.append((click.Context(command, parent=ctx, info_name=name), command))
    return found


def test_every_lazy_subcommand_resolves_to_a_command_of_its_name() -> None:
    root = click.Context(main, info_name="rip5")
    groups = [(root, main), *_lazy_groups(main, root)]
    names = {(group.name, name) for _ctx, group in groups for name in group.lazy_commands}
    assert ("admin", "topic") in names
    assert ("connector", "translate") in names
    for ctx, group in groups:
        for name in group.lazy_commands:
            command = group.get_command(ctx, name)
            assert isinstance(command, click.Command), (group.name, name)
            assert command.name == name, (group.name, name, command.name)


def test_the_admin_group_command_carries_the_consumer_subcommands() -> None:
    root = click.Context(main, info_name="rip5")
    admin = main.get_command(root, "admin")
    assert isinstance(admin, click.Group)
    group = admin.get_command(click.Context(admin, parent=root), "group")
    assert isinstance(group, click.Group)
    assert {"lag", "reset-offset", "create", "list"} <= set(group.commands)


def test_parsing_the_cli_imports_no_admin_chaos_or_loadtest_module() -> None:
    probe = (
        "import sys, rip5.cli; "
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'rip5.admin', 'rip5.chaos', 'rip5.loadtest', 'rip5.snapshot', "
        "'rip5.connector_commands', 'locust'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_a_lazy_target_that_is_not_a_command_is_refused() -> None:
    group = LazyGroup(name="g", lazy_commands={"x": "rip5.cli:EXIT_CONFIG"})
    ctx = click.Context(group, info_name="g")
    with pytest.raises(TypeError, match=r"rip5\.cli:EXIT_CONFIG is not a click command"):
        group.get_command(ctx, "x")
