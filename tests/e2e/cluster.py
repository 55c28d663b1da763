"""A whole rip5 cluster of real processes on 127.0.0.1, for end-to-end tests.

One nameserver (or ``nameservers`` of them, one raft group), ``storage``
storage nodes (joining the nameserver, which places the raft groups on them,
three replicas each, and learns their leaders) and
``brokers`` brokers, each a ``python -m rip5 <role>`` process with its own
data folder and log file under ``root``, reporting readiness through the
``RIP5_READY_FD`` pipe of rip5/shell.py. Ports are ephemeral: each process
takes a port that was free a moment before (the configuration refuses port
0) and reports the address it serves on. Each process serves its Prometheus
metrics on a port of its own too (:attr:`LocalCluster.metrics_addresses`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from angelia_rpc import AngeliaError
from angelia_rpc.config import RpcOptions
from angelia_rpc.ports import free_port
from protocol import errors
from protocol import nameserver_api as api
from rip5.admin import NameserverClient
from rip5.shell import READY_FD_ENV
from tests.contract.test_official_client import run_official

RIP5 = [sys.executable, "-m", "rip5"]
READY_TIMEOUT_S = 60.0
# Test clusters use 16 MiB WAL segments instead of the default 64 MiB: a storage node
# zero-fills its first segment and a spare before and after it starts, and the suite starts
# some 150 of them (19 GB written at 64 MiB). 16 MiB still holds the largest entry (a 4 MiB
# append plus its framing), so segments only rotate more often, which tests rotation more.
WAL_SEGMENT_FLAGS = ("--wal-segment-bytes", str(16 << 20))
CLUSTER = "DefaultCluster"


class Process:
    """One role process; :meth:`start` returns once it reported ready."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self._ready_fd: int | None = None  # the ready pipe's end, from spawn to wait_ready
        self._ready_deadline = 0.0

    def start(self) -> str:
        """Start the process and wait for its ready line; the endpoint it reported."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the process; :meth:`wait_ready` then waits for its ready line (so
        processes that do not need each other can start together)."""
        read_fd, write_fd = os.pipe()
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env, READY_FD_ENV: str(write_fd)},
                pass_fds=(write_fd,),
            )
        os.close(write_fd)
        self._ready_fd = read_fd
        self._ready_deadline = time.monotonic() + READY_TIMEOUT_S

    def wait_ready(self) -> str:
        """Wait for the ready line of the process :meth:`spawn` started (at most
        ``READY_TIMEOUT_S`` from its start); the endpoint it reported."""
        assert self.popen is not None, f"{self.name} was not spawned"
        assert self._ready_fd is not None, f"{self.name}: wait_ready once per spawn"
        read_fd, self._ready_fd = self._ready_fd, None
        data = b""
        try:
            while b"\n" not in data:
                remaining = self._ready_deadline - time.monotonic()
                if remaining <= 0 or self.popen.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} did not become ready:\n{self.log_path.read_text()[-4000:]}"
                    )
                readable, _, _ = select.select([read_fd], [], [], min(remaining, 0.5))
                if readable:
                    chunk = os.read(read_fd, 1024)
                    if not chunk:
                        continue
                    data += chunk
        finally:
            os.close(read_fd)
        self.endpoint = data.decode().split()[1]
        return self.endpoint

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit code (None if it had to be killed)."""
        self.terminate()
        return self.wait_stopped()

    def terminate(self) -> None:
        """Send SIGTERM if it runs; :meth:`wait_stopped` then waits for the exit (so
        processes can stop together)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()

    def wait_stopped(self) -> int | None:
        """Wait for the exit :meth:`terminate` asked for (SIGKILL after 20 s); the exit
        code (None if it had to be killed or never started)."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            return None

    @property
    def alive(self) -> bool:
        """Still running."""
        return self.popen is not None and self.popen.poll() is None


class LocalCluster:
    """Nameserver + storage nodes + brokers under ``root`` (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        storage: int = 3,
        brokers: int = 1,
        groups: int = 8,
        auto_create: bool = False,
        log_level: str = "info",
        broker_flags: tuple[str, ...] = (),
        nameservers: int = 1,
        nameserver_flags: tuple[str, ...] = (),
        replication: str = "raft",
        storage_flags: tuple[str, ...] = (),
        rpc: RpcOptions | None = None,
    ) -> None:
        """``replication``: raft, or controller (RIP-44; at most 3 storage nodes, each
        group on all of them); ``rpc``: the internal RPC of every process (default: tcp,
        msgpack)."""
        self.rpc = rpc or RpcOptions()
        self.root = root
        self.replication = replication
        self.broker_flags = broker_flags
        self.storage_flags = storage_flags
        self.nameserver_flags = nameserver_flags
        self.groups = groups
        self.log_level = log_level
        self.auto_create = auto_create
        self.secret = secrets.token_hex(16)
        self.storage_addresses = {n: f"127.0.0.1:{free_port()}" for n in range(1, storage + 1)}
        self.broker_count = brokers
        self.nameserver: Process | None = None  # the first nameserver
        self.nameservers: dict[int, Process] = {}
        self.nameserver_addresses = [f"127.0.0.1:{free_port()}" for _ in range(nameservers)]
        self.storage: dict[int, Process] = {}
        self.brokers: list[Process] = []
        self.remoting_addresses: list[str] = []  # each broker's, for 4.x clients
        self.metrics_addresses: dict[str, str] = {}  # process name -> its /metrics host:port

    def _argv(self, role: str, name: str, *flags: str) -> list[str]:
        metrics = self.metrics_addresses.setdefault(name, f"127.0.0.1:{free_port()}")
        return [
            *RIP5,
            role,
            "--data-dir",
            str(self.root / name),
            "--log-level",
            self.log_level,
            "--metrics-listen",
            metrics,
            *flags,
            *self.rpc.rpc_flags,
        ]

    def _process(
        self, role: str, name: str, *flags: str, env: dict[str, str] | None = None
    ) -> Process:
        return Process(name, self._argv(role, name, *flags), self.root / f"{name}.log", env or {})

    @property
    def nameserver_address(self) -> str:
        """host:port of every nameserver, comma-separated (a ``--nameserver`` value)."""
        return ",".join(self.nameserver_addresses)

    def start_nameserver(self, node: int) -> Process:
        """Start (or restart, on its data) nameserver ``node`` (1-based); ready when
        this returns."""
        flags = ["--listen", self.nameserver_addresses[node - 1], "--groups", str(self.groups)]
        if self.replication != "raft":
            factor = str(len(self.storage_addresses))
            flags += ["--replication", self.replication, "--replication-factor", factor]
        flags += self.nameserver_flags
        if len(self.nameserver_addresses) > 1:
            peers = ",".join(f"{n}={a}" for n, a in enumerate(self.nameserver_addresses, 1))
            flags += ["--node-id", str(node), "--peers", peers]
        name = "nameserver" if node == 1 else f"nameserver-{node}"
        process = self._process("nameserver", name, *flags)
        self.nameservers[node] = process
        if node == 1:
            self.nameserver = process
        process.start()
        return process

    def start(self) -> None:
        """Start every process in dependency order: the nameservers one by one, then
        the storage nodes together, then the brokers, each role once the previous is
        ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        for node in range(1, len(self.nameserver_addresses) + 1):
            self.start_nameserver(node)
        for node, address in self.storage_addresses.items():
            process = self._process(
                "storage",
                f"storage-{node}",
                "--listen",
                address,
                "--node-id",
                str(node),
                "--nameserver",
                self.nameserver_address,
                "--groups",
                str(self.groups),
                *(("--replication", self.replication) if self.replication != "raft" else ()),
                *WAL_SEGMENT_FLAGS,
                *self.storage_flags,
            )
            process.spawn()
            self.storage[node] = process
        # The storage nodes need only the nameserver: they start together.
        for process in self.storage.values():
            process.wait_ready()
        for _ in range(self.broker_count):
            self.add_broker()

    def add_broker(self) -> Process:
        """Start one more broker; it is ready when this returns."""
        index = len(self.brokers) + 1
        remoting = f"127.0.0.1:{free_port()}"
        process = self._process(
            "broker",
            f"broker-{index}",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--remoting-listen",
            remoting,
            "--nameserver",
            self.nameserver_address,
            "--auto-create" if self.auto_create else "--no-auto-create",
            *self.broker_flags,
            env={"RIP5_BROKER_SECRET": self.secret},
        )
        process.start()
        self.brokers.append(process)
        self.remoting_addresses.append(remoting)
        return process

    def broker_port(self, index: int = 0) -> int:
        """The client port of broker ``index``."""
        return int(self.brokers[index].endpoint.rpartition(":")[2])

    def stop(self) -> dict[str, int | None]:
        """Stop everything, a role at a time (brokers, storage nodes, nameservers), the
        processes of a role together; each process's exit code."""
        codes: dict[str, int | None] = {}
        for role in (self.brokers, list(self.storage.values()), list(self.nameservers.values())):
            for process in role:
                process.terminate()
            for process in role:
                codes[process.name] = process.wait_stopped()
        return codes

    # -- metadata through the nameserver, as `rip5 admin` does it ------------------------

    def create(
        self,
        topics: dict[str, tuple[int, int]],
        groups: dict[str, tuple[bool, int]],
        signed: api.SignedBy | None = None,
    ) -> None:
        """Create ``topics`` (name -> (queue count, message type)) and ``groups``
        (name -> (fifo, max delivery attempts)), retrying until the nameserver's
        leader has created the cluster; ``signed``: an ACL user's signature."""
        signature = signed or api.SignedBy()

        async def run() -> None:
            client = NameserverClient(self.nameserver_addresses, self.rpc.rpc_config())
            try:
                deadline = time.monotonic() + READY_TIMEOUT_S
                for name, (queues, kind) in topics.items():
                    request = api.CreateTopicRequest(name, CLUSTER, queues, kind, signed=signature)
                    await _until(deadline, client, lambda s, r=request: s.create_topic(r))
                for name, (fifo, attempts) in groups.items():
                    group = api.CreateConsumerGroupRequest(
                        name, CLUSTER, fifo, attempts, signed=signature
                    )
                    await _until(deadline, client, lambda s, r=group: s.create_consumer_group(r))
            finally:
                await client.close()

        asyncio.run(run())


@contextlib.contextmanager
def running_cluster(
    root: Path,
    topics: dict[str, tuple[int, int]],
    consumer_groups: dict[str, tuple[bool, int]],
    /,
    **options: Any,
) -> Iterator[LocalCluster]:
    """A started :class:`LocalCluster` under ``root`` (``options`` as its constructor
    takes them, e.g. ``groups``: raft groups) holding ``topics`` and
    ``consumer_groups`` (as :meth:`LocalCluster.create` takes them); on leaving,
    every process is stopped and must have exited cleanly (AssertionError naming
    those that did not, and where their logs are)."""
    local = LocalCluster(root, **options)
    try:
        local.start()
        local.create(topics, consumer_groups)
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


def official_client_step(
    cluster: LocalCluster, module: str, scenario: str, *args: object
) -> dict[str, Any]:
    """One scenario of the official client's script ``module`` (``python -m MODULE
    SCENARIO BROKER_PORT ARGS...``, in its own interpreter) against the cluster's
    first broker: the JSON object it printed last."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = ["-m", module, scenario, str(cluster.broker_port()), *map(str, args)]
    return run_official(argv, home, timeout_s=120)


async def _until(deadline: float, client: NameserverClient, method: Any) -> None:
    while True:
        try:
            await client.call(method)
            return
        except AngeliaError as error:
            if time.monotonic() > deadline or error.code is errors.ALREADY_EXISTS:
                if error.code is errors.ALREADY_EXISTS:
                    return
                raise
        await asyncio.sleep(0.1)
