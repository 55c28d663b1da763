"""Internal RPC chosen by configuration: a ``rip5 dev`` cluster on grpc with the avro
codec and mutual TLS between the processes serves the official Python client. (The
default tcp with msgpack is every other e2e test's cluster; http2 with json is
``test_acl_cluster.py``'s; tcp with TLS is in ``tests/contract/test_angelia_tls.py``.)

Each case starts ``rip5 dev --rpc-transport T --rpc-codec C [--rpc-tls-*]`` with
one storage node, sends one message and receives it (topic and group created
on first use, so the nameserver, the storage node and the broker all talk
over the chosen RPC).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract.test_angelia_tls import self_signed
from tests.contract.test_official_client import run_official
from tests.e2e.test_dev import ready_port
from tests.e2e.test_official_client_cluster import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("transport", "codec", "tls"),
    # tcp with msgpack is every other e2e test's cluster (and tcp with TLS is checked
    # in tests/contract/test_angelia_tls.py); http2 with json is test_acl_cluster.py's.
    [("grpc", "avro", True)],
)
def test_the_official_client_round_trips_over_each_internal_transport(
    tmp_path: Path, transport: str, codec: str, tls: bool
) -> None:
    flags = ["--rpc-transport", transport, "--rpc-codec", codec]
    if tls:
        cert, key = self_signed(
            tmp_path, "cluster", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"
        )
        flags += ["--rpc-tls-cert", str(cert), "--rpc-tls-key", str(key), "--rpc-tls-ca", str(cert)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rip5", "dev", "--free-ports", "--storage", "1",
         "--data-dir", str(tmp_path / "dev"), "--log-level", "warning", *flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        port = ready_port(proc)
        argv = ["-m", "tests.e2e.acl_client", "round_trip", str(port), "", "", "rpc-t", "rpc-g"]
        observed = run_official(argv, tmp_path, timeout_s=120)
        assert observed["sent"], observed
        assert observed["received"] == ["from "], observed
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
