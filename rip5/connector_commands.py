"""``rip5 connector status`` and ``rip5 connector translate``: questions about a
rules file's replication, answered by the clusters (and the connector's marks).

- ``status``: a line per rule: the source queues' end offsets, the rule's
  checkpoints (its group's committed offsets on the source) and the lag between.
- ``translate --group G``: per rule, the target queue offsets at which consumer
  group G, moved from the source cluster to the target, resumes without a gap
  (:func:`connector.plan.translate` over the marks in the connector's data
  directory and G's committed offsets on the source). A target queue with no
  mark has no copy yet: its end offset is printed.

Exit codes: 0 done; 1 a cluster could not answer; 2 a bad rules file.

The role itself (:func:`serve`) is ``connector.runner.serve`` given the one thing
the client-only ``connector`` package cannot do: create a rule's missing target
topic (``create = true``) through the target cluster's nameservers
(:func:`create_topic`, as ``rip5 admin topic create`` does).

SHELL.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import click

from angelia_rpc import AngeliaError
from angelia_rpc.nameserver_client import NameserverClient
from connector import runner
from connector.client import ClusterClient, ConnectorCallError
from connector.config import ConnectorConfig
from connector.plan import (
    Cluster,
    Rule,
    RulesError,
    RuleSet,
    parse_marks,
    parse_rules,
    translate,
)
from protocol import errors
from protocol import nameserver_api as ns
from protocol.vocabulary import MessageType

CREATE_TIMEOUT_MS = 5_000

rules_option = click.option(
    "--rules", "rules_path", required=True, type=click.Path(dir_okay=False), help="TOML rules file"
)
rule_option = click.option("--rule", "rule_name", default=None, help="only this rule")


def load_rules(rules_path: str) -> RuleSet:
    """The rules of the file, or exit 2 naming the file, line and key at fault."""
    try:
        return parse_rules(Path(rules_path).read_text(), rules_path)
    except OSError as exc:
        click.echo(f"rip5: cannot read {rules_path}: {exc.strerror}", err=True)
        sys.exit(2)
    except RulesError as exc:
        click.echo(f"rip5: {exc}", err=True)
        sys.exit(2)


def _chosen(rules: RuleSet, rule_name: str | None) -> list[Rule]:
    if rule_name is None:
        return list(rules.rules)
    try:
        return [rules.rule(rule_name)]
    except KeyError:
        click.echo(f"rip5: no rule {rule_name!r} in the rules file", err=True)
        sys.exit(2)


def _run(work: object) -> None:
    try:
        asyncio.run(work)  # type: ignore[arg-type]
    except ConnectorCallError as exc:
        click.echo(f"rip5: {exc}", err=True)
        sys.exit(1)


async def _status_lines(rules: RuleSet, chosen: list[Rule]) -> list[str]:
    lines = []
    for rule in chosen:
        source = ClusterClient(rule.source, rules.clusters[rule.source].endpoints)
        try:
            ends, done = 0, 0
            queues = await source.queues(rule.topic)
            for queue in queues:
                end = await source.bound(rule.topic, queue, end=True)
                committed = await source.committed(rule.group, rule.topic, queue)
                ends += end
                done += end if committed is None else min(committed, end)
            lines.append(
                f"{rule.name}: {rule.source}/{rule.topic} -> {rule.target}/{rule.target_topic} "
                f"filter={rule.filter} queues={len(queues)} end={ends} "
                f"checkpoint={done} lag={ends - done}"
            )
        finally:
            await source.close()
    return lines


@click.command()
@rules_option
@rule_option
def status(rules_path: str, rule_name: str | None) -> None:
    """A line per rule: source end offsets, checkpoints and lag (summed over queues)."""
    rules = load_rules(rules_path)

    async def work() -> None:
        for line in await _status_lines(rules, _chosen(rules, rule_name)):
            click.echo(line)

    _run(work())


async def _translate_lines(
    rules: RuleSet, chosen: list[Rule], group: str, data_dir: Path
) -> list[str]:
    lines = []
    for rule in chosen:
        source = ClusterClient(rule.source, rules.clusters[rule.source].endpoints)
        target = ClusterClient(rule.target, rules.clusters[rule.target].endpoints)
        try:
            marks_path = data_dir / "marks" / f"{rule.name}.marks"
            marks = parse_marks(marks_path.read_text()) if marks_path.exists() else []
            committed: dict[int, int] = {}
            for queue in await source.queues(rule.topic):
                offset = await source.committed(group, rule.topic, queue)
                if offset is not None:
                    committed[queue] = offset
            resume = translate(marks, committed)
            for queue in await target.queues(rule.target_topic):
                if queue in resume:
                    offset, how = resume[queue], "translated"
                else:
                    offset, how = await target.bound(rule.target_topic, queue, end=True), "end"
                lines.append(
                    f"{rule.name} {rule.target}/{rule.target_topic} {queue} {offset} {how}"
                )
        finally:
            await source.close()
            await target.close()
    return lines


@click.command()
@rules_option
@rule_option
@click.option("--group", required=True, help="the consumer group moving to the target cluster")
@click.option(
    "--data-dir",
    default="data",
    type=click.Path(file_okay=False),
    help="the connector's data directory (its marks) [default: data]",
)
def translate_command(rules_path: str, rule_name: str | None, group: str, data_dir: str) -> None:
    """Target offsets at which GROUP resumes without a gap: a line per target queue,
    "RULE CLUSTER/TOPIC QUEUE OFFSET translated|end"."""
    rules = load_rules(rules_path)

    async def work() -> None:
        chosen = _chosen(rules, rule_name)
        for line in await _translate_lines(rules, chosen, group, Path(data_dir)):
            click.echo(line)

    _run(work())


translate_command.name = "translate"


async def create_topic(
    cluster: Cluster, topic: str, queue_count: int, message_type: MessageType
) -> bool:
    """Create ``topic`` on ``cluster`` through its nameservers, in its storage cluster;
    False when it existed already (created meanwhile by someone else: taken as it is).
    A refusal raises :class:`ConnectorCallError` with the nameserver's code."""
    if not cluster.nameservers:
        raise ConnectorCallError(
            "NO_NAMESERVERS",
            f"cluster {cluster.name!r} names no nameservers to create topic {topic!r} with",
            retriable=False,
        )
    client = NameserverClient(list(cluster.nameservers))
    request = ns.CreateTopicRequest(
        topic, cluster.storage_cluster, max(1, queue_count), int(message_type)
    )
    try:
        await client.call(lambda stub: stub.create_topic(request, timeout_ms=CREATE_TIMEOUT_MS))
    except AngeliaError as error:
        if error.code is errors.ALREADY_EXISTS:
            return False
        raise ConnectorCallError(
            error.code.name,
            f"creating topic {topic!r} on cluster {cluster.name!r}: {error.message}",
            retriable=error.retriable,
        ) from None
    finally:
        await client.close()
    return True


async def serve(
    config: ConnectorConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
) -> None:
    """The connector role (``connector.runner.serve``), creating topics with
    :func:`create_topic`."""
    await runner.serve(config, data_dir, stopping, ready, create_topic)
