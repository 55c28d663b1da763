"""``rip5 chaos``: the command group (``run``, ``matrix``).

SHELL.
"""

from __future__ import annotations

import click

from rip5.chaos.matrix import matrix_command
from rip5.chaos.run import run_command


@click.group()
def chaos() -> None:
    """Fault suite: run producers and consumers under faults and check what was lost."""


chaos.add_command(run_command)
chaos.add_command(matrix_command)
