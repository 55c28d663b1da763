"""A client configured with another transport than the server is refused clearly, not retried."""

from __future__ import annotations

import dataclasses

import pytest

from angelia_rpc import AngeliaError
from protocol import errors
from tests.contract.angelia_rig import Conformance, Req, Rig
from tests.contract.test_angelia_conformance import config_for


@pytest.mark.parametrize(
    ("server_transport", "client_transport"), [("http2", "tcp"), ("grpc", "tcp"), ("tcp", "http2")]
)
async def test_transport_mismatch_is_a_clear_error(
    server_transport: str, client_transport: str
) -> None:
    rig = Rig(config_for(server_transport, "msgpack"))
    try:
        server = await rig.serve()
        client_config = dataclasses.replace(rig.config, transport=client_transport)
        conformance = Conformance(rig.channel(server.address, client_config))
        with pytest.raises(AngeliaError) as caught:
            await conformance.echo(Req(1), timeout_ms=3_000)
        assert caught.value.code is errors.PROTOCOL_VIOLATION
        assert f"not an Angelia {client_transport} server" in caught.value.message
    finally:
        await rig.close()
