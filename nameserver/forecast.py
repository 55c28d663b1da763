"""Load forecasts: one additive Holt-Winters series per raft group, summed per node.

A :class:`LoadForecaster` follows one group's load (msgs/s, or any rate) one
sample per *step* (the caller's clock, e.g. one step per hour): a level, a
damped trend and, when ``season_steps > 0``, one seasonal offset per step of
the season (a day of hourly steps: 24). Its forecast ``k`` steps ahead is

    level + trend * (phi + phi^2 + ... + phi^k) + seasonal[(step + k) % season_steps]

clamped at zero. The damping ``phi < 1`` keeps a burst's trend from being
projected into a long horizon.

A :class:`LoadBook` keeps one forecaster per group and where each group's
replicas are, and maintains every node's forecast as the sum of its groups'
components (level, trend, seasonal offsets) incrementally: observing a group
or moving a replica costs O(replicas), not O(groups), so a node's forecast
over a horizon costs O(horizon). Sums are linear, so a node's forecast is
exactly the sum of its groups' forecasts before clamping.

Invariants: every series is indexed by the same absolute step (the seasonal
slot of step ``t`` is ``t % season_steps`` for every group), so sums line up;
steps observed for one group are increasing.

PURE: steps come in as arguments.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ForecastParams:
    """Smoothing of level (``alpha``), trend (``beta``) and season (``gamma``), all
    in (0, 1]; ``phi`` damps the trend, in (0, 1]; ``season_steps`` is the season's
    length in steps (0: no season)."""

    alpha: float = 0.3
    beta: float = 0.05
    gamma: float = 0.3
    phi: float = 0.9
    season_steps: int = 24

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "phi"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if self.season_steps < 0:
            raise ValueError(f"season_steps must be >= 0, got {self.season_steps}")

    def damped_sum(self, steps_ahead: int) -> float:
        """phi + phi^2 + ... + phi^steps_ahead: the trend's weight ``steps_ahead`` on."""
        if self.phi == 1.0:
            return float(steps_ahead)
        return self.phi * (1.0 - self.phi**steps_ahead) / (1.0 - self.phi)


@dataclass(frozen=True, slots=True)
class Components:
    """A series' state: what a node sums over its groups."""

    level: float
    trend: float
    seasonal: tuple[float, ...]


class LoadForecaster:
    """Additive Holt-Winters with damped trend for one series (module docstring)."""

    __slots__ = (
        "_first_season",
        "_first_step",
        "_last_step",
        "level",
        "params",
        "seasonal",
        "trend",
    )

    def __init__(self, params: ForecastParams) -> None:
        """An empty series: it forecasts 0 until its first sample."""
        self.params = params
        self.level = 0.0
        self.trend = 0.0
        self.seasonal = array("d", bytes(8 * params.season_steps))  # 8 bytes a slot
        self._last_step: int | None = None
        self._first_step: int | None = None
        # The samples of the first season (slot -> value), until it is complete.
        self._first_season: dict[int, float] | None = {} if params.season_steps else None

    @property
    def last_step(self) -> int | None:
        """The step of the latest sample (None: none yet)."""
        return self._last_step

    def components(self) -> Components:
        """The current level, trend and seasonal offsets."""
        return Components(self.level, self.trend, tuple(self.seasonal))

    def observe(self, step: int, value: float) -> bool:
        """Take the sample ``value`` of ``step`` (> the previous step). Missing steps
        in between advance the level along the damped trend.

        While the first season is incomplete the level is the mean of its
        samples and the seasonal offsets stay 0; the sample that completes it
        sets every offset (its sample minus that mean) at once. Returns True
        when this sample changed every seasonal offset (so sums over series
        must be redone), False when it changed only the level, the trend and
        the offset of ``step``'s slot.
        """
        p = self.params
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"steps must increase: {step} after {self._last_step}")
        if self._first_step is None:
            self._first_step = step
        first = self._first_season
        if first is not None:
            first[step % p.season_steps] = value
            self._last_step = step
            self.level = sum(first.values()) / len(first)
            if len(first) < p.season_steps and step - self._first_step < p.season_steps:
                return False
            # Complete (or, with gaps, a season old): offsets from the slots seen.
            self.seasonal = array(
                "d",
                [first.get(slot, self.level) - self.level for slot in range(p.season_steps)],
            )
            self._first_season = None
            return True
        if self._last_step is None:
            self.level = value
            self._last_step = step
            return False
        gap = step - self._last_step
        level = self.level + self.trend * p.damped_sum(gap - 1)
        trend = self.trend * p.phi**gap
        slot = step % p.season_steps if p.season_steps else 0
        offset = self.seasonal[slot] if p.season_steps else 0.0
        new_level = p.alpha * (value - offset) + (1.0 - p.alpha) * (level + trend)
        self.trend = p.beta * (new_level - level) + (1.0 - p.beta) * trend
        self.level = new_level
        if p.season_steps:
            self.seasonal[slot] = p.gamma * (value - new_level) + (1.0 - p.gamma) * offset
        self._last_step = step
        return False

    def forecast(self, step: int, steps_ahead: int) -> float:
        """The load expected ``steps_ahead`` (>= 1) steps after ``step`` (>= 0)."""
        return max(0.0, _raw(self.params, self.components(), step, steps_ahead))

    def peak(self, step: int, horizon_steps: int) -> float:
        """The highest forecast over the ``horizon_steps`` steps after ``step``."""
        return _peak(self.params, self.components(), step, horizon_steps)


def _raw(params: ForecastParams, c: Components, step: int, steps_ahead: int) -> float:
    seasonal = c.seasonal[(step + steps_ahead) % params.season_steps] if c.seasonal else 0.0
    return c.level + c.trend * params.damped_sum(steps_ahead) + seasonal


def _peak(params: ForecastParams, c: Components, step: int, horizon_steps: int) -> float:
    if horizon_steps < 1:
        raise ValueError(f"horizon_steps must be >= 1, got {horizon_steps}")
    return max(0.0, *(_raw(params, c, step, k) for k in range(1, horizon_steps + 1)))


class _Sum:
    """Running sums of the components of a node's groups."""

    __slots__ = ("level", "seasonal", "trend")

    def __init__(self, season_steps: int) -> None:
        self.level = 0.0
        self.trend = 0.0
        self.seasonal = [0.0] * season_steps

    def add(self, c: Components, sign: float) -> None:
        self.level += sign * c.level
        self.trend += sign * c.trend
        for slot, offset in enumerate(c.seasonal):
            self.seasonal[slot] += sign * offset

    def components(self) -> Components:
        return Components(self.level, self.trend, tuple(self.seasonal))


class LoadBook:
    """Every group's forecaster and replicas, and every node's summed forecast."""

    def __init__(self, params: ForecastParams) -> None:
        """An empty book; all series use ``params``."""
        self.params = params
        self._groups: dict[int, LoadForecaster] = {}
        self._replicas: dict[int, tuple[int, ...]] = {}
        self._nodes: dict[int, _Sum] = {}

    def replicas(self, group_id: int) -> tuple[int, ...]:
        """The nodes holding ``group_id`` as the book knows them (() if unknown)."""
        return self._replicas.get(group_id, ())

    def groups(self) -> Iterable[int]:
        """The groups the book follows."""
        return self._replicas.keys()

    def set_replicas(self, group_id: int, replicas: Iterable[int]) -> None:
        """Record where ``group_id`` lives (a placement or a finished move); its
        forecast moves from the nodes it left to the nodes it joined."""
        new = tuple(sorted(set(replicas)))
        old = self._replicas.get(group_id, ())
        if new == old:
            return
        series = self._groups.setdefault(group_id, LoadForecaster(self.params))
        c = series.components()
        for node_id in old:
            if node_id not in new:
                self._node(node_id).add(c, -1.0)
        for node_id in new:
            if node_id not in old:
                self._node(node_id).add(c, 1.0)
        self._replicas[group_id] = new

    def drop_group(self, group_id: int) -> None:
        """Forget ``group_id`` (deleted)."""
        self.set_replicas(group_id, ())
        self._replicas.pop(group_id, None)
        self._groups.pop(group_id, None)

    def observe(self, step: int, samples: Mapping[int, float]) -> None:
        """Take one sample per group (group -> load at ``step``); groups not yet
        placed are followed too, and counted on their nodes once placed."""
        for group_id, value in samples.items():
            series = self._groups.setdefault(group_id, LoadForecaster(self.params))
            self._replicas.setdefault(group_id, ())
            replicas = self._replicas[group_id]
            before = series.components() if replicas else None
            reseasoned = series.observe(step, value)
            if before is not None:
                after = series.components()
                for node_id in replicas:
                    node = self._node(node_id)
                    if reseasoned:
                        node.add(before, -1.0)
                        node.add(after, 1.0)
                        continue
                    node.level += after.level - before.level
                    node.trend += after.trend - before.trend
                    if after.seasonal:
                        slot = step % self.params.season_steps
                        node.seasonal[slot] += after.seasonal[slot] - before.seasonal[slot]

    def group_peak(self, group_id: int, step: int, horizon_steps: int) -> float:
        """``group_id``'s highest forecast over the horizon (0 if never observed)."""
        series = self._groups.get(group_id)
        return 0.0 if series is None else series.peak(step, horizon_steps)

    def group_profile(self, group_id: int, step: int, horizon_steps: int) -> list[float]:
        """``group_id``'s forecast for each of the next ``horizon_steps`` steps."""
        series = self._groups.get(group_id)
        if series is None:
            return [0.0] * horizon_steps
        c = series.components()
        return [_raw(self.params, c, step, k) for k in range(1, horizon_steps + 1)]

    def node_profile(self, node_id: int, step: int, horizon_steps: int) -> list[float]:
        """The summed forecast of ``node_id``'s groups for each of the next steps."""
        c = self._node(node_id).components()
        return [_raw(self.params, c, step, k) for k in range(1, horizon_steps + 1)]

    def node_peak(self, node_id: int, step: int, horizon_steps: int) -> float:
        """The highest summed forecast of ``node_id``'s groups over the horizon."""
        return _peak(self.params, self._node(node_id).components(), step, horizon_steps)

    def _node(self, node_id: int) -> _Sum:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _Sum(self.params.season_steps)
        return node
