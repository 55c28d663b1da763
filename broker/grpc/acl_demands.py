"""What each MessagingService call asks of ACL 2.0: the action and the resources.

A call is allowed when, for SOME action of its demand, EVERY resource is
allowed (``protocol.acl.AclTables.check``). As RocketMQ 5.3 asks:

- sending (SendMessage, EndTransaction, RecallMessage): Pub on the topic;
- consuming (ReceiveMessage, Ack, ChangeInvisibleDuration, dead-lettering,
  PullMessage, offsets, QueryAssignment): Sub on the topic and on the group;
- QueryRoute: Pub or Sub on the topic (producers and consumers both ask);
- QueryOffset: Sub on the topic (it names no group);
- Heartbeat, Telemetry, NotifyClientTermination: only authentication (the
  Telemetry settings name topics and groups the later calls are checked on).

PURE.
"""

from __future__ import annotations

from typing import Any

from broker.acl_demand import GROUP, TOPIC, Demand
from protocol.acl import Action, ResourceType

_AUTHENTICATE_ONLY = frozenset({"Heartbeat", "Telemetry", "NotifyClientTermination"})
_CONSUMING = frozenset(
    {
        "ReceiveMessage",
        "AckMessage",
        "ChangeInvisibleDuration",
        "ForwardMessageToDeadLetterQueue",
        "PullMessage",
        "UpdateOffset",
        "GetOffset",
        "QueryAssignment",
        "SyncLiteSubscription",
    }
)


def demand_of(method: str, request: Any) -> Demand | None:
    """The demand of one call of ``method`` (a MessagingService method name) with
    ``request`` (its decoded protobuf); None: the caller need only be authenticated."""
    if method in _AUTHENTICATE_ONLY:
        return None
    if method == "SendMessage":
        topics = dict.fromkeys(message.topic.name for message in request.messages)
        return Demand((Action.PUB,), tuple((TOPIC, topic) for topic in topics))
    if method in ("EndTransaction", "RecallMessage"):
        return Demand((Action.PUB,), ((TOPIC, request.topic.name),))
    if method == "QueryRoute":
        return Demand((Action.PUB, Action.SUB), ((TOPIC, request.topic.name),))
    if method == "QueryOffset":
        return Demand((Action.SUB,), ((TOPIC, request.message_queue.topic.name),))
    if method in _CONSUMING:
        topic = (
            request.message_queue.topic.name
            if hasattr(request, "message_queue")
            else request.topic.name
        )
        return Demand((Action.SUB,), ((TOPIC, topic), (GROUP, request.group.name)))
    # A method added to the service later, not listed here yet: it demands All on the
    # cluster resource named after it (super users, and policies granting All on it).
    return Demand((Action.ALL,), ((ResourceType.CLUSTER, method),))
