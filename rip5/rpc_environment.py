"""The internal RPC an admin command speaks, from the environment.

``rip5 admin`` commands reach a cluster's nameservers and storage nodes over
the cluster's internal RPC, which must match the roles' ``--rpc-*`` options:
``RIP5_RPC_TRANSPORT``, ``RIP5_RPC_CODEC`` and ``RIP5_RPC_TLS_CERT``/``_KEY``/
``_CA`` (unset: tcp, msgpack, no TLS).

SHELL: reads the environment.
"""

from __future__ import annotations

import dataclasses
import os

from angelia_rpc import RpcConfig
from angelia_rpc.config import RpcOptions


def rpc_config_from_environment(**changes: int) -> RpcConfig:
    """The :class:`RpcConfig` the environment names, with ``changes`` (e.g. a call
    timeout); ValueError (or Angelia's usage error) naming what does not fit."""
    environ = os.environ
    config = RpcOptions(
        environ.get("RIP5_RPC_TRANSPORT", "tcp"),
        environ.get("RIP5_RPC_CODEC", "msgpack"),
        environ.get("RIP5_RPC_TLS_CERT", ""),
        environ.get("RIP5_RPC_TLS_KEY", ""),
        environ.get("RIP5_RPC_TLS_CA", ""),
    ).rpc_config()
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
