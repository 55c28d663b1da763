"""Structured logging: one line per event, with the level and the role in each.

Roles log through the standard ``logging`` module and attach fields with
``extra={...}``; every attribute that is not a standard LogRecord attribute is
rendered as a field. Text lines look like (one line)::

    2026-11-22T04:31:02.123Z level=info role=broker logger=broker.grpc
    msg=listening endpoint=127.0.0.1:8081

An exception is folded into the same line (``error=`` and ``traceback=`` with
escaped newlines), so one event never spans several lines.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, TextIO

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _quote(value: object) -> str:
    text = str(value)
    if text and all(c.isalnum() or c in "._-:/@%,+" for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class EventFormatter(logging.Formatter):
    """Formats a record as one key=value line, or one JSON object."""

    def __init__(self, role: str, fmt: str = "text") -> None:
        super().__init__()
        self.role = role
        self.fmt = fmt

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The event as an ordered mapping of field name to value."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "role": self.role,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return out

    def format(self, record: logging.LogRecord) -> str:
        """Render one event on one line."""
        data = self.fields(record)
        if self.fmt == "json":
            return json.dumps(data, ensure_ascii=False, default=str)
        ts = data.pop("ts")
        return ts + " " + " ".join(f"{k}={_quote(v)}" for k, v in data.items())


def configure(
    role: str, level: str = "info", fmt: str = "text", stream: TextIO | None = None
) -> None:
    """Route all logging of this process to ``stream`` (stderr) as events of ``role``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(EventFormatter(role, fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
