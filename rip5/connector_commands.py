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

SHELL.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from connector.client import ClusterClient, ConnectorCallError
from connector.plan import Rule, RulesError, RuleSet, parse_marks, parse_rules, translate

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
