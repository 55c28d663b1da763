"""Subscription filters.

TAG expressions are parsed and matched by ``protocol.filters`` (shared with
the storage partition, so a filter means the same wherever it runs): ``*`` or
empty matches every message; otherwise the expression is split on ``||``,
each part trimmed, and a message matches when its tag equals one part
exactly (an untagged message matches no specific tag). SQL92 expressions
are not evaluated yet: they are refused with UNSUPPORTED rather than
silently matching everything.

PURE.
"""

from __future__ import annotations

import enum

from broker.errors import BrokerError, Reason, unsupported
from protocol.filters import TagFilter


class FilterKind(enum.IntEnum):
    """How a subscription expression is written (values match the v2 wire enum)."""

    UNSPECIFIED = 0
    TAG = 1
    SQL = 2


def parse_tag_expression(expression: str) -> TagFilter:
    """The filter a TAG expression describes (parsed by the shared ``protocol.filters``).

    An expression made only of separators (``||``) names no tag: it is refused
    rather than read as "everything".
    """
    text = expression.strip()
    if text and text != "*" and not text.replace("|", "").strip():
        raise BrokerError.of(
            Reason.ILLEGAL_FILTER_EXPRESSION, f"tag expression {expression!r} names no tag"
        )
    return TagFilter.parse(expression)


def parse_filter(kind: FilterKind, expression: str) -> TagFilter:
    """The filter for a subscription; unspecified kind reads as TAG."""
    if kind is FilterKind.SQL:
        raise unsupported("SQL92 filter expressions")
    return parse_tag_expression(expression)
