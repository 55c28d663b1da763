"""A rule's copy loop against stand-in clusters: the checkpoint follows the target's
acknowledgement, failed calls are retried, an unexpected error stops the process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from connector import runner
from connector.client import ConnectorCallError, Pulled
from connector.copies import copy_message
from connector.plan import Mark, Pending, Rule, format_pending, parse_marks
from connector.pulled_ahead import PulledAhead, delay_stages
from connector.runner import Metrics, RuleCopier
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

RULE = Rule("orders", "east", "west", "Orders", "OrdersCopy", "*", "earliest", "connector-orders")


def _message(offset: int) -> pb.Message:
    message = pb.Message(topic=pb.Resource(name="Orders"), body=b"x" * offset)
    message.system_properties.message_id = f"ID{offset}"
    message.system_properties.queue_offset = offset
    message.system_properties.store_timestamp.FromMilliseconds(1_000)
    return message


class Source:
    """Two pulls' worth of messages, then nothing; records commits. The second pull's
    message is stored once the first batch's checkpoint is in, unless ``stored``: then
    both are there from the start."""

    def __init__(
        self, journal: list[str], error: Exception | None = None, *, stored: bool = False
    ) -> None:
        self.journal = journal
        self.error = error
        self.caught_up = asyncio.Event()
        self.batches = {0: [_message(0), _message(1)], 2: [_message(2)]}
        self.second_stored = asyncio.Event()
        if stored:
            self.second_stored.set()

    async def pull(self, group: str, topic: str, queue: int, offset: int, expr: str) -> Pulled:
        if self.error is not None:
            raise self.error
        if offset == 2:
            await self.second_stored.wait()
        if offset in self.batches:
            messages = self.batches[offset]
            return Pulled(messages, offset + len(messages), "OK")
        await asyncio.sleep(3600)  # a long poll that finds nothing
        raise AssertionError("unreachable")

    async def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        self.journal.append(f"commit {offset}")
        if offset == 2:
            self.second_stored.set()
        if offset == 3:
            self.caught_up.set()

    async def bound(self, topic: str, queue: int, *, end: bool) -> int:
        return 3

    async def queues(self, topic: str, *, writable: bool = False) -> list[int]:
        return [0]

    async def committed(self, group: str, topic: str, queue: int) -> int:
        return 0


class Target:
    """Fails its first ``failures`` sends (retriable), then stores at offsets from
    ``stored``; ``existing`` copies were stored before (at 100, 101, ...)."""

    def __init__(
        self, journal: list[str], failures: int = 1, existing: list[pb.Message] | None = None
    ) -> None:
        self.journal = journal
        self.failures = failures
        self.existing = existing or []
        self.stored = 100 + len(self.existing)

    async def queues(self, topic: str, *, writable: bool = False) -> list[int]:
        return [0]

    async def offset_at(self, topic: str, queue: int, at_ms: int) -> int:
        self.journal.append(f"scan since {at_ms}")
        return 100

    async def bound(self, topic: str, queue: int, *, end: bool) -> int:
        return self.stored if end else 100

    async def pull(self, group: str, topic: str, queue: int, offset: int, expr: str) -> Pulled:
        messages = self.existing[offset - 100 :]
        return Pulled(messages, offset + len(messages), "OK")

    async def send(self, request: spb.SendMessageRequest) -> list[int]:
        messages = request.messages
        if self.failures:
            self.failures -= 1
            self.journal.append("send failed")
            raise ConnectorCallError("UNAVAILABLE", "broker down", retriable=True)
        ids = [m.system_properties.message_id for m in messages]
        self.journal.append(f"sent {ids}")
        offsets = list(range(self.stored, self.stored + len(messages)))
        self.stored += len(messages)
        return offsets


async def _run_until(copier: RuleCopier, done: asyncio.Event) -> None:
    """Start the copy tasks, wait (10 s at most) for ``done``, stop them."""
    copier.start()
    try:
        async with asyncio.timeout(10):
            await done.wait()
    finally:
        await copier.stop()


async def test_the_checkpoint_moves_only_after_the_target_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "RETRY_DELAY_MIN_S", 0.01)
    journal: list[str] = []
    failures: list[BaseException] = []
    metrics = Metrics()
    source = Source(journal)
    copier = RuleCopier(
        RULE,
        source,  # type: ignore[arg-type]
        Target(journal),  # type: ignore[arg-type]
        tmp_path / "orders.marks",
        metrics,
        failures.append,
    )
    copier.positions = {0: 0}
    copier.target_queues = [0]
    await _run_until(copier, source.caught_up)
    assert journal == [
        "send failed",
        "sent ['ID0', 'ID1']",
        "commit 2",
        "sent ['ID2']",
        "commit 3",
    ]
    assert parse_marks((tmp_path / "orders.marks").read_text()) == [
        Mark(0, 0, 0, 100),
        Mark(0, 2, 0, 102),
    ]
    assert metrics.messages.labels("orders")._value.get() == 3
    assert metrics.bytes.labels("orders")._value.get() == 3
    assert metrics.errors.labels("orders")._value.get() == 1
    assert failures == []


@pytest.mark.parametrize(
    ("pull_max", "messages_max", "bytes_max", "expected"),
    [
        (2, 1024, 1 << 20, ["sent ['ID0', 'ID1', 'ID2']", "commit 3"]),
        (2, 1, 1 << 20, ["sent ['ID0']", "sent ['ID1']", "sent ['ID2']", "commit 1", "commit 3"]),
        (2, 1024, 1, ["sent ['ID0', 'ID1']", "sent ['ID2']", "commit 2", "commit 3"]),
        (32, 1024, 1 << 20, ["sent ['ID0', 'ID1']", "commit 2", "sent ['ID2']", "commit 3"]),
    ],
)
async def test_what_was_pulled_ahead_goes_in_one_send_within_the_caps(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pull_max: int,
    messages_max: int,
    bytes_max: int,
    expected: list[str],
) -> None:
    """With full pulls (``pull_max`` 2: the first pull is full) both pulls are in before
    the first send: one send carries them (one checkpoint, one mark), unless a cap on
    messages or body bytes (bodies of 0, 1 and 2 bytes) ends the batch earlier; the
    checkpoint then stops at the first message left. A checkpoint overlaps the next
    sends (the stand-ins answer at once, so a commit runs once the sender waits); the
    next one comes no sooner than the checkpoint interval later, past every batch
    acknowledged by then (with one message a send: 1, then 3). A partial first pull
    (``pull_max`` 32) is taken before the next pull goes: two sends."""
    monkeypatch.setattr(runner, "PULL_FULL_OFFSETS", pull_max)
    monkeypatch.setattr(runner, "SEND_MESSAGES_MAX", messages_max)
    monkeypatch.setattr(runner, "SEND_BYTES_MAX", bytes_max)
    journal: list[str] = []
    metrics = Metrics()
    source = Source(journal, stored=True)
    copier = RuleCopier(
        RULE,
        source,  # type: ignore[arg-type]
        Target(journal, failures=0),  # type: ignore[arg-type]
        tmp_path / "orders.marks",
        metrics,
        journal.append,  # type: ignore[arg-type]
    )
    copier.positions = {0: 0}
    copier.target_queues = [0]
    await _run_until(copier, source.caught_up)
    assert journal == expected
    sends = [line for line in journal if line.startswith("sent")]
    first_offsets = (
        [0, 1, 2] if messages_max == 1 else [0, 2] if bytes_max == 1 or pull_max == 32 else [0]
    )
    assert parse_marks((tmp_path / "orders.marks").read_text()) == [
        Mark(0, offset, 0, 100 + offset) for offset in first_offsets
    ]
    assert len(sends) == len(first_offsets)
    assert metrics.messages.labels("orders")._value.get() == 3
    assert metrics.bytes.labels("orders")._value.get() == 3
    assert copier.positions == {0: 3}
    # Stopped: no pull (the puller was in a long poll) nor commit is left running.
    assert [task for task in asyncio.all_tasks() if task is not asyncio.current_task()] == []


async def test_an_unexpected_error_in_a_copy_task_is_reported(tmp_path: Path) -> None:
    journal: list[str] = []
    failures: list[BaseException] = []
    reported = asyncio.Event()

    def failed(error: BaseException) -> None:
        failures.append(error)
        reported.set()

    copier = RuleCopier(
        RULE,
        Source(journal, error=ValueError("a bug")),  # type: ignore[arg-type]
        Target(journal),  # type: ignore[arg-type]
        tmp_path / "orders.marks",
        Metrics(),
        failed,
    )
    copier.positions = {0: 0}
    copier.target_queues = [0]
    await _run_until(copier, reported)
    assert [str(f) for f in failures] == ["a bug"]
    assert journal == []


async def _resume_after_crash(
    tmp_path: Path, pending: list[Pending], stored: tuple[int, ...]
) -> tuple[list[str], Path]:
    """Prepare and run a copier (every resend unsafe) whose marks file holds ``pending``
    sends and whose target holds the copies of source offsets ``stored`` (at 100 + the
    offset), until the source is caught up; the journal and the marks file."""
    journal: list[str] = []
    marks = tmp_path / "orders.marks"
    marks.write_text(
        "# east Orders -> west OrdersCopy\n" + "".join(format_pending(p) for p in pending)
    )
    existing = []
    for offset in stored:
        copy, _ = copy_message(_message(offset), "east", 0, "OrdersCopy", [0])
        copy.system_properties.queue_offset = 100 + offset
        existing.append(copy)
    source = Source(journal)
    copier = RuleCopier(
        RULE,
        source,  # type: ignore[arg-type]
        Target(journal, failures=0, existing=existing),  # type: ignore[arg-type]
        marks,
        Metrics(),
        journal.append,  # type: ignore[arg-type]
        resend_safe_ms=0,
    )
    await copier.prepare()
    await _run_until(copier, source.caught_up)
    return journal, marks


async def test_copies_of_an_unfinished_batch_older_than_the_dedup_window_are_not_sent_again(
    tmp_path: Path,
) -> None:
    """A crash left the batch from offset 0 unfinished (sent, not committed) long ago:
    the copies the target stored (offsets 0 and 1, not 2) are found and not resent."""
    journal, marks = await _resume_after_crash(tmp_path, [Pending(0, 0, 500_000)], (0, 1))
    skew_ms = 30_000
    assert journal == [f"scan since {500_000 - skew_ms}", "commit 2", "sent ['ID2']", "commit 3"]
    assert parse_marks(marks.read_text()) == [Mark(0, 0, 0, 100), Mark(0, 2, 0, 102)]


async def test_both_batches_past_a_checkpoint_in_flight_at_a_crash_are_sought_not_resent(
    tmp_path: Path,
) -> None:
    """A crash long ago came while the batch from offset 0 was acknowledged (its
    checkpoint not yet committed) and the next one, from 2, was sent: the look on the
    target starts at the send from the checkpoint and finds the copies of both."""
    journal, marks = await _resume_after_crash(
        tmp_path, [Pending(0, 0, 500_000), Pending(0, 2, 500_100)], (0, 1, 2)
    )
    assert journal == [f"scan since {500_000 - 30_000}", "commit 2", "commit 3"]
    assert parse_marks(marks.read_text()) == [Mark(0, 0, 0, 100), Mark(0, 2, 0, 102)]


async def test_a_pull_that_reached_the_end_lingers_then_the_next_pull_goes_untaken() -> None:
    """After a partial pull the next one waits for the take at most the linger: what
    arrives while a send is in flight is pulled meanwhile, taken in one batch."""
    ahead = PulledAhead(0, 1 << 20, linger_s=0.01)
    ahead.put(Pulled([_message(0)], 1, "OK"), full=False)
    async with asyncio.timeout(5):
        await ahead.wait_room()  # nothing taken: the linger ended
    ahead.put(Pulled([_message(1), _message(2)], 3, "OK"), full=False)
    taken = ahead.take(1024, 1 << 20)
    assert [m.system_properties.queue_offset for m in taken.messages] == [0, 1, 2]
    assert taken.end_offset == 3
    async with asyncio.timeout(5):
        await ahead.wait_room()  # everything taken: at once


def test_a_take_says_when_the_pull_of_its_last_message_went_and_came_back() -> None:
    """The delay stages of a batch's last message: its pull's times (the record of each
    pull taken whole is dropped), then from the store time to the acknowledgement."""
    ahead = PulledAhead(0, 1 << 20, linger_s=0.01)
    ahead.put(Pulled([_message(0), _message(1)], 2, "OK"), full=False, pull_ms=(10, 20))
    ahead.put(Pulled([_message(2), _message(3)], 4, "OK"), full=False, pull_ms=(30, 40))
    assert ahead.take(3, 1 << 20).pull_ms == (30, 40)  # ends inside the second pull
    assert ahead.take(1024, 1 << 20).pull_ms == (30, 40)  # the rest of it
    ahead.put(Pulled([_message(4)], 5, "OK"), full=False)
    assert ahead.take(1024, 1 << 20).pull_ms == (0, 0)  # times not told
    assert delay_stages(1_000, (900, 1_050), 1_070, 1_200) == {
        "wait_pull_ms": 0,  # the pull was long polling when the message was stored
        "pull_ms": 50,
        "wait_send_ms": 20,
        "send_ms": 130,
        "delay_ms": 200,
    }
    assert delay_stages(1_000, (1_300, 1_350), 1_400, 1_500)["wait_pull_ms"] == 300
    assert delay_stages(1_000, (0, 0), 1_400, 1_500) == {"send_ms": 100, "delay_ms": 500}
