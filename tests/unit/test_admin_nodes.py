"""rip5 admin node: drain progress from a cluster status, and the drain/remove commands'
requests (the nameserver side is tested in test_nameserver_moves and on real processes
in tests/integration/test_storage_elasticity.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from click.testing import CliRunner

from protocol import nameserver_api as api
from rip5 import admin_nodes


def status(
    groups: list[api.RaftGroupInfo], hosted: int, alive: bool = True
) -> api.ClusterStatusResponse:
    return api.ClusterStatusResponse(
        api.ClusterInfo("c1", len(groups), 1, 3),
        [
            api.StorageNodeInfo(1, "c1", "h:1", True, 5, groups=len(groups)),
            api.StorageNodeInfo(4, "c1", "h:4", alive, 5, groups=hosted, draining=True),
        ],
        [],
        groups,
        0,
        0,
        9,
    )


def group(
    group_id: int,
    replicas: list[int],
    leader: int,
    joining: tuple[int, ...] = (),
    leaving: tuple[int, ...] = (),
) -> api.RaftGroupInfo:
    return api.RaftGroupInfo(group_id, "c1", replicas, leader, 1, list(joining), list(leaving))


def test_progress_counts_replicas_moves_and_leaderships_until_nothing_is_hosted() -> None:
    groups = [
        group(1, [1, 2, 4, 3], 4, joining=(3,), leaving=(4,)),
        group(2, [1, 2, 4], 1),
        group(3, [1, 2, 3], 2),
    ]
    progress = admin_nodes.drain_progress(status(groups, hosted=2), 4)
    assert (progress.replicas, progress.moving, progress.leaders, progress.hosted) == (2, 1, 1, 2)
    assert not progress.done
    assert progress.line() == "node 4: 2 replicas left (1 moving), leads 1, hosts 2"
    emptied = [group(3, [1, 2, 3], 2)]
    # Still hosting a replica it has not deleted yet: not done.
    assert not admin_nodes.drain_progress(status(emptied, hosted=1), 4).done
    done = admin_nodes.drain_progress(status(emptied, hosted=0), 4)
    assert done.done
    assert done.line().endswith(": drained")
    assert admin_nodes.drain_progress(status(emptied, hosted=3, alive=False), 4).done
    with pytest.raises(ValueError, match="storage node 7 is not registered"):
        admin_nodes.drain_progress(status(emptied, hosted=0), 7)


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, object]] = []

    async def drain_storage_node(self, request: api.StorageNodeRequest, **_: object) -> object:
        self.requests.append(("drain", request))
        return api.RevisionResponse(3)

    async def remove_storage_node(self, request: api.StorageNodeRequest, **_: object) -> object:
        self.requests.append(("remove", request))
        return api.RevisionResponse(4)


def test_drain_undrain_and_remove_send_their_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()

    def run(address: str, method: Callable[[Any], Awaitable[object]]) -> object:
        return asyncio.run(method(recorder))  # type: ignore[arg-type]

    monkeypatch.setattr(admin_nodes, "run", run)
    runner = CliRunner()
    result = runner.invoke(admin_nodes.node, ["drain", "4", "--no-wait"])
    assert result.exit_code == 0, result.output
    assert "node 4: draining" in result.output
    assert runner.invoke(admin_nodes.node, ["undrain", "4"]).exit_code == 0
    assert runner.invoke(admin_nodes.node, ["remove", "4"]).exit_code == 0
    assert recorder.requests == [
        ("drain", api.StorageNodeRequest(4, draining=True)),
        ("drain", api.StorageNodeRequest(4, draining=False)),
        ("remove", api.StorageNodeRequest(4)),
    ]
    refused = runner.invoke(admin_nodes.node, ["drain", "0", "--no-wait"])
    assert refused.exit_code == 2
