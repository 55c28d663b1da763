"""The roles' internal-RPC options, and what ``rip5 dev`` gives its children for RPC and ACL."""

from __future__ import annotations

from pathlib import Path

import pytest

from angelia_rpc.config import RpcOptions, TlsConfig
from broker.config import BrokerConfig
from nameserver.config import NameserverConfig
from nameserver.server import ConfigRefused, super_user_of
from protocol.acl import User, UserType
from rip5.dev import DevLayout, acl_super_user_file, plan
from storage_node.config import StorageConfig


def test_every_role_takes_the_rpc_options_and_builds_its_rpc_config() -> None:
    for config_type in (NameserverConfig, StorageConfig, BrokerConfig):
        config = config_type(rpc_transport="http2", rpc_codec="avro")
        rpc = config.rpc_config()
        assert (rpc.transport, rpc.codec, rpc.tls) == ("http2", "avro", None)
    tls = RpcOptions(rpc_tls_cert="c.pem", rpc_tls_key="k.pem", rpc_tls_ca="ca.pem")
    assert tls.rpc_config().tls == TlsConfig("c.pem", "k.pem", "ca.pem", mutual=True)
    with pytest.raises(ValueError, match="go together"):
        RpcOptions(rpc_tls_cert="c.pem").rpc_config()


def test_rip5_dev_gives_every_child_the_same_rpc_and_the_acl_flags(tmp_path: Path) -> None:
    rpc = RpcOptions("grpc", "json", "c.pem", "k.pem", "ca.pem")
    specs = plan(DevLayout(tmp_path, acl_super_user_file="su", rpc=rpc))
    for spec in specs:
        argv = " ".join(spec.argv)
        assert "--rpc-transport grpc --rpc-codec json" in argv
        assert "--rpc-tls-cert c.pem --rpc-tls-key k.pem --rpc-tls-ca ca.pem" in argv
    roles = {spec.name: spec.argv for spec in specs}
    assert "--acl-super-user-file" in roles["nameserver"]
    assert "--acl" in roles["broker-1"]
    assert "--acl" not in roles["storage-1"]
    plain = plan(DevLayout(tmp_path))
    assert not any("--acl" in spec.argv for spec in plain)
    assert not any("--rpc-transport" in spec.argv for spec in plain)  # defaults left out


def test_the_dev_super_user_is_made_once_and_read_by_the_nameserver(tmp_path: Path) -> None:
    path = acl_super_user_file(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600
    user = super_user_of(str(path))
    assert user is not None
    assert user.user_type is UserType.SUPER
    assert acl_super_user_file(tmp_path).read_text() == path.read_text()  # kept on restart
    assert super_user_of("") is None
    bad = tmp_path / "bad"
    bad.write_text("no-colon")
    with pytest.raises(ConfigRefused, match="NAME:SECRET"):
        super_user_of(str(bad))
    good = tmp_path / "good"
    good.write_text("root:pw\n")
    assert super_user_of(str(good)) == User("root", "pw", UserType.SUPER)
