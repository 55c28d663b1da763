"""compose.yaml, validated and run without containers.

No image can be pulled or built here, so the test takes what Debian's
``docker-compose config`` makes of the file (variables substituted, anchors
merged) and runs exactly each service's command and environment as a process
on 127.0.0.1: ``rip5 <command>`` for the rip5 image, Debian's ``prometheus``
for the Prometheus image. Addresses are remapped, each (service, container
port) to a free port of its own, the service names to 127.0.0.1; volumes become
folders (a bound file is copied there with its addresses remapped). Services
start in ``depends_on`` waves (a wave at once); each service's health check is
run (remapped) once it is up and must pass before the next wave. Then the
official client uses the cluster through each broker.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from angelia_rpc.ports import free_port
from tests.e2e.cluster import RIP5, Process
from tests.e2e.prometheus import Prometheus
from tests.e2e.test_official_client_cluster import ROOT, run_client_in
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

COMPOSE = ROOT / "compose.yaml"
RIP5_IMAGE = "rip5:latest"
SECRET = "compose-test-secret"
_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9.-]+):(?P<port>\d+)")


def compose_config() -> dict[str, Any]:
    """``docker-compose config`` of compose.yaml (it fails on an invalid file)."""
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is missing: run make system-deps"
    done = subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RIP5_BROKER_SECRET": SECRET},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


class Remap:
    """Container addresses and paths -> this machine's."""

    def __init__(self, root: Path, services: dict[str, Any]) -> None:
        self.root = root
        self.services = services
        self.ports: dict[tuple[str, int], int] = {}

    def address(self, service: str, port: int) -> str:
        """Where ``service``'s container port ``port`` is served here."""
        key = (service, port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return f"127.0.0.1:{self.ports[key]}"

    def addresses(self, service: str, text: str) -> str:
        """``text`` (an argument, a config file) of ``service`` with addresses remapped."""

        def one(match: re.Match[str]) -> str:
            host, port = match["host"], int(match["port"])
            if host in ("0.0.0.0", "127.0.0.1", "localhost"):
                return self.address(service, port)
            if host in self.services:
                return self.address(host, port)
            return match[0]

        return _ADDRESS.sub(one, text)

    def text(self, service: str, text: str) -> str:
        """An argument of ``service`` with addresses and volume paths remapped."""
        text = self.addresses(service, text)
        volumes = self.volumes(service)
        if not volumes:
            return text
        # Whole paths only, in one pass (a local path may contain a container path).
        targets = "|".join(re.escape(t) for t in sorted(volumes, key=len, reverse=True))
        pattern = rf"(?<![\w.-])(?:{targets})(?![\w.-])"
        return re.sub(pattern, lambda m: str(volumes[m[0]]), text)

    def volumes(self, service: str) -> dict[str, Path]:
        """Container path -> local path of each volume of ``service``."""
        found: dict[str, Path] = {}
        for volume in self.services[service].get("volumes", []):
            source, target = volume.split(":")[:2]
            if source.startswith("/"):  # a bound file: a remapped copy
                local = self.root / service / "bound" / Path(source).name
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(self.addresses(service, Path(source).read_text()))
            else:
                local = self.root / service / source
                local.mkdir(parents=True, exist_ok=True)
            found[target] = local
        return found


def start_waves(services: dict[str, Any]) -> list[list[str]]:
    """The services in waves: each wave's services depend only on earlier waves' (a wave
    starts at once, as compose starts services whose dependencies are healthy)."""
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in depth:
            below = [level(d) for d in services[name].get("depends_on", {})]
            depth[name] = 1 + max(below, default=-1)
        return depth[name]

    waves: list[list[str]] = [[] for _ in range(1 + max(map(level, services)))]
    for name in sorted(services):
        waves[depth[name]].append(name)
    return waves


def healthy(remap: Remap, service: str) -> bool:
    """Run the service's health check (remapped): whether it passed."""
    test = remap.services[service]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"], test
    argv = [sys.executable, *(remap.text(service, arg) for arg in test[2:])]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Remap, Prometheus]]:
    root = tmp_path_factory.mktemp("compose")
    services: dict[str, Any] = compose_config()["services"]
    remap = Remap(root, services)
    processes: list[Process] = []
    others: list[subprocess.Popen[bytes]] = []
    prometheus: Prometheus | None = None
    try:
        for wave in start_waves(services):
            started: list[Process] = []
            for name in wave:
                service = services[name]
                argv = [remap.text(name, str(arg)) for arg in service["command"]]
                if service["image"] == RIP5_IMAGE:
                    env = {k: str(v) for k, v in service.get("environment", {}).items()}
                    started.append(Process(name, [*RIP5, *argv], root / f"{name}.log", env))
                    continue
                assert service["image"].startswith("prom/prometheus"), service["image"]
                binary = shutil.which("prometheus")
                assert binary, "prometheus is missing: run make system-deps"
                with (root / f"{name}.log").open("wb") as log:
                    others.append(
                        subprocess.Popen([binary, *argv], stdout=log, stderr=subprocess.STDOUT)
                    )
                prometheus = Prometheus(remap.address(name, 9090))
            processes.extend(started)
            with ThreadPoolExecutor(max(1, len(started))) as pool:
                list(pool.map(Process.start, started))  # each returns once ready
            for process in started:
                check = functools.partial(healthy, remap, process.name)
                wait_until(check, timeout_s=30, what=f"{process.name} health")
        assert prometheus is not None, "compose.yaml has no Prometheus"
        yield remap, prometheus
    finally:
        for other in others:
            other.terminate()
            other.wait(timeout=30)
        codes = {process.name: process.stop() for process in reversed(processes)}
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"services did not stop cleanly: {died} (logs in {root})"


def test_compose_runs_as_processes_and_serves_the_official_client(
    running: tuple[Remap, Prometheus],
) -> None:
    remap, prometheus = running
    services = remap.services
    assert {n for n in services if n.startswith("nameserver")} == {
        "nameserver-1", "nameserver-2", "nameserver-3",
    }  # fmt: skip
    assert sum(n.startswith("storage") for n in services) == 3
    assert sum(n.startswith("broker") for n in services) == 2
    assert {"dashboard", "prometheus"} <= set(services)

    for broker in ("broker-1", "broker-2"):
        port = int(remap.address(broker, 8081).rpartition(":")[2])
        observed = run_client_in(remap.root / broker, "first_use", port)
        assert sorted(m["id"] for m in observed["received"]) == sorted(observed["sent"])

    # Prometheus, as compose configures it, scrapes every rip5 process.
    scraped = sum(1 for n in services if n not in {"dashboard", "prometheus"})
    prometheus.wait_for("every role scraped", "sum(up)", lambda v: v == scraped)
    # The dashboard reaches both brokers through their --peer-listen addresses (a broker
    # that does not answer is named on the page).
    page = urllib.request.urlopen(f"http://{remap.address('dashboard', 8088)}/clients")
    assert "did not answer" not in page.read().decode()
