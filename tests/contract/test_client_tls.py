"""TLS on the client endpoint (``--tls-cert``/``--tls-key``), on both gRPC servers, with
the OFFICIAL Python client's TLS mode: it checks the broker's certificate against the
roots in GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (here the throwaway self-signed one)."""

from __future__ import annotations

import signal
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from broker.config import BrokerConfig
from broker.grpc.bad_requests import SERVICE
from broker.grpc.server import SERVERS, client_tls
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from tests.contract.test_angelia_tls import self_signed
from tests.contract.test_official_client import CLIENT, BrokerProcess, run_official, serving_broker
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def _for_localhost(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, in ``folder``."""
    return self_signed(folder, name, "-addext", "subjectAltName=IP:127.0.0.1")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    return _for_localhost(tmp_path, "broker")


def _served_certificate(port: int) -> bytes:
    """The DER certificate a new TLS connection to ``port`` is shown (not verified)."""
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port)))


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


def test_sighup_reloads_the_certificate_for_new_connections(
    broker: BrokerProcess, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    first = ssl.PEM_cert_to_DER_cert(cert.read_text())
    assert _served_certificate(broker.port) == first
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    new_cert, new_key = _for_localhost(renewed, "broker")
    new_key.replace(key)  # the files the broker was started with, renewed
    new_cert.replace(cert)
    second = ssl.PEM_cert_to_DER_cert(cert.read_text())
    broker.process.send_signal(signal.SIGHUP)
    wait_until(lambda: _served_certificate(broker.port) == second, what="the renewed certificate")
    seen = run_official(
        [str(CLIENT), str(broker.port), "tls_round_trip"],
        tmp_path,
        env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)},
    )
    assert seen["received"] == seen["sent"]
    # A key that does not match is refused; the renewed certificate stays.
    key.write_text(_for_localhost(tmp_path, "other")[1].read_text())
    broker.process.send_signal(signal.SIGHUP)
    wait_until(
        lambda: "TLS certificate not reloaded" in broker.log_path.read_text(),
        what="the refused reload to be logged",
    )
    assert _served_certificate(broker.port) == second


def test_with_a_client_ca_only_clients_with_its_certificates_are_served(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    client_cert, client_key = self_signed(tmp_path, "client")  # its own CA
    stranger_cert, stranger_key = self_signed(tmp_path, "stranger")
    request = spb.QueryRouteRequest(topic=pb.Resource(name="normal")).SerializeToString()
    metadata = (("x-mq-client-id", "mutual-tls"),)
    for kind in SERVERS:
        options = ["--grpc-server", kind, "--tls-cert", str(cert), "--tls-key", str(key)]
        options += ["--tls-client-ca", str(client_cert)]
        (tmp_path / kind).mkdir()
        with serving_broker(tmp_path / kind, *options) as broker:
            answers = {}
            for name, pair in [
                ("client", (client_key, client_cert)),
                ("stranger", (stranger_key, stranger_cert)),
                ("none", None),
            ]:
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=cert.read_bytes(),
                    private_key=pair[0].read_bytes() if pair else None,
                    certificate_chain=pair[1].read_bytes() if pair else None,
                )
                target = f"127.0.0.1:{broker.port}"
                with grpc.secure_channel(target, credentials) as channel:
                    route = channel.unary_unary(f"/{SERVICE}/QueryRoute")
                    try:
                        answer = route(request, metadata=metadata, timeout=5)
                        answers[name] = spb.QueryRouteResponse.FromString(answer).status.code
                    except grpc.RpcError as error:
                        answers[name] = error.code()
            assert answers == {
                "client": pb.OK,
                "stranger": grpc.StatusCode.UNAVAILABLE,
                "none": grpc.StatusCode.UNAVAILABLE,
            }, kind


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
    with pytest.raises(ValueError, match="--tls-client-ca needs --tls-cert and --tls-key"):
        client_tls(BrokerConfig(tls_client_ca="ca.pem"))
