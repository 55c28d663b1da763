"""``rip5 admin nameserver list|add|remove``: the requests sent and the members table
printed. The control service is replaced by a recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from click.testing import CliRunner

from protocol import control_api as ctl
from rip5 import admin_nameserver

MEMBERS = ctl.MembersResponse(
    [
        ctl.NameserverMemberInfo(1, "127.0.0.1:9876", ctl.ROLE_VOTER, True),
        ctl.NameserverMemberInfo(4, "127.0.0.1:9879", ctl.ROLE_LEARNER, False),
    ]
)


class RecordingControl:
    """Answers every membership call with MEMBERS."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def members(self, request: ctl.MembersRequest, **_: object) -> ctl.MembersResponse:
        self.requests.append(request)
        return MEMBERS

    async def add_member(self, request: ctl.AddMemberRequest, **_: object) -> ctl.MembersResponse:
        self.requests.append(request)
        return MEMBERS

    async def remove_member(
        self, request: ctl.RemoveMemberRequest, **_: object
    ) -> ctl.MembersResponse:
        self.requests.append(request)
        return MEMBERS


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch) -> RecordingControl:
    recorder = RecordingControl()

    def run_service(address: str, service: object, method: Callable[[Any], Awaitable[Any]]) -> Any:
        async def call() -> Any:
            return await method(recorder)

        return asyncio.run(call())

    monkeypatch.setattr(admin_nameserver, "run_service", run_service)
    return recorder


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(admin_nameserver.nameserver, list(args), env={"COLUMNS": "200"})


def test_list_prints_each_member_with_its_role_and_the_leader(control: RecordingControl) -> None:
    result = _invoke("list")
    assert result.exit_code == 0, result.output
    assert control.requests == [ctl.MembersRequest()]
    rows = [line for line in result.output.splitlines() if "127.0.0.1" in line]
    assert "voter" in rows[0]
    assert "yes" in rows[0]
    assert "learner" in rows[1]
    assert "yes" not in rows[1]


def test_add_and_remove_send_the_node_and_address(control: RecordingControl) -> None:
    added = _invoke("add", "4", "127.0.0.1:9879")
    assert added.exit_code == 0, added.output
    assert "added nameserver 4 at 127.0.0.1:9879" in added.output
    removed = _invoke("remove", "4")
    assert removed.exit_code == 0, removed.output
    assert control.requests == [
        ctl.AddMemberRequest(4, "127.0.0.1:9879"),
        ctl.RemoveMemberRequest(4),
    ]


def test_a_node_id_below_one_is_a_usage_error(control: RecordingControl) -> None:
    result = _invoke("remove", "0")
    assert result.exit_code == 2
    assert control.requests == []
