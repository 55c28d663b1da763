"""How long a long poll of the storage store waits before it pops again."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from broker.services.storage import StorageStore


class _Metadata:
    def on_route_change(self, callback: Callable[[int | None], None]) -> None:
        del callback


@pytest.mark.parametrize(
    ("quiet", "known", "waited_s"),
    [
        (False, {0: 5, 1: 7}, 0.25),  # the group holds leases: pop again at the revisit time
        (True, {0: 5, 1: 7}, 30.0),  # no lease, ends known: only growth brings messages
        (True, {0: 5, 1: -1}, 0.25),  # an end not reported: growth just before is unseen
    ],
)
async def test_only_a_quiet_wait_with_known_ends_skips_the_revisit(
    quiet: bool, known: dict[int, int], waited_s: float
) -> None:
    store = StorageStore(_Metadata(), None, revisit_ms=250)  # type: ignore[arg-type]
    asked: list[float] = []

    async def wait(topic: str, ends: Mapping[int, int], timeout_s: float) -> bool:
        asked.append(timeout_s)
        return False

    store._growth.wait = wait  # type: ignore[method-assign,assignment]
    assert not await store.wait_for_append("t", known, 30_000, quiet=quiet)
    assert asked == [waited_s]
