"""Messages on the remoting wire: property strings, message batches and offset ids.

Properties travel as one string, ``name \\x01 value \\x02`` repeated. A batch
(SEND_BATCH_MESSAGE, or SEND_MESSAGE with ``batch`` set) is a body of
records, each::

    int32 total size   (the record's bytes, this field included)
    int32 magic        (0 from the clients)
    int32 body CRC     (0 from the clients)
    int32 flag
    int32 body length, body
    int16 properties length, properties

A stored message handed to a client (the body of CHECK_TRANSACTION_STATE,
and of a pull answer) is a MessageExt record, version 1::

    int32 total size, int32 magic (-626843481), int32 body CRC, int32 queue id,
    int32 flag, int64 queue offset, int64 physical offset, int32 sysFlag,
    int64 born timestamp, born host (4-byte IPv4 + int32 port),
    int64 store timestamp, store host (same), int32 reconsume times,
    int64 prepared transaction offset, int32 body length + body,
    int8 topic length + topic, int16 properties length + properties

An offset message id (the ``msgId`` of a send response) is 16 bytes in
upper-case hex: the store host's IPv4 address and port (4 + 4 bytes), then
8 bytes of position. RocketMQ puts the commit-log offset there; rip5 has
none, so the position is the queue id in the top 16 bits and the queue
offset in the low 48 bits (all ones when the message is not queued yet, as
a half message), which names the message together with its topic.

PURE.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from protocol.positional import positional
from protocol.remoting.errors import BodyError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# System property names a 4.x producer sets (MessageConst); the rest are the user's.
KEYS = "KEYS"
TAGS = "TAGS"
UNIQUE_ID = "UNIQ_KEY"
DELAY_LEVEL = "DELAY"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
DELIVER_AT_MS = "TIMER_DELIVER_MS"
DELAY_SEC = "TIMER_DELAY_SEC"
DELAY_MS = "TIMER_DELAY_MS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
SHARDING_KEY = "__SHARDINGKEY"
# ...and those the broker sets on a message given back for a retry.
RETRY_TOPIC = "RETRY_TOPIC"  # the topic the message was first sent to
RECONSUME_TIME = "RECONSUME_TIME"  # how often it was given back
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
KEY_SEPARATOR = " "

_RECORD_HEAD = struct.Struct(">iiiii")
_U16 = struct.Struct(">H")
_POSITION = struct.Struct(">4BIQ")
_STORE_HOST = struct.Struct(">4BI")
QUEUE_OFFSET_BITS = 48
UNQUEUED = (1 << QUEUE_OFFSET_BITS) - 1


def parse_properties(text: str) -> dict[str, str]:
    """The properties in ``text``; an entry without exactly one separator is skipped
    (as the Java client reads them)."""
    # A plain loop: for the few entries a message has, faster than any split-and-zip.
    properties: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, separator, value = item.partition(NAME_VALUE_SEPARATOR)
        if separator and name and NAME_VALUE_SEPARATOR not in value:
            properties[name] = value
    return properties


def format_properties(properties: Mapping[str, str]) -> str:
    """``properties`` as one property string."""
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
    )


class BatchRecord(NamedTuple):
    """One message of a batch body (a tuple: a batch of 32 builds 32 of them)."""

    flag: int
    body: bytes
    properties: dict[str, str]


new_batch_record = positional(BatchRecord)


def parse_batch(data: bytes) -> list[BatchRecord]:
    """The records of a batch body; BodyError naming the record that is cut short or
    whose sizes disagree."""
    # One pass: each record's fixed fields and lengths are read in place and checked
    # before anything is copied; the body is the one copy a record makes.
    records: list[BatchRecord] = []
    unpack_head = _RECORD_HEAD.unpack_from
    unpack_u16 = _U16.unpack_from
    head_size = _RECORD_HEAD.size
    size = len(data)
    position = 0
    while position < size:
        body_start = position + head_size
        if body_start > size:
            raise BodyError(f"batch record {len(records)} is cut short in its fixed fields")
        total, _magic, _crc, flag, body_length = unpack_head(data, position)
        body_end = body_start + body_length
        if body_length < 0 or body_end + 2 > size:
            raise BodyError(
                f"batch record {len(records)}: body length {body_length} runs past the body"
            )
        (properties_length,) = unpack_u16(data, body_end)
        end = body_end + 2 + properties_length
        if end > size:
            raise BodyError(
                f"batch record {len(records)}: properties length {properties_length} runs past "
                "the body"
            )
        if total != end - position:
            raise BodyError(
                f"batch record {len(records)}: total size {total} disagrees with its "
                f"{end - position} bytes"
            )
        try:
            text = str(data[body_end + 2 : end], "utf-8")
        except UnicodeDecodeError:
            raise BodyError(f"batch record {len(records)}: properties are not UTF-8") from None
        records.append(new_batch_record((flag, data[body_start:body_end], parse_properties(text))))
        position = end
    return records


def format_batch(records: list[BatchRecord]) -> bytes:
    """A batch body of ``records`` (as the clients write it: magic and CRC 0)."""
    out = bytearray()
    for record in records:
        properties = format_properties(record.properties).encode()
        total = _RECORD_HEAD.size + len(record.body) + 2 + len(properties)
        out += _RECORD_HEAD.pack(total, 0, 0, record.flag, len(record.body))
        out += record.body + _U16.pack(len(properties)) + properties
    return bytes(out)


MESSAGE_EXT_MAGIC = -626843481
_EXT_HEAD = struct.Struct(">iiiiiqqiq4BIq4BIiqi")
_U8 = struct.Struct(">B")


@dataclass(frozen=True, slots=True)
class MessageExt:
    """A stored message as a client reads it (hosts are ``ip:port``, IPv4)."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: dict[str, str]
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = "0.0.0.0:0"
    store_timestamp_ms: int = 0
    store_host: str = "0.0.0.0:0"
    physical_offset: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0


def encode_message_ext(message: MessageExt) -> bytes:
    """One MessageExt record; ValueError if the topic or properties are too long."""
    topic = message.topic.encode()
    properties = format_properties(message.properties).encode()
    if len(topic) > 255 or len(properties) > 0xFFFF:
        raise ValueError("topic or properties too long for a MessageExt record")
    total = _EXT_HEAD.size + len(message.body) + 1 + len(topic) + 2 + len(properties)
    born_host, born_port = _host_port(message.born_host)
    store_host, store_port = _host_port(message.store_host)
    head = _EXT_HEAD.pack(
        total, MESSAGE_EXT_MAGIC, message.body_crc, message.queue_id, message.flag,
        message.queue_offset, message.physical_offset, message.sys_flag,
        message.born_timestamp_ms, *born_host, born_port,
        message.store_timestamp_ms, *store_host, store_port,
        message.reconsume_times, message.prepared_transaction_offset, len(message.body),
    )  # fmt: skip
    return (
        head + message.body + _U8.pack(len(topic)) + topic + _U16.pack(len(properties)) + properties
    )


def parse_message_exts(data: bytes) -> list[MessageExt]:
    """The MessageExt records of ``data``; BodyError for a record cut short or of another
    magic."""
    out: list[MessageExt] = []
    position = 0
    while position < len(data):
        if position + _EXT_HEAD.size > len(data):
            raise BodyError(f"message record {len(out)} is cut short in its fixed fields")
        fields = _EXT_HEAD.unpack_from(data, position)
        total, magic, crc, queue_id, flag, queue_offset, physical, sys_flag, born_ms = fields[:9]
        born_host, born_port = fields[9:13], fields[13]
        store_ms, store_host, store_port = fields[14], fields[15:19], fields[19]
        reconsume, prepared, body_length = fields[20], fields[21], fields[22]
        if magic != MESSAGE_EXT_MAGIC:
            raise BodyError(f"message record {len(out)} has magic {magic}")
        end = position + total
        body_start = position + _EXT_HEAD.size
        topic_at = body_start + body_length
        if total < _EXT_HEAD.size or end > len(data) or body_length < 0 or topic_at + 1 > end:
            raise BodyError(f"message record {len(out)}: sizes run past the data")
        topic_end = topic_at + 1 + data[topic_at]
        if topic_end + 2 > end:
            raise BodyError(f"message record {len(out)}: topic runs past the record")
        (properties_length,) = _U16.unpack_from(data, topic_end)
        if topic_end + 2 + properties_length != end:
            raise BodyError(f"message record {len(out)}: total size disagrees with its parts")
        try:
            topic = data[topic_at + 1 : topic_end].decode()
            properties = parse_properties(data[topic_end + 2 : end].decode())
        except UnicodeDecodeError:
            raise BodyError(f"message record {len(out)}: text is not UTF-8") from None
        out.append(
            MessageExt(
                topic, queue_id, queue_offset, data[body_start:topic_at], properties, flag,
                sys_flag, born_ms, _host_text(born_host, born_port), store_ms,
                _host_text(store_host, store_port), physical, reconsume, prepared, crc,
            )
        )  # fmt: skip
        position = end
    return out


def _host_port(address: str) -> tuple[tuple[int, int, int, int], int]:
    host, _, port = address.rpartition(":")
    return _ipv4(host), int(port) if port.isdigit() else 0


def _host_text(ip: tuple[int, ...], port: int) -> str:
    return f"{'.'.join(map(str, ip))}:{port}"


def offset_message_id(host: str, port: int, queue_id: int, offset: int) -> str:
    """The offset message id of a message at ``offset`` (-1: not queued) of queue
    ``queue_id``, stored through ``host:port`` (an IPv4 address; other hosts read as
    0.0.0.0)."""
    return store_host_hex(host, port) + offset_position_hex(queue_id, offset)


@functools.lru_cache(maxsize=64)  # a broker answers every send with its own few addresses
def store_host_hex(host: str, port: int) -> str:
    """The first half of an offset message id stored through ``host:port``: the IPv4
    address and port, in upper-case hex (16 digits)."""
    return _STORE_HOST.pack(*_ipv4(host), port & 0xFFFFFFFF).hex().upper()


def offset_position_hex(queue_id: int, offset: int) -> str:
    """The second half of an offset message id: the queue id and the offset (-1: not
    queued), in upper-case hex (16 digits); ValueError if they do not fit."""
    if not 0 <= queue_id < 1 << 16:
        raise ValueError(f"queue id {queue_id} does not fit 16 bits")
    position = UNQUEUED if offset < 0 else offset
    if position > UNQUEUED:
        raise ValueError(f"queue offset {offset} does not fit {QUEUE_OFFSET_BITS} bits")
    return f"{queue_id << QUEUE_OFFSET_BITS | position:016X}"


def parse_offset_message_id(text: str) -> tuple[str, int, int, int]:
    """(host, port, queue id, offset; -1 when not queued) of an offset message id;
    ValueError if it is not one."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"message id {text!r} is not hex") from None
    if len(raw) != _POSITION.size:
        raise ValueError(f"message id {text!r} is not {_POSITION.size} bytes")
    a, b, c, d, port, position = _POSITION.unpack(raw)
    offset = position & UNQUEUED
    return (
        f"{a}.{b}.{c}.{d}",
        port,
        position >> QUEUE_OFFSET_BITS,
        (-1 if offset == UNQUEUED else offset),
    )


@functools.lru_cache(maxsize=64)
def _ipv4(host: str) -> tuple[int, int, int, int]:
    parts = host.split(".")
    if len(parts) == 4 and all(part.isdigit() and int(part) < 256 for part in parts):
        a, b, c, d = (int(part) for part in parts)
        return a, b, c, d
    return 0, 0, 0, 0
