"""``rip5 bench queues`` without a cluster: its refusal of bad sizes, and a run
stopped by a signal (the signal raises in the main thread, the sends not started
are dropped rather than waited for, the handlers are restored; the cluster's stop
itself is ``rip5.dev_cluster``'s)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from loadtest.client import CallFailed, Received
from rip5.bench import queues
from rip5.bench.queues import BenchStopped, main, map_stoppable, stopped_by_signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_raises_once_and_the_handlers_come_back(signum: int) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stopped = None
    with stopped_by_signals():
        try:
            os.kill(os.getpid(), signum)
            threading.Event().wait(5)  # the handler raises here, at once
        except BenchStopped as raised:
            stopped = raised
        os.kill(os.getpid(), signum)  # a second one is ignored while the run stops
    assert stopped is not None
    assert stopped.signum == signum
    assert str(stopped) == f"stopped by {signal.Signals(signum).name}"
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_stopped_map_drops_the_calls_not_started() -> None:
    started: list[int] = []
    release = threading.Event()

    def call(index: int) -> int:
        started.append(index)
        if index == 0:
            raise BenchStopped(signal.SIGTERM)  # as the signal would, mid-run
        release.wait(5)
        return index

    with pytest.raises(BenchStopped):
        map_stoppable(call, 1_000, 2)
    release.set()
    assert len(started) < 100  # the other 900-odd were cancelled, not run
    assert map_stoppable(lambda i: i * 2, 5, 2) == [0, 2, 4, 6, 8]


def test_a_long_map_reports_its_progress_while_calls_remain() -> None:
    reported: list[int] = []
    first_done = threading.Event()

    def call(index: int) -> int:
        if index == 1:  # ends only once progress saw call 0 finished
            assert first_done.wait(5)
        return index * 2

    def progress(done: int, seconds: float) -> None:
        assert seconds >= 0
        reported.append(done)
        if done == 1:
            first_done.set()

    assert map_stoppable(call, 2, 2, progress, every_s=0.01) == [0, 2]
    assert reported[-1:] == [1]
    assert set(reported) <= {0, 1}


def test_a_map_stopped_in_the_main_thread_leaves_its_workers_free() -> None:
    """A stop raised while the main thread waits (as the signal handler raises it) ends
    the map; the call under way still hands over its result and ends."""
    release = threading.Event()
    ended = threading.Event()

    def call(index: int) -> int:
        release.wait(5)
        ended.set()
        return index

    def progress(done: int, seconds: float) -> None:
        release.set()
        raise BenchStopped(signal.SIGTERM)

    with pytest.raises(BenchStopped):
        map_stoppable(call, 100, 1, progress, every_s=0.01)
    assert ended.wait(5)


def test_bad_sizes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any cluster starts (in process: the command's own parser)."""
    with pytest.raises(SystemExit) as exited:
        main(["--queues", "0"])
    assert exited.value.code == 2
    assert "--queues must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--baseline-samples", "0"])
    assert exited.value.code == 2
    assert "--baseline-samples must be at least 1" in capsys.readouterr().err


class _AckingClient:
    """Answers acks from a script of outcomes: None (acked) or a status name."""

    def __init__(self, outcomes: list[str | None]) -> None:
        self.outcomes = outcomes
        self.acks: list[tuple[str, str, list[Received]]] = []

    def ack(self, group: str, topic: str, messages: list[Received]) -> None:
        self.acks.append((group, topic, list(messages)))
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise CallFailed(outcome)


def test_the_simple_consumer_acks_what_it_received(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues, "RETRY_PAUSE_S", 0.0)
    got = [Received("id-1", "handle-1", 16), Received("id-2", "handle-2", 16)]
    # A retriable failure is retried, and the ack then goes through.
    client = _AckingClient(["UNAVAILABLE", None])
    queues._ack(client, "bq-0", got)  # type: ignore[arg-type]
    assert client.acks == [(queues.GROUP, "bq-0", got)] * 2
    # A lapsed lease (or an earlier attempt's ack that went through) ends it.
    client = _AckingClient(["INVALID_RECEIPT_HANDLE"])
    queues._ack(client, "bq-0", got)  # type: ignore[arg-type]
    assert len(client.acks) == 1
    # Past the attempts, the failure is the bench's.
    client = _AckingClient(["UNAVAILABLE"] * queues.CALL_ATTEMPTS)
    with pytest.raises(CallFailed, match="UNAVAILABLE"):
        queues._ack(client, "bq-0", got)  # type: ignore[arg-type]
    assert len(client.acks) == queues.CALL_ATTEMPTS
