"""Subscription filters: the broker's checks on a subscription's expression.

TAG expressions are parsed and matched by ``protocol.filters`` (shared with
the storage partition, so a filter means the same wherever it runs): ``*`` or
empty matches every message; otherwise the expression is split on ``||``,
each part trimmed, and a message matches when its tag equals one part
exactly (an untagged message matches no specific tag). SQL92 expressions are
compiled by ``protocol.sql92`` and evaluated by the storage node before
messages leave it. A bad expression of either kind is refused here, at
subscribe time, as ILLEGAL_FILTER_EXPRESSION with the position of the fault.

PURE.
"""

from __future__ import annotations

from broker.errors import BrokerError, Reason
from protocol.filters import FilterKind, MessageFilter, TagFilter
from protocol.sql92 import FilterExpressionError


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


def parse_filter(kind: FilterKind, expression: str) -> MessageFilter:
    """The filter for a subscription, checked; unspecified kind reads as TAG."""
    if kind is not FilterKind.SQL:
        return MessageFilter(FilterKind.TAG, parse_tag_expression(expression).expression())
    try:
        return MessageFilter.of(FilterKind.SQL, expression)
    except FilterExpressionError as error:
        raise BrokerError.of(Reason.ILLEGAL_FILTER_EXPRESSION, str(error)) from None
