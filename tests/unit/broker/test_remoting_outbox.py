"""The remoting server's outbox: the frames of one event-loop turn go out in one write."""

from __future__ import annotations

import asyncio
from typing import cast

from broker.remoting.server import Outbox


class RecordingWriter:
    """The part of a StreamWriter the outbox uses, recording each write call."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def writelines(self, frames: list[bytes]) -> None:
        self.writes.append(list(frames))

    def close(self) -> None:
        self.closed = True


def _outbox() -> tuple[Outbox, RecordingWriter]:
    writer = RecordingWriter()
    return Outbox(cast(asyncio.StreamWriter, writer)), writer


async def test_frames_of_one_turn_go_out_in_one_write_in_order() -> None:
    outbox, writer = _outbox()
    for frame in (b"a", b"b", b"c"):
        outbox.write(frame)
    assert writer.writes == []  # not before the turn ends
    await asyncio.sleep(0)  # one turn: the flush scheduled by the first frame runs
    assert writer.writes == [[b"a", b"b", b"c"]]
    outbox.write(b"d")
    await asyncio.sleep(0)
    assert writer.writes == [[b"a", b"b", b"c"], [b"d"]]


async def test_closing_writes_what_is_queued_first_and_nothing_after() -> None:
    outbox, writer = _outbox()
    outbox.write(b"answer")
    outbox.close()
    assert (writer.writes, writer.closed, outbox.closing) == ([[b"answer"]], True, True)
    outbox.write(b"late")
    await asyncio.sleep(0)  # the scheduled flush finds the connection closing
    assert writer.writes == [[b"answer"]]
