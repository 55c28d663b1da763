"""Tag filter expressions, matched as RocketMQ does.

``*`` or an empty expression matches every message (a ``*`` inside a
list, as in ``a || *``, is just a tag, as in RocketMQ). Otherwise the
expression is split on ``||``, each part is trimmed, empty parts are dropped,
and a message matches when its tag equals one of the parts exactly; an
untagged message matches no specific tag.

The broker and the storage node's queue state machine both use this module,
so a message is filtered the same way wherever the filter runs.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

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
