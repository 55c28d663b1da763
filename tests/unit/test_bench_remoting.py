"""``rip5 bench remoting``'s batch bodies: each send's messages get fresh ids."""

from __future__ import annotations

import pytest

from protocol.remoting import messages
from rip5.bench.remoting import BatchBodies


def test_every_batch_body_carries_fresh_ids_and_parses() -> None:
    bodies = BatchBodies(3, b"x" * 1024, "ABCD0001ABCD0001")
    first, second = messages.parse_batch(bodies.next()), messages.parse_batch(bodies.next())
    ids = [r.properties[messages.UNIQUE_ID] for r in first + second]
    assert ids == [f"ABCD0001ABCD0001{n:016X}" for n in range(6)]
    assert all(len(i) == 32 for i in ids)
    assert all(r.body == b"x" * 1024 and r.properties[messages.TAGS] == "bench" for r in first)
    with pytest.raises(ValueError, match="16 hex digits"):
        BatchBodies(1, b"x", "ABCD")
