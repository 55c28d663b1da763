"""``rip5 dashboard`` as a process on a test cluster (tests/e2e/test_ops_cluster.py,
tests/e2e/test_dashboard_views.py)."""

from __future__ import annotations

import urllib.error
import urllib.request

from angelia_rpc.ports import free_port
from tests.e2e.cluster import RIP5, LocalCluster, Process


def start_dashboard(cluster: LocalCluster, name: str, *flags: str) -> Process:
    """``rip5 dashboard`` (logging to NAME.log) on the cluster with ``flags``, started
    (its ``endpoint`` is the host:port it serves)."""
    process = Process(
        name,
        [
            *RIP5,
            "dashboard",
            "--data-dir",
            str(cluster.root / name),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--nameserver",
            cluster.nameserver_address,
            *flags,
        ],
        cluster.root / f"{name}.log",
        {},
    )
    process.start()
    return process


def fetch(url: str) -> tuple[int, str]:
    """GET ``url``: the status and the page."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
