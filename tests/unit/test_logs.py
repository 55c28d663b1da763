import io
import json
import logging

from rip5 import logs


def _emit(fmt: str) -> str:
    stream = io.StringIO()
    logs.configure("broker", "debug", fmt, stream)
    log = logging.getLogger("broker.grpc")
    log.info("listening", extra={"endpoint": "127.0.0.1:8081", "note": "two words"})
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        log.exception("failed")
    logging.getLogger().handlers.clear()
    return stream.getvalue()


def test_text_lines_carry_level_role_and_fields_one_line_per_event() -> None:
    lines = _emit("text").splitlines()
    assert len(lines) == 2
    assert "level=info role=broker logger=broker.grpc msg=listening" in lines[0]
    assert "endpoint=127.0.0.1:8081" in lines[0]
    assert 'note="two words"' in lines[0]
    assert "level=error" in lines[1]
    assert 'error="ValueError: bad\\nthing"' in lines[1]
    assert "traceback=" in lines[1]


def test_json_lines_parse() -> None:
    events = [json.loads(line) for line in _emit("json").splitlines()]
    assert events[0]["role"] == "broker"
    assert events[0]["endpoint"] == "127.0.0.1:8081"
    assert events[1]["level"] == "error"
    assert events[1]["error"].startswith("ValueError")
