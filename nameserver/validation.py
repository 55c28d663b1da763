"""The limits and checks of records a command creates or replaces in the metadata.

Each check raises :class:`nameserver.errors.BadRequest` naming the field at
fault and its bounds; :class:`nameserver.state.MetadataState` runs them before
its first write, so a command that fails changes nothing.

PURE.
"""

from __future__ import annotations

from nameserver.errors import BadRequest
from nameserver.records import ConsumerGroup, RetryPolicy, Topic
from protocol import routing

GROUP_COUNT_MAX = 65_536
REPLICATION_FACTOR_MAX = 7
QUEUE_COUNT_MAX = 1024
MAX_DELIVERY_ATTEMPTS_MAX = 1000
LEASE_NAME_LENGTH_MAX = 255
CREATE_TOPICS_MAX = 1000
"""Topics in one ``CreateTopics`` entry: about 40 KB of log entry and 1,000 of
the watch history's changes (10,000 by default), so one entry neither stalls
the raft log nor pushes a watcher out of the history by itself."""


def check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise BadRequest(f"{what} must be in [{low}, {high}], got {value}")


def check_address(address: str) -> None:
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"address {address!r} is not host:port")


def check_topic(topic: Topic, replication_factor: int) -> None:
    """``topic``'s settings, in a cluster keeping ``replication_factor`` replicas of
    each raft group."""
    if not routing.is_dead_letter_topic(topic.name):
        check_range(f"topic {topic.name!r}: queue_count", topic.queue_count, 1, QUEUE_COUNT_MAX)
    if topic.retention_ms < 1:
        raise BadRequest(
            f"topic {topic.name!r}: retention_ms must be >= 1, got {topic.retention_ms}"
        )
    for what in ("retention_bytes", "local_retention_ms", "local_retention_bytes"):
        value = getattr(topic, what)
        if value < 0:
            raise BadRequest(f"topic {topic.name!r}: {what} must be >= 0 (0: none), got {value}")
    if topic.read_replicas and replication_factor < 2:
        raise BadRequest(
            f"topic {topic.name!r}: read_replicas needs followers to read from, but cluster "
            f"{topic.cluster!r} keeps {replication_factor} replica of each raft group"
        )


def check_consumer_group(group: ConsumerGroup) -> None:
    check_range(
        f"consumer group {group.name!r}: max_delivery_attempts",
        group.max_delivery_attempts,
        1,
        MAX_DELIVERY_ATTEMPTS_MAX,
    )
    _check_retry(group.name, group.retry)


def _check_retry(name: str, retry: RetryPolicy) -> None:
    where = f"consumer group {name!r}: retry"
    if retry.initial_backoff_ms < 0 or retry.max_backoff_ms < retry.initial_backoff_ms:
        raise BadRequest(
            f"{where} needs 0 <= initial_backoff_ms <= max_backoff_ms, got "
            f"{retry.initial_backoff_ms} and {retry.max_backoff_ms}"
        )
    if not retry.multiplier >= 1.0:
        raise BadRequest(f"{where} multiplier must be >= 1, got {retry.multiplier}")
    if any(b < 0 for b in retry.backoff_ms):
        raise BadRequest(f"{where} backoff_ms must all be >= 0, got {list(retry.backoff_ms)}")


def check_lease_request(name: str, owner: str, ttl_ms: int) -> None:
    if not name or len(name) > LEASE_NAME_LENGTH_MAX:
        raise BadRequest(f"lease name must be 1..{LEASE_NAME_LENGTH_MAX} characters")
    if not owner:
        raise BadRequest(f"lease {name!r}: owner is empty")
    if ttl_ms < 1:
        raise BadRequest(f"lease {name!r}: ttl_ms must be >= 1, got {ttl_ms}")
