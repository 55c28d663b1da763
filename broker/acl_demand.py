"""What a client call asks of ACL 2.0, whatever its protocol: actions and resources.

A call is allowed when, for SOME action of its demand, EVERY resource is
allowed (``protocol.acl.AclTables.check``). Each protocol's adapter says what
its calls demand (``broker/grpc/acl_demands.py``,
``broker/remoting/acl_demands.py``).

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.acl import Action, ResourceType

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


@dataclass(frozen=True, slots=True)
class Demand:
    """Any one of ``actions`` on every one of ``resources`` lets the call through."""

    actions: tuple[Action, ...]
    resources: tuple[tuple[ResourceType, str], ...]


def topic_resource(topic: str) -> tuple[ResourceType, str]:
    """The resource a topic name stands for: a group's retry or dead-letter topic is its
    group (as RocketMQ checks them), any other topic itself."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return (GROUP, topic[len(prefix) :])
    return (TOPIC, topic)
