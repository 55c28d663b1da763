"""Joining the cluster: how a node waits for a nameserver that is not up yet."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from angelia_rpc.errors import AngeliaError
from angelia_rpc.nameserver_client import NameserverClient
from protocol import errors
from protocol import nameserver_api as api
from storage_node.config import StorageConfig
from storage_node.registration import Registration, join_cluster
from storage_node.service import FIRST_GROUP_ID, StorageNode

CLUSTER = api.ClusterInfo("c1", 8, FIRST_GROUP_ID, 3)
WAITING = "nameserver not reachable yet; retrying"


class StartingNameserver:
    """A nameserver client whose first ``unreachable`` calls find nothing listening."""

    addresses = ("127.0.0.1:1",)

    def __init__(self, unreachable: int) -> None:
        self.unreachable = unreachable
        self.calls = 0

    async def call(self, method: Callable[[Any], Awaitable[Any]]) -> Any:
        self.calls += 1
        if self.calls <= self.unreachable:
            raise AngeliaError(errors.UNAVAILABLE, "connection refused")
        return api.ClusterStatusResponse(CLUSTER, [], [], [], 0, 0, 1)


async def _join(unreachable: int, warn_after_ms: int) -> api.ClusterInfo | None:
    client = cast(NameserverClient, StartingNameserver(unreachable))
    return await join_cluster(
        client, StorageConfig(cluster="c1"), asyncio.Event(), warn_after_ms=warn_after_ms
    )


async def test_a_nameserver_not_up_yet_is_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="storage_node.registration")
    assert await _join(unreachable=2, warn_after_ms=60_000) == CLUSTER
    waits = [
        r for r in caplog.records if r.getMessage() == "nameserver not reachable yet; retrying"
    ]
    assert [r.levelno for r in waits] == [logging.INFO, logging.INFO]


async def test_a_nameserver_away_past_the_grace_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="storage_node.registration")
    assert await _join(unreachable=1, warn_after_ms=0) == CLUSTER
    waits = [
        r for r in caplog.records if r.getMessage() == "nameserver not reachable yet; retrying"
    ]
    assert [r.levelno for r in waits] == [logging.WARNING]


class FlakyNameserver:
    """A nameserver client whose calls fail while ``down`` is set."""

    addresses = ("127.0.0.1:1",)

    def __init__(self) -> None:
        self.down = True

    async def call(self, method: Callable[[Any], Awaitable[Any]]) -> Any:
        if self.down:
            raise AngeliaError(errors.UNAVAILABLE, "connection lost: closed by the peer")
        return api.StorageHeartbeatResponse([], 1)


def _registration(client: FlakyNameserver, tmp_path: Path, warn_after_ms: int) -> Registration:
    registration = Registration(
        cast(NameserverClient, client),
        cast(StorageNode, None),
        StorageConfig(cluster="c1"),
        "127.0.0.1:2",
        tmp_path,
        warn_after_ms=warn_after_ms,
    )
    registration.heartbeat_request = lambda: cast(api.StorageHeartbeatRequest, None)  # type: ignore[method-assign]
    return registration


async def test_heartbeats_failing_briefly_are_no_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="storage_node.registration")
    client = FlakyNameserver()
    registration = _registration(client, tmp_path, warn_after_ms=60_000)
    assert await registration.maybe_heartbeat() is None
    assert await registration.maybe_heartbeat() is None
    client.down = False
    assert await registration.maybe_heartbeat() is not None
    levels = [(r.getMessage(), r.levelno) for r in caplog.records]
    assert levels == [
        ("heartbeat failed", logging.INFO),
        ("heartbeat failed", logging.INFO),
        ("heartbeats answered again", logging.INFO),
    ]


async def test_heartbeats_failing_past_the_grace_are_warned_of(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="storage_node.registration")
    registration = _registration(FlakyNameserver(), tmp_path, warn_after_ms=0)
    assert await registration.maybe_heartbeat() is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
