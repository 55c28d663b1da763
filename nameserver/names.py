"""Name rules for topics and consumer groups (RocketMQ's, so names valid there
are valid here and the reverse).

A name is 1..127 (topic) or 1..120 (consumer group) characters, each an ASCII
letter, a digit, or one of ``%``, ``-``, ``_``, ``|``. Errors name the rule
broken and, for a bad character, the character and its position.

PURE.
"""

from __future__ import annotations

import string

from nameserver.errors import InvalidName

TOPIC_LENGTH_MAX = 127
CONSUMER_GROUP_LENGTH_MAX = 120
CLUSTER_LENGTH_MAX = 127
NAME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "%-_|")
_ALLOWED = "letters a-z A-Z, digits 0-9, '%', '-', '_', '|'"


def validate_topic(name: str) -> None:
    """Raise :class:`InvalidName` unless ``name`` is a valid topic name."""
    _validate("topic", name, TOPIC_LENGTH_MAX)


def validate_consumer_group(name: str) -> None:
    """Raise :class:`InvalidName` unless ``name`` is a valid consumer group name."""
    _validate("consumer group", name, CONSUMER_GROUP_LENGTH_MAX)


def validate_cluster(name: str) -> None:
    """Raise :class:`InvalidName` unless ``name`` is a valid cluster name (topic rules)."""
    _validate("cluster", name, CLUSTER_LENGTH_MAX)


def _validate(kind: str, name: str, length_max: int) -> None:
    if not name:
        raise InvalidName(f"{kind} name is empty")
    if len(name) > length_max:
        raise InvalidName(
            f"{kind} name is {len(name)} characters long; the maximum is {length_max}"
        )
    for position, character in enumerate(name):
        if character not in NAME_CHARACTERS:
            raise InvalidName(
                f"{kind} name {name!r} has {character!r} at position {position}; "
                f"allowed: {_ALLOWED}"
            )
