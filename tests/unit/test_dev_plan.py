"""``rip5 dev``'s plan: the nameserver and storage children agree on the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rip5 import cli
from rip5.dev import (
    DevLayout,
    dashboard_banner,
    metrics_banner,
    metrics_endpoints,
    parse_metrics_banner,
    plan,
    ready_banner,
    remoting_endpoints,
)


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_storage_children_join_the_nameserver_with_its_group_count(tmp_path: Path) -> None:
    specs = plan(
        DevLayout(tmp_path, storage=3, nameserver_port=7800, storage_port=7801, storage_groups=32)
    )
    (nameserver,) = [spec for spec in specs if spec.name == "nameserver"]
    assert _flag(nameserver.argv, "--listen") == "127.0.0.1:7800"
    assert _flag(nameserver.argv, "--groups") == "32"
    assert _flag(nameserver.argv, "--replication-factor") == "3"
    storage = [spec for spec in specs if spec.name.startswith("storage-")]
    assert [spec.name for spec in storage] == ["storage-1", "storage-2", "storage-3"]
    for i, spec in enumerate(storage, start=1):
        assert "--peers" not in spec.argv  # the nameserver places the groups
        assert _flag(spec.argv, "--nameserver") == "127.0.0.1:7800"
        assert _flag(spec.argv, "--groups") == "32"
        assert _flag(spec.argv, "--node-id") == str(i)
        assert _flag(spec.argv, "--listen") == f"127.0.0.1:{7800 + i}"


def test_a_single_storage_node_gets_a_replication_factor_of_one(tmp_path: Path) -> None:
    specs = plan(DevLayout(tmp_path, storage=1))
    (nameserver,) = [spec for spec in specs if spec.name == "nameserver"]
    assert _flag(nameserver.argv, "--replication-factor") == "1"


def test_free_ports_are_distinct_and_agree_between_children(tmp_path: Path) -> None:
    specs = plan(DevLayout(tmp_path, storage=3, free_ports=True))
    listens = [_flag(spec.argv, "--listen") for spec in specs]
    assert len(set(listens)) == len(listens)
    (nameserver,) = [spec for spec in specs if spec.name == "nameserver"]
    for spec in specs:
        if spec.name.startswith("storage-"):
            assert _flag(spec.argv, "--nameserver") == _flag(nameserver.argv, "--listen")


def test_three_nameservers_form_one_group_and_every_other_child_is_given_them_all(
    tmp_path: Path,
) -> None:
    specs = plan(DevLayout(tmp_path, storage=3, brokers=1, nameservers=3))
    nameservers = [spec for spec in specs if spec.argv[3] == "nameserver"]
    assert [spec.name for spec in nameservers] == ["nameserver", "nameserver-2", "nameserver-3"]
    listens = [_flag(spec.argv, "--listen") for spec in nameservers]
    assert listens == ["127.0.0.1:9876", "127.0.0.1:9877", "127.0.0.1:9878"]
    peers = ",".join(f"{n}={a}" for n, a in enumerate(listens, 1))
    for node, spec in enumerate(nameservers, 1):
        assert _flag(spec.argv, "--peers") == peers
        assert _flag(spec.argv, "--node-id") == str(node)
    others = [spec for spec in specs if spec not in nameservers]
    assert len(others) == 4
    for spec in others:
        assert _flag(spec.argv, "--nameserver") == ",".join(listens)


def test_a_dev_cluster_without_a_nameserver_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one nameserver"):
        plan(DevLayout(tmp_path, nameservers=0))


def test_brokers_get_remoting_ports_counting_down_and_the_banner_names_the_first(
    tmp_path: Path,
) -> None:
    specs = plan(DevLayout(tmp_path, brokers=3, broker_port=8081, remoting_port=8080))
    remoting = remoting_endpoints(specs)
    assert remoting == {
        "broker-1": "127.0.0.1:8080", "broker-2": "127.0.0.1:8079", "broker-3": "127.0.0.1:8078",
    }  # fmt: skip
    grpc = {spec.name: _flag(spec.argv, "--listen") for spec in specs}
    assert not set(remoting.values()) & set(grpc.values())
    banner = ready_banner({"nameserver": "127.0.0.1:9876", "broker-1": "127.0.0.1:8081"}, remoting)
    assert banner.startswith("rip5 dev ready: client endpoint 127.0.0.1:8081 ")
    assert "remoting endpoint 127.0.0.1:8080;" in banner
    assert "remoting" not in ready_banner({"broker-1": "127.0.0.1:8081"})
    free = remoting_endpoints(plan(DevLayout(tmp_path, brokers=2, free_ports=True)))
    assert len(set(free.values())) == 2


def test_every_child_gets_a_metrics_port_and_the_dashboard_charts_the_brokers(
    tmp_path: Path,
) -> None:
    specs = plan(DevLayout(tmp_path, brokers=2, dashboard=True, dashboard_port=8088))
    metrics = metrics_endpoints(specs)
    assert set(metrics) == {spec.name for spec in specs} - {"dashboard"}
    assert len(set(metrics.values())) == len(metrics)
    (dashboard,) = (spec for spec in specs if spec.name == "dashboard")
    assert dashboard.argv[3] == "dashboard"
    assert _flag(dashboard.argv, "--listen") == "127.0.0.1:8088"
    assert _flag(dashboard.argv, "--nameserver") == _flag(specs[0].argv, "--listen")
    assert _flag(dashboard.argv, "--broker-metrics") == ",".join(
        (metrics["broker-1"], metrics["broker-2"])
    )
    assert "--metrics-listen" not in dashboard.argv
    assert dashboard_banner({"dashboard": "127.0.0.1:8088"}) == (
        "rip5 dev dashboard: http://127.0.0.1:8088/"
    )
    assert dashboard_banner({"broker-1": "127.0.0.1:8081"}) is None
    assert metrics_banner({"broker-1": "127.0.0.1:5557"}) == (
        "rip5 dev metrics: broker-1 http://127.0.0.1:5557/metrics"
    )
    # Read back as rip5.dev_cluster reads the banner from the child's output.
    assert parse_metrics_banner(metrics_banner(metrics)) == metrics
    assert parse_metrics_banner(metrics_banner({})) == {}
    assert parse_metrics_banner("rip5 dev ready: ...") is None
    assert all(spec.name != "dashboard" for spec in plan(DevLayout(tmp_path)))


def test_the_dashboard_asks_for_a_login_with_acl_and_shows_the_tier(tmp_path: Path) -> None:
    def dashboard_argv(layout: DevLayout) -> tuple[str, ...]:
        (dashboard,) = (spec for spec in plan(layout) if spec.name == "dashboard")
        return tuple(dashboard.argv)

    assert "--acl" not in dashboard_argv(DevLayout(tmp_path, dashboard=True))
    with_acl = DevLayout(tmp_path, dashboard=True, acl_super_user_file=str(tmp_path / "su"))
    assert "--acl" in dashboard_argv(with_acl)
    with_tier = DevLayout(tmp_path, dashboard=True, tier_url="file:///srv/tier")
    assert _flag(dashboard_argv(with_tier), "--tier-url") == "file:///srv/tier"


def test_a_tier_url_goes_to_every_storage_node_only(tmp_path: Path) -> None:
    specs = plan(DevLayout(tmp_path, tier_url="file:///srv/tier"))
    for spec in specs:
        if spec.name.startswith("storage-"):
            assert _flag(spec.argv, "--tier-url") == "file:///srv/tier"
        else:
            assert "--tier-url" not in spec.argv
    assert all("--tier-url" not in spec.argv for spec in plan(DevLayout(tmp_path)))


def test_rip5_dev_takes_the_storage_group_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[DevLayout] = []

    def record(layout: DevLayout) -> list[object]:
        planned.append(layout)
        raise SystemExit(0)  # planned: nothing is started

    monkeypatch.setattr(cli, "plan", record)
    result = CliRunner().invoke(cli.dev, ["--data-dir", str(tmp_path), "--storage-groups", "24"])
    assert result.exit_code == 0, result.output
    assert planned[0].storage_groups == 24
    CliRunner().invoke(cli.dev, ["--data-dir", str(tmp_path)])
    assert planned[1].storage_groups == DevLayout.storage_groups == 16
    refused = CliRunner().invoke(cli.dev, ["--storage-groups", "0"])
    assert refused.exit_code == 2
    assert "--storage-groups" in refused.output
    assert "0 is not in the range 1<=x<=65536" in refused.output
