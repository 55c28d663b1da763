"""Our RocketMQ v2 protos: generated code is current, and the wire matches the official client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FileDescriptor

from protocol.rocketmq.v2 import definition_pb2, service_pb2
from protocol.rocketmq.v2.generate import HERE, ROOT, generate

# Dumps {message: {field: [number, type, label]}} and {enum: {value: number}} of
# the given generated modules; runs in a subprocess for the official client.
DUMP = r"""
import json, sys, importlib
out = {"messages": {}, "enums": {}, "methods": {}}
def walk(desc):
    out["messages"][desc.full_name] = {
        f.name: [f.number, f.type, getattr(f, "label", 0)] for f in desc.fields}
    for nested in desc.nested_types:
        walk(nested)
    for enum in desc.enum_types:
        out["enums"][enum.full_name] = {v.name: v.number for v in enum.values}
for name in sys.argv[1:]:
    fd = importlib.import_module(name).DESCRIPTOR
    for desc in fd.message_types_by_name.values():
        walk(desc)
    for enum in fd.enum_types_by_name.values():
        out["enums"][enum.full_name] = {v.name: v.number for v in enum.values}
    for svc in fd.services_by_name.values():
        for m in svc.methods:
            out["methods"][f"/{svc.full_name}/{m.name}"] = [
                m.input_type.full_name, m.output_type.full_name,
                m.client_streaming if hasattr(m, "client_streaming") else None,
                m.server_streaming if hasattr(m, "server_streaming") else None]
print(json.dumps(out))
"""


def _dump(modules: list[str], home: Path) -> dict[str, dict[str, object]]:
    env = {**os.environ, "HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-c", DUMP, *modules],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
        cwd=ROOT,
    )
    dump: dict[str, dict[str, object]] = json.loads(result.stdout)
    return dump


def test_checked_in_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    for fresh in generate(tmp_path):
        checked_in = ROOT / fresh.relative_to(tmp_path)
        assert checked_in.read_bytes() == fresh.read_bytes(), (
            f"{checked_in.relative_to(ROOT)} is stale: run python -m protocol.rocketmq.v2.generate"
        )
    assert HERE.as_posix() == "protocol/rocketmq/v2"


def test_wire_matches_the_official_python_client(tmp_path: Path) -> None:
    ours = _dump(
        ["protocol.rocketmq.v2.definition_pb2", "protocol.rocketmq.v2.service_pb2"], tmp_path
    )
    theirs = _dump(
        ["rocketmq.grpc_protocol.definition_pb2", "rocketmq.grpc_protocol.service_pb2"], tmp_path
    )
    # Every message, field, enum value and method the client knows, we know identically.
    for kind in ("messages", "enums", "methods"):
        for name, spec in theirs[kind].items():
            assert name in ours[kind], f"{kind[:-1]} {name} missing"
            if kind == "methods":
                assert ours[kind][name] == spec, name
                continue
            for key, value in spec.items():  # type: ignore[attr-defined]
                assert ours[kind][name].get(key) == value, f"{name}.{key}"  # type: ignore[attr-defined]


def _fields(desc: Any) -> dict[str, int]:
    return {f.name: f.number for f in desc.fields}


def test_fields_the_clients_depend_on() -> None:
    system = _fields(definition_pb2.SystemProperties.DESCRIPTOR)
    assert system["message_id"] == 3
    assert system["delivery_timestamp"] == 11
    assert system["receipt_handle"] == 12
    assert system["delivery_attempt"] == 16
    assert system["dead_letter_queue"] == 20
    assert _fields(definition_pb2.Settings.DESCRIPTOR)["client_properties"] == 9
    assert definition_pb2.Code.Value("MESSAGE_BODY_EMPTY") == 41302
    assert definition_pb2.Code.Value("OK") == 20000
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    assert len(service.methods) == 17
    file: FileDescriptor = service_pb2.DESCRIPTOR
    assert file.package == "apache.rocketmq.v2"


def test_messages_round_trip() -> None:
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(name="orders"),
        user_properties={"k": "v"},
        system_properties=definition_pb2.SystemProperties(
            tag="a", keys=["k1"], message_id="01ABC", delivery_attempt=2
        ),
        body=b"hello",
    )
    request = service_pb2.SendMessageRequest(messages=[message])
    decoded = service_pb2.SendMessageRequest.FromString(request.SerializeToString())
    assert decoded == request
    assert decoded.messages[0].system_properties.HasField("delivery_attempt")
    assert not decoded.messages[0].system_properties.HasField("receipt_handle")
