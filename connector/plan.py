"""The connector's rules and the decisions made from them: what to copy, where to.

- **Rules file** (TOML): ``[clusters.NAME]`` tables (``endpoints``: the
  brokers' client endpoints, gRPC v2; optional ``nameservers`` and
  ``storage_cluster``, for creating topics) and ``[[rules]]`` tables (``name``,
  ``from``, ``to``, ``topic``; optional ``target_topic``, ``filter``,
  ``start``, ``group``, ``create``). Other keys are allowed and ignored. A bad file is
  refused with a :class:`RulesError` naming the line and the key at fault.
- **Reload**: :func:`plan_reload` says which rules a new file adds, removes,
  changes and keeps (a kept rule keeps its place: its copy tasks go on).
- **Queue mapping**: :func:`target_queue` maps a source queue to a stable
  target queue, so a resend after a crash lands where the first copy did and
  the target's dedup window (keyed by topic and message id, per queue's raft
  group) absorbs it.
- **Offset translation**: a :class:`Mark` ``(source queue, source offset,
  target queue, target offset)`` says that the copy of the message at
  ``source offset`` landed at ``target offset``, and so (copies are made in
  source order, target offsets only grow) that every later message of that
  source queue copied into that target queue landed at or past it.
  :func:`translate` gives, per target queue, the offset at which a consumer
  group that had committed given source offsets resumes without a gap.

PURE.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from protocol.filters import TagFilter
from protocol.routing import group_queue_index
from protocol.vocabulary import MessageType

START_POSITIONS = ("latest", "earliest")
_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+")
_TOPIC_LENGTH_MAX = 127
_ENDPOINT = re.compile(r"[^\s:]+:\d{1,5}")
DEFAULT_STORAGE_CLUSTER = "DefaultCluster"
"""Where a created topic goes unless the cluster names ``storage_cluster``."""
GROUP_PREFIX = "connector-"
"""The default checkpoint group of a rule is ``connector-<rule name>``."""


class RulesError(Exception):
    """A rules file that cannot be used; ``str()`` names the file, line and key."""

    retriable = False

    def __init__(self, file_name: str, line: int | None, key: str, problem: str) -> None:
        """``line``: 1-based, None when the key is absent from the text."""
        where = f"{file_name} line {line}" if line is not None else file_name
        super().__init__(f"{where}, key '{key}': {problem}")
        self.file_name = file_name
        self.line = line
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Cluster:
    """A cluster the rules read from or write to: its brokers' client endpoints."""

    name: str
    endpoints: tuple[str, ...]
    nameservers: tuple[str, ...] = ()
    """The nameserver replicas (host:port): only a rule that creates its target topic
    on this cluster needs them (the client protocol cannot create topics)."""
    storage_cluster: str = DEFAULT_STORAGE_CLUSTER
    """The storage cluster a created topic is placed in."""


@dataclass(frozen=True)
class Rule:
    """Copy ``topic`` of cluster ``source`` to ``target_topic`` of cluster ``target``."""

    name: str
    source: str
    target: str
    topic: str
    target_topic: str
    filter: str
    start: str
    group: str
    """The consumer group, on the source cluster, whose committed offsets are the
    rule's checkpoints."""
    create: bool = False
    """Create the target topic when it is missing (through the target's nameservers),
    with the source topic's queue count and message type."""


@dataclass(frozen=True)
class RuleSet:
    """A parsed rules file."""

    clusters: Mapping[str, Cluster]
    rules: tuple[Rule, ...]

    def rule(self, name: str) -> Rule:
        """The rule called ``name`` (KeyError if none)."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)


@dataclass(frozen=True)
class Reload:
    """What a new rules file changes: rule names in file order."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    kept: tuple[str, ...]


@dataclass(frozen=True, order=True)
class Mark:
    """The copy of ``source_offset`` of ``source_queue`` landed at ``target_offset``
    of ``target_queue`` (see the module docstring)."""

    source_queue: int
    source_offset: int
    target_queue: int
    target_offset: int


# -- the rules file -----------------------------------------------------------------


class _Lines:
    """Where each (table, key) of a TOML text is written: 1-based line numbers.

    Tables are ``("clusters", NAME)`` and ``("rules", INDEX)``; a key written
    as a table header (``[clusters.east]``) is found as the table's own line.
    Only what the rules file's shape uses is understood; a key not found has
    no line (None) and the error names the key alone.
    """

    _HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
    _ARRAY_HEADER = re.compile(r"\s*\[\[\s*([^\[\]]+?)\s*\]\]\s*(#.*)?$")
    _KEY = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*=""")

    def __init__(self, text: str) -> None:
        self.tables: dict[tuple[str, ...], int] = {}
        self.keys: dict[tuple[tuple[str, ...], str], int] = {}
        table: tuple[str, ...] = ()
        arrays: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if match := self._ARRAY_HEADER.match(line):
                name = match.group(1).strip()
                index = arrays.get(name, -1) + 1
                arrays[name] = index
                table = (name, str(index))
                self.tables[table] = number
            elif match := self._HEADER.match(line):
                table = tuple(part.strip().strip("\"'") for part in match.group(1).split("."))
                self.tables[table] = number
            elif match := self._KEY.match(line):
                key = next(group for group in match.groups() if group is not None)
                self.keys.setdefault((table, key), number)

    def of(self, table: tuple[str, ...], key: str | None = None) -> int | None:
        """The line of ``key`` in ``table`` (of the table itself when ``key`` is None or
        not written there)."""
        if key is not None and (table, key) in self.keys:
            return self.keys[(table, key)]
        return self.tables.get(table)


def _text(
    body: Mapping[str, object],
    key: str,
    default: str | None,
    at: Callable[[str, str], RulesError],
) -> str:
    """The string at ``key`` of a table (``default`` when absent; required when None)."""
    value = body.get(key, default)
    if value is None:
        raise at(key, "is required")
    if not isinstance(value, str):
        raise at(key, f"must be a string, not {value!r}")
    return value


def _failing(
    file_name: str, lines: _Lines, table: tuple[str, ...], where: str
) -> Callable[[str, str], RulesError]:
    """The error maker for keys of one table: ``at(key, problem)``."""

    def at(key: str, problem: str) -> RulesError:
        return RulesError(file_name, lines.of(table, key), f"{where}.{key}", problem)

    return at


def parse_rules(text: str, file_name: str = "rules file") -> RuleSet:
    """The rules of a TOML rules file's ``text``; :class:`RulesError` if it is not usable."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = int(match.group(1)) if match else None
        raise RulesError(file_name, line, "(syntax)", f"not valid TOML: {exc}") from None
    lines = _Lines(text)

    def fail(table: tuple[str, ...], key: str, path: str, problem: str) -> RulesError:
        return RulesError(file_name, lines.of(table, key), path, problem)

    clusters_table = document.get("clusters")
    if not isinstance(clusters_table, dict) or not clusters_table:
        raise fail(("clusters",), "clusters", "clusters", "no [clusters.NAME] table")
    clusters: dict[str, Cluster] = {}
    for name, body in clusters_table.items():
        table = ("clusters", name)
        if not isinstance(body, dict):
            raise fail(("clusters",), name, f"clusters.{name}", "must be a table")
        addresses: dict[str, tuple[str, ...]] = {}
        for key in ("endpoints", "nameservers"):
            listed = body.get(key, [] if key == "nameservers" else None)
            path = f"clusters.{name}.{key}"
            if (
                not isinstance(listed, list)
                or (key == "endpoints" and not listed)
                or not all(isinstance(e, str) for e in listed)
            ):
                raise fail(table, key, path, 'must be a list of "host:port" strings')
            for address in listed:
                if (
                    not _ENDPOINT.fullmatch(address)
                    or not 0 < int(address.rpartition(":")[2]) < 65536
                ):
                    raise fail(table, key, path, f"{address!r} is not host:port")
            addresses[key] = tuple(listed)
        storage_cluster = _text(
            body,
            "storage_cluster",
            DEFAULT_STORAGE_CLUSTER,
            _failing(file_name, lines, table, f"clusters.{name}"),
        )
        clusters[name] = Cluster(
            name, addresses["endpoints"], addresses["nameservers"], storage_cluster
        )

    rules_list = document.get("rules")
    if not isinstance(rules_list, list) or not rules_list:
        raise fail((), "rules", "rules", "no [[rules]] table")
    rules: list[Rule] = []
    for index, body in enumerate(rules_list):
        table = ("rules", str(index))
        where = f"rules[{index}]"
        if not isinstance(body, dict):
            raise fail((), "rules", where, "must be a table")

        name = _text(body, "name", None, _failing(file_name, lines, table, where))
        at = _failing(file_name, lines, table, f"rules[{index}] ({name})")
        if not _NAME.fullmatch(name):
            raise at("name", "must be letters, digits, '_' or '-'")
        if any(rule.name == name for rule in rules):
            raise at("name", f"a second rule is called {name!r}")
        source = _text(body, "from", None, at)
        target = _text(body, "to", None, at)
        for key, cluster in (("from", source), ("to", target)):
            if cluster not in clusters:
                known = ", ".join(sorted(clusters))
                raise at(key, f"no cluster {cluster!r} (clusters: {known})")
        topic = _text(body, "topic", None, at)
        target_topic = _text(body, "target_topic", topic, at)
        for key, value in (("topic", topic), ("target_topic", target_topic)):
            if not _TOPIC.fullmatch(value) or len(value) > _TOPIC_LENGTH_MAX:
                raise at(
                    key,
                    f"{value!r} is not a topic name ([%|a-zA-Z0-9_-], at most 127 characters)",
                )
        if source == target and topic == target_topic:
            raise at("to", "copies a topic onto itself")
        expression = _text(body, "filter", "*", at)
        filter_text = TagFilter.parse(expression).expression()
        start = _text(body, "start", "latest", at)
        if start not in START_POSITIONS:
            raise at("start", f"{start!r} is not 'latest' or 'earliest'")
        create = body.get("create", False)
        if not isinstance(create, bool):
            raise at("create", f"must be true or false, not {create!r}")
        if create and not clusters[target].nameservers:
            raise at(
                "create",
                f"creating the target topic needs the nameservers of cluster {target!r} "
                f"(clusters.{target}.nameservers): the client protocol cannot create topics",
            )
        group = _text(body, "group", GROUP_PREFIX + name, at)
        if not _TOPIC.fullmatch(group):
            raise at("group", f"{group!r} is not a group name")
        rules.append(
            Rule(name, source, target, topic, target_topic, filter_text, start, group, create)
        )
    return RuleSet(clusters, tuple(rules))


def _rule_and_clusters(rules: RuleSet, name: str) -> tuple[Rule, Cluster, Cluster]:
    rule = rules.rule(name)
    return rule, rules.clusters[rule.source], rules.clusters[rule.target]


def plan_reload(old: RuleSet, new: RuleSet) -> Reload:
    """Which rules ``new`` adds, removes, changes (the rule or one of its clusters
    differs) and keeps, compared with ``old``."""
    old_names = [rule.name for rule in old.rules]
    new_names = [rule.name for rule in new.rules]
    changed = tuple(
        name
        for name in new_names
        if name in old_names and _rule_and_clusters(old, name) != _rule_and_clusters(new, name)
    )
    return Reload(
        added=tuple(name for name in new_names if name not in old_names),
        removed=tuple(name for name in old_names if name not in new_names),
        changed=changed,
        kept=tuple(name for name in new_names if name in old_names and name not in changed),
    )


def target_type(source_types: frozenset[MessageType]) -> MessageType:
    """The message type a created target topic takes (``create``) for a source topic
    accepting ``source_types``: the source's own (FIFO and DELAY copies keep their
    kind), NORMAL for a transactional or normal one (committed transaction messages
    are copied as NORMAL ones)."""
    for kind in (MessageType.FIFO, MessageType.DELAY):
        if kind in source_types:
            return kind
    return MessageType.NORMAL


# -- where copies go ----------------------------------------------------------------


def target_queue(source_queue: int, message_group: str | None, target_queues: Sequence[int]) -> int:
    """The target queue of a copy: for a FIFO message the queue its message group
    picks (as every broker picks it, so FIFO order per group holds), else source
    queue ``i`` goes to the ``i mod n``-th of the ``n`` target queues (ids in
    ascending order). Stable while the target topic's writable queues stay the same.
    """
    if not target_queues:
        raise ValueError("the target topic has no writable queue")
    ordered = sorted(target_queues)
    if message_group is not None:
        return ordered[group_queue_index(message_group, len(ordered))]
    return ordered[source_queue % len(ordered)]


# -- resends beyond the target's dedup window ----------------------------------------

DEDUP_WINDOW_MS = 2 * 60_000
"""How long a target remembers a stored message id (a storage partition's dedup window)."""
CLOCK_SKEW_MS = 30_000
"""How far the connector's clock and a target's store clock may disagree."""
RESEND_SAFE_MS = DEDUP_WINDOW_MS - CLOCK_SKEW_MS
"""A batch whose send began less than this long ago is still in the target's window."""


@dataclass(frozen=True)
class Pending:
    """A send of source queue ``source_queue`` from ``source_offset`` began at ``sent_ms``
    (connector clock): written to the marks file before each send."""

    source_queue: int
    source_offset: int
    sent_ms: int


def format_pending(pending: Pending) -> str:
    """One line of a marks file."""
    return f"P {pending.source_queue} {pending.source_offset} {pending.sent_ms}\n"


def _pending_lines(text: str) -> Iterator[Pending]:
    """The pending lines of a marks file, in order (a torn last line is skipped)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "P" and all(part.isdigit() for part in parts[1:]):
            yield Pending(*(int(part) for part in parts[1:]))


def last_pending(text: str) -> dict[int, Pending]:
    """Per source queue, the last send begun (a torn last line is skipped)."""
    return {pending.source_queue: pending for pending in _pending_lines(text)}


def first_pending(text: str, committed: Mapping[int, int]) -> dict[int, Pending]:
    """Per source queue, the first unconfirmed send: the last one begun at its checkpoint
    ``committed[queue]`` (a restart sends from there again), else the first one begun
    past it (when a batch of filtered-out messages moved the position past the
    checkpoint before anything was sent). Every later send of the queue followed it, so
    the copies any of them stored were stored after it began. Queues that sent nothing
    since their checkpoint are left out."""
    at: dict[int, Pending] = {}
    past: dict[int, Pending] = {}
    for pending in _pending_lines(text):
        checkpoint = committed.get(pending.source_queue)
        if checkpoint is None or pending.source_offset < checkpoint:
            continue
        if pending.source_offset == checkpoint:
            at[pending.source_queue] = pending
        else:
            past.setdefault(pending.source_queue, pending)
    return past | at


def resend_unsafe(pending: Pending | None, committed: int, now_ms: int, safe_ms: int) -> bool:
    """Whether resending from ``committed`` may double copies the target's dedup window
    no longer remembers: ``pending``, the first send begun at or past the checkpoint
    (:func:`first_pending`; it and every later one unconfirmed), began at least
    ``safe_ms`` ago. The copies they may have stored are then sought on the target
    before anything is sent again."""
    return (
        pending is not None
        and pending.source_offset >= committed
        and now_ms - pending.sent_ms >= safe_ms
    )


# -- offset translation -------------------------------------------------------------


def format_mark(mark: Mark) -> str:
    """One line of a marks file."""
    return f"{mark.source_queue} {mark.source_offset} {mark.target_queue} {mark.target_offset}\n"


def parse_marks(text: str) -> list[Mark]:
    """The marks of a marks file; a torn last line (a crash mid-write) is skipped."""
    marks = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(part.isdigit() for part in parts):
            marks.append(Mark(*(int(part) for part in parts)))
    return marks


def translate(marks: Iterable[Mark], committed: Mapping[int, int]) -> dict[int, int]:
    """Per target queue, the lowest offset at which a consumer group resumes without
    missing a copy of any source message at or past its committed source offsets
    (``committed``: source queue -> offset; a source queue absent from it is read from
    its first copy).

    For each (source queue, target queue) pair the mark with the greatest source
    offset at or below the committed one bounds where the group's next copy can be;
    without one, the pair's first mark does (the group is behind the connector's
    first copy: what came before was never copied). The answer is the lowest bound
    over the source queues feeding each target queue. Target queues no mark names
    are absent: nothing was copied there yet.
    """
    pairs: dict[tuple[int, int], list[Mark]] = {}
    for mark in marks:
        pairs.setdefault((mark.source_queue, mark.target_queue), []).append(mark)
    resume: dict[int, int] = {}
    for (source_queue, queue), pair_marks in pairs.items():
        pair_marks.sort()
        at = committed.get(source_queue, -1)
        reached = [mark for mark in pair_marks if mark.source_offset <= at]
        bound = (reached[-1] if reached else pair_marks[0]).target_offset
        resume[queue] = min(bound, resume.get(queue, bound))
    return resume
