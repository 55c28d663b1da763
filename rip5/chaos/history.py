"""What the chaos clients did and saw: sends, deliveries and fault windows.

A history is a plain value (the checkers read it; the runner writes it as
JSON lines and can read it back), with every time in ms of one wall clock
(the machine's: clients and servers run on it).

PURE.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field


class Outcome(enum.StrEnum):
    """How a send ended, as the client saw it."""

    ACKED = "acked"
    """The broker answered OK: the message is stored."""
    FAILED = "failed"
    """The broker answered a definite refusal (a status that says nothing was stored)."""
    UNKNOWN = "unknown"
    """No answer (deadline, connection lost) or a status that does not say: maybe stored."""


class Intent(enum.StrEnum):
    """What a sent message must become for a consumer."""

    NORMAL = "normal"
    FIFO = "fifo"
    COMMIT = "commit"
    """A transactional half message the producer commits: visible once committed."""
    ROLLBACK = "rollback"
    """A transactional half message the producer rolls back: never visible."""
    TIMER = "timer"
    """A timed message: visible at ``due_ms``, never before."""


@dataclass(frozen=True)
class Send:
    """One message's send, over all its attempts (a retry keeps the message id).

    ``outcome`` is the last attempt's. For a transaction, ``ended`` is how the
    EndTransaction call ended (None: not tried, the send was not acked).
    ``sequence`` orders a message group's messages as the producer sent them.
    """

    message_id: str
    intent: Intent
    invoked_ms: int
    completed_ms: int
    outcome: Outcome
    attempts: int = 1
    group: str | None = None
    sequence: int = 0
    due_ms: int | None = None
    ended: Outcome | None = None
    error: str = ""


@dataclass(frozen=True)
class Delivery:
    """One message handed to a consumer; ``acked``: its ack call succeeded."""

    message_id: str
    at_ms: int
    consumer: str
    acked: bool = True


@dataclass(frozen=True)
class FaultWindow:
    """One injected fault: from ``start_ms`` (injected) to ``end_ms`` (healed)."""

    fault: str
    target: str
    start_ms: int
    end_ms: int
    detail: str = ""


@dataclass(frozen=True)
class History:
    """A whole run: the measured window is ``[start_ms, end_ms]`` (the drain included)."""

    model: str
    start_ms: int
    end_ms: int
    sends: tuple[Send, ...] = ()
    deliveries: tuple[Delivery, ...] = ()
    faults: tuple[FaultWindow, ...] = ()
    notes: tuple[str, ...] = field(default=())


_KINDS: dict[str, type[Send] | type[Delivery] | type[FaultWindow]] = {
    "send": Send,
    "delivery": Delivery,
    "fault": FaultWindow,
}


def to_lines(history: History) -> Iterator[str]:
    """The history as JSON lines: a header, then one line per send, delivery and fault."""
    yield json.dumps(
        {
            "kind": "history",
            "model": history.model,
            "start_ms": history.start_ms,
            "end_ms": history.end_ms,
            "notes": list(history.notes),
        }
    )
    for kind, items in (
        ("send", history.sends),
        ("delivery", history.deliveries),
        ("fault", history.faults),
    ):
        for item in items:
            yield json.dumps({"kind": kind, **asdict(item)})


def from_lines(lines: Iterable[str]) -> History:
    """Read back what :func:`to_lines` wrote; raises ValueError naming a bad line."""
    header: dict[str, object] | None = None
    sends: list[Send] = []
    deliveries: list[Delivery] = []
    faults: list[FaultWindow] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record.pop("kind")
            if kind == "history":
                header = record
            elif kind == "send":
                record["intent"] = Intent(record["intent"])
                record["outcome"] = Outcome(record["outcome"])
                if record.get("ended") is not None:
                    record["ended"] = Outcome(record["ended"])
                sends.append(Send(**record))
            elif kind == "delivery":
                deliveries.append(Delivery(**record))
            elif kind == "fault":
                faults.append(FaultWindow(**record))
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"history line {number} is not valid: {exc}") from exc
    if header is None:
        raise ValueError("the history has no header line")
    return History(
        str(header["model"]),
        int(str(header["start_ms"])),
        int(str(header["end_ms"])),
        tuple(sends),
        tuple(deliveries),
        tuple(faults),
        tuple(str(n) for n in header.get("notes", []) or []),  # type: ignore[attr-defined]
    )
