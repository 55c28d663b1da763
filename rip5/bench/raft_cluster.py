"""Start, kill and restart raft host processes on 127.0.0.1, and talk to them.

Used by the multi-process integration test and by ``rip5 bench raft``. Every
node is a real process (``python -m rip5.bench.raft_host``) with its own data
folder; clients reach them over Angelia (tcp, msgpack).

SHELL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.ports import free_port
from rip5.bench.raft_host import (
    ProposeRequest,
    RaftHostService,
    ReadRequest,
    ReadResponse,
    StatusRequest,
    StatusResponse,
)


@dataclass
class HostSpec:
    """How to start the nodes (options passed through to rip5.bench.raft_host)."""

    groups: int = 64
    nodes: int = 3
    tick_ms: int = 50
    election_tick: int = 10
    heartbeat_tick: int = 2
    snapshot_entries: int = 10_000
    keep_entries: int = 2_000
    keep_values: bool = False
    extra_args: list[str] = field(default_factory=list)


class LocalCluster:
    """N raft host processes on 127.0.0.1 under ``root``."""

    def __init__(self, root: Path, spec: HostSpec) -> None:
        """Choose ports; nothing starts until :meth:`start`."""
        self.root = root
        self.spec = spec
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in range(1, spec.nodes + 1)}
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._peers = Peers(RpcConfig(call_timeout_ms=5000))

    def stub(self, node_id: int) -> RaftHostService:
        """The client stub of one node."""
        return self._peers.stub(RaftHostService, self.addresses[node_id])

    async def start(self) -> None:
        """Start every node and wait until each serves."""
        await asyncio.gather(*(self.start_node(n) for n in self.addresses))

    async def start_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        """Start (or restart) one node with its data folder; wait for READY."""
        spec = self.spec
        peers = ",".join(f"{n}={a}" for n, a in sorted(self.addresses.items()))
        args = [
            sys.executable,
            "-m",
            "rip5.bench.raft_host",
            "--id",
            str(node_id),
            "--peers",
            peers,
            "--groups",
            str(spec.groups),
            "--data-dir",
            str(self.root / f"n{node_id}"),
            "--tick-ms",
            str(spec.tick_ms),
            "--election-tick",
            str(spec.election_tick),
            "--heartbeat-tick",
            str(spec.heartbeat_tick),
            "--snapshot-entries",
            str(spec.snapshot_entries),
            "--keep-entries",
            str(spec.keep_entries),
            *(["--keep-values"] if spec.keep_values else []),
            *spec.extra_args,
        ]
        process = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        self.processes[node_id] = process
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout_s)
        if not line.startswith(b"READY"):
            raise RuntimeError(f"node {node_id} did not start: {line!r}")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (no chance to flush or close anything)."""
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM every node and wait; close the client channels."""
        for process in self.processes.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()
        self.processes.clear()
        await self._peers.close()

    async def status(self, node_id: int) -> StatusResponse | None:
        """One node's status, or None if it does not answer."""
        try:
            return await self.stub(node_id).status(StatusRequest(), timeout_ms=2000)
        except AngeliaError:
            return None

    async def leaders(self, alive: list[int] | None = None) -> dict[int, int]:
        """Groups whose leader every live node agrees on and which that leader confirms."""
        nodes = alive if alive is not None else sorted(self.processes)
        statuses = await asyncio.gather(*(self.status(n) for n in nodes))
        if any(s is None for s in statuses):
            return {}
        agreed: dict[int, int] = {}
        led_by = {s.node_id: set(s.led) for s in statuses if s is not None}
        for index in range(self.spec.groups):
            views = {s.leaders[index] for s in statuses if s is not None}
            if len(views) == 1:
                (lead,) = views
                if lead in led_by and index + 1 in led_by[lead]:
                    agreed[index + 1] = lead
        return agreed

    async def wait_all_led(
        self, alive: list[int] | None = None, timeout_s: float = 60
    ) -> dict[int, int]:
        """Wait until every group has an agreed leader; return them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leaders = await self.leaders(alive)
            if len(leaders) == self.spec.groups:
                return leaders
            if loop.time() > deadline:
                raise TimeoutError(
                    f"only {len(leaders)} of {self.spec.groups} groups have a leader"
                )
            await asyncio.sleep(0.05)

    async def propose(self, node_id: int, group: int, items: list[bytes]) -> list[int]:
        """Propose a batch to ``group`` at ``node_id``; the indices (AngeliaError on failure)."""
        response = await self.stub(node_id).propose(ProposeRequest(group, items), timeout_ms=5000)
        return response.indices

    async def read(self, node_id: int, group: int, with_values: bool = False) -> ReadResponse:
        """What ``node_id`` applied for ``group``."""
        return await self.stub(node_id).read(ReadRequest(group, with_values), timeout_ms=5000)
