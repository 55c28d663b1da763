"""Start, kill and restart storage node processes on 127.0.0.1, and call them.

Used by the storage integration tests and ``rip5 bench storage``. Every node
is a real ``python -m rip5 storage`` process with its own data folder, on a
port that was free when the cluster was planned; it reports readiness through
the ``RIP5_READY_FD`` pipe of rip5/shell.py. Clients reach nodes over Angelia
(tcp, msgpack); :meth:`LocalStorageCluster.call` routes a queue to its group,
follows leader hints and retries retriable errors until a deadline (through
:func:`angelia_rpc.failover.call_leader`).

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.errors import unavailable
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader, starting_at
from angelia_rpc.ports import free_port
from protocol import routing
from protocol.storage_api import NodeStatusRequest, NodeStatusResponse
from rip5.shell import READY_FD_ENV
from rip5.supervisor import DIE_WITH_PARENT, terminate_all
from storage_node.service import FIRST_GROUP_ID

T = TypeVar("T")

_FAILOVER = FailoverPolicy(pause_first_s=0.01, pause_max_s=0.2)
"""A call's pauses after a miss: 10 ms doubling to 200 ms."""


class LocalStorageCluster:
    """``nodes`` storage processes replicating ``groups`` groups, under ``root``."""

    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        groups: int = 16,
        log_level: str = "warning",
        *,
        nameserver: str = "",
        static: bool = True,
        flags: tuple[str, ...] = (),
    ) -> None:
        """Choose ports; nothing starts until :meth:`start`.

        ``nameserver``: the nodes register there; ``static`` False: they host
        the groups the nameserver assigns instead of every group (``--peers``).
        ``flags``: more options of every node (``--replication controller``).
        """
        self.root = root
        self.flags = flags
        self.groups = groups
        self.log_level = log_level
        self.nameserver = nameserver
        self.static = static
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in range(1, nodes + 1)}
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._peers = Peers(RpcConfig(call_timeout_ms=5000))
        self._served_by: dict[int, str] = {}

    @property
    def peers_flag(self) -> str:
        """The ``--peers`` value of every node."""
        return ",".join(f"{n}={a}" for n, a in sorted(self.addresses.items()))

    def stub(self, node_id: int) -> StorageService:
        """The client stub of one node."""
        return self.stub_at(self.addresses[node_id])

    def stub_at(self, address: str) -> StorageService:
        """The client stub of the node at ``address`` (one per address, as peers keep it)."""
        return self._peers.stub(StorageService, address)

    async def start(self) -> None:
        """Start every node and wait until each serves."""
        await asyncio.gather(*(self.start_node(n) for n in self.addresses))

    async def start_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start (or restart) one node on its data folder; wait until it is ready."""
        read_fd, write_fd = os.pipe()
        args = [
            sys.executable,
            "-m",
            "rip5",
            "storage",
            "--data-dir",
            str(self.root / f"storage-{node_id}"),
            "--log-level",
            self.log_level,
            "--listen",
            self.addresses[node_id],
            "--node-id",
            str(node_id),
            "--groups",
            str(self.groups),
            # Each node its own metrics port: the default one is taken by the first.
            "--metrics-listen",
            f"127.0.0.1:{free_port()}",
        ]
        if self.static:
            args += ["--peers", self.peers_flag]
        if self.nameserver:
            args += ["--nameserver", self.nameserver]
        args += self.flags
        try:
            process = await asyncio.create_subprocess_exec(
                *args,
                env={**os.environ, READY_FD_ENV: str(write_fd)},
                pass_fds=(write_fd,),
                preexec_fn=DIE_WITH_PARENT,  # a killed bench leaves no node running
            )
        finally:
            os.close(write_fd)
        self.processes[node_id] = process
        loop = asyncio.get_running_loop()
        try:
            reading = loop.run_in_executor(None, _read_line, read_fd)
            line = await asyncio.wait_for(reading, timeout_s)
        finally:
            os.close(read_fd)
        if not line.startswith("ready"):
            raise RuntimeError(f"storage node {node_id} did not start (exit {process.returncode})")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node: no chance to flush or close anything."""
        process = self.processes.pop(node_id)
        process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM every node and wait; close the client channels."""
        await terminate_all(self.processes.values(), 30)
        self.processes.clear()
        await self._peers.close()

    async def status(self, node_id: int) -> NodeStatusResponse | None:
        """One node's status, or None if it does not answer."""
        try:
            return await self.stub(node_id).status(NodeStatusRequest(), timeout_ms=2000)
        except AngeliaError:
            return None

    async def leaders(self) -> dict[int, int]:
        """Groups whose leader every live node agrees on and which that leader confirms."""
        nodes = sorted(self.processes)
        statuses = await asyncio.gather(*(self.status(n) for n in nodes))
        live = [s for s in statuses if s is not None]
        if len(live) != len(nodes):
            return {}
        led_by = {s.node_id: set(s.led) for s in live}
        agreed: dict[int, int] = {}
        for index in range(self.groups):
            views = {s.leaders[index] for s in live}
            if len(views) == 1:
                (lead,) = views
                group_id = FIRST_GROUP_ID + index
                if lead in led_by and group_id in led_by[lead]:
                    agreed[group_id] = lead
        return agreed

    async def wait_all_led(self, timeout_s: float = 60) -> dict[int, int]:
        """Wait until every group has an agreed leader; return group -> leader node."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leaders = await self.leaders()
            if len(leaders) == self.groups:
                return leaders
            if loop.time() > deadline:
                raise TimeoutError(f"only {len(leaders)} of {self.groups} groups have a leader")
            await asyncio.sleep(0.05)

    async def wait_balanced(self, timeout_s: float = 60) -> dict[int, int]:
        """Wait until every group has an agreed leader and each node leads about G/N of
        them (the nameserver's leader balance); return group -> leader node."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leaders = await self.leaders()
            led = [list(leaders.values()).count(node) for node in self.processes]
            if len(leaders) == self.groups and max(led) - min(led) <= 1:
                return leaders
            if loop.time() > deadline:
                raise TimeoutError(f"leaders not balanced within {timeout_s} s: {leaders}")
            await asyncio.sleep(0.05)

    def group_of(self, topic: str, queue_id: int) -> int:
        """The group serving a queue in this cluster."""
        return routing.group_id(topic, queue_id, FIRST_GROUP_ID, self.groups)

    async def call(
        self,
        invoke: Callable[[StorageService], Awaitable[T]],
        first_node: int | None = None,
        timeout_s: float = 30.0,
        group: int | None = None,
    ) -> T:
        """``invoke(stub)`` on a live node; when it fails, the other live nodes as
        :func:`angelia_rpc.failover.call_leader` decides (leader hints followed,
        retriable errors retried after a pause) until ``timeout_s``.

        With ``group`` (the group serving the call's queue), the call starts at the
        node that last served that group.

        A retried call may have taken effect before it failed: callers rely on
        the storage API's idempotence (message ids) or tolerate a repeat.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        live = sorted(self.processes)
        address = self.addresses[first_node if first_node in self.processes else live[0]]
        if first_node is None and group is not None:
            address = self._served_by.get(group, address)
        failure = None
        try:
            result = await invoke(self.stub_at(address))
        except AngeliaError as error:
            failure = error
        if failure is not None:

            async def attempt(at: str, _timeout_ms: int) -> T:
                if at not in self._live_addresses():  # a hint naming a stopped node
                    raise unavailable(f"the storage node at {at} is stopped")
                return await invoke(self.stub_at(at))

            async def refresh() -> list[str]:
                return self._live_addresses()

            failover = Failover(starting_at(address, self._live_addresses()), _FAILOVER, deadline)
            result = await call_leader(
                failover,
                attempt,
                clock=loop.time,
                sleep=asyncio.sleep,
                refresh=refresh,
                failure=failure,
            )
            address = failover.address
        if group is not None:
            self._served_by[group] = address
        return result

    def _live_addresses(self) -> list[str]:
        return [self.addresses[n] for n in sorted(self.processes)]


def _read_line(fd: int) -> str:
    """One line from a pipe ('' when the writer closed it without one)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    with contextlib.suppress(UnicodeDecodeError):
        return data.decode()
    return ""
