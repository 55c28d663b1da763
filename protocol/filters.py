"""Tag filter expressions, matched as RocketMQ does.

``*`` or an empty expression matches every message (a ``*`` inside a
list, as in ``a || *``, is just a tag, as in RocketMQ). Otherwise the
expression is split on ``||``, each part is trimmed, empty parts are dropped,
and a message matches when its tag equals one of the parts exactly; an
untagged message matches no specific tag.

The broker and the storage node's queue state machine both use this module,
so a message is filtered the same way wherever the filter runs.

:class:`MessageFilter` is a subscription's filter of either kind (TAG or
SQL92, see ``protocol.sql92``) as one value: what a receive carries from the
broker to storage.

PURE.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from protocol import sql92

MATCH_ALL = "*"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag expression; ``tags`` empty means "match everything"."""

    tags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        """The filter for a subscription expression such as ``"a || b"`` or ``"*"``."""
        stripped = expression.strip()
        if stripped in ("", MATCH_ALL):
            return cls()
        parts = {part.strip() for part in stripped.split("||")}
        parts.discard("")
        return cls(frozenset(parts))

    @property
    def matches_all(self) -> bool:
        """Whether every message, tagged or not, matches."""
        return not self.tags

    def matches(self, tag: str) -> bool:
        """Whether a message with ``tag`` ("" for untagged) passes the filter."""
        if not self.tags:
            return True
        return tag != "" and tag in self.tags

    def expression(self) -> str:
        """A canonical expression that parses back to this filter."""
        if not self.tags:
            return MATCH_ALL
        return "||".join(sorted(self.tags))


class FilterKind(enum.IntEnum):
    """How a subscription expression is written (the values of the v2 wire enum)."""

    UNSPECIFIED = 0
    TAG = 1
    SQL = 2


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """A subscription's filter as it travels from the broker to storage: kind and expression.

    The one value a receive (and a pull) carries; build it with :meth:`of`, which
    checks the expression (a bad SQL92 expression raises
    ``protocol.sql92.FilterExpressionError`` naming the position). A TAG
    expression is kept in its canonical form, so equal filters compare equal.
    Matching reuses the compiled form: ``sql92.parse`` keeps the last
    expressions compiled, so no message ever re-parses its filter.
    """

    kind: FilterKind = FilterKind.TAG
    expression: str = MATCH_ALL

    @classmethod
    def of(cls, kind: FilterKind, expression: str) -> MessageFilter:
        """The filter for ``expression`` of ``kind`` (UNSPECIFIED reads as TAG), checked."""
        if kind is FilterKind.SQL:
            sql92.parse(expression)
            return cls(FilterKind.SQL, expression)
        return cls(FilterKind.TAG, TagFilter.parse(expression).expression())

    @property
    def is_sql92(self) -> bool:
        """Whether the filter tests message properties (else it tests tags only)."""
        return self.kind is FilterKind.SQL

    def tag_filter(self) -> TagFilter:
        """The tag test of the filter: the filter itself for TAG, everything for SQL92."""
        if self.kind is FilterKind.SQL:
            return TagFilter()
        return _tag_filter(self.expression)

    def sql92_filter(self) -> sql92.Sql92Filter:
        """The compiled SQL92 expression (a SQL92 filter only; cached by ``sql92.parse``)."""
        if self.kind is not FilterKind.SQL:
            raise ValueError(f"a {self.kind.name} filter has no SQL92 expression")
        return sql92.parse(self.expression)

    def matches(
        self, tag: str, properties: Iterable[tuple[str, str]] = (), keys: Sequence[str] = ()
    ) -> bool:
        """Whether a message with this tag ("" for none), these user properties and keys
        passes the filter (SQL92 sees them as ``sql92.visible_properties`` says)."""
        if self.kind is FilterKind.SQL:
            return sql92.parse(self.expression).matches(
                sql92.visible_properties(properties, tag, keys)
            )
        return _tag_filter(self.expression).matches(tag)


@functools.lru_cache(maxsize=256)
def _tag_filter(expression: str) -> TagFilter:
    """``TagFilter.parse``, remembered for the last expressions seen."""
    return TagFilter.parse(expression)
