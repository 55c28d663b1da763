"""The ``rip5`` command: one subcommand per role, plus ``dev``, ``admin`` and ``bench``.

Exit codes: 0 done; 1 the process failed while running; 2 bad usage or a
rejected configuration value.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import signal
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import uvloop

from angelia_rpc.config import RpcOptions
from connector.config import ConnectorConfig
from rip5 import __version__
from rip5.config import CommonConfig, ConfigError, OptionSpec, options_of, resolve
from rip5.dev import (
    DevLayout,
    acl_super_user_file,
    dashboard_banner,
    metrics_banner,
    metrics_endpoints,
    plan,
    ready_banner,
    remoting_endpoints,
)
from rip5.roles import ROLES, Role
from rip5.shell import run_role
from rip5.supervisor import Supervisor

EXIT_CONFIG = 2

BENCH_TARGETS = {
    "raft": "[Raft]",
    "angelia": "[Angelia]",
    "storage": "[Storage]",
    "nameserver": "[Nameserver]",
    "e2e": "[Broker]",
    "timer": "[Broker-txn-delay]",
    "sql_filter": "[Consumers]",
    "spark": "[Spark]",
    "remoting": "[Remoting]",
    "connector": "[Connector]",
    "placement": "[Scale]",
    "replication": "[Control plane]",
    "queues": "[Scale]",
    "tier": "[Tiered]",
}


def _fail(message: str, code: int) -> None:
    click.echo(f"rip5: {message}", err=True)
    sys.exit(code)


def _option_decorators(specs: list[OptionSpec], section: str) -> list[Callable[..., Any]]:
    decorators = []
    for spec in specs:
        help_text = (
            f"{spec.help} [default: {spec.default}; "
            f"env {spec.env_var(section)}; allowed: {spec.allowed()}]"
        )
        if spec.type is bool:
            flag = f"{spec.flag}/--no-{spec.flag[2:]}"
            decorators.append(click.option(flag, spec.name, default=None, help=help_text))
        else:
            decorators.append(
                click.option(
                    spec.flag,
                    spec.name,
                    default=None,
                    metavar=spec.type.__name__.upper(),
                    help=help_text,
                )
            )
    return decorators


_RPC_OPTIONS = {spec.name: spec for spec in options_of(RpcOptions)}
"""The role options ``rip5 dev`` passes on to every process: its flags take their
choices and defaults from there."""


def _read_config_file(path: str | None) -> tuple[Mapping[str, Any], str]:
    if not path:
        return {}, "config file"
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle), path
    except FileNotFoundError:
        _fail(f"config file {path} does not exist", EXIT_CONFIG)
    except tomllib.TOMLDecodeError as exc:
        _fail(f"config file {path} is not valid TOML: {exc}", EXIT_CONFIG)
    except OSError as exc:
        _fail(f"config file {path} cannot be read: {exc.strerror}", EXIT_CONFIG)
    raise AssertionError("unreachable")


def load_role_config(
    role: Role, config_path: str | None, flags: Mapping[str, Any]
) -> tuple[CommonConfig, object]:
    """Resolve the common and the role's options from file, environment and flags."""
    document, file_name = _read_config_file(config_path)
    table = document.get(role.name, {})
    if not isinstance(table, dict):
        raise ConfigError(role.name, table, file_name, f"a [{role.name}] table")
    common_names = {spec.name for spec in options_of(CommonConfig)}
    role_names = {spec.name for spec in options_of(role.config_type)}
    unknown = set(table) - common_names - role_names
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(
            f"{role.name}.{key}",
            table[key],
            f"{file_name} [{role.name}]",
            "a known option: " + ", ".join(sorted(common_names | role_names)),
        )
    env = dict(os.environ)
    prefix = f"RIP5_{role.name.upper()}_"
    for var in sorted(env):
        if var.startswith(prefix) and var[len(prefix) :].lower() not in common_names | role_names:
            raise ConfigError(
                var,
                env[var],
                "environment",
                "a known variable: "
                + ", ".join(prefix + name.upper() for name in sorted(common_names | role_names)),
            )
    common = resolve(
        CommonConfig,
        role.name,
        file_name=file_name,
        env=env,
        file_values=table,
        ignore=role_names,
        flags={k: v for k, v in flags.items() if k in common_names},
    )
    config: object = resolve(
        role.config_type,
        role.name,
        file_name=file_name,
        env=env,
        file_values=table,
        ignore=common_names,
        flags={k: v for k, v in flags.items() if k in role_names},
    )
    return common, config


def _role_command(role: Role) -> click.Command:
    def run(config_path: str | None, **flags: Any) -> None:
        try:
            common, config = load_role_config(role, config_path, flags)
        except ConfigError as exc:
            _fail(str(exc), EXIT_CONFIG)
        if isinstance(config, ConnectorConfig):  # a bad rules file is refused before the start
            from rip5 import connector_commands  # noqa: PLC0415 (loaded by the connector only)

            connector_commands.load_rules(config.rules)
        sys.exit(run_role(role.name, role.load_serve(), config, common))

    command: Callable[..., Any] = run
    for decorator in reversed(
        _option_decorators(options_of(CommonConfig) + options_of(role.config_type), role.name)
    ):
        command = decorator(command)
    command = click.option(
        "--config",
        "config_path",
        default=None,
        envvar="RIP5_CONFIG",
        metavar="FILE",
        help=f"TOML file; this role reads its [{role.name}] table [env RIP5_CONFIG]",
    )(command)
    if role.name != "connector":
        return click.command(name=role.name, help=role.summary)(command)

    # The connector also answers questions about its rules: `rip5 connector status|translate`.
    def run_unless_asked(config_path: str | None, **flags: Any) -> None:
        if click.get_current_context().invoked_subcommand is None:
            run(config_path, **flags)

    run_unless_asked.__click_params__ = command.__click_params__  # type: ignore[attr-defined]
    return click.group(
        name=role.name,
        cls=LazyGroup,
        lazy_commands={
            "status": "rip5.connector_commands:status",
            "translate": "rip5.connector_commands:translate_command",
        },
        help=role.summary,
        invoke_without_command=True,
    )(run_unless_asked)


class LazyGroup(click.Group):
    """A command group whose subcommands in ``lazy_commands`` (name ->
    "module:attribute[.attribute]") are imported when run or listed in help, not when
    the group is built.

    Every process start parses this CLI (a storage node, each ``rip5 admin`` call), so
    a command's imports are paid only by the commands that need them.
    """

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand name, the lazy ones included, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand ``cmd_name``, imported now if it is a lazy one."""
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, path = target.partition(":")
        command: Any = importlib.import_module(module_name)
        for attribute in path.split("."):
            command = getattr(command, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(
    cls=LazyGroup,
    lazy_commands={
        "loadtest": "rip5.loadtest:loadtest",
        "chaos": "rip5.chaos.cli:chaos",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="rip5")
def main() -> None:
    """rip5: a compute/storage-separated message broker speaking the RocketMQ 5 protocol."""


for _role in ROLES.values():
    main.add_command(_role_command(_role))


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="parent folder of every process's data [default: a temp folder, removed on exit]",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="number of broker processes",
)
@click.option(
    "--storage",
    type=click.IntRange(1, 16),
    default=3,
    show_default=True,
    help="number of storage node processes",
)
@click.option(
    "--storage-groups",
    type=click.IntRange(1, 65_536),
    default=DevLayout.storage_groups,
    show_default=True,
    help="raft groups of the storage cluster (fixed once created; fewer join more "
    "messages into each raft entry when many queues are written)",
)
@click.option(
    "--nameserver-port",
    type=click.IntRange(1, 65535),
    default=9876,
    show_default=True,
    help="port of the (first) nameserver (the next ones follow)",
)
@click.option(
    "--nameservers",
    type=click.IntRange(1, 7),
    default=1,
    show_default=True,
    help="nameserver replicas (one raft group; 3 survive the loss of one)",
)
@click.option(
    "--replication",
    type=click.Choice(["raft", "controller"]),
    default="raft",
    show_default=True,
    help="how storage groups replicate: raft, or controller (RIP-44: the nameservers "
    "name each group's master; 2 replicas suffice)",
)
@click.option(
    "--storage-port",
    type=click.IntRange(1, 65535),
    default=7701,
    show_default=True,
    help="port of the first storage node (the next ones follow)",
)
@click.option(
    "--broker-port",
    type=click.IntRange(1, 65535),
    default=8081,
    show_default=True,
    help="client port of the first broker (the next ones follow)",
)
@click.option(
    "--remoting-port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="remoting (4.x client) port of the first broker (the next ones count down)",
)
@click.option(
    "--free-ports",
    is_flag=True,
    default=False,
    help="give every process a port free at start instead of the base ports (for tests)",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=True,
    show_default=True,
    help="also run rip5 dashboard (the web console)",
)
@click.option(
    "--metrics/--no-metrics",
    default=True,
    show_default=True,
    help="every process serves Prometheus metrics on a free port (printed once ready)",
)
@click.option(
    "--dashboard-port",
    type=click.IntRange(1, 65535),
    default=8088,
    show_default=True,
    help="port of the dashboard",
)
@click.option(
    "--auto-create/--no-auto-create",
    default=True,
    show_default=True,
    help="create topics and consumer groups on first use",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="log level of every process",
)
@click.option(
    "--tier-url",
    default="",
    help="fsspec URL of a tier for every storage node (file:///path, s3://bucket/prefix; "
    "credentials from the environment); empty: no tier",
)
@click.option(
    "--acl",
    is_flag=True,
    default=False,
    help="ACL 2.0 on: a super user is created with the cluster (its credentials are in a "
    "file under the data dir, printed at start) and the brokers check every call",
)
@click.option(
    "--rpc-transport",
    type=click.Choice(_RPC_OPTIONS["rpc_transport"].choices or ()),
    default=_RPC_OPTIONS["rpc_transport"].default,
    show_default=True,
    help="internal RPC transport of every process",
)
@click.option(
    "--rpc-codec",
    type=click.Choice(_RPC_OPTIONS["rpc_codec"].choices or ()),
    default=_RPC_OPTIONS["rpc_codec"].default,
    show_default=True,
    help="internal RPC payload codec of every process",
)
@click.option("--rpc-tls-cert", default="", help="mutual TLS between the processes: certificate")
@click.option("--rpc-tls-key", default="", help="mutual TLS between the processes: private key")
@click.option("--rpc-tls-ca", default="", help="mutual TLS between the processes: the CA")
def dev(
    data_dir: Path | None,
    brokers: int,
    storage: int,
    storage_groups: int,
    nameserver_port: int,
    nameservers: int,
    replication: str,
    storage_port: int,
    broker_port: int,
    remoting_port: int,
    free_ports: bool,
    dashboard: bool,
    metrics: bool,
    dashboard_port: int,
    auto_create: bool,
    log_level: str,
    tier_url: str,
    acl: bool,
    rpc_transport: str,
    rpc_codec: str,
    rpc_tls_cert: str,
    rpc_tls_key: str,
    rpc_tls_ca: str,
) -> None:
    """Run a whole local cluster on 127.0.0.1 until Ctrl-C."""
    temp = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="rip5-dev-")) if data_dir is None else data_dir
    layout = DevLayout(
        root,
        brokers,
        storage,
        nameserver_port,
        storage_port,
        broker_port,
        auto_create,
        log_level,
        free_ports=free_ports,
        nameservers=nameservers,
        remoting_port=remoting_port,
        acl_super_user_file=str(acl_super_user_file(root)) if acl else "",
        rpc=RpcOptions(rpc_transport, rpc_codec, rpc_tls_cert, rpc_tls_key, rpc_tls_ca),
        dashboard=dashboard,
        dashboard_port=dashboard_port,
        metrics=metrics,
        replication=replication,
        tier_url=tier_url,
        storage_groups=storage_groups,
    )
    try:
        layout.rpc.rpc_config()
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    specs = plan(layout)

    def out(line: str) -> None:
        click.echo(line)

    out(f"rip5 dev | data in {root}")
    if acl:
        out(
            f"rip5 dev | ACL on: the super user's NAME:SECRET is in {layout.acl_super_user_file} "
            "(clients: Credentials(NAME, SECRET); rip5 admin: --ak NAME --sk SECRET)"
        )

    async def supervise() -> int:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        supervisor = Supervisor(specs, out=out)
        remoting = remoting_endpoints(specs)
        metrics = metrics_endpoints(specs)

        def on_ready(endpoints: dict[str, str]) -> None:
            out(ready_banner(endpoints, remoting))
            out(metrics_banner(metrics))
            dashboard = dashboard_banner(endpoints)
            if dashboard is not None:
                out(dashboard)

        return await supervisor.run(stopping, on_ready)

    try:
        code = uvloop.run(supervise())
    finally:
        if temp:
            shutil.rmtree(root, ignore_errors=True)
    out("rip5 dev | stopped")
    sys.exit(code)


@main.group(
    cls=LazyGroup,
    lazy_commands={
        "topic": "rip5.admin:topic",
        # admin_consumers adds `lag` and `reset-offset` to rip5.admin's group on import.
        "group": "rip5.admin_consumers:admin.group",
        "cluster": "rip5.admin:cluster",
        "nameserver": "rip5.admin_nameserver:nameserver",
        "message": "rip5.admin_consumers:message",
        "dlq": "rip5.admin_consumers:dlq",
        "snapshot": "rip5.snapshot:snapshot",
        "tier": "rip5.admin_tier:tier",
        "node": "rip5.admin_nodes:node",
        "user": "rip5.admin_acl:user",
        "acl": "rip5.admin_acl:acl",
        "broker": "rip5.admin_nodes:broker",
    },
)
def admin() -> None:
    """Administer a cluster: topics, consumer groups, cluster status."""


@main.command(
    "spark",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def spark_jobs(args: tuple[str, ...]) -> None:
    """Spark jobs over snapshots: stats, export, pipeline (``rip5 spark --help``)."""
    # Loaded on demand: pyspark (the spark extra) is imported only by these commands.
    from spark_batch.jobs import spark  # noqa: PLC0415

    spark.main(list(args), prog_name="rip5 spark")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("target", type=click.Choice(sorted(BENCH_TARGETS)))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(target: str, args: tuple[str, ...]) -> None:
    """Run a benchmark: raft, angelia, storage, nameserver, e2e, timer, sql_filter, spark,
    remoting, connector, placement, replication, queues or tier.

    Every target warms up, measures several runs and prints median [min-max]
    with client and server CPU; ``--json FILE`` writes the runs as JSON.
    ``placement`` is a seeded simulation instead: it prints its tables.
    ``rip5 bench TARGET --help`` lists a target's options.
    """
    # Each target is a module rip5.bench.<target> with main(argv) -> exit code, loaded on demand.
    module = importlib.import_module(f"rip5.bench.{target}")
    sys.exit(module.main(list(args)))
