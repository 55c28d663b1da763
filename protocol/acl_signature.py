"""The official clients' request signature (RocketMQ gRPC v2 ``authorization`` header).

Every call of an official client with credentials carries two headers::

    x-mq-date-time: 20261127T151500Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>,
                    SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is the lowercase hex HMAC-SHA1 of the date-time text,
keyed by the user's secret. A verifier recomputes it with the secret of the
user the access key names, compares in constant time, and refuses a date
further than a skew bound from its own clock (a captured header replays only
within that window). The clients format their local time with a ``Z``
suffix, so the bound must also cover a client whose clock is set to a local
zone; the broker's default bound is 15 minutes.

Classic (4.x remoting) clients sign differently: ext fields ``AccessKey`` and
``Signature``, the signature being the base64 HMAC-SHA1 of every other ext
field's value, in key order, followed by the body (:func:`classic_signature`).
No date is signed, so nothing bounds a replay.

PURE: the caller passes the current time in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from protocol.acl import Unauthenticated

AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
SKEW_MS_DEFAULT = 15 * 60 * 1000
CLASSIC_ACCESS_KEY = "AccessKey"
CLASSIC_SIGNATURE = "Signature"


@dataclass(frozen=True, slots=True)
class Credential:
    """What an ``authorization`` header claims: who, over which headers, with which
    signature."""

    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Credential:
    """The credential in an ``authorization`` header; :class:`Unauthenticated` names
    what is malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Unauthenticated(
            f"authorization header: algorithm {algorithm!r}, expected {ALGORITHM}"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, equals, field = part.strip().partition("=")
        if equals:
            fields[key] = field
    missing = [key for key in ("Credential", "SignedHeaders", "Signature") if not fields.get(key)]
    if missing:
        raise Unauthenticated(f"authorization header: missing {', '.join(missing)}")
    return Credential(
        fields["Credential"],
        tuple(header.strip().lower() for header in fields["SignedHeaders"].split(";")),
        fields["Signature"],
    )


def sign(secret: str, date_time: str) -> str:
    """The signature of ``date_time`` with ``secret`` (lowercase hex HMAC-SHA1)."""
    return hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization(access_key: str, secret: str, date_time: str) -> str:
    """The ``authorization`` header value a client sends (for rip5's own callers)."""
    signature = sign(secret, date_time)
    return (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={signature}"
    )


def signed_headers(access_key: str, secret: str, now_ms: int) -> tuple[tuple[str, str], ...]:
    """The two headers a call signed at ``now_ms`` carries (for rip5's own callers)."""
    date_time = format_date_time(now_ms)
    return (
        (DATE_TIME_HEADER, date_time),
        (AUTHORIZATION_HEADER, authorization(access_key, secret, date_time)),
    )


def format_date_time(now_ms: int) -> str:
    """``now_ms`` (Unix milliseconds) as the ``x-mq-date-time`` header writes it (UTC)."""
    return datetime.fromtimestamp(now_ms / 1000, UTC).strftime(DATE_TIME_FORMAT)


def date_time_ms(date_time: str) -> int:
    """Unix milliseconds of an ``x-mq-date-time`` value; :class:`Unauthenticated` if it
    does not parse."""
    try:
        parsed = datetime.strptime(date_time, DATE_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise Unauthenticated(
            f"{DATE_TIME_HEADER} {date_time!r} is not a date-time like 20261127T151500Z"
        ) from None
    return int(parsed.timestamp() * 1000)


def verify(credential: Credential, secret: str, date_time: str, now_ms: int, skew_ms: int) -> None:
    """Raise :class:`Unauthenticated` unless ``credential`` signs ``date_time`` with
    ``secret`` and ``date_time`` is within ``skew_ms`` of ``now_ms``."""
    if DATE_TIME_HEADER not in credential.signed_headers:
        raise Unauthenticated(f"authorization header: SignedHeaders lacks {DATE_TIME_HEADER}")
    if abs(now_ms - date_time_ms(date_time)) > skew_ms:
        raise Unauthenticated(
            f"{DATE_TIME_HEADER} {date_time} is more than {skew_ms // 1000} s from the "
            "server's clock (stale or replayed request, or a wrong client clock)"
        )
    if not hmac.compare_digest(sign(secret, date_time), credential.signature.lower()):
        raise Unauthenticated(
            f"signature mismatch for user {credential.access_key!r} (wrong secret?)"
        )


def classic_signature(fields: Mapping[str, str], body: bytes, secret: str) -> str:
    """The signature a classic client puts in ext field ``Signature``: base64 HMAC-SHA1,
    keyed by the secret, of every other ext field's value in key order, then the body."""
    content = "".join(value for key, value in sorted(fields.items()) if key != CLASSIC_SIGNATURE)
    digest = hmac.new(secret.encode(), content.encode() + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def verify_classic(fields: Mapping[str, str], body: bytes, secret: str) -> None:
    """Raise :class:`Unauthenticated` unless ``fields`` carry the classic signature of
    themselves and ``body`` with ``secret``."""
    expected = classic_signature(fields, body, secret)
    if not hmac.compare_digest(expected, fields.get(CLASSIC_SIGNATURE, "")):
        raise Unauthenticated(
            f"signature mismatch for user {fields.get(CLASSIC_ACCESS_KEY, '')!r} (wrong secret?)"
        )
