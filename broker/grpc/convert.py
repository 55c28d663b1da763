"""RocketMQ v2 protobuf <-> broker domain, both directions.

Conversion only: no lookups, no policy. Malformed wire values become
:class:`BrokerError` (MESSAGE_CORRUPTED and friends) naming the field.

PURE.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib

from google.protobuf import duration_pb2, timestamp_pb2
from isal.isal_zlib import crc32

from broker.domain import (
    Delivery,
    GroupInfo,
    HalfMessage,
    Message,
    PulledMessage,
    QueueInfo,
    TopicInfo,
    new_message,
)
from broker.errors import BrokerError, Reason
from broker.processor.filter import parse_filter
from broker.remoting.convert import broker_name
from protocol.filters import FilterKind, MessageFilter
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.vocabulary import MessageType, Permission

BROKER_NAME = "rip5"
PUBLISH_BODY_BYTES_MAX = 4 * 1024 * 1024
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
PRODUCER_SEND_ATTEMPTS = 3


def duration_ms(duration: duration_pb2.Duration) -> int:
    """A protobuf Duration in milliseconds."""
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def timestamp_ms(stamp: timestamp_pb2.Timestamp) -> int:
    """A protobuf Timestamp in epoch milliseconds."""
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def to_timestamp(epoch_ms: int) -> timestamp_pb2.Timestamp:
    """Epoch milliseconds as a protobuf Timestamp."""
    return timestamp_pb2.Timestamp(seconds=epoch_ms // 1000, nanos=(epoch_ms % 1000) * 1_000_000)


def to_duration(ms: int) -> duration_pb2.Duration:
    """Milliseconds as a protobuf Duration."""
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _corrupted(what: str) -> BrokerError:
    return BrokerError.of(Reason.MESSAGE_CORRUPTED, what)


def _check_digest(kind: int, checksum: str, body: bytes) -> None:
    if kind == pb.CRC32:
        crc = crc32(body)  # zlib's, at several times the speed (one per sent message)
        expected = f"{crc:08X}"
        # Python clients write 8 hex digits, Node clients decimal: accept both.
        if checksum == expected or checksum.upper() in (expected, str(crc)):
            return
        raise _corrupted("message body does not match its CRC32 digest")
    if kind == pb.MD5:
        actual = hashlib.md5(body).hexdigest()
    elif kind == pb.SHA1:
        actual = hashlib.sha1(body).hexdigest()
    else:
        return
    if checksum.lower() != actual:
        raise _corrupted("message body does not match its digest")


_MESSAGE_TYPES = {int(kind): kind for kind in MessageType}
_V2_PERMISSIONS: dict[Permission, pb.Permission] = {
    Permission.NONE: pb.NONE,
    Permission.READ: pb.READ,
    Permission.WRITE: pb.WRITE,
    Permission.READ_WRITE: pb.READ_WRITE,
}
"""The v2 wire number of each permission (v2 numbers them apart from ``PermName``)."""
_IDENTITY_ENCODINGS = (pb.IDENTITY, pb.ENCODING_UNSPECIFIED)


def message_from_pb(message: pb.Message) -> Message:
    """A sent message; the client's message id is kept as the message's identity.

    Runs once per sent message: empty repeated and map fields are not copied,
    and the domain message is built from its fields in one step.
    """
    system = message.system_properties
    message_type = _MESSAGE_TYPES.get(system.message_type)
    if message_type is None:
        raise _corrupted(f"unknown message type {system.message_type}")
    body = wire_body = message.body  # each read of a bytes field copies it
    encoding = system.body_encoding
    if encoding not in _IDENTITY_ENCODINGS:
        if encoding != pb.GZIP:
            raise _corrupted(f"unknown body encoding {encoding}")
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            raise _corrupted("message body is not valid gzip") from None
    digest = system.body_digest  # unset: an empty default, whose empty checksum is skipped
    checksum = digest.checksum
    if checksum:
        _check_digest(digest.type, checksum, wire_body)
    keys = system.keys
    properties = message.user_properties
    born = system.born_timestamp
    return new_message(
        (
            message.topic.name,
            body,
            system.message_id,
            message_type,
            system.tag or None,  # an empty tag is no tag, as in the proxy
            tuple(keys) if keys else (),
            # A comprehension reads the map natively; dict(map) goes through the
            # Mapping ABC in Python (twice the time a message with properties).
            {key: properties[key] for key in properties} if properties else {},
            system.message_group if system.HasField("message_group") else None,
            born.seconds * 1000 + born.nanos // 1_000_000,  # timestamp_ms, inline
            system.born_host,
            (
                timestamp_ms(system.delivery_timestamp)
                if system.HasField("delivery_timestamp")
                else None
            ),
            system.queue_id if system.HasField("queue_id") else None,
            None,  # dead_letter_of: a sent message is nobody's dead letter
        )
    )


def filter_from_pb(expression: pb.FilterExpression) -> MessageFilter:
    """The subscription filter of a receive request or a subscription setting, checked."""
    try:
        kind = FilterKind(expression.type)
    except ValueError:
        raise BrokerError.of(
            Reason.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {expression.type}"
        ) from None
    return parse_filter(kind, expression.expression)


def _fill_stored(
    stored: pb.Message,
    message: Message,
    store_timestamp_ms: int,
    queue_id: int,
    namespace: str,
    digest: bool = True,
) -> None:
    """Fill the empty ``stored`` with a stored message as the server hands it out:
    MD5 upper-case digest (unless not ``digest``), identity body.

    Filled in place field by field: about half the CPU of building the nested
    messages through constructors (this runs once per delivered message).
    """
    stored.body = message.body
    stored.topic.name = message.topic
    if namespace:
        stored.topic.resource_namespace = namespace
    if message.user_properties:
        stored.user_properties.update(message.user_properties)
    system = stored.system_properties
    if message.keys:
        system.keys.extend(message.keys)
    system.message_id = message.message_id
    if digest:
        body_digest = system.body_digest
        body_digest.type = pb.MD5
        body_digest.checksum = hashlib.md5(message.body).hexdigest().upper()
    system.body_encoding = pb.IDENTITY
    system.message_type = message.message_type  # type: ignore[assignment]
    _set_timestamp(system.born_timestamp, message.born_timestamp_ms)
    system.born_host = message.born_host
    _set_timestamp(system.store_timestamp, store_timestamp_ms)
    system.queue_id = queue_id
    if message.tag is not None:
        system.tag = message.tag
    if message.message_group is not None:
        system.message_group = message.message_group
    if message.delivery_timestamp_ms is not None:
        _set_timestamp(system.delivery_timestamp, message.delivery_timestamp_ms)


def _set_timestamp(stamp: timestamp_pb2.Timestamp, epoch_ms: int) -> None:
    stamp.seconds, ms = divmod(epoch_ms, 1000)
    stamp.nanos = ms * 1_000_000


def fill_delivered(
    delivered: pb.Message, delivery: Delivery, namespace: str, store_host: str
) -> None:
    """Fill the empty ``delivered`` with a message as the consumer receives it: with
    its handle, offset and attempt (in place: a response's own message field, so
    nothing is copied into the response afterwards)."""
    popped = delivery.popped
    message = popped.message
    _fill_stored(delivered, message, popped.store_timestamp_ms, popped.queue.queue_id, namespace)
    system = delivered.system_properties
    system.store_host = store_host
    system.receipt_handle = delivery.receipt_handle
    system.queue_offset = popped.offset
    system.delivery_attempt = popped.delivery_attempt
    if message.dead_letter_of is not None:
        system.dead_letter_queue.topic = message.dead_letter_of[0]
        system.dead_letter_queue.message_id = message.dead_letter_of[1]


def fill_pulled(
    pulled_pb: pb.Message,
    pulled: PulledMessage,
    namespace: str,
    store_host: str,
    *,
    digest: bool = True,
) -> None:
    """Fill the empty ``pulled_pb`` with a message read by offset: with its offset, and
    no receipt handle (a pull is not a delivery to finish); no body digest unless
    ``digest`` (a replicator's pull: ``protocol.rocketmq.pull.REPLICATOR_HEADER``)."""
    message = pulled.message
    _fill_stored(
        pulled_pb, message, pulled.store_timestamp_ms, pulled.queue.queue_id, namespace, digest
    )
    system = pulled_pb.system_properties
    system.store_host = store_host
    system.queue_offset = pulled.offset
    if message.dead_letter_of is not None:
        system.dead_letter_queue.topic = message.dead_letter_of[0]
        system.dead_letter_queue.message_id = message.dead_letter_of[1]


def half_message_pb(half: HalfMessage, namespace: str = "") -> pb.Message:
    """A half message as a check-back carries it to the producer (no receipt handle)."""
    stored = pb.Message()
    _fill_stored(stored, half.message, half.store_timestamp_ms, half.queue.queue_id, namespace)
    return stored


def endpoints_or(requested: pb.Endpoints, fallback: pb.Endpoints) -> pb.Endpoints:
    """The endpoints the client reached us by, or ours when it named none."""
    return requested if requested.addresses else fallback


def endpoints_from_address(address: str) -> pb.Endpoints:
    """``host:port`` as v2 Endpoints (IPv4 literal, IPv6 in brackets, else a domain name)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host.count(".") == 3 and host.replace(".", "").isdigit():
        scheme = pb.IPv4
    elif ":" in host:
        scheme = pb.IPv6
    else:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def endpoint_text(endpoints: pb.Endpoints) -> str:
    """The first address of ``endpoints`` as ``host:port`` (empty if none)."""
    if not endpoints.addresses:
        return ""
    address = endpoints.addresses[0]
    return f"{address.host}:{address.port}"


def message_queue_pb(
    topic: TopicInfo,
    queue: QueueInfo,
    namespace: str,
    endpoints: pb.Endpoints,
    name: str = BROKER_NAME,
) -> pb.MessageQueue:
    """One queue of a route, served at ``endpoints`` by the broker called ``name``
    (always id 0: every broker is a master of every queue)."""
    return pb.MessageQueue(
        topic=pb.Resource(resource_namespace=namespace, name=topic.name),
        id=queue.queue_id,
        permission=_V2_PERMISSIONS[queue.permission],
        broker=pb.Broker(name=name, id=0, endpoints=endpoints),
        accept_message_types=sorted(int(t) for t in topic.message_types),  # type: ignore[misc]
    )


def route_pb(topic: TopicInfo, namespace: str, endpoints: pb.Endpoints) -> list[pb.MessageQueue]:
    """The queues of a topic for QueryRoute, all at ``endpoints`` (the load-balancer
    deployment: the address the client used)."""
    return [message_queue_pb(topic, queue, namespace, endpoints) for queue in topic.queues]


def spread_route_pb(
    topic: TopicInfo, namespace: str, broker_addresses: list[str]
) -> list[pb.MessageQueue]:
    """The queues of a topic for QueryRoute, spread over the live brokers: queue i is
    served by ``broker_addresses[i % n]`` (named after its address), so a client's
    round robin over the queues spreads its calls over the brokers. Any broker can
    serve any queue; the spread only places the load."""
    if not broker_addresses:
        raise ValueError("a spread route needs at least one broker address")
    return [
        message_queue_pb(
            topic,
            queue,
            namespace,
            endpoints_from_address(broker_addresses[index % len(broker_addresses)]),
            name=broker_name(broker_addresses[index % len(broker_addresses)]),
        )
        for index, queue in enumerate(topic.queues)
    ]


def producer_settings_pb(client: pb.Settings) -> pb.Settings:
    """The settings reply for a producer: the client's own, with our limits and backoff."""
    reply = pb.Settings()
    reply.CopyFrom(client)
    reply.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=PRODUCER_SEND_ATTEMPTS,
            exponential_backoff=pb.ExponentialBackoff(
                initial=to_duration(10), max=to_duration(1000), multiplier=2.0
            ),
        )
    )
    reply.publishing.max_body_size = PUBLISH_BODY_BYTES_MAX
    reply.publishing.validate_message_type = True
    reply.metric.CopyFrom(pb.Metric(on=False))
    return reply


def consumer_settings_pb(client: pb.Settings, group: GroupInfo) -> pb.Settings:
    """The settings reply for a consumer: the group's retry policy, polling and FIFO flag."""
    reply = pb.Settings()
    reply.CopyFrom(client)
    # Clients read the customized backoff in whole seconds.
    reply.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=group.retry.max_delivery_attempts,
            customized_backoff=pb.CustomizedBackoff(
                next=[to_duration(ms // 1000 * 1000) for ms in group.retry.backoff_ms]
            ),
        )
    )
    reply.subscription.fifo = group.fifo
    reply.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
    reply.subscription.long_polling_timeout.CopyFrom(
        duration_pb2.Duration(seconds=LONG_POLLING_TIMEOUT_S)
    )
    reply.metric.CopyFrom(pb.Metric(on=False))
    return reply
