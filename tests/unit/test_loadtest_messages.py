"""The load generator's message building: renewed messages are new sends."""

from __future__ import annotations

import time

from loadtest.client import build_message, next_message_id, renew_messages
from protocol.rocketmq.v2 import definition_pb2 as pb


def test_message_ids_are_unique_and_shaped_like_uuids() -> None:
    ids = [next_message_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_renewed_messages_get_fresh_ids_and_born_times_and_keep_the_rest() -> None:
    messages = [build_message("t", b"body", "host", tag="a") for _ in range(3)]
    before = [pb.Message.FromString(m.SerializeToString()) for m in messages]
    for m in messages:
        m.system_properties.born_timestamp.seconds = 1  # long ago
    renew_messages(messages)
    now_s = time.time()
    ids = {m.system_properties.message_id for m in messages}
    assert len(ids) == 3
    assert ids.isdisjoint(b.system_properties.message_id for b in before)
    for renewed, old in zip(messages, before, strict=True):
        assert abs(renewed.system_properties.born_timestamp.seconds - now_s) < 60
        assert renewed.body == old.body
        assert renewed.system_properties.tag == "a"
        assert renewed.system_properties.body_digest == old.system_properties.body_digest
