"""``python -m rip5`` is the ``rip5`` command."""

from rip5.cli import main

main(prog_name="rip5")
