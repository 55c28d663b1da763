"""A local cluster for the chaos suite: ``rip5 dev``'s processes, each server behind a proxy.

The processes are the ones ``rip5 dev`` plans (:func:`rip5.dev.plan`, every
port free), supervised in this process by :class:`rip5.supervisor.Supervisor`
so a killed one comes back. Two changes make faults between them possible:

- the nameserver and every storage node get a :class:`~rip5.chaos.proxy.NamedProxy`
  in front: brokers and storage nodes are given the nameserver's proxy, and
  each storage node advertises its proxy (``--advertise``), so every link
  between two processes passes one proxy that knows both ends;
- each storage node reads its fault-injection file (``RIP5_FAULT_INJECTION``,
  see :mod:`storage_node.fault_injection`), which the runner writes.

SHELL: processes, files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as api
from rip5.admin import DEFAULT_CLUSTER
from rip5.chaos.proxy import Faults, NamedProxy
from rip5.chaos.schedule import role_of
from rip5.dev import DevLayout, plan
from rip5.supervisor import ChildSpec, RestartPolicy, Supervisor
from storage_node.fault_injection import FAULT_FILE_ENV

READY_TIMEOUT_S = 120.0
RESTART_POLICY = RestartPolicy(
    initial_backoff_ms=200, max_backoff_ms=2_000, max_restarts=1_000, window_ms=60_000
)
"""A chaos run kills processes on purpose: restart them fast and never give up."""


class ClusterFailed(Exception):
    """The cluster did not start; the message names the cause."""


@dataclass(frozen=True)
class ClusterShape:
    """How many processes of each role, and how many raft groups."""

    storage: int = 3
    brokers: int = 1
    groups: int = 8
    log_level: str = "warning"
    wal_segment_bytes: int = 16 << 10
    """Small, so that a short run seals segments (the corrupt fault flips bytes in one)."""

    def process_names(self) -> list[str]:
        """The names :func:`rip5.dev.plan` gives this shape's processes."""
        return [
            "nameserver",
            *(f"storage-{i + 1}" for i in range(self.storage)),
            *(f"broker-{i + 1}" for i in range(self.brokers)),
        ]


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _set_flag(argv: list[str], flag: str, value: str) -> None:
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]


class ChaosCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; see the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        shape: ClusterShape,
        seed: int,
        log: Callable[[str], None],
        role_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """Data, logs and fault files live under ``data_dir``; ``log`` takes the children's
        lines; ``role_env`` adds environment variables to every process of a role (the
        planted bugs of the checker's tests)."""
        self.data_dir = data_dir
        self._role_env = role_env or {}
        self.shape = shape
        self.faults = Faults()
        self._seed = seed
        self._log = log
        self.proxies: dict[str, NamedProxy] = {}
        self.endpoints: dict[str, str] = {}
        self.specs: list[ChildSpec] = []
        self._supervisor: Supervisor | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[int] | None = None

    # -- what the faults need -------------------------------------------------

    @property
    def processes(self) -> list[str]:
        """Every process name (``nameserver``, ``storage-1``, ..., ``broker-1``)."""
        return [spec.name for spec in self.specs]

    @property
    def storage_nodes(self) -> list[str]:
        """The storage nodes' names."""
        return [p for p in self.processes if role_of(p) == "storage"]

    def pid_of(self, name: str) -> int | None:
        """The live pid of process ``name`` (None while it is down)."""
        assert self._supervisor is not None
        return self._supervisor.pids.get(name)

    def name_of_pid(self, pid: int) -> str | None:
        """The process name of ``pid``, if it is one of the cluster's."""
        assert self._supervisor is not None
        return next((n for n, p in self._supervisor.pids.items() if p == pid), None)

    def data_dir_of(self, name: str) -> Path:
        """Where process ``name`` keeps its data."""
        return self.data_dir / name

    def fault_file_of(self, name: str) -> Path:
        """The fault-injection file storage node ``name`` reads."""
        return self.data_dir / "faults" / f"{name}.json"

    def write_fault_file(self, name: str, settings: dict[str, object]) -> None:
        """Replace storage node ``name``'s injected faults (``{}``: none), atomically."""
        path = self.fault_file_of(name)
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(settings))
        scratch.replace(path)

    @property
    def endpoint(self) -> str:
        """The first broker's client endpoint."""
        return next(ep for name, ep in self.endpoints.items() if name.startswith("broker"))

    @property
    def broker_endpoints(self) -> list[str]:
        """Every broker's client endpoint, the first broker's first."""
        return [ep for name, ep in sorted(self.endpoints.items()) if name.startswith("broker")]

    @property
    def nameserver(self) -> str:
        """The nameserver's real address (for the runner's own calls)."""
        return self.endpoints["nameserver"]

    async def leader_heavy_storage(self) -> str:
        """The storage node leading the most groups now (the nameserver's view)."""
        client = NameserverClient([self.nameserver])
        try:
            status = await client.call(
                lambda ns: ns.cluster_status(api.NameRequest(DEFAULT_CLUSTER))
            )
        finally:
            await client.close()
        best = max(status.storage_nodes, key=lambda n: (n.alive, n.leaders), default=None)
        return f"storage-{best.node_id}" if best is not None else self.storage_nodes[0]

    # -- start and stop -------------------------------------------------------

    async def start(self) -> None:
        """Start proxies and processes; return once every process is ready."""
        layout = DevLayout(
            data_dir=self.data_dir,
            brokers=self.shape.brokers,
            storage=self.shape.storage,
            log_level=self.shape.log_level,
            storage_groups=self.shape.groups,
            free_ports=True,
        )
        planned = plan(layout)
        if [spec.name for spec in planned] != self.shape.process_names():
            raise ClusterFailed(f"rip5 dev planned {[s.name for s in planned]}, not this shape")
        (self.data_dir / "faults").mkdir(parents=True, exist_ok=True)
        for i, spec in enumerate(planned):
            if spec.name == "nameserver" or role_of(spec.name) == "storage":
                proxy = NamedProxy(
                    spec.name,
                    _flag(list(spec.argv), "--listen"),
                    self.faults,
                    self.name_of_pid,
                    lambda: list(self._supervisor.pids.values()) if self._supervisor else [],
                    self._seed * 1000 + i,
                )
                await proxy.start()
                self.proxies[spec.name] = proxy
        nameserver_front = self.proxies["nameserver"].address
        for spec in planned:
            argv = list(spec.argv)
            env = {**spec.env, **self._role_env.get(role_of(spec.name), {})}
            if spec.name != "nameserver":
                _set_flag(argv, "--nameserver", nameserver_front)
            if role_of(spec.name) == "storage":
                _set_flag(argv, "--advertise", self.proxies[spec.name].address)
                _set_flag(argv, "--wal-segment-bytes", str(self.shape.wal_segment_bytes))
                self.write_fault_file(spec.name, {})
                env[FAULT_FILE_ENV] = str(self.fault_file_of(spec.name))
            self.specs.append(ChildSpec(spec.name, tuple(argv), env))
        self._supervisor = Supervisor(self.specs, out=self._log, policy=RESTART_POLICY)
        ready = asyncio.get_running_loop().create_future()

        def on_ready(endpoints: dict[str, str]) -> None:
            if not ready.done():
                ready.set_result(endpoints)

        self._task = asyncio.create_task(self._supervisor.run(self._stopping, on_ready))
        done, _ = await asyncio.wait(
            {ready, self._task}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            await self.stop()
            raise ClusterFailed(
                f"the cluster was not ready within {READY_TIMEOUT_S:.0f} s; see the cluster log"
            )
        self.endpoints = ready.result()

    async def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL) and every proxy."""
        self.faults.heal()
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        for proxy in self.proxies.values():
            await proxy.stop()
