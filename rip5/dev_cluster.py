"""A ``rip5 dev`` cluster as a child process, for ``rip5 loadtest`` and ``rip5 bench e2e``.

Every port is chosen free on 127.0.0.1 just before the start (several of
these may run at once on one machine), the data lives in a temp folder
removed afterwards, and the child's output goes to a log file (a thread
drains the pipe to its end, so it never fills). :func:`dev_cluster` yields
once ``rip5 dev`` says its broker serves, and stops the whole cluster
(SIGTERM, then SIGKILL to the process group) when the block ends.

SHELL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.ports import free_port
from loadtest.client import CallFailed, RocketClient
from protocol import errors
from protocol import nameserver_api as api
from rip5.admin import DEFAULT_CLUSTER, NameserverClient
from rip5.dev import parse_metrics_banner

EXIT_UNAVAILABLE = 69
DEV_READY_TIMEOUT_S = 120.0
READY_PREFIX = "rip5 dev ready:"
METRICS_BANNER_TIMEOUT_S = 10.0
ENDPOINT_MARK = "client endpoint "


class ClusterError(Exception):
    """The cluster could not start; ``exit_code`` says how the command should end."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        """``message`` names the cause."""
        super().__init__(message)
        self.exit_code = exit_code


def descendant_pids(root_pid: int) -> list[int]:
    """Every live process below ``root_pid`` (children, grandchildren, ...), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    frontier = [root_pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


@dataclass
class DevCluster:
    """A running ``rip5 dev`` child process and its addresses."""

    process: subprocess.Popen[str]
    nameserver: str
    endpoint: str
    log_path: Path
    remoting: str = ""
    """The broker's remoting endpoint (4.x clients)."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Each child's Prometheus metrics endpoint (host:port) by child name, as ``rip5 dev``
    printed them (``storage-1``, ``broker-1``, ...)."""

    def server_pids(self) -> list[int]:
        """The role processes (the supervisor's descendants)."""
        return descendant_pids(self.process.pid)


@contextlib.contextmanager
def dev_cluster(
    log_path: Path, storage_nodes: int = 3, extra_args: tuple[str, ...] = ()
) -> Iterator[DevCluster]:
    """Start ``rip5 dev`` on free ports; yield once its broker serves; stop it after."""
    try:
        nameserver_port = free_port()
        broker_port = free_port()
        remoting_port = free_port()
        storage_port = free_port(span=storage_nodes)
    except OSError as exc:
        raise ClusterError(f"no free ports for the dev cluster: {exc}") from exc
    data_dir = Path(tempfile.mkdtemp(prefix="rip5-dev-cluster-"))
    args = [
        sys.executable, "-m", "rip5", "dev",
        "--data-dir", str(data_dir),
        "--storage", str(storage_nodes),
        "--nameserver-port", str(nameserver_port),
        "--storage-port", str(storage_port),
        "--broker-port", str(broker_port),
        "--remoting-port", str(remoting_port),
        "--log-level", "warning",
        "--no-dashboard",  # its fixed port could clash with another run's
        *extra_args,
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    ready = threading.Event()
    banner: list[str] = []
    metrics: dict[str, str] = {}
    metrics_seen = threading.Event()

    def drain() -> None:
        assert process.stdout is not None
        with open(log_path, "a") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                if line.startswith(READY_PREFIX) and not banner:
                    banner.append(line.strip())
                    ready.set()
                endpoints = parse_metrics_banner(line.strip())
                if endpoints is not None and not metrics_seen.is_set():
                    metrics.update(endpoints)
                    metrics_seen.set()
        ready.set()
        metrics_seen.set()

    reader = threading.Thread(target=drain, name="rip5-dev-output", daemon=True)
    reader.start()
    try:
        if not ready.wait(DEV_READY_TIMEOUT_S) or not banner:
            raise ClusterError(
                f"rip5 dev did not become ready within {DEV_READY_TIMEOUT_S:.0f} s "
                f"(exit {process.poll()}); see {log_path}"
            )
        line = banner[0]
        if ENDPOINT_MARK not in line:
            raise ClusterError(
                f"rip5 dev runs no broker in this build ({line}); use --endpoint",
                EXIT_UNAVAILABLE,
            )
        endpoint = line.split(ENDPOINT_MARK, 1)[1].split()[0]
        # rip5 dev prints where the metrics are right after it is ready.
        metrics_seen.wait(METRICS_BANNER_TIMEOUT_S)
        yield DevCluster(
            process,
            f"127.0.0.1:{nameserver_port}",
            endpoint,
            log_path,
            f"127.0.0.1:{remoting_port}",
            dict(metrics),
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        reader.join(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)


def ensure_resources(
    nameserver: str,
    topics: list[tuple[str, int, int]],
    groups: list[str],
    signed: api.SignedBy | None = None,
) -> None:
    """Create ``topics`` ((name, queue count, message type)) and consumer ``groups``
    through the nameserver; ones that exist already are left as they are. ``signed``:
    an ACL user's signature (a cluster with ACL on)."""
    signature = signed or api.SignedBy()
    requests: list[api.CreateTopicRequest | api.CreateConsumerGroupRequest] = [
        api.CreateTopicRequest(name, DEFAULT_CLUSTER, queues, message_type, signed=signature)
        for name, queues, message_type in topics
    ]
    requests += [
        api.CreateConsumerGroupRequest(name, DEFAULT_CLUSTER, signed=signature) for name in groups
    ]

    async def create_all() -> None:
        client = NameserverClient([nameserver])
        try:
            for request in requests:

                async def create(
                    ns: NameserverService,
                    r: api.CreateTopicRequest | api.CreateConsumerGroupRequest = request,
                ) -> object:
                    if isinstance(r, api.CreateTopicRequest):
                        return await ns.create_topic(r)
                    return await ns.create_consumer_group(r)

                try:
                    await client.call(create)
                except AngeliaError as exc:
                    if exc.code is not errors.ALREADY_EXISTS:
                        raise
        finally:
            await client.close()

    try:
        uvloop.run(create_all())
    except AngeliaError as exc:
        raise ClusterError(f"cannot create topics and groups: {exc}") from exc


def wait_until_serving(
    endpoint: str,
    topics: list[tuple[str, bool]],
    timeout_s: float = 90.0,
    metadata: tuple[tuple[str, str], ...] = (),
) -> int:
    """Send one probe message to each (topic, is_fifo) until the broker stores it.

    A fresh cluster answers sends with a retriable status (no leader placed yet)
    for a while after ``rip5 dev`` is ready; load must not start before it
    serves. Returns the number of probe messages stored (one per topic).
    ``metadata``: headers for every probe (an ACL signature).
    """
    client = RocketClient(endpoint, timeout_s=5.0, metadata=metadata)
    deadline = time.monotonic() + timeout_s
    last = ""
    try:
        for topic, fifo in topics:
            while True:
                message = client.message(topic, b"probe", message_group="probe" if fifo else None)
                try:
                    client.send([message])
                    break
                except CallFailed as failure:
                    last = f"{failure.name}: {failure.detail}"
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"the broker at {endpoint} did not store a message in {topic} "
                        f"within {timeout_s:.0f} s (last answer {last})"
                    )
                time.sleep(0.2)
    finally:
        client.close()
    return len(topics)
