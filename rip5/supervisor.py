"""A supervisor of local child processes, used by ``rip5 dev``.

Contract:
- Start: every child is spawned with ``RIP5_READY_FD`` naming a pipe; it is
  ready when it writes ``ready <endpoint>`` there (rip5/shell.py does this).
  ``run`` reports readiness once every child is ready. A child that exits
  before it is ready fails the start: everything is stopped and ``run``
  returns 1, so a bad port or config never leaves a half cluster behind.
- Once a child has been ready, its exits are restarted with exponential backoff; one
  that dies more than ``max_restarts`` times within ``window_ms`` is reported
  and left down while the others go on.
- Stop (``stopping`` set): SIGTERM to every child, SIGKILL to any still alive
  after ``stop_timeout_ms``; ``run`` returns only once all have exited.
- Children get PR_SET_PDEATHSIG, so a supervisor killed with SIGKILL still
  takes its children with it.
- Each line a child prints is forwarded to ``out`` prefixed with its name.

Ownership: all state here is owned by the supervisor's event loop; one task
per child mutates only that child's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rip5.shell import READY_FD_ENV

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildSpec:
    """How to start one child process."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RestartPolicy:
    """When and how often a dead child is started again."""

    initial_backoff_ms: int = 500
    max_backoff_ms: int = 10_000
    max_restarts: int = 5
    window_ms: int = 60_000


@dataclass
class _Child:
    spec: ChildSpec
    process: asyncio.subprocess.Process | None = None
    endpoint: str | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    deaths_s: deque[float] = field(default_factory=deque)
    gave_up: bool = False


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux).

    For ``preexec_fn``: it runs in the child between fork and exec, so no
    child of a killed supervisor or bench outlives it.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


DIE_WITH_PARENT = die_with_parent if sys.platform == "linux" else None
"""``preexec_fn`` for children that must not outlive their parent (None off Linux)."""


async def terminate_all(processes: Iterable[asyncio.subprocess.Process], timeout_s: float) -> None:
    """SIGTERM every process still running, then wait for each; one still alive
    ``timeout_s`` after its turn to be waited on is SIGKILLed."""
    processes = list(processes)
    for process in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class StartFailed(Exception):
    """A child exited before it became ready."""

    code = "CHILD_START_FAILED"
    retriable = False


class Supervisor:
    """Starts, watches, restarts and stops a fixed set of child processes."""

    def __init__(
        self,
        specs: list[ChildSpec],
        *,
        out: Callable[[str], None],
        policy: RestartPolicy | None = None,
        ready_timeout_ms: int = 60_000,
        stop_timeout_ms: int = 10_000,
    ) -> None:
        self._children = [_Child(spec) for spec in specs]
        self._out = out
        self._policy = policy or RestartPolicy()
        self._ready_timeout_ms = ready_timeout_ms
        self._stop_timeout_ms = stop_timeout_ms
        self._stopping = asyncio.Event()

    @property
    def pids(self) -> dict[str, int]:
        """Current pid of each running child."""
        return {
            c.spec.name: c.process.pid
            for c in self._children
            if c.process is not None and c.process.returncode is None
        }

    async def run(self, stopping: asyncio.Event, on_ready: Callable[[dict[str, str]], None]) -> int:
        """Run until ``stopping`` is set; returns 0, or 1 if the start failed."""
        tasks = [asyncio.create_task(self._keep(child)) for child in self._children]
        code = 0
        try:
            ready = asyncio.create_task(self._all_ready())
            stop_wait = asyncio.create_task(stopping.wait())
            waiting: set[asyncio.Task[None] | asyncio.Task[bool]] = {ready, stop_wait, *tasks}
            deadline = asyncio.get_running_loop().time() + self._ready_timeout_ms / 1000
            while True:
                done, waiting = await asyncio.wait(
                    waiting,
                    timeout=max(0.0, deadline - asyncio.get_running_loop().time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                # A child given up on after it had been ready does not fail the
                # start: keep waiting for the others (it may die faster than a
                # slow sibling starts).
                if not done or not all(t in tasks and t.exception() is None for t in done):
                    break
            if ready in done:
                on_ready({c.spec.name: c.endpoint or "" for c in self._children})
                await stopping.wait()
            elif stop_wait not in done:
                failed = [t for t in tasks if t in done and t.exception() is not None]
                reason = (
                    str(failed[0].exception())
                    if failed
                    else (f"not every child was ready within {self._ready_timeout_ms} ms")
                )
                self._out(f"supervisor | start failed: {reason}; stopping everything")
                code = 1
            ready.cancel()
            stop_wait.cancel()
        finally:
            self._stopping.set()
            await asyncio.gather(*(self._stop(c) for c in self._children))
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return code

    async def _all_ready(self) -> None:
        await asyncio.gather(*(c.ready.wait() for c in self._children))

    async def _keep(self, child: _Child) -> None:
        backoff_ms = self._policy.initial_backoff_ms
        while not self._stopping.is_set():
            returncode = await self._run_once(child)
            if self._stopping.is_set():
                return
            if not child.ready.is_set():
                raise StartFailed(
                    f"{child.spec.name} exited with code {returncode} before it was ready"
                )
            now = time.monotonic()
            child.deaths_s.append(now)
            while child.deaths_s and now - child.deaths_s[0] > self._policy.window_ms / 1000:
                child.deaths_s.popleft()
            if len(child.deaths_s) > self._policy.max_restarts:
                child.gave_up = True
                self._out(
                    f"supervisor | {child.spec.name} exited with code {returncode} "
                    f"{len(child.deaths_s)} times within {self._policy.window_ms} ms; "
                    "giving up on it"
                )
                return
            self._out(
                f"supervisor | {child.spec.name} exited with code {returncode}; "
                f"restarting in {backoff_ms} ms"
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self._policy.max_backoff_ms)

    async def _run_once(self, child: _Child) -> int:
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **child.spec.env, READY_FD_ENV: str(write_fd)}
        try:
            child.process = await asyncio.create_subprocess_exec(
                *child.spec.argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_fd,),
                preexec_fn=DIE_WITH_PARENT,
            )
        finally:
            os.close(write_fd)
        process = child.process
        assert process.stdout is not None
        forward = asyncio.create_task(self._forward(child.spec.name, process.stdout))
        watch_ready = asyncio.create_task(self._watch_ready(child, read_fd))
        returncode = await process.wait()
        await forward
        # The child closed its end of the pipe by exiting; read what it wrote.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watch_ready, 1.0)
        return returncode

    async def _watch_ready(self, child: _Child, read_fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            line = await reader.readline()
            if line.startswith(b"ready"):
                child.endpoint = line.decode(errors="replace").split(" ", 1)[-1].strip()
                child.ready.set()
        finally:
            transport.close()

    async def _forward(self, name: str, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self._out(f"{name} | {line.decode(errors='replace').rstrip()}")

    async def _stop(self, child: _Child) -> None:
        process = child.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self._stop_timeout_ms / 1000)
        except TimeoutError:
            self._out(
                f"supervisor | {child.spec.name} did not stop within "
                f"{self._stop_timeout_ms} ms; killing it"
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
