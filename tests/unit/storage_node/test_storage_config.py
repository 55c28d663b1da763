"""The storage role's cluster options: --peers / --groups validation and their consistency."""

from __future__ import annotations

import pytest

from protocol.nameserver_api import ClusterInfo
from rip5.config import ConfigError, resolve
from storage_node.config import StorageConfig, parse_peers
from storage_node.registration import ClusterRefused, check_cluster
from storage_node.server import cluster_peers


def test_peers_and_groups_are_read_and_normalised() -> None:
    config = resolve(
        StorageConfig,
        "storage",
        flags={"peers": " 1=127.0.0.1:7701, 2=127.0.0.1:7702 ", "groups": "8"},
    )
    assert config.peers == "1=127.0.0.1:7701,2=127.0.0.1:7702"
    assert config.groups == 8
    assert parse_peers(config.peers) == {1: "127.0.0.1:7701", 2: "127.0.0.1:7702"}


@pytest.mark.parametrize(
    "peers",
    ["127.0.0.1:7701", "x=127.0.0.1:7701", "0=127.0.0.1:7701", "1=host", "1=a:1,1=b:2", "1=a:0"],
)
def test_bad_peers_are_refused_naming_the_option(peers: str) -> None:
    with pytest.raises(ConfigError) as refused:
        resolve(StorageConfig, "storage", flags={"peers": peers})
    assert "peers" in str(refused.value)
    assert "ID=host:port" in str(refused.value)


@pytest.mark.parametrize("groups", ["-1", "65536", "many"])
def test_bad_group_counts_are_refused(groups: str) -> None:
    with pytest.raises(ConfigError, match="groups"):
        resolve(StorageConfig, "storage", flags={"groups": groups})


def test_groups_0_means_learn_the_count_from_the_nameserver() -> None:
    config = resolve(StorageConfig, "storage", flags={"groups": "0"})
    assert config.groups == 0
    assert StorageConfig().groups == 0  # the default: the nameserver is the source of truth


def test_no_peers_means_this_node_alone() -> None:
    config = StorageConfig(listen="127.0.0.1:9000", node_id=4)
    assert cluster_peers(config) == {4: "127.0.0.1:9000"}


def test_peers_must_name_this_node_at_its_listen_address() -> None:
    peers = "1=127.0.0.1:7701,2=127.0.0.1:7702"
    assert cluster_peers(StorageConfig(listen="127.0.0.1:7702", node_id=2, peers=peers)) == {
        1: "127.0.0.1:7701",
        2: "127.0.0.1:7702",
    }
    with pytest.raises(ValueError, match="node id 3 is not in peers"):
        cluster_peers(StorageConfig(listen="127.0.0.1:7703", node_id=3, peers=peers))
    with pytest.raises(ValueError, match=r"listen is 127\.0\.0\.1:7709"):
        cluster_peers(StorageConfig(listen="127.0.0.1:7709", node_id=2, peers=peers))


def test_a_group_count_that_disagrees_with_the_cluster_is_refused() -> None:
    cluster = ClusterInfo("DefaultCluster", 64, 1, 3)
    assert check_cluster(cluster, StorageConfig(groups=0)) is cluster
    assert check_cluster(cluster, StorageConfig(groups=64)) is cluster
    with pytest.raises(ClusterRefused, match="--groups 16 disagrees with cluster 'DefaultCluster'"):
        check_cluster(cluster, StorageConfig(groups=16))
    with pytest.raises(ClusterRefused, match="group ids from 65"):
        check_cluster(ClusterInfo("second", 64, 65, 3), StorageConfig())
