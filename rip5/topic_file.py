"""Many topics at once: the topic file ``rip5 admin topic create --from-file`` reads,
and the batches that create its topics through the nameserver.

A topic file is either

- text (CSV): one topic a line, ``name[,queues[,type]]``; blank lines and lines
  starting with ``#`` are skipped, and so is a first line ``name,queues,type``
  (a header); or
- TOML (a file whose name ends in ``.toml``): ``[[topic]]`` tables with ``name``
  and optional ``queues`` and ``type``.

A missing queue count or type takes the command's ``--queues`` and ``--type``.
A type is a message type's name in any case (normal, fifo, delay, transaction).

:func:`create_topics` sends the topics in batches of at most
``CREATE_TOPICS_BATCH`` (the nameserver's ``CreateTopics``: one raft entry,
all or nothing), one batch at a time, so a failure leaves every earlier batch
created and none of its own; ``skip_existing`` makes a rerun after a failure
carry on where it stopped.
"""

from __future__ import annotations

import tomllib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.nameserver_client import NameserverClient
from nameserver import names
from nameserver.errors import NameserverError
from protocol import nameserver_api as api
from protocol.vocabulary import MessageType

CREATE_TOPICS_BATCH = 1000
"""Topics a ``CreateTopicsRequest`` carries (the nameserver's maximum an entry)."""
QUEUES_MAX = 1024
HEADER = ("name", "queues", "type")


class TopicFileError(ValueError):
    """A topic file that cannot be read as one: the message names the line (or the
    ``[[topic]]`` table) and what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Created:
    """What :func:`create_topics` did: topics created (those skipped as existing
    left out), topics sent, and the metadata revision after the last batch."""

    created: int
    sent: int
    revision: int


def parse_topic_file(
    text: str, toml: bool, template: api.CreateTopicRequest
) -> list[api.CreateTopicRequest]:
    """The topics of a topic file: each a copy of ``template`` (cluster, queue count,
    type, retention, permission, read replicas) with the file's name, and its queues
    and type where the file gives them. :class:`TopicFileError` on a malformed line or
    table, a name RocketMQ's rules refuse, a bad queue count or type, or a name given
    twice."""
    rows = _toml_rows(text) if toml else _text_rows(text)
    topics: list[api.CreateTopicRequest] = []
    where_of: dict[str, str] = {}
    for where, name, queues, kind in rows:
        try:
            names.validate_topic(name)
        except NameserverError as error:
            raise TopicFileError(f"{where}: {error}") from None
        if name in where_of:
            raise TopicFileError(f"{where}: topic {name!r} is given twice (also {where_of[name]})")
        where_of[name] = where
        topics.append(
            replace(
                template,
                name=name,
                queue_count=template.queue_count if queues is None else queues,
                message_type=template.message_type if kind is None else _message_type(where, kind),
            )
        )
    return topics


_Row = tuple[str, str, int | None, str | None]
"""Where in the file (for errors), name, queues, type (None: the template's)."""


def _text_rows(text: str) -> list[_Row]:
    rows: list[_Row] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = [f.strip() for f in line.split(",")]
        if not fields[0] or fields[0].startswith("#"):
            continue
        where = f"line {number}"
        if len(fields) > len(HEADER):
            raise TopicFileError(f"{where}: {len(fields)} fields; a line is name[,queues[,type]]")
        if not rows and tuple(f.lower() for f in fields) == HEADER[: len(fields)]:
            continue  # the header
        queues = _queues(where, fields[1]) if len(fields) > 1 and fields[1] else None
        kind = fields[2] if len(fields) > 2 and fields[2] else None
        rows.append((where, fields[0], queues, kind))
    return rows


def _toml_rows(text: str) -> list[_Row]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise TopicFileError(f"not valid TOML: {error}") from None
    unknown = set(document) - {"topic"}
    if unknown:
        raise TopicFileError(f"unknown keys {sorted(unknown)}: a topic file has [[topic]] tables")
    tables = document.get("topic", [])
    if not isinstance(tables, list):
        raise TopicFileError("'topic' must be an array of tables: write [[topic]]")
    rows: list[_Row] = []
    for index, table in enumerate(tables):
        where = f"[[topic]] #{index + 1}"
        extra = set(table) - set(HEADER)
        if extra:
            raise TopicFileError(f"{where}: unknown keys {sorted(extra)}; allowed {list(HEADER)}")
        name, queues, kind = table.get("name", ""), table.get("queues"), table.get("type")
        if not isinstance(name, str):
            raise TopicFileError(f"{where}: name must be a string, got {name!r}")
        if queues is not None:
            queues = _queues(where, str(queues))
        if kind is not None and not isinstance(kind, str):
            raise TopicFileError(f"{where}: type must be a string, got {kind!r}")
        rows.append((where, name, queues, kind))
    return rows


def _queues(where: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= QUEUES_MAX:
        raise TopicFileError(f"{where}: queues must be a whole number in [1, {QUEUES_MAX}]: {text}")
    return int(text)


def _message_type(where: str, text: str) -> int:
    try:
        return int(MessageType[text.upper()])
    except KeyError:
        allowed = ", ".join(kind.name.lower() for kind in MessageType)
        raise TopicFileError(f"{where}: type {text!r} is not one of {allowed}") from None


def _create_batch(
    request: api.CreateTopicsRequest, timeout_ms: int, nameserver: NameserverService
) -> Awaitable[api.CreateTopicsResponse]:
    return nameserver.create_topics(request, timeout_ms=timeout_ms)


async def create_topics(
    client: NameserverClient,
    topics: Sequence[api.CreateTopicRequest],
    *,
    skip_existing: bool = False,
    signed: Callable[[], api.SignedBy] = api.SignedBy,
    on_batch: Callable[[int], None] = lambda done: None,
    timeout_ms: int = 30_000,
) -> Created:
    """Create ``topics`` in batches of :data:`CREATE_TOPICS_BATCH`, one after the other
    (each call follows the nameserver leader); ``on_batch`` gets the number of topics
    sent so far after each batch; ``signed`` signs each request. The first refused
    batch raises its :class:`AngeliaError` (earlier batches stay created)."""
    created = sent = revision = 0
    for start in range(0, len(topics), CREATE_TOPICS_BATCH):
        batch = list(topics[start : start + CREATE_TOPICS_BATCH])
        response = await client.call(
            partial(
                _create_batch, api.CreateTopicsRequest(batch, skip_existing, signed()), timeout_ms
            )
        )
        created += response.created
        sent += len(batch)
        revision = response.revision
        on_batch(sent)
    return Created(created, sent, revision)
