"""rip5: the launcher. One CLI with a subcommand per role, the process shell
every role runs inside, and the `rip5 dev` supervisor.

Roles are libraries; this package is their shell. It may import any role,
and no role imports it (enforced by import-linter, see pyproject.toml).
"""

__version__ = "0.1.0"
