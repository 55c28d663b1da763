"""``rip5 admin message show|query``, ``rip5 admin group lag|reset-offset`` and
``rip5 admin dlq resend``: what an operator asks of the storage groups.

The calls are in :mod:`rip5.admin_storage`; this module parses options and
prints: rich tables for people (times as "3 s ago"), ``--json`` for machines
(one JSON document on stdout). Times are taken in ISO 8601 (``2026-11-27T12:00:00``,
UTC unless the text names a zone). Exit codes as in :mod:`rip5.admin`.

SHELL.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import uvloop
from rich.table import Table

from angelia_rpc import AngeliaError
from nameserver import names
from protocol import errors
from protocol.storage_api import TIME_MAX_MS
from protocol.vocabulary import MessageType
from rip5 import admin
from rip5.admin_storage import ClusterAdmin, Found, Progress, QueryOutcome, Resent, Reset
from rip5.units import ago

T = TypeVar("T")
BODY_PREVIEW_BYTES = 256
"""How much of a body ``message show`` prints."""

begin_option = click.option("--begin", default=None, help="stored at or after (ISO 8601)")
end_option = click.option("--end", default=None, help="stored at or before (ISO 8601)")


def _run(nameserver: str, cluster: str, action: Callable[[ClusterAdmin], Awaitable[T]]) -> T:
    """``action`` on a :class:`ClusterAdmin`; exit 1 with the reason if the cluster fails
    it, 2 for a bad option value it found."""
    addresses = admin.parse_nameservers(nameserver)
    try:
        return uvloop.run(ClusterAdmin.using(addresses, cluster, action))
    except AngeliaError as exc:
        if exc.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED):
            admin.fail(f"cannot reach the cluster: {exc.message}", admin.EXIT_REFUSED)
        admin.fail(f"the cluster refused: {exc.code.name}: {exc.message}", admin.EXIT_REFUSED)
    except ValueError as exc:
        admin.fail(str(exc), admin.EXIT_USAGE)


def parse_time_ms(text: str | None, option: str, default: int) -> int:
    """An ISO 8601 time as ms since the epoch (UTC unless it names a zone); ``default``
    if not given; exit 2 naming the option if it is not a time."""
    if text is None:
        return default
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        admin.fail(f"{option}: {text!r} is not an ISO 8601 time", admin.EXIT_USAGE)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _iso(ms: int) -> str:
    if ms <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _echo_json(document: object) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=True))


def body_preview(body: bytes) -> str:
    """The start of a body: as text if it is UTF-8, else as hex."""
    head = body[:BODY_PREVIEW_BYTES]
    try:
        text = head.decode()
    except UnicodeDecodeError:
        text = head.hex(" ")
    more = len(body) - len(head)
    return text + (f" ... ({more} more bytes)" if more else "")


def found_json(found: Found) -> dict[str, Any]:
    """A found message as JSON (the body as a preview)."""
    stored = found.stored
    message = stored.message
    return {
        "group_id": found.group_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": stored.queue_offset,
        "store_timestamp_ms": stored.store_timestamp_ms,
        "message_id": message.message_id,
        "tag": message.tag,
        "keys": list(message.keys),
        "message_group": message.message_group,
        "properties": dict(message.properties),
        "born_timestamp_ms": message.born_timestamp_ms,
        "born_host": message.born_host,
        "message_type": message.message_type,
        "dead_letter_topic": message.dead_letter_topic,
        "body_bytes": len(message.body),
        "body_preview": body_preview(message.body),
    }


def outcome_json(outcome: QueryOutcome) -> dict[str, Any]:
    """A query's outcome as JSON."""
    return {
        "messages": [found_json(f) for f in outcome.found],
        "complete": outcome.complete,
        "unanswered_groups": {str(g): why for g, why in sorted(outcome.unanswered.items())},
    }


def _found_table(found: list[Found], title: str) -> Table:
    table = Table(title=title)
    for column in ("message id", "topic", "queue", "offset", "raft group", "stored", "tag", "keys"):
        table.add_column(column)
    now_ms = _now_ms()
    for f in found:
        m = f.stored.message
        table.add_row(
            m.message_id,
            m.topic,
            str(m.queue_id),
            str(f.stored.queue_offset),
            str(f.group_id),
            f"{_iso(f.stored.store_timestamp_ms)} ({ago(f.stored.store_timestamp_ms, now_ms)})",
            m.tag or "-",
            ",".join(m.keys) or "-",
        )
    return table


def _incomplete_note(outcome: QueryOutcome) -> None:
    """Say on stderr what the search could not cover."""
    if not outcome.complete:
        click.echo("note: the search stopped at its scan budget; narrow --begin/--end", err=True)
    for group_id, why in sorted(outcome.unanswered.items()):
        click.echo(
            f"note: raft group {group_id} did not answer ({why}): messages missing", err=True
        )


def _query(
    nameserver: str, cluster: str, begin: str | None, end: str | None, **what: Any
) -> QueryOutcome:
    """``ClusterAdmin.query_messages`` for ``what``, in the range of ``--begin``/``--end``."""
    begin_ms = parse_time_ms(begin, "--begin", 0)
    end_ms = parse_time_ms(end, "--end", TIME_MAX_MS)
    return _run(
        nameserver,
        cluster,
        lambda a: a.query_messages(begin_ms=begin_ms, end_ms=end_ms, **what),
    )


@click.group()
def message() -> None:
    """show | query messages stored in the cluster."""


@message.command("show")
@click.argument("message_id")
@admin.nameserver_option
@admin.cluster_option
@click.option("--topic", default="", help="only this topic (else every raft group is asked)")
@begin_option
@end_option
@admin.json_option
def message_show(
    message_id: str,
    nameserver: str,
    cluster: str,
    topic: str,
    begin: str | None,
    end: str | None,
    as_json: bool,
) -> None:
    """Show message MESSAGE_ID: where it is stored, headers, properties, body preview.

    A dead-lettered message is shown in its topic and in the dead-letter queue."""
    if topic:
        admin.check_name(names.validate_topic, topic)
    outcome = _query(nameserver, cluster, begin, end, topic=topic, message_id=message_id)
    if as_json:
        _echo_json(outcome_json(outcome))
    elif not outcome.found:
        click.echo(f"no message {message_id} found")
    for f in [] if as_json else outcome.found:
        _print_message(f)
    _incomplete_note(outcome)
    if not outcome.found:
        raise SystemExit(admin.EXIT_REFUSED)


def _type_name(number: int) -> str:
    """RocketMQ's name of a message type (the number if it has none)."""
    try:
        return MessageType(number).name
    except ValueError:
        return str(number)


def _print_message(found: Found) -> None:
    document = found_json(found)
    table = Table(title=f"message {document['message_id']}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    now_ms = _now_ms()
    stored_ms = found.stored.store_timestamp_ms
    rows = [
        (
            "stored in",
            f"{document['topic']} queue {document['queue_id']} "
            f"offset {document['queue_offset']} (raft group {found.group_id})",
        ),
        ("stored at", f"{_iso(stored_ms)} ({ago(stored_ms, now_ms)})"),
        ("born", f"{_iso(document['born_timestamp_ms'])} on {document['born_host'] or '-'}"),
        ("type", _type_name(document["message_type"])),
        ("tag", document["tag"] or "-"),
        ("keys", ", ".join(document["keys"]) or "-"),
        ("message group", document["message_group"] or "-"),
        ("dead letter of", document["dead_letter_topic"] or "-"),
        ("body", f"{document['body_bytes']} bytes"),
    ]
    rows += [(f"property {k}", v) for k, v in sorted(document["properties"].items())]
    for field, value in rows:
        table.add_row(field, value)
    admin._print(table)
    click.echo(document["body_preview"])


@message.command("query")
@admin.nameserver_option
@admin.cluster_option
@click.option("--topic", required=True)
@click.option("--key", required=True, help="a message key")
@begin_option
@end_option
@click.option("--limit", type=click.IntRange(1, 1000), default=32, show_default=True)
@admin.json_option
def message_query(
    nameserver: str,
    cluster: str,
    topic: str,
    key: str,
    begin: str | None,
    end: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Messages of --topic carrying --key, stored in [--begin, --end], oldest first."""
    admin.check_name(names.validate_topic, topic)
    outcome = _query(nameserver, cluster, begin, end, topic=topic, key=key, limit=limit)
    if as_json:
        _echo_json(outcome_json(outcome))
    else:
        admin._print(_found_table(outcome.found, f"{topic} key {key}: {len(outcome.found)}"))
    _incomplete_note(outcome)


def progress_json(row: Progress) -> dict[str, Any]:
    """A queue's progress as JSON."""
    q = row.queue
    return {
        "topic": q.topic,
        "queue_id": q.queue_id,
        "raft_group": row.group_id,
        "first_offset": q.first_offset,
        "broker_offset": q.end_offset,
        "consumer_offset": q.consumer_offset,
        "in_flight": q.in_flight,
        "lag": q.lag,
        "last_consumed_ms": q.last_consumed_ms,
    }


@admin.group.command("lag")
@click.argument("name")
@admin.nameserver_option
@admin.cluster_option
@click.option("--topic", default="", help="every queue of this topic (else of the topics consumed)")
@admin.json_option
def group_lag(name: str, nameserver: str, cluster: str, topic: str, as_json: bool) -> None:
    """Consumer group NAME's progress per queue (pop and pull consumers alike)."""
    admin.check_name(names.validate_consumer_group, name)
    if topic:
        admin.check_name(names.validate_topic, topic)
    rows = _run(nameserver, cluster, lambda a: a.group_lag(name, topic))
    if as_json:
        _echo_json({"group": name, "queues": [progress_json(r) for r in rows]})
        return
    table = Table(title=f"consumer group {name}: lag {sum(r.queue.lag for r in rows)}")
    columns = (
        "topic",
        "queue",
        "broker offset",
        "consumer offset",
        "in flight",
        "lag",
        "last consumed",
    )
    for column in columns:
        table.add_column(column)
    now_ms = _now_ms()
    for row in rows:
        q = row.queue
        table.add_row(
            q.topic,
            str(q.queue_id),
            str(q.end_offset),
            "-" if q.consumer_offset < 0 else str(q.consumer_offset),
            str(q.in_flight),
            str(q.lag),
            ago(q.last_consumed_ms, now_ms),
        )
    admin._print(table)


@admin.group.command("reset-offset")
@click.argument("name")
@admin.nameserver_option
@admin.cluster_option
@click.option("--topic", required=True)
@click.option("--to", "to", type=click.Choice(["earliest", "latest"]), default=None)
@click.option("--to-time", default=None, help="the first message stored at or after (ISO 8601)")
@admin.json_option
def group_reset_offset(
    name: str,
    nameserver: str,
    cluster: str,
    topic: str,
    to: str | None,
    to_time: str | None,
    as_json: bool,
) -> None:
    """Reset consumer group NAME in every queue of --topic.

    Pop and pull consumers then receive from the new offset. Messages in flight
    are delivered again; acks of their old receipt handles fail."""
    admin.check_name(names.validate_consumer_group, name)
    admin.check_name(names.validate_topic, topic)
    if (to is None) == (to_time is None):
        admin.fail("give one of --to earliest|latest and --to-time", admin.EXIT_USAGE)
    timestamp_ms = parse_time_ms(to_time, "--to-time", -1)
    resets: list[Reset] = _run(
        nameserver,
        cluster,
        lambda a: a.reset_offset(name, topic, to=to or "", timestamp_ms=timestamp_ms),
    )
    if as_json:
        _echo_json(
            {
                "group": name,
                "topic": topic,
                "queues": [
                    {"queue_id": r.queue_id, "before": r.before, "after": r.after} for r in resets
                ],
            }
        )
        return
    table = Table(title=f"consumer group {name} reset on {topic}")
    for column in ("queue", "consumer offset before", "after"):
        table.add_column(column)
    for r in resets:
        table.add_row(str(r.queue_id), "-" if r.before < 0 else str(r.before), str(r.after))
    admin._print(table)
    click.echo(
        "messages in flight were released: those at or after the new offsets come again, "
        "acks of their old receipt handles fail"
    )


@click.group()
def dlq() -> None:
    """resend dead letters."""


@dlq.command("resend")
@click.argument("name")
@admin.nameserver_option
@admin.cluster_option
@admin.json_option
def dlq_resend(name: str, nameserver: str, cluster: str, as_json: bool) -> None:
    """Send the messages of %DLQ%NAME back to their original topics.

    Only dead letters not resent by an earlier run go (the progress is kept as a
    committed offset in the dead-letter queues)."""
    admin.check_name(names.validate_consumer_group, name)
    resent: Resent = _run(nameserver, cluster, lambda a: a.resend_dead_letters(name))
    if as_json:
        _echo_json(
            {
                "group": name,
                "resent": resent.count,
                "by_topic": resent.by_topic,
                "duplicates": resent.duplicates,
            }
        )
        return
    click.echo(f"resent {resent.count} dead letters of {name}")
    for topic, count in sorted(resent.by_topic.items()):
        click.echo(f"  {topic}: {count}")
    if resent.duplicates:
        click.echo(f"  ({resent.duplicates} were stored already: an earlier run was interrupted)")
