"""Named Locust scenarios: which users, how many, how fast, for how long.

``rip5 loadtest --scenario NAME`` runs one headless; every field can be
overridden on its command line. The user classes live in
``loadtest/locustfile.py``; ``options`` are that file's ``--rip5-*``
options (without the prefix).

PURE (data only).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    """A headless Locust run."""

    name: str
    summary: str
    user_classes: tuple[str, ...]
    users: int
    spawn_rate: float
    run_time_s: int
    options: dict[str, str] = field(default_factory=dict)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "smoke",
            "every user once: normal, FIFO and batch producers and a consumer, briefly",
            ("NormalProducer", "FifoProducer", "BatchProducer", "Consumer"),
            users=4,
            spawn_rate=4,
            run_time_s=10,
            options={"batch": "8"},
        ),
        Scenario(
            "produce",
            "NORMAL producers, one message per SendMessage, as fast as they can",
            ("NormalProducer",),
            users=32,
            spawn_rate=16,
            run_time_s=30,
        ),
        Scenario(
            "produce-fifo",
            "FIFO producers, 8 message groups each",
            ("FifoProducer",),
            users=32,
            spawn_rate=16,
            run_time_s=30,
        ),
        Scenario(
            "produce-batch",
            "batch producers, 16 messages of 1 KiB per SendMessage",
            ("BatchProducer",),
            users=16,
            spawn_rate=16,
            run_time_s=30,
        ),
        Scenario(
            "produce-consume",
            "NORMAL producers and simple consumers on one topic",
            ("NormalProducer", "Consumer"),
            users=32,
            spawn_rate=16,
            run_time_s=30,
        ),
        Scenario(
            "steady",
            "NORMAL producers held at 50 requests/s each, with consumers",
            ("NormalProducer", "Consumer"),
            users=20,
            spawn_rate=10,
            run_time_s=60,
            options={"rate": "50"},
        ),
    )
}
