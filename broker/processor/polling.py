"""Long-polling time for ReceiveMessage, after the RocketMQ proxy.

The poll asked for (or, if absent, half the client's remaining time) is
clamped to [5 s, 20 s]; when that exceeds the time the client has left, the
poll shrinks to fit, and a client with less than 5 s left is refused with
ILLEGAL_POLLING_TIME. Unlike the proxy, the poll always ends
``reply_margin_ms`` before the client's deadline, so the final status and
delivery timestamp reach the client before it gives up (a reply at the very
deadline is a DEADLINE_EXCEEDED in the client).

PURE.
"""

from __future__ import annotations

from broker.errors import BrokerError, Reason

POLL_MS_MIN = 5_000
POLL_MS_MAX = 20_000
REPLY_MARGIN_MS = 500
DEFAULT_REQUEST_TIMEOUT_MS = 3_000


def plan_poll_ms(
    requested_ms: int | None,
    remaining_ms: int | None,
    *,
    reply_margin_ms: int = REPLY_MARGIN_MS,
) -> int:
    """How long a receive may wait for messages; ``remaining_ms`` None means no deadline."""
    if requested_ms is None:
        if remaining_ms is None:
            requested_ms = POLL_MS_MAX
        else:
            requested_ms = remaining_ms - DEFAULT_REQUEST_TIMEOUT_MS // 2
    poll_ms = min(max(requested_ms, POLL_MS_MIN), POLL_MS_MAX)
    if remaining_ms is None:
        return poll_ms
    if remaining_ms < POLL_MS_MIN:
        raise BrokerError.of(
            Reason.ILLEGAL_POLLING_TIME,
            f"the call has {remaining_ms} ms left, less than the {POLL_MS_MIN} ms minimum poll",
        )
    return max(0, min(poll_ms, remaining_ms - reply_margin_ms))
