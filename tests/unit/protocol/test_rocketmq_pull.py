"""The RocketMQ v2 PullMessage exchange our clients make (protocol.rocketmq.pull)."""

from __future__ import annotations

from protocol.rocketmq.pull import pull_request, read_pull
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb


def test_a_pull_request_names_the_queue_offset_batch_filter_and_poll() -> None:
    request = pull_request("g", "t", 3, 120, batch_size=32, poll_ms=1_500, expression="a||b")
    assert request.group.name == "g"
    assert (request.message_queue.topic.name, request.message_queue.id) == ("t", 3)
    assert (request.offset, request.batch_size) == (120, 32)
    assert request.filter_expression == pb.FilterExpression(type=pb.TAG, expression="a||b")
    poll = request.long_polling_timeout
    assert (poll.seconds, poll.nanos) == (1, 500_000_000)
    assert pull_request("g", "t", 0, 0, batch_size=1, poll_ms=0).filter_expression.expression == "*"


def _message(offset: int) -> pb.Message:
    message = pb.Message(topic=pb.Resource(name="t"), body=b"x")
    message.system_properties.queue_offset = offset
    return message


def test_an_answer_reads_its_status_messages_and_next_offset() -> None:
    responses = [
        spb.PullMessageResponse(status=pb.Status(code=pb.OK)),
        spb.PullMessageResponse(message=_message(7)),
        spb.PullMessageResponse(message=_message(8)),
        spb.PullMessageResponse(next_offset=9),
    ]
    answer = read_pull(responses, 7)
    assert answer.status.code == pb.OK
    assert [m.system_properties.queue_offset for m in answer.messages] == [7, 8]
    assert answer.next_offset == 9


def test_a_refusal_keeps_its_status_and_an_answer_without_next_offset_stays_put() -> None:
    refused = pb.Status(code=pb.ILLEGAL_OFFSET, message="offset 3 below the first offset 5")
    answer = read_pull(
        [spb.PullMessageResponse(status=refused), spb.PullMessageResponse(next_offset=5)], 3
    )
    assert (answer.status, list(answer.messages), answer.next_offset) == (refused, [], 5)
    empty = read_pull([], 11)
    assert (empty.status.code, list(empty.messages), empty.next_offset) == (pb.OK, [], 11)
