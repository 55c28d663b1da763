"""TLS on every socket transport, with a throwaway self-signed certificate made at run time."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError, TlsConfig
from protocol import errors
from tests.contract.angelia_rig import Conformance, Req, Resp, Rig
from tests.contract.test_angelia_conformance import config_for


def self_signed(folder: Path, name: str, *extensions: str) -> tuple[Path, Path]:
    """A throwaway EC certificate for CN=localhost and its key, made by the openssl
    command. A machine without openssl fails the test (``make system-deps`` installs it)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS tests need the openssl command; `make system-deps` installs it")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=localhost", *extensions,
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsConfig:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(folder, "cert", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    return TlsConfig(cert_file=str(cert), key_file=str(key), ca_file=str(cert))


@pytest.fixture(params=["tcp", "grpc", "http2"])
async def rig(request: pytest.FixtureRequest, tls: TlsConfig) -> AsyncIterator[Rig]:
    rig = Rig(config_for(request.param, "msgpack", tls=tls))
    try:
        yield rig
    finally:
        await rig.close()


async def test_calls_and_streams_over_tls(rig: Rig) -> None:
    server = await rig.serve()
    conformance = Conformance(rig.channel(server.address))
    assert await conformance.echo(Req(1, b"secret")) == Resp(1, b"secret")
    assert [r.n async for r in conformance.count(Req(300))] == list(range(300))


async def test_a_plaintext_client_cannot_talk_to_a_tls_server(rig: Rig) -> None:
    server = await rig.serve()
    plain = Conformance(rig.channel(server.address, dataclasses.replace(rig.config, tls=None)))
    with pytest.raises(AngeliaError) as caught:
        await plain.echo(Req(1), timeout_ms=500)
    assert caught.value.code is errors.UNAVAILABLE


@pytest.fixture(scope="module")
def untrusted_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    other, _ = self_signed(tmp_path_factory.mktemp("other"), "other")
    return other


async def test_a_client_that_does_not_trust_the_server_refuses_it(
    rig: Rig, tls: TlsConfig, untrusted_ca: Path
) -> None:
    server = await rig.serve()
    wary = dataclasses.replace(rig.config, tls=dataclasses.replace(tls, ca_file=str(untrusted_ca)))
    with pytest.raises(AngeliaError) as caught:
        await Conformance(rig.channel(server.address, wary)).echo(Req(1), timeout_ms=500)
    assert caught.value.code is errors.UNAVAILABLE


@pytest.fixture(params=["tcp", "grpc", "http2"])
async def mutual_rig(request: pytest.FixtureRequest, tls: TlsConfig) -> AsyncIterator[Rig]:
    rig = Rig(config_for(request.param, "msgpack", tls=dataclasses.replace(tls, mutual=True)))
    try:
        yield rig
    finally:
        await rig.close()


async def test_mutual_tls_serves_a_client_with_a_certificate_and_refuses_one_without(
    mutual_rig: Rig,
) -> None:
    server = await mutual_rig.serve()
    conformance = Conformance(mutual_rig.channel(server.address))
    assert await conformance.echo(Req(1, b"both ends")) == Resp(1, b"both ends")
    assert mutual_rig.config.tls is not None
    anonymous = dataclasses.replace(
        mutual_rig.config, tls=dataclasses.replace(mutual_rig.config.tls, mutual=False)
    )
    with pytest.raises(AngeliaError) as caught:
        await Conformance(mutual_rig.channel(server.address, anonymous)).echo(
            Req(1), timeout_ms=500
        )
    assert caught.value.code is errors.UNAVAILABLE
