"""What the nameserver leader learns from storage heartbeats: degraded nodes and load history.

:class:`LoadMonitor` is soft state of the leader (like the memberships it
keeps): a new leader starts empty and learns again within a few windows.

- **Latency windows.** Each heartbeat carries the node's fsync p99 since its
  previous heartbeat (0: no sync ran, no figure). The latest figure of each
  node in a window of ``window_ms`` is judged against its peers' when the
  window closes (:class:`~nameserver.anomaly.DegradationTracker`: median/MAD
  outliers, marked after 3 windows in a row, cleared after 6 normal ones).
- **Append latency and moves.** Each heartbeat carries the node's append p99
  since its previous heartbeat (0: none). When a window closes, the highest
  latest figure of any node, and whether a replica move was under way at any
  :meth:`LoadMonitor.tick` of the window, go to the move throttle
  (:class:`~nameserver.move_throttle.MoveThrottle`), which sets how many groups
  may move at once.
- **Load history.** Each heartbeat carries the message rate of every group
  the node leads. The rate times the time since the node's previous
  heartbeat is the messages of that interval; at the end of each step of
  ``step_ms`` each group's mean rate over the step (0 for a group with
  history but no messages) is one sample of its forecaster
  (:class:`~nameserver.forecast.LoadBook`, step number ``now_ms // step_ms``).

Windows and steps advance in :meth:`LoadMonitor.tick`, called by the
leader's sweep; heartbeats only record.

PURE: time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping

from nameserver.anomaly import DegradationTracker
from nameserver.forecast import ForecastParams, LoadBook
from nameserver.move_throttle import MoveThrottle
from nameserver.moves import MOVES_MAX_DEFAULT

WINDOW_MS_DEFAULT = 2000
STEP_MS_DEFAULT = 3_600_000
SEASON_SLOTS_MAX = 48
"""Daily slots a forecaster keeps at most (memory: 8 bytes a slot per group)."""
FSYNC_METRIC = "fsync_p99_ms"


class LoadMonitor:
    """Degraded marks and per-group load history from heartbeats (module docstring)."""

    def __init__(
        self,
        *,
        window_ms: int = WINDOW_MS_DEFAULT,
        step_ms: int = STEP_MS_DEFAULT,
        tracker: DegradationTracker | None = None,
        params: ForecastParams | None = None,
        throttle: MoveThrottle | None = None,
    ) -> None:
        """``params``: the forecasters' (default: a daily season of ``step_ms`` steps
        when a day has 2 to ``SEASON_SLOTS_MAX`` of them, else no season)."""
        if window_ms < 1 or step_ms < 1:
            raise ValueError(f"window_ms and step_ms must be >= 1, got {window_ms}, {step_ms}")
        self.window_ms = window_ms
        self.step_ms = step_ms
        self.tracker = tracker or DegradationTracker()
        if params is None:
            slots = 86_400_000 // step_ms
            params = ForecastParams(season_steps=slots if 2 <= slots <= SEASON_SLOTS_MAX else 0)
        self.book = LoadBook(params)
        self.throttle = throttle or MoveThrottle(MOVES_MAX_DEFAULT)
        self._append_us: dict[int, int] = {}  # node -> latest append p99 this window
        self._append_last_us: dict[int, int] = {}  # node -> latest ever (for status)
        self._moving = False  # a move was under way at some tick of this window
        self._window_start_ms: int | None = None
        self._step_start_ms: int | None = None
        self._fsync_ms: dict[int, float] = {}  # node -> latest figure this window
        self._fsync_us: dict[int, int] = {}  # node -> latest figure ever (for status)
        self._last_heartbeat_ms: dict[int, int] = {}
        self._messages: dict[int, float] = {}  # group -> messages this step
        self._data_lost: frozenset[int] = frozenset()  # nodes whose heartbeat says so

    @property
    def degraded(self) -> frozenset[int]:
        """The nodes marked degraded now: latency outliers, and nodes whose last
        heartbeat said they lost their data and are not re-admitted everywhere yet."""
        if not self._data_lost:
            return self.tracker.degraded
        return self.tracker.degraded | self._data_lost

    def fsync_p99_us(self, node_id: int) -> int:
        """The latest fsync p99 ``node_id`` reported (0: none yet)."""
        return self._fsync_us.get(node_id, 0)

    def append_p99_us(self, node_id: int) -> int:
        """The latest append p99 ``node_id`` reported (0: none yet)."""
        return self._append_last_us.get(node_id, 0)

    def heartbeat(
        self,
        node_id: int,
        now_ms: int,
        fsync_p99_us: int,
        group_rates: Mapping[int, int],
        data_lost: bool = False,
        append_p99_us: int = 0,
    ) -> None:
        """Record one heartbeat's figures (rates: group -> msgs/s; ``data_lost``: the
        node is being re-admitted after its WAL was set aside)."""
        if fsync_p99_us < 0 or append_p99_us < 0 or any(rate < 0 for rate in group_rates.values()):
            raise ValueError(f"node {node_id} reported a negative latency or rate")
        if append_p99_us > 0:
            self._append_us[node_id] = append_p99_us
            self._append_last_us[node_id] = append_p99_us
        if data_lost:
            self._data_lost |= {node_id}
        elif node_id in self._data_lost:
            self._data_lost -= {node_id}
        if fsync_p99_us > 0:
            self._fsync_ms[node_id] = fsync_p99_us / 1000.0
            self._fsync_us[node_id] = fsync_p99_us
        previous = self._last_heartbeat_ms.get(node_id)
        self._last_heartbeat_ms[node_id] = now_ms
        if previous is None or now_ms <= previous:
            return  # no interval to weigh the rates with yet
        elapsed_s = (now_ms - previous) / 1000.0
        for group_id, rate in group_rates.items():
            self._messages[group_id] = self._messages.get(group_id, 0.0) + rate * elapsed_s

    def tick(self, now_ms: int, moving: bool = False) -> frozenset[int]:
        """Close the window and the step if their time is up; the degraded nodes.
        ``moving``: whether a replica move is under way now (for the move throttle)."""
        self._moving |= moving
        if self._window_start_ms is None:
            self._window_start_ms = now_ms
        elif now_ms - self._window_start_ms >= self.window_ms:
            if self._fsync_ms:
                self.tracker.window({FSYNC_METRIC: self._fsync_ms})
            self._fsync_ms = {}
            self.throttle.window(max(self._append_us.values(), default=0), self._moving)
            self._append_us = {}
            self._moving = moving
            self._window_start_ms = now_ms
        if self._step_start_ms is None:
            self._step_start_ms = now_ms
        elif now_ms - self._step_start_ms >= self.step_ms:
            step_s = (now_ms - self._step_start_ms) / 1000.0
            samples = dict.fromkeys(self.book.groups(), 0.0)
            for group_id, messages in self._messages.items():
                samples[group_id] = messages / step_s
            self.book.observe(now_ms // self.step_ms, samples)
            self._messages = {}
            self._step_start_ms = now_ms
        return self.degraded

    def forget(self, node_id: int) -> None:
        """Drop what is known of ``node_id`` (removed from the cluster)."""
        self.tracker.forget(node_id)
        self._fsync_ms.pop(node_id, None)
        self._fsync_us.pop(node_id, None)
        self._append_us.pop(node_id, None)
        self._append_last_us.pop(node_id, None)
        self._last_heartbeat_ms.pop(node_id, None)
        self._data_lost -= {node_id}
