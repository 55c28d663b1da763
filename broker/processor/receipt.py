"""Receipt handles: self-describing, signed with the cluster secret.

A handle carries everything any broker needs to ack or renew a delivery
against storage (group, topic, queue id, offset, pop generation, delivery
attempt, expiry, message id), so no broker keeps receipt state: a handle
issued by one broker is honoured by every other broker of the cluster.

Format (version 2): ``base64url(payload || mac)`` without padding, where
``payload`` is a fixed header (version, expiry, offset, generation, queue id,
attempt) followed by three length-prefixed UTF-8 strings (group, topic,
message id), and ``mac`` is keyed BLAKE2b-128 of ``payload`` under the secret
(a secret longer than BLAKE2b's 64-byte key is SHA-256 hashed first).
Version 1 (HMAC-SHA256, three times the CPU per handle) is no longer
accepted: a handle lives only as long as its invisible duration, so brokers
of both versions side by side during an upgrade only cost redeliveries.

A forged, truncated or altered handle fails the MAC; an expired one
(``invisible_until_ms`` passed) is refused too, as the RocketMQ proxy does.
A valid MAC proves the broker issued the handle, not that it is current:
storage refuses a stale generation.

PURE.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import struct

from broker.domain import QueueRef, Receipt
from broker.errors import BrokerError, Reason
from protocol.positional import positional

VERSION = 2
_HEADER = struct.Struct(">BqqqiI")  # version, expiry ms, offset, generation, queue id, attempt
_MAC_BYTES = 16
_TEXT_MAX = 0xFFFF


_KEY_BYTES_MAX = 64  # BLAKE2b's key limit


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


@functools.lru_cache(maxsize=16)
def _keyed(secret: bytes) -> hashlib.blake2b:
    """BLAKE2b keyed with ``secret``, before any payload (copied per handle:
    a copy skips hashing the key block again)."""
    key = secret if len(secret) <= _KEY_BYTES_MAX else hashlib.sha256(secret).digest()
    return hashlib.blake2b(key=key, digest_size=_MAC_BYTES)


def _mac(secret: bytes, payload: bytes) -> bytes:
    signer = _keyed(secret).copy()
    signer.update(payload)
    return signer.digest()


_U16 = struct.Struct(">H")
_PADDING = ("", "===", "==", "=")  # by the unpadded length modulo 4
_new_receipt = positional(Receipt)  # one per handle decoded


def _text(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > _TEXT_MAX:
        raise ValueError("receipt field too long")
    return _U16.pack(len(raw)) + raw


@functools.lru_cache(maxsize=4096)
def _group_and_topic(group: str, topic: str) -> bytes:
    """The two texts every handle of one receive shares."""
    return _text(group) + _text(topic)


def encode(receipt: Receipt, secret: bytes) -> str:
    """The handle string for ``receipt``."""
    return encode_fields(
        receipt.group,
        receipt.queue,
        receipt.offset,
        receipt.generation,
        receipt.delivery_attempt,
        receipt.invisible_until_ms,
        receipt.message_id,
        secret,
    )


def encode_fields(
    group: str,
    queue: QueueRef,
    offset: int,
    generation: int,
    delivery_attempt: int,
    invisible_until_ms: int,
    message_id: str,
    secret: bytes,
) -> str:
    """The handle string for the receipt of these fields (as :func:`encode`, without
    building the receipt: one per delivered message)."""
    payload = (
        _HEADER.pack(
            VERSION, invisible_until_ms, offset, generation, queue.queue_id, delivery_attempt
        )
        + _group_and_topic(group, queue.topic)
        + _text(message_id)
    )
    raw = binascii.b2a_base64(payload + _mac(secret, payload), newline=False)
    return raw.translate(_TO_URLSAFE).rstrip(b"=").decode()


def _invalid(why: str) -> BrokerError:
    return BrokerError.of(Reason.INVALID_RECEIPT_HANDLE, f"receipt handle is {why}")


def decode(handle: str, secret: bytes, now_ms: int) -> Receipt:
    """The receipt a handle proves; raises INVALID_RECEIPT_HANDLE if forged or expired."""
    try:
        # As base64.urlsafe_b64decode: characters outside the alphabet are dropped.
        padded = (handle + _PADDING[len(handle) & 3]).encode("ascii")
        raw = binascii.a2b_base64(padded.translate(_FROM_URLSAFE))
    except (binascii.Error, ValueError):
        raise _invalid("malformed") from None
    if len(raw) < _HEADER.size + _MAC_BYTES:
        raise _invalid("malformed")
    payload = raw[:-_MAC_BYTES]
    if not hmac.compare_digest(raw[-_MAC_BYTES:], _mac(secret, payload)):
        raise _invalid("not issued by this cluster")
    version, expiry_ms, offset, generation, queue_id, attempt = _HEADER.unpack_from(payload)
    if version != VERSION:
        raise _invalid(f"of unknown version {version}")
    if expiry_ms <= now_ms:
        raise _invalid("expired")
    # Three length-prefixed texts: group, topic, message id (the MAC vouches for them).
    texts: list[str] = []
    end = _HEADER.size
    for _ in range(3):
        start = end + 2
        end = start + _U16.unpack_from(payload, end)[0]
        texts.append(payload[start:end].decode())
    group, topic, message_id = texts
    return _new_receipt(
        (group, QueueRef(topic, queue_id), offset, generation, attempt, expiry_ms, message_id)
    )
