"""The load generator's message building: every request it sends is a new send."""

from __future__ import annotations

import time

import pytest

from loadtest import client
from loadtest.client import SendRequests, build_message, next_message_id
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb


def test_message_ids_are_unique_and_shaped_like_uuids() -> None:
    ids = [next_message_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def _without_id_and_born_time(message: pb.Message) -> pb.Message:
    copy = pb.Message()
    copy.CopyFrom(message)
    copy.system_properties.ClearField("message_id")
    copy.system_properties.ClearField("born_timestamp")
    return copy


def test_each_request_carries_every_message_with_fresh_ids_and_born_time() -> None:
    messages = [
        build_message("t", b"body", "host", tag="a"),
        build_message("t", b"x" * 300, "host", keys=["k1", "k2"]),  # a two-byte length
        build_message("fifo", b"", "host", message_group="g"),
    ]
    messages[0].user_properties["p"] = "v"
    messages[1].system_properties.born_timestamp.seconds = 1  # long ago
    requests = SendRequests(messages)
    seen: set[str] = set()
    for _ in range(3):
        before_s = time.time()
        request = spb.SendMessageRequest.FromString(requests.next())
        after_s = time.time()
        assert len(request.messages) == len(messages)
        for sent, given in zip(request.messages, messages, strict=True):
            assert _without_id_and_born_time(sent) == _without_id_and_born_time(given)
            system = sent.system_properties
            assert len(system.message_id) == 32
            assert int(system.message_id, 16) >= 0
            born_s = system.born_timestamp.seconds + system.born_timestamp.nanos / 1e9
            assert before_s - 1 <= born_s <= after_s + 1
            seen.add(system.message_id)
    assert len(seen) == 3 * len(messages)


@pytest.mark.parametrize("now_ns", [1_700_000_000_000_000_000, 1_700_000_000_000_000_001])
def test_a_born_time_on_the_second_or_not_comes_back_exactly(
    monkeypatch: pytest.MonkeyPatch, now_ns: int
) -> None:
    monkeypatch.setattr(client.time, "time_ns", lambda: now_ns)
    requests = SendRequests([build_message("t", b"b", "h")])
    request = spb.SendMessageRequest.FromString(requests.next())
    born = request.messages[0].system_properties.born_timestamp
    assert born.seconds * 1_000_000_000 + born.nanos == now_ns
