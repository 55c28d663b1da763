"""Receipt handles: round trip, and every way a bad handle is refused."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.domain import QueueRef, Receipt
from broker.errors import BrokerError, Reason
from broker.processor import receipt

SECRET = b"cluster-secret"
NOW_MS = 1_700_000_000_000


def _receipt(**changes: object) -> Receipt:
    fields: dict[str, object] = {
        "group": "group-1",
        "queue": QueueRef("topic-1", 3),
        "offset": 42,
        "generation": 7,
        "delivery_attempt": 2,
        "invisible_until_ms": NOW_MS + 30_000,
        "message_id": "0102FC000000016F320B140EA200000002",
    }
    fields.update(changes)
    return Receipt(**fields)  # type: ignore[arg-type]


def _refused(handle: str, secret: bytes = SECRET, now_ms: int = NOW_MS) -> str:
    with pytest.raises(BrokerError) as caught:
        receipt.decode(handle, secret, now_ms)
    assert caught.value.reason is Reason.INVALID_RECEIPT_HANDLE
    return caught.value.message


def test_round_trip() -> None:
    original = _receipt()
    handle = receipt.encode(original, SECRET)
    assert handle.isascii()
    assert "=" not in handle
    assert receipt.decode(handle, SECRET, NOW_MS) == original


@given(
    group=st.text(min_size=1, max_size=40),
    topic=st.text(min_size=1, max_size=40),
    queue_id=st.integers(-1, 2**31 - 1),
    offset=st.integers(0, 2**62),
    generation=st.integers(0, 2**62),
    attempt=st.integers(1, 1000),
)
def test_round_trip_any_values(
    group: str, topic: str, queue_id: int, offset: int, generation: int, attempt: int
) -> None:
    original = _receipt(
        group=group,
        queue=QueueRef(topic, queue_id),
        offset=offset,
        generation=generation,
        delivery_attempt=attempt,
    )
    assert receipt.decode(receipt.encode(original, SECRET), SECRET, NOW_MS) == original


def test_other_secret_is_refused() -> None:
    handle = receipt.encode(_receipt(), b"another cluster")
    assert "not issued" in _refused(handle)


def test_every_altered_byte_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(receipt.encode(_receipt(), SECRET) + "=="))
    for index in range(len(raw)):
        altered = bytearray(raw)
        altered[index] ^= 0x01
        _refused(base64.urlsafe_b64encode(bytes(altered)).decode().rstrip("="))


def test_truncated_and_garbage_are_refused() -> None:
    handle = receipt.encode(_receipt(), SECRET)
    for cut in (0, 1, 10, len(handle) // 2, len(handle) - 1):
        _refused(handle[:cut])
    assert "malformed" in _refused("not a handle!")
    assert "malformed" in _refused("abc")


def test_expired_is_refused() -> None:
    handle = receipt.encode(_receipt(invisible_until_ms=NOW_MS), SECRET)
    assert "expired" in _refused(handle, now_ms=NOW_MS)
    assert receipt.decode(handle, SECRET, NOW_MS - 1).offset == 42
