"""The dev supervisor over real child processes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rip5.supervisor import ChildSpec, RestartPolicy, Supervisor, terminate_all
from tests.waiting import async_wait_until, pid_alive, wait_until

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ECHO = str(HERE / "echo_role.py")


def _echo(name: str, root: Path, mode: str = "serve", timeout_ms: int = 5000) -> ChildSpec:
    return ChildSpec(name, (sys.executable, ECHO, str(root / name), mode, str(timeout_ms)))


async def _echo_round_trip(endpoint: str) -> bytes:
    host, port = endpoint.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"ping")
    await writer.drain()
    data = await reader.readexactly(4)
    writer.close()
    await writer.wait_closed()
    return data


async def test_starts_all_reports_endpoints_and_stops_all(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor([_echo(f"e{i}", tmp_path) for i in range(3)], out=lines.append)
    stopping = asyncio.Event()
    ready: dict[str, str] = {}
    pids: dict[str, int] = {}

    def on_ready(endpoints: dict[str, str]) -> None:
        ready.update(endpoints)
        pids.update(supervisor.pids)
        stopping.set()

    code = await supervisor.run(stopping, on_ready)
    assert code == 0
    assert sorted(ready) == ["e0", "e1", "e2"]
    assert all(ep.startswith("127.0.0.1:") for ep in ready.values())
    assert len(pids) == 3
    assert not any(pid_alive(pid) for pid in pids.values())
    assert any(line.startswith("e1 | ") and "msg=ready" in line for line in lines)


async def test_children_serve_while_supervised(tmp_path: Path) -> None:
    supervisor = Supervisor([_echo("e", tmp_path)], out=lambda _: None)
    stopping = asyncio.Event()
    endpoints: dict[str, str] = {}
    task = asyncio.create_task(supervisor.run(stopping, endpoints.update))
    await async_wait_until(lambda: endpoints, what="readiness")
    assert await _echo_round_trip(endpoints["e"]) == b"ping"
    stopping.set()
    assert await task == 0


async def test_a_child_that_dies_after_start_is_restarted(tmp_path: Path) -> None:
    lines: list[str] = []
    policy = RestartPolicy(initial_backoff_ms=10)
    supervisor = Supervisor(
        [_echo("e", tmp_path, "crash-after-ready")], out=lines.append, policy=policy
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stopping, lambda _: None))
    await async_wait_until(
        lambda: sum("msg=ready" in ln for ln in lines) >= 2 and supervisor.pids,
        what="the restarted child to be ready again",
    )
    assert any("exited with code 9; restarting" in ln for ln in lines)
    stopping.set()
    assert await task == 0


async def test_a_child_failing_before_ready_fails_the_start_and_stops_the_rest(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    supervisor = Supervisor(
        [_echo("good", tmp_path), _echo("bad", tmp_path, "crash-before-ready")], out=lines.append
    )
    code = await supervisor.run(asyncio.Event(), lambda _: pytest.fail("must not be ready"))
    assert code == 1
    assert any("bad exited with code 7 before it was ready" in ln for ln in lines)
    assert supervisor.pids == {}


async def test_a_child_ignoring_sigterm_is_killed_after_the_deadline(tmp_path: Path) -> None:
    lines: list[str] = []
    # The child's own graceful deadline (60 s) is longer than the supervisor's (300 ms).
    supervisor = Supervisor(
        [_echo("s", tmp_path, "stubborn", 60_000)], out=lines.append, stop_timeout_ms=300
    )
    stopping = asyncio.Event()
    code = await supervisor.run(stopping, lambda _: stopping.set())
    assert code == 0
    assert any("did not stop within 300 ms; killing it" in ln for ln in lines)


async def test_gives_up_on_a_child_that_keeps_dying(tmp_path: Path) -> None:
    lines: list[str] = []
    policy = RestartPolicy(initial_backoff_ms=1, max_backoff_ms=2, max_restarts=2)
    spec = ChildSpec(
        "flappy",
        (
            sys.executable,
            "-c",
            "import os,sys;os.write(int(os.environ['RIP5_READY_FD']), b'ready x\\n');sys.exit(5)",
        ),
    )
    supervisor = Supervisor([spec, _echo("steady", tmp_path)], out=lines.append, policy=policy)
    stopping = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stopping, lambda _: None))
    await async_wait_until(
        lambda: any("giving up on it" in ln for ln in lines), what="the supervisor to give up"
    )
    assert "steady" in supervisor.pids
    stopping.set()
    assert await task == 0


async def test_a_child_given_up_on_before_a_slow_sibling_is_ready_does_not_fail_the_start(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    policy = RestartPolicy(initial_backoff_ms=1, max_backoff_ms=2, max_restarts=2)
    ready_then_exit = (
        "import os,sys;os.write(int(os.environ['RIP5_READY_FD']), b'ready x\\n');sys.exit(5)"
    )
    # The sibling takes longer to start than the flappy child takes to be given up on.
    slow_start = (
        "import os,time;time.sleep(1.0);"
        "os.write(int(os.environ['RIP5_READY_FD']), b'ready y\\n');time.sleep(60)"
    )
    supervisor = Supervisor(
        [
            ChildSpec("flappy", (sys.executable, "-c", ready_then_exit)),
            ChildSpec("slow", (sys.executable, "-c", slow_start)),
        ],
        out=lines.append,
        policy=policy,
    )
    stopping = asyncio.Event()
    endpoints: list[dict[str, str]] = []
    task = asyncio.create_task(supervisor.run(stopping, endpoints.append))
    await async_wait_until(lambda: endpoints or task.done(), what="the start to settle")
    assert endpoints == [{"flappy": "x", "slow": "y"}]
    assert "slow" in supervisor.pids
    assert any("giving up on it" in ln for ln in lines)
    stopping.set()
    assert await task == 0


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "supervise_echo.py"), str(tmp_path), "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pids: dict[str, int] = {}
    for line in proc.stdout:
        if line.startswith("pids "):
            pids = json.loads(line[5:])
            break
    assert len(pids) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=20)
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), what="orphans to exit")
    proc.stdout.close()


async def test_terminate_all_stops_the_willing_and_kills_the_stubborn() -> None:
    code = (
        "import signal, sys, time\n"
        "if sys.argv[1] == 'stubborn':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, mode, stdout=asyncio.subprocess.PIPE
        )
        for mode in ("willing", "stubborn")
    ]
    for process in processes:  # both run, the stubborn one already ignores SIGTERM
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 30) == b"up\n"
    await terminate_all(processes, 0.3)
    willing, stubborn = processes
    assert willing.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    await terminate_all(processes, 0.3)  # already stopped: nothing to do, no error
