"""One thread that runs the WAL's fdatasync calls for an event loop, in order.

What the driver needs from a thread is narrow: run one blocking call at a
time, in the order asked, and wake the loop when it ends. A general
executor (``loop.run_in_executor``) pays for more on every call: two locks
and a work item per submit, a ``concurrent.futures.Future`` with its own
condition variable, and the chaining of that future into an asyncio one.
Here a call is one ``SimpleQueue.put`` on the loop and one
``call_soon_threadsafe`` from the thread.

Contracts:

- Calls run one at a time, in the order of :meth:`SyncThread.run`.
- The future returned by :meth:`SyncThread.run` gets the call's result or
  exception; a future cancelled meanwhile (its awaiting task was
  cancelled) is left alone, and the call still runs to its end.
- :meth:`SyncThread.shutdown` waits for the calls already queued.

SHELL: threads and the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_Call = tuple[Callable[[], object], "asyncio.Future[object]", asyncio.AbstractEventLoop]


class SyncThread:
    """A single worker thread for blocking calls awaited on one event loop."""

    def __init__(self, name: str) -> None:
        """The thread starts with the first call."""
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``call`` for the thread; the future ends with its outcome (on the loop)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._start()
        self._calls.put((call, future, loop))  # type: ignore[arg-type]
        return future

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        calls = self._calls
        while True:
            item = calls.get()
            if item is None:
                return
            call, future, loop = item
            try:
                value, ok = call(), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                value, ok = exc, False
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                loop.call_soon_threadsafe(_settle, future, ok, value)

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread (no-op if it never started)."""
        thread = self._thread
        if thread is None:
            return
        self._calls.put(None)
        thread.join()
        self._thread = None


def _settle(future: asyncio.Future[object], ok: bool, value: object) -> None:
    """On the loop: hand the call's outcome to its future unless it was cancelled."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        assert isinstance(value, BaseException)
        future.set_exception(value)


__all__ = ["SyncThread"]
