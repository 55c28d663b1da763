"""Undecodable requests: counted by method, reported at most once per interval."""

from __future__ import annotations

import logging

import pytest
from google.protobuf.message import DecodeError

from broker.grpc.bad_requests import BadRequests, CheckedRegistration, UndecodableRequest
from broker.grpc.status import bad_request
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc


def test_each_is_counted_and_reports_come_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "broker.grpc.bad_requests")
    seen = BadRequests(interval_s=10.0)
    for now_s, method in [(0.0, "SendMessage"), (1.0, "SendMessage"), (9.9, "AckMessage")]:
        seen.note(method, "cause", now_s)
    seen.note("Heartbeat", "the latest cause", 10.0)
    assert seen.counts == {"SendMessage": 2, "AckMessage": 1, "Heartbeat": 1}
    assert seen.total == 4
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].endswith("1 since the last report (latest: SendMessage: cause)")
    assert messages[1].endswith("3 since the last report (latest: Heartbeat: the latest cause)")
    assert not [r for r in caplog.records if r.exc_info]


def test_the_status_is_bad_request_naming_the_cause() -> None:
    status = bad_request("the request is not a valid SendMessageRequest: truncated")
    assert status.code == pb.BAD_REQUEST
    assert status.message == "the request is not a valid SendMessageRequest: truncated"


class _Recorder:
    """A server as generated code sees it: what was registered."""

    def __init__(self) -> None:
        self.registered: dict[str, object] = {}
        self.generic = 0

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        self.generic += 1

    def add_registered_method_handlers(self, service: str, handlers: dict[str, object]) -> None:
        self.registered.update(handlers)


def test_every_method_is_registered_with_a_decoder_that_never_raises() -> None:
    recorder = _Recorder()
    registration = CheckedRegistration(recorder, BadRequests())
    service_pb2_grpc.add_MessagingServiceServicer_to_server(
        service_pb2_grpc.MessagingServiceServicer(), registration
    )
    methods = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
    assert sorted(recorder.registered) == sorted(methods)
    assert recorder.generic == 1
    for name, handler in recorder.registered.items():
        decode = handler.request_deserializer  # type: ignore[attr-defined]
        request_type = methods[name].input_type.name
        with pytest.raises(DecodeError):
            getattr(spb, request_type).FromString(b"\xff")
        refused = decode(b"\xff")
        assert isinstance(refused, UndecodableRequest)
        assert refused.cause.startswith(f"the request is not a valid {request_type}: ")
        assert decode(b"") == getattr(spb, request_type)()


def test_another_service_is_refused() -> None:
    registration = CheckedRegistration(_Recorder(), BadRequests())
    with pytest.raises(ValueError, match=r"only apache\.rocketmq\.v2\.MessagingService"):
        registration.add_registered_method_handlers("t.S", {})
