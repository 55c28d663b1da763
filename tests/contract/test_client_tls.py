"""TLS on the client endpoint (``--tls-cert``/``--tls-key``), on both gRPC servers, with
the OFFICIAL Python client's TLS mode: it checks the broker's certificate against the
roots in GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (here the throwaway self-signed one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from broker.config import BrokerConfig
from broker.grpc.server import SERVERS, client_tls
from protocol.rocketmq.v2 import service_pb2 as spb
from tests.contract.test_angelia_tls import self_signed
from tests.contract.test_official_client import CLIENT, BrokerProcess, run_official, serving_broker

pytestmark = pytest.mark.integration


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    return self_signed(tmp_path, "broker", "-addext", "subjectAltName=IP:127.0.0.1")


@pytest.fixture(params=SERVERS)
def broker(
    request: pytest.FixtureRequest, tmp_path: Path, certificate: tuple[Path, Path]
) -> Iterator[BrokerProcess]:
    """A broker serving TLS only, on each gRPC server."""
    cert, key = certificate
    options = ["--grpc-server", request.param, "--tls-cert", str(cert), "--tls-key", str(key)]
    with serving_broker(tmp_path, *options) as process:
        yield process


def test_the_official_client_sends_and_receives_over_tls(
    broker: BrokerProcess, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, _key = certificate
    seen = run_official(
        [str(CLIENT), str(broker.port), "tls_round_trip"],
        tmp_path,
        env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)},
    )
    assert len(seen["sent"]) == 3
    assert seen["received"] == seen["sent"]


def test_a_cleartext_client_gets_no_answer(broker: BrokerProcess) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        route = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute")
        with pytest.raises(grpc.RpcError) as caught:
            route(spb.QueryRouteRequest().SerializeToString(), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE


def test_tls_flags_go_together_and_name_missing_files(tmp_path: Path) -> None:
    assert client_tls(BrokerConfig()) is None
    with pytest.raises(ValueError, match="--tls-cert and --tls-key go together"):
        client_tls(BrokerConfig(tls_cert="cert.pem"))
    with pytest.raises(ValueError, match=r"--tls-cert .*missing\.pem: no such file"):
        client_tls(BrokerConfig(tls_cert=str(tmp_path / "missing.pem"), tls_key="k"))
