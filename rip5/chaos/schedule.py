"""Which fault hits which process when: a seeded plan, the same for the same seed.

A fault is named ``KIND`` or ``KIND@TARGET`` (``kill``, ``pause@broker``,
``partition@ring``, ``disk-full@storage-2``). TARGET is a process name
(``storage-2``), a role (a random process of it), ``leader`` (the storage
node leading the most groups when the fault begins: resolved by the shell),
or for ``partition``: ``one`` (one storage node cut from every other process,
the default), ``ring`` (majorities-ring: each storage node sees only its two
neighbours; needs 5) or ``bridge`` (two halves joined by one node; needs 3).

The plan: after ``warmup_ms``, fault i begins at ``warmup_ms + i *
interval_ms`` and is healed ``hold_ms`` later; the faults given are taken in
turn. Targets are drawn with a splitmix64 generator from the seed.

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KINDS: dict[str, str] = {
    "kill": "SIGKILL a process; its supervisor starts it again",
    "pause": "SIGSTOP a process for the hold time, then SIGCONT",
    "partition": "cut network links through the fault proxies (one, ring, bridge)",
    "delay": "delay every byte into a process by 100 +- 50 ms",
    "loss": "stall 80% of the chunks into a process as TCP retransmits would (200-400 ms)",
    "clock-jump": "move a storage node's wall clock 60 s forward for the hold time",
    "disk-slow": "add 200 ms to each WAL fdatasync of a storage node",
    "disk-full": "fail a storage node's WAL writes with ENOSPC for the hold time",
    "corrupt": "stop a storage node, flip bytes in a sealed WAL segment, start it again",
}
"""Every fault kind and what it does."""

DEFAULT_ROLES: dict[str, tuple[str, ...]] = {
    "kill": ("storage", "broker", "nameserver"),
    "pause": ("storage", "broker", "nameserver"),
    "partition": ("storage",),
    "delay": ("storage", "nameserver"),
    "loss": ("storage", "nameserver"),
    "clock-jump": ("storage",),
    "disk-slow": ("storage",),
    "disk-full": ("storage",),
    "corrupt": ("storage",),
}
"""The roles a fault without a target picks from."""

STORAGE_ONLY = frozenset({"clock-jump", "disk-slow", "disk-full", "corrupt", "partition"})
PARTITION_SHAPES = ("one", "ring", "bridge")
RUNTIME_TARGETS = frozenset({"leader"})


class ScheduleError(ValueError):
    """A fault name or target that cannot be planned; the message names it."""


@dataclass(frozen=True)
class FaultSpec:
    """A fault as asked for: a kind and an optional target."""

    kind: str
    target: str = ""

    @property
    def name(self) -> str:
        """The spec as written (``kind`` or ``kind@target``)."""
        return f"{self.kind}@{self.target}" if self.target else self.kind


@dataclass(frozen=True)
class FaultStep:
    """One planned fault: ``target`` is a process name, ``leader``, or a partition shape."""

    at_ms: int
    hold_ms: int
    kind: str
    target: str


def role_of(process: str) -> str:
    """``storage-2`` -> ``storage``; ``nameserver`` -> ``nameserver``."""
    return process.rsplit("-", 1)[0] if process[-1:].isdigit() else process


def parse_fault(text: str, processes: Sequence[str]) -> FaultSpec:
    """Read ``KIND[@TARGET]``, checked against the kinds and the cluster's ``processes``."""
    kind, _, target = text.partition("@")
    if kind not in KINDS:
        raise ScheduleError(f"unknown fault {kind!r}; known: {', '.join(KINDS)}")
    roles = {role_of(p) for p in processes}
    storage = [p for p in processes if role_of(p) == "storage"]
    if kind == "partition":
        target = target or "one"
        if target not in PARTITION_SHAPES and target not in storage:
            raise ScheduleError(
                f"partition target {target!r} is not one of {', '.join(PARTITION_SHAPES)} "
                "or a storage node"
            )
        if target == "ring" and len(storage) < 5:
            raise ScheduleError(
                f"partition@ring needs 5 storage nodes, the cluster has {len(storage)}"
            )
        if target == "bridge" and len(storage) < 3:
            raise ScheduleError(
                f"partition@bridge needs 3 storage nodes, the cluster has {len(storage)}"
            )
        return FaultSpec(kind, target)
    if not target or target in RUNTIME_TARGETS:
        return FaultSpec(kind, target)
    role = role_of(target)
    if target not in processes and target not in roles:
        raise ScheduleError(
            f"fault target {target!r} is no process or role of the cluster ({', '.join(processes)})"
        )
    if kind in STORAGE_ONLY and role != "storage":
        raise ScheduleError(f"{kind} applies to storage nodes only, not {target!r}")
    return FaultSpec(kind, target)


class SplitMix64:
    """A small seeded generator (splitmix64): the same seed gives the same draws."""

    def __init__(self, seed: int) -> None:
        """Start from ``seed``."""
        self._state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self) -> int:
        """The next 64-bit draw."""
        self._state = (self._state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def choice(self, items: Sequence[str]) -> str:
        """One of ``items`` (not empty)."""
        return items[self.next() % len(items)]


def plan(
    faults: Sequence[FaultSpec],
    processes: Sequence[str],
    *,
    duration_ms: int,
    interval_ms: int,
    hold_ms: int,
    warmup_ms: int,
    seed: int,
) -> list[FaultStep]:
    """The faults of a run of ``duration_ms``: every step is healed before the run ends."""
    if not faults:
        return []
    if hold_ms >= interval_ms:
        raise ScheduleError(
            f"hold ({hold_ms} ms) must be shorter than the interval ({interval_ms} ms)"
        )
    draws = SplitMix64(seed)
    steps: list[FaultStep] = []
    at_ms = warmup_ms
    i = 0
    while at_ms + hold_ms <= duration_ms:
        spec = faults[i % len(faults)]
        steps.append(FaultStep(at_ms, hold_ms, spec.kind, _target(spec, processes, draws)))
        at_ms += interval_ms
        i += 1
    return steps


def _target(spec: FaultSpec, processes: Sequence[str], draws: SplitMix64) -> str:
    if spec.target in processes or spec.target in RUNTIME_TARGETS:
        return spec.target
    if spec.kind == "partition" and spec.target in PARTITION_SHAPES:
        return spec.target
    roles = (spec.target,) if spec.target else DEFAULT_ROLES[spec.kind]
    candidates = [p for p in processes if role_of(p) in roles]
    if not candidates:
        raise ScheduleError(f"no process of role {', '.join(roles)} for {spec.name}")
    return draws.choice(candidates)


def partition_sides(
    shape: str, storage: Sequence[str], others: Sequence[str]
) -> list[tuple[str, str]]:
    """The pairs of processes that must not reach each other (both ways) under ``shape``.

    ``one`` cuts ``storage[0]`` from everything; ``ring`` lets each storage node
    reach only its two ring neighbours (other roles reach all); ``bridge`` splits
    the storage nodes in two halves that only the middle node joins. The shell
    puts the chosen node first for ``one``.
    """
    cut: set[tuple[str, str]] = set()
    if shape == "one" or shape in storage:
        lone = shape if shape in storage else storage[0]
        cut = {(lone, p) for p in [*storage, *others] if p != lone}
    elif shape == "ring":
        n = len(storage)
        for i, a in enumerate(storage):
            near = {storage[(i - 1) % n], storage[(i + 1) % n]}
            cut |= {(a, b) for b in storage if b != a and b not in near}
    elif shape == "bridge":
        middle = len(storage) // 2
        left, right = storage[:middle], storage[middle + 1 :]
        cut = {(a, b) for a in left for b in right}
    else:
        raise ScheduleError(f"unknown partition shape {shape!r}")
    return sorted({tuple(sorted(pair)) for pair in cut})  # type: ignore[misc]
