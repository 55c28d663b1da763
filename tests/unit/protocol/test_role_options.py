"""Every role declares ``--metrics-listen`` through the one field: same help form,
its own default (docs/metrics.md) and the series it names."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.config import BrokerConfig
from connector.config import ConnectorConfig
from nameserver.config import NameserverConfig
from protocol.role_options import metrics_listen_field
from rip5.config import options_of, resolve
from storage_node.config import StorageConfig


@pytest.mark.parametrize(
    ("config_type", "default", "series"),
    [
        (BrokerConfig, "127.0.0.1:5557", "RocketMQ's RIP-46 names"),
        (NameserverConfig, "127.0.0.1:5558", "rip5_nameserver_*"),
        (StorageConfig, "127.0.0.1:5559", "rip5_raft_*, rip5_storage_*"),
        (ConnectorConfig, "", "rip5_connector_*"),
    ],
)
def test_each_role_declares_metrics_listen_through_the_one_field(
    config_type: type, default: str, series: str
) -> None:
    spec = {spec.name: spec for spec in options_of(config_type)}["metrics_listen"]
    assert spec.default == default
    assert spec.type is str
    assert spec.help.startswith(f"host:port serving Prometheus metrics at /metrics ({series}")
    assert spec.help.endswith("; port 0: any free port; empty: none)")
    assert (spec.kind, spec.minimum, spec.maximum, spec.choices) == (None, None, None, None)


@dataclass(frozen=True)
class _Role:
    metrics_listen: str = metrics_listen_field("h:1", "rip5_demo_*")


def test_the_field_states_its_series_and_what_port_0_and_empty_mean() -> None:
    (spec,) = options_of(_Role)
    assert (spec.flag, spec.default) == ("--metrics-listen", "h:1")
    assert spec.help == (
        "host:port serving Prometheus metrics at /metrics (rip5_demo_*; "
        "port 0: any free port; empty: none)"
    )


def test_the_field_takes_port_zero_and_empty_from_any_source() -> None:
    config = resolve(
        NameserverConfig, "nameserver", file_name="f.toml", env={}, file_values={}, flags={}
    )
    assert config.metrics_listen == "127.0.0.1:5558"
    for value in ("", "127.0.0.1:0"):
        config = resolve(
            NameserverConfig,
            "nameserver",
            file_name="f.toml",
            env={"RIP5_NAMESERVER_METRICS_LISTEN": value},
            file_values={},
            flags={},
        )
        assert config.metrics_listen == value
