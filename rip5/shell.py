"""The process shell every role runs inside.

Duties, in order: configure logging; take the data directory (created if
missing, locked so two processes never share it); run the role's ``serve``
coroutine on uvloop; on SIGINT or SIGTERM set the role's ``stopping`` event and
give ``serve`` ``shutdown_timeout_ms`` to return before it is cancelled.

A role's serve function has the signature::

    async def serve(config, data_dir: Path, stopping: asyncio.Event,
                    ready: Callable[[str], None]) -> None

It calls ``ready(endpoint)`` once it accepts work, watches ``stopping``, and
returns when it has stopped. When the role's config has a non-empty
``metrics_listen``, the shell serves its Prometheus metrics there for the life
of ``serve`` (rip5/metrics_endpoint.py). ``ready`` logs the event and, when the process was
started by ``rip5 dev``, tells the supervisor through the pipe named by
``RIP5_READY_FD``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import gc
import logging
import os
import signal
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import uvloop

from rip5 import logs
from rip5.config import CommonConfig, describe
from rip5.metrics_endpoint import READY, start_metrics_endpoint

ServeFn = Callable[[Any, Path, asyncio.Event, Callable[[str], None]], Coroutine[Any, Any, None]]
READY_FD_ENV = "RIP5_READY_FD"

log = logging.getLogger("rip5.shell")


class DataDirInUse(Exception):
    """Another live process holds this data directory."""

    code = "DATA_DIR_IN_USE"
    retriable = False


@contextlib.contextmanager
def hold_data_dir(path: Path) -> Iterator[Path]:
    """Create ``path`` if needed and hold its lock for the life of the block."""
    path.mkdir(parents=True, exist_ok=True)
    lock_path = path / "LOCK"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise DataDirInUse(
                f"data directory {path} is in use by another rip5 process (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)


def _notify_ready(endpoint: str) -> None:
    log.info("ready", extra={"endpoint": endpoint})
    READY.set(1)
    fd_text = os.environ.pop(READY_FD_ENV, "")
    if fd_text.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(fd_text), f"ready {endpoint}\n".encode())
            os.close(int(fd_text))


async def _main(serve: ServeFn, config: object, data_dir: Path, timeout_ms: int) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    listen = str(getattr(config, "metrics_listen", ""))
    try:
        metrics = start_metrics_endpoint(listen) if listen else None
    except ValueError as exc:
        log.error(str(exc))
        return 1
    try:
        return await _run_serve(serve, config, data_dir, stopping, timeout_ms)
    finally:
        if metrics is not None:
            metrics.stop()


async def _run_serve(
    serve: ServeFn, config: object, data_dir: Path, stopping: asyncio.Event, timeout_ms: int
) -> int:
    task = asyncio.create_task(serve(config, data_dir, stopping, _notify_ready))
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        log.info("stopping", extra={"deadline_ms": timeout_ms})
        done, _ = await asyncio.wait({task}, timeout=timeout_ms / 1000)
        if not done:
            log.warning(
                "graceful stop overran its deadline; cancelling",
                extra={"deadline_ms": timeout_ms, "pending": _pending_awaits()},
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return 1
    stop_wait.cancel()
    if task.cancelled():
        return 1
    error = task.exception()
    if error is not None:
        log.error("role failed", exc_info=error)
        return 1
    log.info("stopped")
    return 0


def _pending_awaits(limit: int = 12) -> str:
    """Where each unfinished task of the loop waits, innermost call last
    (``name: coroutine file:line > ...``): what an overrun stop was stuck on."""
    current = asyncio.current_task()
    lines: list[str] = []
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        chain: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(chain) < 8:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                break
            code = frame.f_code
            chain.append(f"{code.co_name} {os.path.basename(code.co_filename)}:{frame.f_lineno}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        lines.append(f"{task.get_name()}: {' > '.join(chain) or '?'}")
    return "; ".join(sorted(lines)[:limit])


GC_THRESHOLDS = (50_000, 20, 100)
"""The cyclic collector's thresholds in role processes (CPython's default: 700, 10, 10).

A storage node holds millions of long-lived objects (queue indexes, held
timers, pop state); with the defaults a full collection ran several times a
second under load and paused the event loop 110-190 ms each time (measured
with ``rip5 bench timer``: timer lateness p99 206 ms before, 59 ms after).
Reference counting frees everything that is not in a cycle, so collecting
rarely costs little memory."""


def tune_gc() -> None:
    """Collect cycles rarely (:data:`GC_THRESHOLDS`); what exists at startup is never scanned."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


MALLOC_MMAP_THRESHOLD_BYTES = 32 << 20
MALLOC_TRIM_THRESHOLD_BYTES = 64 << 20
"""glibc malloc settings in role processes (its defaults: 128 KiB, adjusted upward, and 128 KiB).

With the defaults a freed block of a few hundred KiB (a raft batch, a frame
being received) went back to the kernel, and the next one was page-faulted in
and zeroed again: ``perf`` showed 5.6% of a storage node in ``clear_page``, and
receiving 300 KB frames in 64 KiB reads ran at 0.6 GB/s instead of 6 GB/s.
Blocks under 32 MiB now come from the heap, and up to 64 MiB of free heap is
kept for reuse."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc() -> bool:
    """Apply the glibc settings above; False (and nothing changed) without glibc's ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES)
    )


def run_role(role: str, serve: ServeFn, config: object, common: CommonConfig) -> int:
    """Run one role process to completion; returns the process exit code."""
    logs.configure(role, common.log_level, common.log_format)
    tune_gc()
    if not tune_malloc():
        log.info("malloc settings left as they are (no glibc mallopt)")
    log.info("starting", extra=dict([*describe(common), *describe(config)]))
    try:
        with hold_data_dir(common.data_dir.resolve()) as data_dir:
            return uvloop.run(_main(serve, config, data_dir, common.shutdown_timeout_ms))
    except DataDirInUse as exc:
        log.error(str(exc))
        return 1
