"""Random and mutated remoting frames to a running remoting server over TCP (seeded,
counted).

Each input goes on its own connection, then the client half-closes. Whatever the
bytes: every answer is a whole response frame; every request the codec reads (a
command, or a frame whose header is unreadable) that is neither one-way nor flagged
a response gets one answer; a stream that cannot be framed further gets a
SYSTEM_ERROR naming why (answers go out as they are ready, so not always last), then
the server closes the connection; the broker serves a healthy client throughout; no
task or file descriptor stays behind. ``RIP5_FUZZ_EXAMPLES`` sets the number of
inputs (a long run: ``make fuzz``).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from protocol.remoting import messages
from protocol.remoting.codes import RequestCode, ResponseCode, SerializeType
from protocol.remoting.errors import FrameError
from protocol.remoting.frames import FrameDecoder, Malformed, RemotingCommand, encode
from tests.contract import test_remoting_server as remoting_suite
from tests.contract.remoting_wire import WireClient
from tests.fuzzing import exchange, inputs, open_fds, settled

pytestmark = pytest.mark.integration
FUZZ_INPUTS = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "300"))
FRAME_BYTES_MAX = remoting_suite.FRAME_BYTES_MAX


def _seeds() -> list[bytes]:
    """Valid requests of the common codes, in both header serializations."""
    properties = messages.format_properties({"KEYS": "k", "TAGS": "t", "UNIQ_KEY": "01"})
    # SendMessageRequestHeaderV2's short names: group, topic, default topic, queues...
    send = {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "f": "0", "g": "1700000000000"}
    send |= {"h": "0", "j": "0"}
    batch = messages.format_batch([messages.BatchRecord(0, b"x", {"KEYS": "k"})] * 2)
    offset = {"consumerGroup": "cg", "topic": "orders", "queueId": "0"}
    requests = [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, b""),
        (RequestCode.SEND_MESSAGE_V2, {**send, "e": "1", "i": properties}, b"fuzz body"),
        (RequestCode.SEND_BATCH_MESSAGE, {**send, "e": "0", "i": "", "m": "true"}, batch),
        (RequestCode.HEART_BEAT, {}, b'{"clientID":"c1","producerDataSet":[{"groupName":"pg"}]}'),
        (RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "1"}, b""),
        (RequestCode.QUERY_CONSUMER_OFFSET, offset, b""),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}, b""),
        (999, {}, b""),
    ]
    seeds = []
    for opaque, (code, fields, body) in enumerate(requests, 1):
        for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
            command = RemotingCommand(
                code, opaque, 0, "JAVA", 453, None, fields, body, serialize_type
            )
            seeds.append(encode(command))
    return [*seeds, seeds[0] + seeds[2] + seeds[4]]


def _expected(data: bytes) -> tuple[int, bool]:
    """The answers the server owes ``data`` then a half-close: the requests that are
    neither one-way nor flagged as responses, and whether a SYSTEM_ERROR for the
    framing comes too."""
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    decoder.receive(data)
    owed = 0
    try:
        while (decoded := decoder.next_command()) is not None:
            if isinstance(decoded, Malformed):
                owed += not decoded.is_oneway
            else:  # a stray response is only logged
                owed += not (decoded.is_oneway or decoded.is_response)
    except FrameError:
        return owed, True
    return owed, decoder.end_of_stream() is not None


# The remoting server suite's broker: in-memory ports, topic ``orders``, group ``cg``.
broker = remoting_suite.broker


async def _answers(port: int, data: bytes) -> tuple[list[RemotingCommand], FrameError | None]:
    """Send ``data`` on a new connection, half-close, read the answers until the close."""
    received = await exchange(port, data)
    decoder = FrameDecoder(1 << 24)
    decoder.receive(received)
    answers = []
    while (answer := decoder.next_command()) is not None:
        assert isinstance(answer, RemotingCommand), answer
        answers.append(answer)
    return answers, decoder.end_of_stream()


async def test_bad_frames_are_answered_then_closed_and_the_broker_serves_on(
    broker: remoting_suite.Broker,
) -> None:
    port = broker.port
    route = (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    healthy = await WireClient.connect(port)
    try:
        assert (await healthy.call(*route)).code == 0
        tasks_before = len(asyncio.all_tasks())
        fds_before = open_fds()
        rng = random.Random("remoting-server:1")
        seeds = _seeds()
        framing_errors = 0
        for index in range(FUZZ_INPUTS):
            data = inputs(seeds, rng)
            answers, cut = await _answers(port, data)
            assert cut is None, (index, data.hex(), "an answer was cut short")
            assert all(a.is_response for a in answers), (index, data.hex(), answers)
            owed, unframeable = _expected(data)
            assert len(answers) == owed + unframeable, (index, data.hex(), owed, answers)
            if unframeable:
                framing_errors += 1
                # Answers go out as they are ready: the framing's may pass a slower one.
                why = [a.remark for a in answers if a.code == ResponseCode.SYSTEM_ERROR]
                assert any("frame" in (remark or "") for remark in why), (index, answers)
            if index % 25 == 24:
                assert (await healthy.call(*route)).code == 0
        assert framing_errors > FUZZ_INPUTS // 10  # the inputs reached the framing refusals
        assert (await healthy.call(*route)).code == 0  # the broker serves on
        await settled(tasks_before, fds_before)
    finally:
        await healthy.close()
